"""V0's shell (`BashSession`, in the action execution server) as the recorded run had it: each command typed
into a pane that shows its prompt alone, and first read once the shell has taken it.

V0 types a command into its tmux pane and, from its first look at the pane on, takes a screen that ends
in a prompt for the command's end. Two moments of that exchange are timed for an idle machine:
- after a command, `_clear_screen` sends Ctrl-L and clears the history 0.1 s later, whether or not bash
  has redrawn its prompt by then;
- right after typing a command, the first look can come before bash has echoed it: the screen still
  ends in the previous prompt.
A shell late at either answers the command with the previous screen and the previous exit code
("[Previous command outputs are truncated. Showing the last 1 lines...]"), and the command runs later,
unseen. The recorded run had a model call between two commands and did not lose that race; a rerun
types the next command at once, on a machine that may be loaded. Here the clear waits until the prompt
is redrawn alone before clearing the history, and a command typed at the prompt is first looked at once
the pane shows it: V0's own steps, in V0's order, each wait bounded (past it, V0 goes on as it would).
"""

import time

from openhands.events.observation.commands import CMD_OUTPUT_PS1_END, CmdOutputMetadata
from openhands.runtime.utils import bash

REDRAW_S = 10.0
"""How long a clear waits for bash to redraw its prompt alone."""
TAKEN_S = 30.0
"""How long a command typed at the prompt waits for the pane to show it."""
POLL_S = 0.01


def _until(done, bound_s):
    deadline = time.monotonic() + bound_s
    while not done() and time.monotonic() < deadline:
        time.sleep(POLL_S)


def _visible(pane):
    """The pane's screen without its history, as `_get_pane_content` renders lines."""
    return "\n".join(line.rstrip() for line in pane.cmd("capture-pane", "-J", "-p").stdout)


def _prompt_alone(screen):
    """Ctrl-L done: one prompt, at the top of the screen (what a background job prints after it may follow)."""
    matches = CmdOutputMetadata.matches_ps1_metadata(screen)
    return len(matches) == 1 and not screen[: matches[0].start()].strip()


def _clear_screen(self):
    self.pane.send_keys("C-l", enter=False)
    _until(lambda: _prompt_alone(_visible(self.pane)), REDRAW_S)
    self.pane.cmd("clear-history")


def _taken(session, send_keys):
    def send_taken(cmd, enter=True, **kwargs):
        before = session._get_pane_content()
        send_keys(cmd, enter=enter, **kwargs)
        if enter and before.rstrip().endswith(CMD_OUTPUT_PS1_END.rstrip()):
            _until(lambda: session._get_pane_content() != before, TAKEN_S)

    return send_taken


_initialize = bash.BashSession.initialize


def _initialize_taken(self):
    _initialize(self)
    self.pane.send_keys = _taken(self, self.pane.send_keys)


def install():
    bash.BashSession._clear_screen = _clear_screen
    bash.BashSession.initialize = _initialize_taken
