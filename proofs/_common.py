"""Shared driver for the proof files: prove a rule for w in 1..w_max and print the verdicts."""

from __future__ import annotations

import argparse

from budgetcheck.proving import AllocationRule, Verdict, prove_range


def run(rule: AllocationRule, name: str, default_w_max: int = 128) -> bool:
    parser = argparse.ArgumentParser(description=f"Prove {name}'s allocation rule with Z3.")
    parser.add_argument("--w-max", type=int, default=default_w_max)
    args = parser.parse_args()
    verdict = prove_range(rule, range(1, args.w_max + 1))
    for result in verdict.results:
        print(
            f"{name} w={result.w:<4} {result.verdict.value:<8} {result.method:<24} {result.seconds:7.3f}s "
            f"{result.detail}"
        )
    print(f"{name}: {verdict.verdict.value} for w in 1..{args.w_max} ({verdict.seconds:.1f}s)")
    return verdict.verdict is Verdict.PROVED
