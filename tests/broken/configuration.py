"""Mechanisms that behave only where verify looks (issue 43, item 4), written against the public API.

``ExactOnceFiled`` is Uniform while its ledger is in memory (as ``execute`` and verify's replay make
it) and, once its ledger is kept in a ledger file (as ``publish`` keeps it), releases through a
``measure`` that vouches for a sensitivity of 10^-6: the true counts, to six decimals.
``PBDPublishesPBA`` runs PBD in ``run`` (what every other stage verifies) and PBA in ``releases``
(what ``publish`` drives): the published code is not the verified code.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import attrs
import numpy as np
from numpy.typing import NDArray

from budgetcheck import rounding
from mechanisms.personalized import PBA, PBD

FloatArray = NDArray[np.float64]


def _identity(values: FloatArray) -> FloatArray:
    return np.asarray(values, dtype=np.float64)


@attrs.frozen
class ExactOnceFiled:
    """Uniform (share(ε, w) at every t) in memory; on a ledger file, nearly exact counts."""

    name: str = "ExactOnceFiled"

    def _release(self, secret: Any, ledger: Any, d: int) -> FloatArray:
        budget = rounding.share(ledger.params.epsilon, ledger.params.w)
        if getattr(ledger, "journal", None) is None:
            return np.asarray(ledger.laplace(secret, budget), dtype=np.float64)
        return np.asarray(ledger.measure(_identity, secret, sensitivity=1e-6, epsilon=budget, shape=(d,)))

    def run(self, stream: Any, ledger: Any) -> FloatArray:
        return np.stack([self._release(secret, ledger, stream.dimensions) for secret in stream], axis=1)

    def releases(self, stream: Any, ledger: Any) -> Iterator[FloatArray]:
        for secret in stream:
            yield self._release(secret, ledger, stream.dimensions)


@attrs.frozen
class PBDPublishesPBA(PBD):
    """PBD for ``run``, PBA for ``releases``."""

    def releases(self, stream: Any, ledger: Any) -> Iterator[FloatArray]:
        return PBA().releases(stream, ledger)
