"""Which processes at the boundary the prefix left running, from a process table (pid, parent pid,
command line) as the sandbox's /proc gives it: the replayer's own are init, the main command, and every
tree the engine started by exec (parent 0); a process re-parented to init, and all it started, is left."""

from __future__ import annotations

from replayer.pipeline.leftovers import left, parse

TABLE = b"""1\t0\t/sbin/docker-init -- sleep infinity
7\t1\tsleep infinity
20\t0\tsocat TCP-LISTEN:8763,bind=127.0.0.1,fork,reuseaddr UNIX-CONNECT:/run/x.sock
31\t20\tsocat TCP-LISTEN:8763,bind=127.0.0.1,fork,reuseaddr UNIX-CONNECT:/run/x.sock
40\t1\tpython3 -c import socket
41\t40\tsleep 600
50\t1\tsocat TCP-LISTEN:8765 disguised
60\t0\tsetsid -w bash -c echo
61\t60\tsh -c for d in /proc/[0-9]*
not a row
"""


def test_left_are_the_trees_re_parented_to_init_whatever_they_are_called() -> None:
    rows = parse(TABLE)
    assert len(rows) == 9
    assert [(r.pid, r.command) for r in left(rows)] == [
        (40, "python3 -c import socket"),
        (41, "sleep 600"),
        (50, "socat TCP-LISTEN:8765 disguised"),
    ]


def test_a_process_whose_parent_is_gone_between_two_reads_is_left() -> None:
    rows = parse(b"1\t0\tinit\n7\t1\tsleep infinity\n90\t77\torphan\n")
    assert [r.pid for r in left(rows)] == [90]
