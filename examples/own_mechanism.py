"""Write your own w-event mechanism against the ledger, expose its rule, then verify and prove it.

EveryKth samples every k-th timestamp (the Uniform-Sample hybrid of Schäler et al. 2022): a window
of w timestamps holds at most ceil(w/k) sampling points, so each gets ε / ceil(w/k).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import attrs
import numpy as np
from numpy.typing import NDArray

import budgetcheck
from budgetcheck import GuardedStream, WindowLedger
from budgetcheck.ops import FLOAT, Ops
from budgetcheck.proving import RuleEnv, State, symbol_int


@attrs.frozen
class EveryKthRule:
    """The allocation rule, written once over ``Ops``: state c = (t − 1) mod k for the next t.

    Invariant: 0 <= c < k; a recent timestamp of age a spent at most u if a ≡ c (mod k), else 0.
    """

    k: int
    purposes: tuple[str, ...] = ("publication",)

    def initial(self, ops: Ops, env: RuleEnv) -> State:
        return (0,)

    def arbitrary(self, env: RuleEnv, tag: str) -> State:
        return (symbol_int(f"{tag}_c"),)

    def charges(self, ops: Ops, env: RuleEnv, state: State, decision: Any) -> tuple[Any, ...]:
        unit = ops.share(env.epsilon, math.ceil(env.w / self.k))
        return (ops.where(state[0] == 0, unit, 0),)

    def advance(self, ops: Ops, env: RuleEnv, state: State, decision: Any, spent: tuple[Any, ...]) -> State:
        return (ops.where(state[0] == self.k - 1, 0, state[0] + 1),)

    def invariant(self, ops: Ops, env: RuleEnv, state: State, recent: Sequence[Any]) -> Any:
        (c,) = state
        unit = ops.share(env.epsilon, math.ceil(env.w / self.k))
        terms = [c >= 0, c <= self.k - 1]
        for age in range(1, env.w):
            value = recent[env.w - 1 - age]
            terms.append(ops.where((age - c) % self.k == 0, value <= unit, value == 0))
        return ops.all_of(terms)


@attrs.frozen
class EveryKth:
    k: int = 4
    name: str = "EveryKth"

    def allocation_rule(self) -> EveryKthRule:
        return EveryKthRule(self.k)

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> NDArray[np.float64]:
        rule, env = self.allocation_rule(), RuleEnv(ledger.params.epsilon, ledger.params.w)
        state = rule.initial(FLOAT, env)
        releases = np.zeros((ledger.runs, stream.length, stream.dimensions))
        last = np.zeros((ledger.runs, stream.dimensions))
        for secret in stream:  # each secret is opaque: only the ledger can read it, and it charges first
            (budget,) = rule.charges(FLOAT, env, state, True)
            if budget > 0:
                last = ledger.laplace(secret, float(budget), purpose="publication")
            state = rule.advance(FLOAT, env, state, True, (budget,))
            releases[:, secret.t - 1] = last
        return releases


def main() -> None:
    counts = 100 + 50 * np.sin(np.arange(200) / 10)[:, None] * np.ones((1, 3))
    execution = budgetcheck.execute(EveryKth(), counts, epsilon=1.0, w=20, runs=10, seed=42)
    mae = float(np.abs(execution.releases - counts).mean())
    report = budgetcheck.audit_windows(execution.ledger.records, epsilon=1.0, w=20, runs=10)
    print(f"EveryKth: MAE {mae:.2f}, worst window {float(report.worst_ratio):.4f} of epsilon, audit ok={report.ok}")
    assert report.ok

    result = budgetcheck.verify_mechanism("own_mechanism:EveryKth", examples=50)
    for stage in result.stages:
        print(f"verify [{stage.stage}] {stage.verdict}: {stage.detail}")
    assert result.passed


if __name__ == "__main__":
    main()
