"""Sum up a py-spy profile (`--format raw`: one collapsed stack and its sample count per line).

    python -m benchmarks.support.profile_summary PROFILE.txt [TOP]

Prints, as shares of all samples: the leaf functions (where the CPU was), and for each stack the
innermost frame of our own code (`cursor_byok/`; library time is charged to the code of ours that
called it), so a row reads "this function of ours, and everything it called, took x%".
"""
from __future__ import annotations

import collections
import re
import sys

_FRAME = re.compile(r"^(?P<function>.*) \((?P<file>[^()]*?)(?::\d+)?\)$")


def _frames(stack: str) -> list[tuple[str, str]]:
    out = []
    for frame in stack.split(";")[1:]:  # the first is the process
        match = _FRAME.match(frame.strip())
        out.append((match["function"], match["file"]) if match else (frame.strip(), ""))
    return out


def summarize(lines: list[str], top: int) -> str:
    leaf: collections.Counter[str] = collections.Counter()
    ours: collections.Counter[str] = collections.Counter()
    total = 0
    for line in lines:
        stack, _, count = line.rstrip().rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = _frames(stack)
        if not frames:
            continue
        function, file = frames[-1]
        leaf[f"{function} ({file})"] += n
        own = next((f for f in reversed(frames) if "cursor_byok/" in f[1] or f[1].startswith("cursor_byok")), None)
        ours[f"{own[0]} ({own[1]})" if own else "(outside our code: server, event loop, threads)"] += n
    rows = [f"{total} samples"]
    for title, counter in (("leaf functions", leaf), ("innermost frame of ours (inclusive of what it called)", ours)):
        rows.append(f"\n{title}:")
        rows += [f"{100 * n / total:6.1f}%  {name}" for name, n in counter.most_common(top)]
    return "\n".join(rows)


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8", errors="replace") as f:
        print(summarize(f.readlines(), int(sys.argv[2]) if len(sys.argv) > 2 else 25))
