"""How long `budgetcheck verify --all --profile quick` takes on this machine, stage by stage, and
`verify` on one hand-written mechanism, and `budgetcheck prove` (targets from issue 28: under
2 minutes on 2 cores and under 30 s; issue 3: prove under 5 minutes at w-max 128).

    python benchmarks/verify_speed.py               # verify --all per mechanism and stage, EveryKth, prove w <= 128
    python benchmarks/verify_speed.py --w-max 32    # a shorter prove range
    python benchmarks/verify_speed.py --no-prove    # verify only
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

STAGES = ("ledger replay", "secret access", "exploration", "rule conformance", "proof", "statistical audit")
SHORT = ("replay", "secret", "explore", "conform", "proof", "audit")


def cpu_seconds() -> float:
    """CPU seconds (user + system) of the finished child processes so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(arguments: list[str], cwd: Path | None = None) -> tuple[float, int, str]:
    """Seconds, exit code and standard output of one `budgetcheck` command in a fresh process; its
    CPU seconds are printed too (on a loaded machine the wall time overstates an idle one's)."""
    before = cpu_seconds()
    start = time.perf_counter()
    env = dict(os.environ)
    if cwd is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(cwd), env.get("PYTHONPATH", "")]))
    command = [sys.executable, "-m", "budgetcheck", *arguments]
    completed = subprocess.run(command, capture_output=True, text=True, check=False, cwd=cwd, env=env)
    seconds = time.perf_counter() - start
    print(
        f"  ({' '.join(arguments[:2])}: {cpu_seconds() - before:.1f} CPU seconds, {seconds:.1f} s wall, "
        f"load {os.getloadavg()[0]:.1f})"
    )
    return seconds, completed.returncode, completed.stdout


def stage_table(rows: list[dict[str, object]]) -> None:
    """Per mechanism: seconds per stage (exploration includes rule conformance), the bound and the verdict."""
    columns = " ".join(f"{name:>8}" for name in SHORT)
    print(f"{'mechanism':<20} {columns} {'total':>8}  {'bound (w, T, runs)':<20} verdict")
    totals = dict.fromkeys(STAGES, 0.0)
    for row in rows:
        seconds = {stage["stage"]: float(stage["seconds"]) for stage in row["stages"]}  # type: ignore[attr-defined]
        for name in STAGES:
            totals[name] += seconds.get(name, 0.0)
        bound = row.get("bound") or {}
        keys = ("w_max", "horizon", "runs_explored")
        where = ", ".join(str(bound.get(key)) for key in keys)  # type: ignore[union-attr]
        cells = " ".join(f"{seconds[name]:8.1f}" if name in seconds else f"{'-':>8}" for name in STAGES)
        print(f"{row['mechanism']!s:<20} {cells} {sum(seconds.values()):8.1f}  {where:<20} {row['verdict']}")
    print(f"{'all':<20} " + " ".join(f"{totals[name]:8.1f}" for name in STAGES) + f" {sum(totals.values()):8.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--w-max", type=int, default=128)
    parser.add_argument("--no-prove", action="store_true")
    parser.add_argument("--only-one", action="store_true", help="skip verify --all (time one hand-written mechanism)")
    args = parser.parse_args()
    if not args.only_one:
        seconds, code, out = timed(["verify", "--all", "--profile", "quick", "--json", "--timings"])
        stage_table(json.loads(out)["results"])
        print(f"verify --all --profile quick: {seconds:.1f}s wall, exit {code} (target < 120 s on 2 cores)")
    tests = Path(__file__).resolve().parents[1] / "tests"
    seconds, code, out = timed(["verify", "plain_mechanisms:EveryKth", "--profile", "quick", "--json"], cwd=tests)
    (row,) = json.loads(out)["results"]
    print(
        f"verify plain_mechanisms:EveryKth --profile quick: {seconds:.1f}s wall, exit {code}, {row['verdict']} "
        "(target < 30 s)"
    )
    if args.no_prove:
        return
    seconds, code, out = timed(["prove", "--w-max", str(args.w_max), "--json"])
    for row in json.loads(out)["results"]:
        print(
            f"prove  {row['mechanism']:<14} w {row['w']:<8} {row['method']:<20} {row['seconds']:8.1f}s  "
            f"{row['verdict']}"
        )
    print(f"prove --w-max {args.w_max}: {seconds:.1f}s, exit {code} (target < 300 s at w-max 128)")


if __name__ == "__main__":
    main()
