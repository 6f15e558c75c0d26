"""What openhands-ai 0.x (e.g. 0.35.0) needs to run in the sandbox, where 1.x needs none of it: its own
config loader and setup functions, and the development install its local runtime assumes.

- `load_app_config` instead of `load_openhands_config`; its config sections are strict (an unknown
  `[agent]` key voids the whole section, silently turning Jupyter and browsing back on), so the keys of
  later versions the config file holds are left out, each named on stderr;
- a user that is not root: the 0.x local runtime otherwise runs its shell and kernel through `su`
  and micromamba as in its Docker image (the sandbox runs as uid 0 under that name, as 1.x does);
- `poetry run` (devbin/poetry), which its Jupyter plugin starts the kernel gateway with;
- its install check skipped (`poetry run jupyter --version`, a tmux session, a working browser): the
  first two are exercised for real as the server starts, and the sandbox has no browser;
- the action execution server without a browser (`no_browser`, called by v0_server.py): that version's
  server starts one in the background whatever the config says (1.x has `[core] enable_browser`),
  blocking its start for minutes when the sandbox has none (BrowserEnv waits 5 x 200 s for a browser
  process that died). Here BrowserEnv fails at once, which the server takes as a browser it could not
  start (browsing is off in the replayed configuration).
"""

import os
import sys
import tempfile

import toml
from openhands.core.config import AgentConfig, AppConfig, LLMConfig, SecurityConfig, load_app_config
from openhands.runtime.impl.local import local_runtime

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = {"core": AppConfig, "agent": AgentConfig, "llm": LLMConfig, "security": SecurityConfig}
USER = "openhands-replayer"


def load_config(config_file):
    with open(config_file) as fh:
        sections = toml.load(fh)
    for name, model in MODELS.items():
        section = sections.get(name, {})
        unknown = [key for key in section if key not in model.model_fields]
        for key in unknown:
            del section[key]
        if unknown:
            print(
                f"[{name}] {', '.join(unknown)}: not in this version, left out", file=sys.stderr, flush=True
            )
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as out:
        toml.dump(sections, out)
    try:
        return load_app_config(config_file=out.name)
    finally:
        os.unlink(out.name)


def prepare_local_runtime():
    os.environ["USER"] = USER
    os.environ["PATH"] = f"{HERE}/devbin{os.pathsep}{os.environ.get('PATH', '')}"
    local_runtime.check_dependencies = lambda *args: None


def no_browser():
    from openhands.core.exceptions import BrowserInitException
    from openhands.runtime.browser import browser_env

    def fail(self, *args, **kwargs):
        raise BrowserInitException("no browser in the replay sandbox")

    browser_env.BrowserEnv.__init__ = fail
