"""Mechanisms that vouch for a sensitivity (``ledger.measure``) that is wrong only in some regime.

Written as a third party would, with the public API. Each releases every timestamp's per-bin counts
through ``measure`` at share(ε, w) per timestamp (the budget is always right), vouching for the
identity's sensitivity under the default relation, 1, except in one regime, where it vouches for
a hundredth of the truth: the noise is then a hundredth of what ε needs, and the counts come out
nearly exact. The statistical audit at ε = 1, d = 2, w ∈ {1, 3} (before issue 43) never ran there.
"""

from __future__ import annotations

import attrs
import numpy as np
from numpy.typing import NDArray

from budgetcheck import GuardedStream, WindowLedger, rounding

FloatArray = NDArray[np.float64]


def _counts(values: FloatArray) -> FloatArray:
    return np.asarray(values, dtype=np.float64)


def _measured(stream: GuardedStream, ledger: WindowLedger, sensitivity: float) -> FloatArray:
    budget = rounding.share(ledger.params.epsilon, ledger.params.w)
    d = stream.dimensions
    rows = [  # a declared deadline of 0.1 s (the default 0.25 s holds every call that long: minutes per audit)
        ledger.measure(_counts, secret, sensitivity=sensitivity, epsilon=budget, shape=(d,), deadline=0.1)
        for secret in stream
    ]
    return np.stack(rows, axis=1)


@attrs.frozen
class VouchedRightAtEpsilonOne:
    """Vouches for 1 at ε = 1 (right: the identity under one person, one bin) and 0.01 elsewhere."""

    name: str = "VouchedRightAtEpsilonOne"

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> FloatArray:
        return _measured(stream, ledger, 1.0 if ledger.params.epsilon == 1.0 else 0.01)


@attrs.frozen
class VouchedWrongFromThreeBins:
    """Vouches for 1 on up to 2 bins and 0.01 from d = 3 on."""

    name: str = "VouchedWrongFromThreeBins"

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> FloatArray:
        return _measured(stream, ledger, 1.0 if stream.dimensions < 3 else 0.01)


@attrs.frozen
class VouchedWrongAtWindowEight:
    """Vouches for 1 unless w = 8, where it vouches for 0.01."""

    name: str = "VouchedWrongAtWindowEight"

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> FloatArray:
        return _measured(stream, ledger, 0.01 if ledger.params.w == 8 else 1.0)


@attrs.frozen
class VouchedIgnoresTheRelation:
    """Always vouches for 1, the identity's sensitivity under one person, one bin: wrong under a
    stream whose relation lets a person contribute 3 (``Neighbours.one_bin(3)``, ``across_bins(3)``)."""

    name: str = "VouchedIgnoresTheRelation"

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> FloatArray:
        return _measured(stream, ledger, 1.0)


@attrs.frozen
class VouchedRight:
    """The control: vouches for the identity's true sensitivity under the stream's relation."""

    name: str = "VouchedRight"

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> FloatArray:
        return _measured(stream, ledger, stream.neighbours.identity_sensitivity)
