"""Safe mechanisms that expose a proved rule and charge otherwise: verify must not call them violated.

Written as a third party would (the public API and the built-in rules). Every window of every run
stays within ε (the ledger, exact, never refuses them), yet at some step each charges more than
its rule's float computation allows: a few ulps (its own ε/w instead of ``rounding.share``, or all
of ``ledger.remaining(t)``), or more under one purpose while less in total. The proof then does not
cover the code (*not proved*); privacy is not broken (issue 43, item 6).
"""

from __future__ import annotations

import attrs
import numpy as np
from numpy.typing import NDArray

from budgetcheck import GuardedStream, WindowLedger, rounding
from mechanisms.rules import BDRule, PeriodicRule

FloatArray = NDArray[np.float64]


def _release(stream: GuardedStream, ledger: WindowLedger, budget_at: object, purpose: str) -> FloatArray:
    """Laplace with ``budget_at(t)`` (per run) at every t where it is > 0, else the last release again."""
    last = np.zeros((ledger.runs, stream.dimensions))
    out = []
    for secret in stream:
        budget = np.asarray(budget_at(secret.t), dtype=np.float64)  # type: ignore[operator]
        if np.any(budget > 0):
            last = np.where(budget[:, None] > 0, ledger.laplace(secret, budget, purpose=purpose), last)
        out.append(last)
    return np.stack(out, axis=1)


@attrs.frozen
class UniformOwnShareEveryOther:
    """Uniform's rule, Laplace at every other timestamp with its own ε/w (rounded to nearest: one ulp
    above ``rounding.share(ε, w)`` for, e.g., ε = 0.5, w = 5). At most ceil(w/2) releases per window:
    never more than ε."""

    name: str = "UniformOwnShareEveryOther"

    def allocation_rule(self) -> PeriodicRule:
        return PeriodicRule(every=1)

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> FloatArray:
        own = ledger.params.epsilon / ledger.params.w
        runs = ledger.runs
        return _release(stream, ledger, lambda t: np.full(runs, own if t % 2 == 1 else 0.0), "publication")


@attrs.frozen
class UniformSpendsRemaining:
    """Uniform, except that at every w-th timestamp it spends all of ``ledger.remaining(t)`` (what the
    ledger guarantees can be spent in full): ε − (w − 1)·share(ε, w), a few ulps above the share when
    ε/w is not a double."""

    name: str = "UniformSpendsRemaining"

    def allocation_rule(self) -> PeriodicRule:
        return PeriodicRule(every=1)

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> FloatArray:
        w, runs = ledger.params.w, ledger.runs
        share = rounding.share(ledger.params.epsilon, w)
        return _release(
            stream,
            ledger,
            lambda t: ledger.remaining(t) if t % w == 0 else np.full(runs, share),
            "publication",
        )


@attrs.frozen
class UniformUnderBDRule:
    """Exposes BD's rule and releases Uniform's share(ε, w) at every t, labelled "dissimilarity":
    twice the rule's dissimilarity charge, less than its charges on a publishing step in total
    (w >= 2), and w of them per window: never more than ε."""

    name: str = "UniformUnderBDRule"

    def allocation_rule(self) -> BDRule:
        return BDRule()

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> FloatArray:
        share, runs = rounding.share(ledger.params.epsilon, ledger.params.w), ledger.runs
        return _release(stream, ledger, lambda t: np.full(runs, share), "dissimilarity")
