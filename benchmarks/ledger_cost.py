"""Cost per spend of the exact WindowLedger, scalar (R = 1) and batched (R = 100).

Compared in the same process against a plain reference that keeps float window sums with no
exactness and no records (what a hand-written accumulator would do). Run:

    python benchmarks/ledger_cost.py            # 20,000 spends per configuration
    python benchmarks/ledger_cost.py --quick    # 2,000
"""

from __future__ import annotations

import argparse
import time
from collections import deque

import numpy as np

from budgetcheck import GuardedStream, WEventParams, WindowLedger, rounding


def _exact_ledger(runs: int, w: int, spends: int) -> float:
    ledger = WindowLedger(WEventParams(1.0, w), runs=runs, seed=0, sampler="numpy-laplace")
    amount = np.full(runs, rounding.share(1.0, 2 * w))
    start = time.perf_counter()
    for t in range(1, spends // 2 + 1):
        ledger.spend(t, amount, purpose="dissimilarity")
        ledger.spend(t, amount, purpose="publication")
    return (time.perf_counter() - start) / (2 * (spends // 2))


def _exact_laplace(runs: int, w: int, spends: int, d: int) -> float:
    stream = GuardedStream(np.zeros((spends, d)))
    ledger = WindowLedger(WEventParams(1.0, w), runs=runs, seed=0, sampler="numpy-laplace")
    ledger.bind(stream)
    amount = rounding.share(1.0, w)
    start = time.perf_counter()
    for secret in stream:
        ledger.laplace(secret, amount)
    return (time.perf_counter() - start) / spends


def _reference(runs: int, w: int, spends: int) -> float:
    """Plain float sliding-window sums, no exactness, no records."""
    window = np.zeros(runs)
    history: deque[np.ndarray] = deque()
    amount = np.full(runs, 1.0 / (2 * w))
    start = time.perf_counter()
    for _ in range(spends):
        if len(history) == 2 * w:
            window -= history.popleft()
        if np.any(window + amount > 1.0 + 1e-9):
            raise RuntimeError("reference overspent")
        window += amount
        history.append(amount)
    return (time.perf_counter() - start) / spends


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--w", type=int, default=120)
    args = parser.parse_args()
    spends = 2_000 if args.quick else 20_000
    print(f"WindowLedger cost per spend (w = {args.w}, {spends} spends each)")
    print(f"{'runs R':>7} {'exact spend':>14} {'exact laplace d=1':>18} {'float reference':>16} {'ratio':>7}")
    for runs in (1, 100):
        exact = _exact_ledger(runs, args.w, spends)
        laplace = _exact_laplace(runs, args.w, spends, 1)
        reference = _reference(runs, args.w, spends)
        print(
            f"{runs:>7} {exact * 1e6:>11.1f} µs {laplace * 1e6:>15.1f} µs {reference * 1e6:>13.1f} µs "
            f"{exact / reference:>6.1f}x"
        )


if __name__ == "__main__":
    main()
