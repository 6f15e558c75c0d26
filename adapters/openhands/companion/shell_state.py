"""The agent's shell state at a boundary, taken from the rerun's shell and given to the continuation's fresh
one (stdlib only: both companions import it, under either pinned interpreter).

Both versions' shells persist across the agent's commands, so a `cd` or `export` of the prefix is in
effect when the agent's next command runs. The reruns keep one shell for the whole replay, but the
continuation starts a new one. Each companion runs the commands below through its version's own shell
(V1: the terminal tool; V0: the runtime's `CmdRunAction`), whose observation the agent never sees, and
which leave the shell's exit status and history as they were:
- `query_command`: the working directory, the last exit status and the exported environment, into a file;
- `restore_command`: in the fresh shell, the working directory, the exported variables the prefix set or
  changed, those it unset, and the exit status (checked by a query after it).
Not kept: shell functions, aliases, options and unexported variables.
"""

import json
import os
import re
import shlex
import time

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MANAGED = {"_", "PWD", "PS1"}
"""Variables set anew for every command: by bash (`_`; PWD follows the `cd`), by both versions' shells
(their PROMPT_COMMAND exports PS1, the prompt that carries the command's metadata, before each prompt)."""
_KEEP_STATUS = 'eval "unset __oh_status; history -d -1 2>/dev/null; (exit $__oh_status)"'
"""The end of both commands: this line out of the shell's history, its exit status the one before it."""


QUERY_WAIT_S = 60.0
"""How long reading a query waits for its file: a shell may answer a command before it ran it (a loaded
machine's tmux pane still showing the screen before, as V0's did: v0_settled_shell), and run it then."""


def query_command(path):
    """Writes `status NUL cwd NUL` and `env -0` to `path` (whole: written beside it, then renamed), leaving
    `$?` and the history as they were."""
    part = shlex.quote(f"{path}.part")
    return (
        "__oh_status=$?; "
        f'{{ printf "%s\\0%s\\0" "$__oh_status" "$(pwd)"; env -0; }} > {part}; '
        f"mv -f -- {part} {shlex.quote(path)}; " + _KEEP_STATUS
    )


def read_query(path):
    """The query's file as {"status": int, "cwd": str, "env": {name: value}}, removed once read; waited for
    (QUERY_WAIT_S) while its command has not run yet."""
    deadline = time.monotonic() + QUERY_WAIT_S
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.05)
    with open(path, "rb") as fh:
        data = fh.read()
    os.unlink(path)
    status, cwd, *pairs = data.decode("utf-8", "surrogateescape").split("\0")
    env = dict(p.split("=", 1) for p in pairs if "=" in p)
    return {"status": int(status), "cwd": cwd, "env": env}


def query(run, path):
    """The shell's state (`read_query`) through `run`, which runs a command in it (False: there is no
    shell, and None is the answer)."""
    if run(query_command(path)) is False:
        return None
    return read_query(path)


def changes(start, now):
    """What the prefix changed in the shell since its start: {"cwd": str or None, "status": int,
    "set": {name: value}, "unset": [name]} (names bash can export only)."""
    before = {k: v for k, v in start["env"].items() if NAME.fullmatch(k) and k not in MANAGED}
    after = {k: v for k, v in now["env"].items() if NAME.fullmatch(k) and k not in MANAGED}
    return {
        "cwd": now["cwd"] if now["cwd"] != start["cwd"] else None,
        "status": now["status"],
        "set": {k: v for k, v in sorted(after.items()) if before.get(k) != v},
        "unset": sorted(k for k in before if k not in after),
    }


def keep(path, state):
    """Write `state` (None: nothing changed) where the host asked for it (`path`: a str), in the sandbox."""
    if not isinstance(path, str):
        return
    if state is None:
        if os.path.lexists(path):
            os.unlink(path)
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(f"{path}.tmp", "w") as fh:
        json.dump(state, fh)
    os.replace(f"{path}.tmp", path)


def checked(state):
    """`state` when it is what `changes` makes: variable names bash can export, string values (quoted by
    `restore_command`), an exit status; else ValueError in one line. The file is in the agent home, which
    the prefix could write: a planted one never runs as shell code."""
    if not isinstance(state, dict) or set(state) != {"cwd", "status", "set", "unset"}:
        raise ValueError("not an object of cwd, status, set and unset")
    cwd, status, values, unset = state["cwd"], state["status"], state["set"], state["unset"]
    if cwd is not None and not (isinstance(cwd, str) and cwd.startswith("/") and "\0" not in cwd):
        raise ValueError("cwd is not an absolute path")
    if type(status) is not int or not 0 <= status <= 255:
        raise ValueError("status is not an exit status")
    if not isinstance(values, dict) or not isinstance(unset, list):
        raise ValueError("set is not an object or unset not a list")
    for name in [*values, *unset]:
        if not isinstance(name, str) or not NAME.fullmatch(name) or name in MANAGED:
            raise ValueError(f"{json.dumps(name)[:80]} is not a variable name the state keeps")
    if not all(isinstance(v, str) and "\0" not in v for v in values.values()):
        raise ValueError("a value is not a string")
    return state


def restore_command(state):
    """The command that gives a fresh shell `state` (changes(), `checked`); None when there is nothing to give."""
    state = checked(state)
    parts = []
    if state["cwd"] is not None:
        parts.append(f"cd -- {shlex.quote(state['cwd'])}")
    if state["set"]:
        parts.append("export " + " ".join(f"{k}={shlex.quote(v)}" for k, v in state["set"].items()))
    if state["unset"]:
        parts.append("unset -v -- " + " ".join(state["unset"]))
    if not parts and not state["status"]:
        return None
    return "; ".join([*parts, f"__oh_status={int(state['status'])}", _KEEP_STATUS])


def restored(state, now):
    """Why the fresh shell after the restore (`now`, a query) does not have `state`, or None."""
    wrong = [k for k, v in state["set"].items() if now["env"].get(k) != v]
    wrong += [k for k in state["unset"] if k in now["env"]]
    if state["cwd"] is not None and now["cwd"] != state["cwd"]:
        wrong.append(f"the working directory {state['cwd']}")
    if now["status"] != state["status"]:
        wrong.append(f"the exit status {state['status']}")
    return f"the continuation's shell did not take {', '.join(wrong)}" if wrong else None


def restore(path, run):
    """Give a fresh shell (`run`, as for `query`) the state the reruns kept at `path`, when they kept one,
    and check it took; RuntimeError naming what it did not take."""
    if not path or not os.path.isfile(path):
        return
    try:
        with open(path) as fh:
            state = checked(json.load(fh))
    except (ValueError, UnicodeDecodeError) as exc:  # json's errors are ValueErrors
        raise RuntimeError(f"refused the shell state the reruns kept ({path}): {exc}") from None
    command = restore_command(state)
    if command is None or run(command) is False:
        return
    wrong = restored(state, query(run, f"{path}.query"))
    if wrong is not None:
        raise RuntimeError(wrong)
