"""Correct mechanisms that expose no allocation rule (verify can replay them but not prove them)."""

from __future__ import annotations

import math

import attrs
import numpy as np
from numpy.typing import NDArray

from budgetcheck import GuardedStream, WindowLedger, rounding


@attrs.frozen
class UniformWithoutRule:
    name: str = "uniform-without-rule"

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> NDArray[np.float64]:
        budget = rounding.share(ledger.params.epsilon, ledger.params.w)
        out = np.zeros((ledger.runs, stream.length, stream.dimensions))
        for secret in stream:
            out[:, secret.t - 1] = ledger.laplace(secret, budget)
        return out


@attrs.frozen
class EveryKth:
    """The README's own example, verbatim: sample every k-th timestamp; a window holds at most ceil(w/k) samples."""

    k: int = 4
    name: str = "EveryKth"

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> NDArray[np.float64]:
        p = ledger.params
        budget = rounding.share(p.epsilon, math.ceil(p.w / self.k))  # rounded down: never refused
        out = np.zeros((ledger.runs, stream.length, stream.dimensions))
        last = np.zeros((ledger.runs, stream.dimensions))
        for secret in stream:
            if (secret.t - 1) % self.k == 0:
                last = ledger.laplace(secret, budget)  # checks the window, then adds Lap(1/budget)
            out[:, secret.t - 1] = last
        return out
