"""Cost per spend of the personalized and Swellfish ledgers.

Personalized: 10^6 users in 5 requirement classes (one exact window check per class, not per user),
spend-only and a Sampling-Mechanism release over the per-class counts. Swellfish: 1,000 policies
that all overlap at the measured timestamps (every spend updates 1,000 exact TOP_δ(J) sets).
Scalar (R = 1) and batched (R = 100) runs. Then PBD at 10^6 users in 15 classes (d = 2) with
per-user rows for every timestep: the stream's counting of rows into class counts against PBD's
own steps, and the timesteps per second of both. Run:

    python benchmarks/notion_ledgers_cost.py            # 400 spends per configuration
    python benchmarks/notion_ledgers_cost.py --quick    # 40 (and 10 PBD timesteps, not 40)
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from budgetcheck import (
    PersonalizedLedger,
    PersonalizedStream,
    PolicyCollection,
    RequirementSet,
    StreamPolicy,
    SwellfishLedger,
)
from mechanisms.personalized import PBD

CLASSES = [
    ((10, 1.0), 200_000),
    ((20, 0.5), 200_000),
    ((40, 2.0), 200_000),
    ((80, 1.0), 200_000),
    ((120, 0.1), 200_000),
]


def personalized(runs: int, spends: int) -> tuple[float, float]:
    requirements = RequirementSet.from_counts(CLASSES)
    ledger = PersonalizedLedger(requirements, runs=runs, seed=0, sampler="numpy-laplace")
    budgets = np.array([r.epsilon / (4 * r.w) for r in requirements.classes])
    start = time.perf_counter()
    for t in range(1, spends + 1):
        ledger.spend(t, budgets, purpose="publication")
    spend = (time.perf_counter() - start) / spends
    bins = np.zeros((spends, requirements.n_users), dtype=np.int8)
    bins[:, ::3] = 1
    stream = PersonalizedStream(requirements, bins, dimensions=2)
    ledger = PersonalizedLedger(requirements, runs=runs, seed=0, sampler="numpy-laplace")
    ledger.bind(stream)
    start = time.perf_counter()
    for secret in stream:
        ledger.sample_release(secret, budgets)
    return spend, (time.perf_counter() - start) / spends


def swellfish(runs: int, spends: int, policies: int = 1000) -> float:
    rng = np.random.default_rng(0)
    starts = rng.integers(1, 50, size=policies)
    collection = PolicyCollection(
        [
            StreamPolicy(int(s), int(s) + 200 + int(rng.integers(0, 100)), [1.0] * int(rng.integers(1, 4)))
            for s in starts
        ]
    )
    ledger = SwellfishLedger(collection, epsilon=1.0, runs=runs, seed=0, sampler="numpy-laplace")
    amount = 1e-4
    start = time.perf_counter()
    for t in range(50, 50 + spends):
        ledger.spend(t, amount, purpose="publication")
    return (time.perf_counter() - start) / spends


def pbd_million(steps: int) -> tuple[float, float]:
    """Seconds per timestep of PersonalizedStream's counting of 10^6 per-user rows, and of PBD's run (R = 1)."""
    pairs = [(w, eps) for w in (10, 20, 40, 80, 120) for eps in (0.5, 1.0, 2.0)]
    users = 1_000_000
    requirements = RequirementSet.from_counts([(pair, users // 15 + (i < users % 15)) for i, pair in enumerate(pairs)])
    bins = np.random.default_rng(0).integers(-1, 2, size=(steps, users), dtype=np.int8)  # a third absent
    counting, running = [], []
    for _ in range(3):  # the least of three: the first pays for fresh memory
        start = time.perf_counter()
        stream = PersonalizedStream(requirements, bins, dimensions=2)
        counting.append(time.perf_counter() - start)
        ledger = PersonalizedLedger(requirements, runs=1, seed=0, sampler="numpy-laplace")
        ledger.bind(stream)
        start = time.perf_counter()
        PBD().run(stream, ledger)
        running.append(time.perf_counter() - start)
    return min(counting) / steps, min(running) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    spends = 40 if args.quick else 400
    print(
        f"{'runs R':>7} {'personalized spend':>19} {'personalized SM release':>24} "
        f"{'Swellfish spend (1,000 policies)':>33}"
    )
    for runs in (1, 100):
        spend, release = personalized(runs, spends)
        sw = swellfish(runs, max(4, spends // 10))
        print(f"{runs:>7} {spend * 1e6:>16.1f} µs {release * 1e6:>21.1f} µs {sw * 1e3:>30.1f} ms")
    count, run = pbd_million(10 if args.quick else 40)
    print(
        f"PBD, 10^6 users in 15 classes, d = 2, R = 1: counting the rows {count * 1e3:.1f} ms per timestep "
        f"({count / (count + run):.0%} of the whole), PBD {run * 1e3:.1f} ms; "
        f"{1 / (count + run):.0f} timesteps/s (target 200)"
    )


if __name__ == "__main__":
    main()
