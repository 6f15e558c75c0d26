"""The version's action execution server, run as its module, with V0's shell settled (v0_settled_shell),
rfc3987_syntax imported where first used (deferred_iri) and, for 0.x, without a browser
(v0_before_1.no_browser)."""

import runpy

import deferred_iri  # noqa: F401  (first: rfc3987_syntax imported where first used)
import v0_settled_shell

try:
    from openhands.core.config import load_openhands_config  # noqa: F401  (1.x)
except ImportError:
    import v0_before_1

    v0_before_1.no_browser()
v0_settled_shell.install()
runpy.run_module("openhands.runtime.action_execution_server", run_name="__main__", alter_sys=True)
