"""Run in the sandbox, in the background, by a test's shell command: once V0 has cleared its tmux pane after
that command (one prompt left, no `ls` output), stop the shell PID (argv[1]) for 4 s, then let it go on.

By ptrace, not SIGSTOP: tmux sends SIGCONT to a pane's shell that a signal stopped, at once."""

import ctypes
import os
import subprocess
import sys
import time

PTRACE_DETACH, PTRACE_SEIZE, PTRACE_INTERRUPT = 17, 0x4206, 0x4207

pid = int(sys.argv[1])
deadline = time.monotonic() + 20
while time.monotonic() < deadline:
    pane = ["tmux", "capture-pane", "-p", "-t", os.environ["TMUX_PANE"]]
    screen = subprocess.run(pane, capture_output=True, text=True).stdout.splitlines()
    if screen.count("###PS1JSON###") == 1 and "README.md  calc.py" not in screen:
        break
    time.sleep(0.02)
libc = ctypes.CDLL(None, use_errno=True)
if libc.ptrace(PTRACE_SEIZE, pid, 0, 0) != 0 or libc.ptrace(PTRACE_INTERRUPT, pid, 0, 0) != 0:
    sys.exit(f"ptrace: errno {ctypes.get_errno()}")
os.waitpid(pid, 0x40000000)  # __WALL: the tracee's stop
time.sleep(4)
libc.ptrace(PTRACE_DETACH, pid, 0, 0)
