"""How long `budgetcheck verify --all --profile quick` and `budgetcheck prove` take on this machine.

    python benchmarks/verify_speed.py                 # verify --all (quick) + prove, BA up to w = 64
    python benchmarks/verify_speed.py --ba-w-max 128  # the BA proof over the full default range
"""

from __future__ import annotations

import argparse
import time

from budgetcheck import verify_mechanism
from budgetcheck.proving import prove_range, rule_of
from mechanisms import BUILTIN


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--w-max", type=int, default=128)
    parser.add_argument("--ba-w-max", type=int, default=64)
    args = parser.parse_args()
    start = time.perf_counter()
    for name in BUILTIN:
        result = verify_mechanism(name, profile="quick")
        print(f"verify {name:<8} {result.verdict}")
    print(f"verify --all --profile quick: {time.perf_counter() - start:.1f}s")
    total = 0.0
    for name, factory in BUILTIN.items():
        rule = rule_of(factory())
        assert rule is not None
        w_max = args.ba_w_max if name == "BA" else args.w_max
        verdict = prove_range(rule, range(1, w_max + 1))
        total += verdict.seconds
        slowest = max(verdict.results, key=lambda r: r.seconds)
        print(f"prove  {name:<8} w 1..{w_max:<4} {verdict.verdict.value:<8} {verdict.seconds:8.1f}s  (slowest w={slowest.w}: {slowest.seconds:.1f}s)")
    print(f"prove all built-ins: {total:.1f}s")


if __name__ == "__main__":
    main()
