"""Where would XLA's CPU runtime hand work to its thread pool?  A static reading of its logs.

XLA logs the dependency graph of every `ThunkExecutor` it builds (the entry computation, each
loop body and branch) when asked to::

    TF_CPP_MIN_LOG_LEVEL=0 TF_CPP_VMODULE=thunk_executor=6 python my_script.py 2> xla.log
    python benchmarks/thunk_offloads.py xla.log [--after MARKER]

For each executor that does not run its kernels strictly in order, this replays its ready
queue on one thread (first in, first out, as jaxlib 0.10's executor does) and reports where
it would hand work off (see `bench_handoffs.py` for what that costs):

- ``split(n) at K``: taking kernel ``K``, ``n`` other kernels are ready (more than 8: the
  back half of the queue moves to a pool thread);
- ``may-block K``: ``K`` is a YNNPACK/XNNPACK/oneDNN fusion and other kernels are ready.

The replay assumes every kernel finishes before the next starts, which is what one thread
does when nothing has been handed off yet: the first event it reports is the first hand-off
of a call.  Branches that never run (e.g. the untaken side of a check) are listed too; tell
them apart by their kernels.  ``--after`` skips everything logged before a line containing
``MARKER`` (print one to stderr just before compiling the program of interest).
"""

from __future__ import annotations

import argparse
import re
from collections import deque

SPLIT_THRESHOLD = 8  # Thunk::ExecuteSession::kSplitThreshold (jaxlib 0.10.x)
MAY_BLOCK = {"ynn-fusion", "xnn-fusion", "onednn"}

_CONSTRUCTED = re.compile(r"Constructed ThunkExecutor with (\d+) thunks: .*is_sequential=(\w+)")
_THUNK = re.compile(r"thunk #(\d+): op_name=([^,]+), kind=([^,]+), dependencies=\[([^\]]*)\]")


def parse(lines: list[str]) -> list[tuple[bool, list[dict]]]:
    """``(is_sequential, thunks)`` for every executor graph in the log, in order."""
    executors: list[tuple[bool, list[dict]]] = []
    sequential = None
    for line in lines:
        constructed = _CONSTRUCTED.search(line)
        if constructed:
            sequential = constructed.group(2) == "true"
            continue
        if "ThunkExecutor: #thunks=" in line:
            executors.append((bool(sequential), []))
            continue
        thunk = _THUNK.search(line)
        if thunk and executors:
            deps = [d.strip() for d in thunk.group(4).split(",") if d.strip()]
            executors[-1][1].append(
                {"id": int(thunk.group(1)), "name": thunk.group(2), "kind": thunk.group(3),
                 "deps": deps})
    return executors


def hand_offs(thunks: list[dict]) -> list[str]:
    """The hand-offs of one executor's first-in-first-out replay on one thread."""
    index = {t["name"]: t["id"] for t in thunks}
    waiting = {t["id"]: len(t["deps"]) for t in thunks}
    users: dict[int, list[int]] = {t["id"]: [] for t in thunks}
    for t in thunks:
        for dep in t["deps"]:
            users[index[dep]].append(t["id"])
    ready = deque(t["id"] for t in thunks if not t["deps"])
    events = []
    while ready:
        node = thunks[ready.popleft()]
        if len(ready) > SPLIT_THRESHOLD:
            events.append(f"split({len(ready)}) at {node['name']}")
        if node["kind"] in MAY_BLOCK and ready:
            events.append(f"may-block {node['name']}")
        for user in users[node["id"]]:
            waiting[user] -= 1
            if waiting[user] == 0:
                ready.append(user)
    return events


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("log")
    parser.add_argument("--after", default=None)
    options = parser.parse_args(argv)
    with open(options.log) as f:
        lines = f.read().splitlines()
    if options.after is not None:
        marks = [i for i, line in enumerate(lines) if options.after in line]
        lines = lines[marks[0]:] if marks else lines
    for k, (sequential, thunks) in enumerate(parse(lines)):
        if sequential or len(thunks) <= 1:
            continue
        events = hand_offs(thunks)
        if events:
            sources = sum(not t["deps"] for t in thunks)
            shown = ", ".join(events[:3]) + (", ..." if len(events) > 3 else "")
            print(f"executor {k} ({len(thunks)} kernels, {sources} without inputs; first "
                  f"{thunks[0]['name']}): {shown}")


if __name__ == "__main__":
    main()
