"""MAE of Kellaris et al. 2014 §4.5's extensions against plain BD and BA on multi-column streams.

The benchmark's artificial streams have one column, where column partitioning is one group and the
shift (d > 2w) never applies; this script draws streams with d columns, a quarter of them moving
(a random walk with steps of ``--step``) and the rest flat with Poisson noise around 100, and
prints the mean MAE over runs for each mechanism, with its ratio to plain BD or BA.

    PYTHONPATH=src python benchmarks/kellaris_extensions.py --runs 20
"""

from __future__ import annotations

import argparse

import numpy as np

from budgetcheck import execute
from mechanisms import BA, BD, BAPartitioned, BAShifted, BDPartitioned, BDShifted


def stream(length: int, d: int, step: float, seed: int) -> np.ndarray:
    """d columns: the first d/4 a random walk of ``step``-sized moves (clipped at 0), the rest Poisson(100)."""
    rng = np.random.default_rng(seed)
    data = rng.poisson(100.0, size=(length, d)).astype(np.float64)
    moving = max(1, d // 4)
    data[:, :moving] = np.maximum(0.0, 500.0 + np.cumsum(rng.normal(0.0, step, size=(length, moving)), axis=0))
    return data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--length", type=int, default=300)
    parser.add_argument("--step", type=float, default=20.0)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    print(f"{'d':>5} {'w':>4} {'eps':>4}  {'mechanism':<16} {'MAE':>10} {'vs plain':>9}")
    for d, w, epsilon in ((16, 10, 1.0), (200, 10, 1.0), (200, 40, 1.0), (200, 40, 0.5)):
        data = stream(args.length, d, args.step, args.seed)
        for plain, variants in ((BD(), (BDShifted(), BDPartitioned())), (BA(), (BAShifted(), BAPartitioned()))):
            base = float(
                np.abs(
                    execute(plain, data, epsilon=epsilon, w=w, runs=args.runs, seed=args.seed).releases - data
                ).mean()
            )
            print(f"{d:>5} {w:>4} {epsilon:>4}  {plain.name:<16} {base:>10.2f} {1.0:>9.2f}")
            for mechanism in variants:
                releases = execute(mechanism, data, epsilon=epsilon, w=w, runs=args.runs, seed=args.seed).releases
                mae = float(np.abs(releases - data).mean())
                print(f"{d:>5} {w:>4} {epsilon:>4}  {mechanism.name:<16} {mae:>10.2f} {mae / base:>9.2f}")


if __name__ == "__main__":
    main()
