"""How long `budgetcheck verify --all --profile quick` and `budgetcheck prove` take on this machine
(targets from issue 3: under 3 minutes and under 5 minutes).

    python benchmarks/verify_speed.py               # both commands, prove over w = 1..128
    python benchmarks/verify_speed.py --w-max 32    # a shorter prove range
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time


def timed(arguments: list[str]) -> tuple[float, int, str]:
    """Seconds, exit code and standard output of one `budgetcheck` command in a fresh process."""
    start = time.perf_counter()
    completed = subprocess.run([sys.executable, "-m", "budgetcheck.cli", *arguments], capture_output=True, text=True, check=False)
    return time.perf_counter() - start, completed.returncode, completed.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--w-max", type=int, default=128)
    args = parser.parse_args()
    seconds, code, out = timed(["verify", "--all", "--profile", "quick", "--json"])
    for row in json.loads(out)["results"]:
        print(f"verify {row['mechanism']:<14} {row['verdict']}")
    print(f"verify --all --profile quick: {seconds:.1f}s, exit {code} (target < 180 s)")
    seconds, code, out = timed(["prove", "--w-max", str(args.w_max), "--json"])
    for row in json.loads(out)["results"]:
        print(f"prove  {row['mechanism']:<14} w {row['w']:<8} {row['method']:<20} {row['seconds']:8.1f}s  {row['verdict']}")
    print(f"prove --w-max {args.w_max}: {seconds:.1f}s, exit {code} (target < 300 s at w-max 128)")


if __name__ == "__main__":
    main()
