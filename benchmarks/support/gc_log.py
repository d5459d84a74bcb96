"""The garbage collections a benchmarked server logged (`cprofile_site`, BENCH_GC_OUT), summed up over
a window of the benchmark's own clock (CLOCK_MONOTONIC, the server's too)."""
from __future__ import annotations

import glob
import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class Collection:
    end_ns: int
    generation: int
    wall_ns: int
    cpu_ns: int
    on_main: bool
    collected: int


def read(prefix: str, start_ns: int, end_ns: int) -> list[Collection]:
    """Every collection that ended in [start_ns, end_ns), of every process logging to `prefix`."""
    found = []
    for path in glob.glob(f"{glob.escape(prefix)}.*"):
        with open(path) as log:
            for line in log:
                end, generation, wall, cpu, on_main, collected = map(int, line.split())
                if start_ns <= end < end_ns:
                    found.append(Collection(end, generation, wall, cpu, bool(on_main), collected))
    return found


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summary(collections: list[Collection], per: float, unit: str) -> str:
    """Per generation: collections per `unit` (`per` of them in the window), their wall ms p50 /
    p99 / max, and the main (loop) thread's collection CPU per `unit` in µs."""
    parts = []
    for generation in (0, 1, 2):
        ours = [c for c in collections if c.generation == generation]
        if not ours:
            parts.append(f"gen{generation} 0")
            continue
        walls = [c.wall_ns / 1e6 for c in ours]
        parts.append(f"gen{generation} {len(ours)} ({len(ours) / per:.3g}/{unit}) ms {statistics.median(walls):.2f}/{_pct(walls, 0.99):.2f}/{max(walls):.2f}")
    loop_us = sum(c.cpu_ns for c in collections if c.on_main) / 1e3 / per
    collected = sum(c.collected for c in collections)
    return f"{'; '.join(parts)}; loop CPU in collections {loop_us:.1f} µs/{unit}; {collected} objects collected"
