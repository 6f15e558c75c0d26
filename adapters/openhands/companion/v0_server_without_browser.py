"""openhands-ai 0.x's action execution server, started with no browser: that version's server starts one
in the background whatever the config says (1.x has `[core] enable_browser`), blocking its start for
minutes when the sandbox has none (BrowserEnv waits 5 x 200 s for a browser process that died). Here
BrowserEnv fails at once, which the server takes as a browser it could not start (browsing is off in the
replayed configuration); everything else is the server of the version, run as its module."""

import runpy

from openhands.core.exceptions import BrowserInitException
from openhands.runtime.browser import browser_env


def _no_browser(self, *args, **kwargs):
    raise BrowserInitException("no browser in the replay sandbox")


browser_env.BrowserEnv.__init__ = _no_browser
runpy.run_module("openhands.runtime.action_execution_server", run_name="__main__", alter_sys=True)
