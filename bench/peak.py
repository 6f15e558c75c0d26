"""Peak memory of a command and its process tree: `python -m bench.peak CMD...`.

Runs CMD (its output passes through) and prints, as the last line of stdout, one JSON object:
- `tree_kb`: the largest sum of the resident sets of CMD and all its descendants, polled every 10 ms;
- `root_kb`: the largest resident set of CMD's own process, polled the same way;
- `other_kb`: the largest resident set of any other process of the tree (a worker), polled the same way;
- `process_kb`: the largest resident set any single process of the tree reached (RUSAGE_CHILDREN,
  exact, no polling: this wrapper's only child is CMD, and CMD waits for its workers);
- `wall_s` and `returncode`.
A fresh wrapper per measurement, so that RUSAGE_CHILDREN covers exactly one command.
"""

from __future__ import annotations

import json
import resource
import sys
import time

import psutil


def main(argv: list[str]) -> int:
    started = time.perf_counter()
    root = psutil.Popen(argv)
    tree = own = other = 0
    while root.poll() is None:
        try:
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            procs = [root]
        total = 0
        for proc in procs:
            try:
                rss = proc.memory_info().rss
            except psutil.Error:
                continue
            total += rss
            if proc.pid == root.pid:
                own = max(own, rss)
            else:
                other = max(other, rss)
        tree = max(tree, total)
        time.sleep(0.01)
    report = {
        "tree_kb": tree // 1024,
        "root_kb": own // 1024,
        "other_kb": other // 1024,
        "process_kb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
        "wall_s": time.perf_counter() - started,
        "returncode": root.returncode,
    }
    sys.stdout.flush()
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
