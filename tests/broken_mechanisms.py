"""A corpus of deliberately broken mechanisms that `budgetcheck verify` must reject."""

from __future__ import annotations

import attrs
import numpy as np
from numpy.typing import NDArray

from budgetcheck import BudgetExceeded, GuardedStream, WindowLedger, rounding

FloatArray = NDArray[np.float64]


@attrs.frozen
class BAAsPublished:
    """BA as in the published artifact: the last publication (l, ε_l) is never updated.

    Nothing is ever nullified and every publication absorbs up to w shares: (w+1)/2 · ε per window.
    """

    name: str = "BA-as-published"

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> FloatArray:
        w = ledger.params.w
        unit = rounding.share(ledger.params.epsilon, 2 * w)
        last = np.zeros((ledger.runs, stream.dimensions))
        out = np.zeros((ledger.runs, stream.length, stream.dimensions))
        for secret in stream:
            t = secret.t
            dis = ledger.dissimilarity(secret, last, unit)
            shares = min(t, w)  # l = 0 and one share, forever
            budget = rounding.mul_down(unit, shares)
            publish = dis > 1.0 / budget
            if publish.any():
                noisy = ledger.laplace(secret, np.where(publish, budget, 0.0))
                last = np.where(publish[:, None], np.nan_to_num(noisy), last)
            out[:, t - 1] = last
        return out


@attrs.frozen
class UniformFullEpsilon:
    """Spends the whole ε at every timestamp."""

    name: str = "Uniform-full-epsilon"

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> FloatArray:
        out = np.zeros((ledger.runs, stream.length, stream.dimensions))
        for secret in stream:
            out[:, secret.t - 1] = ledger.laplace(secret, ledger.params.epsilon)
        return out


@attrs.frozen
class SwallowsRefusals:
    """Asks for ε at every timestamp and silently repeats the last release when refused."""

    name: str = "swallows-refusals"

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> FloatArray:
        out = np.zeros((ledger.runs, stream.length, stream.dimensions))
        last = np.zeros((ledger.runs, stream.dimensions))
        for secret in stream:
            try:
                last = ledger.laplace(secret, ledger.params.epsilon)
            except BudgetExceeded:
                pass
            out[:, secret.t - 1] = last
        return out


@attrs.frozen
class ReadsSecret:
    """Thresholds on the true count directly (a non-private parameter, benchmark M-R4)."""

    name: str = "reads-secret"

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> FloatArray:
        out = np.zeros((ledger.runs, stream.length, stream.dimensions))
        budget = rounding.share(ledger.params.epsilon, ledger.params.w)
        for secret in stream:
            if np.max(secret) > 10:  # type: ignore[call-overload]
                out[:, secret.t - 1] = ledger.laplace(secret, budget)
        return out


@attrs.frozen
class SecondLedger:
    """Reads the stream through a private ledger of its own, so its spends never reach the record."""

    name: str = "second-ledger"

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> FloatArray:
        shadow = WindowLedger(ledger.params, runs=ledger.runs, seed=1)
        out = np.zeros((ledger.runs, stream.length, stream.dimensions))
        budget = rounding.share(ledger.params.epsilon, ledger.params.w)
        for secret in stream:
            out[:, secret.t - 1] = shadow.laplace(secret, budget)
        return out


@attrs.frozen
class FloatUniform:
    """Uniform with ε/w in round-to-nearest floats: w of them can exceed ε by an ulp (e.g. w = 10)."""

    name: str = "float-uniform"

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> FloatArray:
        out = np.zeros((ledger.runs, stream.length, stream.dimensions))
        budget = ledger.params.epsilon / ledger.params.w
        for secret in stream:
            out[:, secret.t - 1] = ledger.laplace(secret, budget)
        return out


BROKEN = [BAAsPublished, UniformFullEpsilon, SwallowsRefusals, ReadsSecret, SecondLedger, FloatUniform]
