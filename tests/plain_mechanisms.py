"""Correct mechanisms that expose no allocation rule (verify can replay them but not prove them)."""

from __future__ import annotations

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
