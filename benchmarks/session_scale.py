"""CPU of one vary-ε batch (the paper grid's 20 artificial streams stacked, 6 ε, w = 120) through
``batch_releases``, on the ledger's path or the grid session's, at a given number of runs per stream.

    python benchmarks/session_scale.py MECHANISM RUNS_PER_STREAM PATH [REPEATS]

PATH: ``ledger`` (no session), ``session`` (session, the compiled rule up to its own cutoff) or
``compiled`` (session and compiled rule at any size). Prints the least CPU of REPEATS batches after a
warm-up batch (one process: run the paths in alternating processes to compare them).
"""

from __future__ import annotations

import sys
import time

from budgetcheck.bench import Benchmark
from budgetcheck.bench.config import PAPER_EPSILONS, Batch
from budgetcheck.bench.runner import batch_releases
from budgetcheck.ledger import grid


def main() -> None:
    mechanism, runs, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    repeats = int(sys.argv[4]) if len(sys.argv) > 4 else 3
    import mechanisms._compiled as compiled_rule

    if path == "ledger":
        grid.MOST_RUNS = 0  # type: ignore[misc]
    else:
        grid.MOST_RUNS = 10**9  # type: ignore[misc]
        if path == "compiled":
            compiled_rule.MOST_RUNS = 10**9
    benchmark = Benchmark.paper(runs=runs, real=())
    streams = tuple(spec.name for spec in benchmark.streams[:20])
    batch = Batch(mechanism, tuple(PAPER_EPSILONS), 120, streams, 0)
    batch_releases(benchmark, batch)  # warm-up: compilation, caches
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        batch_releases(benchmark, batch)
        best = min(best, time.process_time() - start)
    print(f"{mechanism} {runs * 120} {path} {best:.3f}")


if __name__ == "__main__":
    main()
