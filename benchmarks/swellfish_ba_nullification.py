"""Why TSBA gains little over BA in large Swellfish zones (the study's TEAS ratio TSBA/BA near 1).

For one household's policies and a zone, runs BA and BD (w-event, global sensitivity) and TSBA and
TSBD (Swellfish, temporal sensitivity) and prints, per mechanism: MAE overall, at the timestamps
where no policy is relevant (TS variants release the true value there) and at the relevant ones,
publications per run, and the histogram of publication sizes in shares of ε/(2w). TSBA's free
exact releases leave BA's budget unspent; its next relevant publication absorbs it (many shares)
and is then nullified for shares − 1 timestamps, which costs most where the series moves faster
than the noise (large zones).

    python benchmarks/swellfish_ba_nullification.py [--zone 50000] [--household 0] [--runs 10]
"""

from __future__ import annotations

import argparse

import numpy as np

from budgetcheck.bench import swellfish_study as study
from budgetcheck.bench.config import stable_seed
from budgetcheck.ledger.policies import PolicyCollection
from budgetcheck.mechanism.execute import execute, execute_swellfish
from budgetcheck.mechanism.loading import load_mechanism


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zone", type=float, default=50000.0)
    parser.add_argument("--household", type=int, default=0)
    parser.add_argument("--length", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    truth = study.zone_stream(args.zone, args.length)
    policies = PolicyCollection(
        study.household_policies(args.length, np.random.default_rng(stable_seed(0, "household", args.household)))
    )
    appliances = sum(a.power for a in study.APPLIANCES)
    w = policies.max_interval
    free = np.array([policies.temporal_sensitivity(t) == 0.0 for t in range(1, args.length + 1)])
    print(
        f"zone {args.zone:g} kW, household {args.household}, T = {args.length}, w = {w}, {free.mean():.0%} of "
        "timestamps with no relevant policy"
    )
    print(
        f"{'mechanism':<10}{'MAE':>10}{'no policy':>11}{'relevant':>10}{'pubs/run':>10}  publication sizes (shares of "
        "ε/(2w): 1, 2, ...)"
    )
    for name in ("BA", "TSBA", "BD", "TSBD"):
        mechanism = load_mechanism(name)
        if name.startswith("TS"):
            run = execute_swellfish(mechanism, policies, truth, epsilon=1.0, runs=args.runs, seed=1)
            releases = run.releases
        else:
            run = execute(mechanism, truth / appliances, epsilon=1.0, w=w, runs=args.runs, seed=1)
            releases = run.releases * appliances
        error = np.abs(releases - truth)[..., 0]
        spent = np.concatenate([r.amounts[r.amounts > 0] for r in run.ledger.records if r.purpose == "publication"])
        shares = np.bincount(np.round(spent * 2 * w).astype(np.int64))[1:13]
        print(
            f"{name:<10}{error.mean():>10.1f}{error[:, free].mean():>11.1f}{error[:, ~free].mean():>10.1f}"
            f"{spent.size / args.runs:>10.1f}  {shares.tolist()}"
        )


if __name__ == "__main__":
    main()
