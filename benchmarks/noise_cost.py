"""What the secure default costs per release: numpy-laplace (seeded, reproducible, for experiments)
against discrete-laplace (exact, OS CSPRNG; the ledgers' and the publisher's default), for one
run at d = 1, 10, 100, measured in one process: a Laplace release of the counts, and an
AboveThreshold query (AdaPub's and PeGaSus's test) on the same cells.

    python benchmarks/noise_cost.py [--releases N]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import budgetcheck as bc


def _per_release(sampler: str, d: int, n: int, *, threshold: bool) -> float:
    """Seconds per release (or per threshold query) over ``n`` timestamps."""
    ledger = bc.WindowLedger(epsilon=1e9, w=1, sampler=sampler, allow_vouched=True)  # its own statistic: vouched
    stream = bc.GuardedStream(np.tile(np.arange(d, dtype=np.float64) * 7, (n + 1, 1)))
    ledger.bind(stream)
    secrets = iter(stream)
    if threshold:
        test = ledger.above_threshold(epsilon=1.0, sensitivity=1.0, cells=(d,))
        test.query(next(secrets), lambda v: v[:, -1], 50.0)  # opens every instance: the draws of ρ
        start = time.perf_counter()
        for secret in secrets:
            test.query(secret, lambda v: v[:, -1], 1e12)  # never above: every query tests every cell
    else:
        next(secrets)
        start = time.perf_counter()
        for secret in secrets:
            ledger.laplace(secret, 1.0)
    return (time.perf_counter() - start) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--releases", type=int, default=300, help="timestamps per configuration (default 300)")
    args = parser.parse_args()
    print(f"{'operation':<16} {'d':>4} {'numpy-laplace':>14} {'discrete-laplace':>17} {'ratio':>7}")
    for threshold in (False, True):
        for d in (1, 10, 100):
            for sampler in ("numpy-laplace", "discrete-laplace"):  # warm up (compiled kernels, caches)
                _per_release(sampler, d, 3, threshold=threshold)
            fast = _per_release("numpy-laplace", d, args.releases, threshold=threshold)
            secure = _per_release("discrete-laplace", d, args.releases, threshold=threshold)
            name = "AboveThreshold" if threshold else "laplace release"
            print(f"{name:<16} {d:>4} {fast * 1e6:>11.1f} µs {secure * 1e6:>14.1f} µs {secure / fast:>6.1f}x")


if __name__ == "__main__":
    main()
