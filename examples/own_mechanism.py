"""Write your own w-event mechanism against the ledger, expose its rule, verify it, publish it live.

FrontLoaded publishes at every timestamp but front-loads each block of w: ε/2 at the block's first
timestamp and ε/(2(w − 1)) at the others. Any window of w consecutive timestamps meets exactly one
block start, so it spends ε/2 + (w − 1)·ε/(2(w − 1)) = ε.

``releases`` is the mechanism as a live publisher drives it (``budgetcheck publish``): one release per
timestamp as the row arrives. ``run`` collects the same generator over a whole stream, so the two
charge and release exactly the same, which ``verify`` checks by replaying both.
"""

from __future__ import annotations

import io
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np
from numpy.typing import NDArray

import budgetcheck
from budgetcheck import GuardedStream, LiveStream, WindowLedger
from budgetcheck.ops import FLOAT, Ops
from budgetcheck.proving import RuleEnv, State, symbol_int


@attrs.frozen
class FrontLoadedRule:
    """The allocation rule, written once over ``Ops``: state c = (t − 1) mod w for the next t.

    Invariant: 0 <= c < w; the recent timestamp of age c (the block start) spent at most ε/2,
    every other recent timestamp at most ε/(2(w − 1)).
    """

    purposes: tuple[str, ...] = ("publication",)

    def budgets(self, ops: Ops, env: RuleEnv) -> tuple[Any, Any]:
        if env.w == 1:
            return ops.share(env.epsilon, 1), 0
        return ops.share(env.epsilon, 2), ops.share(env.epsilon, 2 * (env.w - 1))

    def initial(self, ops: Ops, env: RuleEnv) -> State:
        return (0,)

    def arbitrary(self, env: RuleEnv, tag: str) -> State:
        return (symbol_int(f"{tag}_c"),)

    def charges(self, ops: Ops, env: RuleEnv, state: State, decision: Any) -> tuple[Any, ...]:
        start, rest = self.budgets(ops, env)
        return (ops.where(state[0] == 0, start, rest),)

    def advance(self, ops: Ops, env: RuleEnv, state: State, decision: Any, spent: tuple[Any, ...]) -> State:
        return (ops.where(state[0] == env.w - 1, 0, state[0] + 1),)

    def invariant(self, ops: Ops, env: RuleEnv, state: State, recent: Sequence[Any]) -> Any:
        (c,) = state
        start, rest = self.budgets(ops, env)
        terms = [c >= 0, c <= env.w - 1]
        for age in range(1, env.w):
            terms.append(recent[env.w - 1 - age] <= ops.where(c == age, start, rest))
        return ops.all_of(terms)


@attrs.frozen
class FrontLoaded:
    name: str = "FrontLoaded"

    def allocation_rule(self) -> FrontLoadedRule:
        return FrontLoadedRule()

    def releases(self, stream: GuardedStream | LiveStream, ledger: WindowLedger) -> Iterator[NDArray[np.float64]]:
        """The release of each timestamp as it arrives, shape (runs, d)."""
        rule, env = self.allocation_rule(), RuleEnv(ledger.params.epsilon, ledger.params.w)
        state = rule.initial(FLOAT, env)
        for secret in stream:  # each secret is opaque: only the ledger can read it, and it charges first
            (budget,) = rule.charges(FLOAT, env, state, True)
            yield ledger.laplace(secret, float(budget), purpose="publication")
            state = rule.advance(FLOAT, env, state, True, (budget,))

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> NDArray[np.float64]:
        releases = np.zeros((ledger.runs, stream.length, stream.dimensions))
        for t, release in enumerate(self.releases(stream, ledger), start=1):
            releases[:, t - 1] = release
        return releases


def main() -> None:
    counts = 100 + 50 * np.sin(np.arange(200) / 10)[:, None] * np.ones((1, 3))
    execution = budgetcheck.execute(FrontLoaded(), counts, epsilon=1.0, w=20, runs=10, seed=42)
    mae = float(np.abs(execution.releases - counts).mean())
    report = budgetcheck.audit_windows(execution.ledger.records, epsilon=1.0, w=20, runs=10)
    print(f"FrontLoaded: MAE {mae:.2f}, worst window {float(report.worst_ratio):.4f} of epsilon, audit ok={report.ok}")
    assert report.ok

    result = budgetcheck.verify_mechanism("own_mechanism:FrontLoaded", examples=50)
    for stage in result.stages:
        print(f"verify [{stage.stage}] {stage.verdict}: {stage.detail}")
    assert result.passed

    # Live: rows arrive one by one and each release is written once its charge is stored in the ledger file.
    rows = [f"{t},{','.join(str(round(v)) for v in counts[t - 1])}" for t in range(1, 31)]
    with tempfile.TemporaryDirectory() as folder:
        out = io.StringIO()
        summary = budgetcheck.publish(
            FrontLoaded(), rows, Path(folder) / "ledger.db", dimensions=3, epsilon=1.0, w=20, out=out
        )
    print(f"published live: {summary}; first line {out.getvalue().splitlines()[0]!r}")
    assert len(out.getvalue().splitlines()) == 30


if __name__ == "__main__":
    main()
