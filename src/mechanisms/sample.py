"""Sample (Kellaris et al. 2014, §3): the whole ε at one timestamp of every w."""

from __future__ import annotations

import attrs
import numpy as np
from numpy.typing import NDArray

from budgetcheck import GuardedStream, WindowLedger
from mechanisms._common import empty_releases, filtered


@attrs.frozen
class Sample:
    """Publishes Q(D_t) + Lap(1/ε) when (t mod w) = 1 (every t when w = 1), else repeats the last release.

    t = 1 is always a sampling point, so there is always a last release to repeat.
    """

    filtering: bool = False
    name: str = attrs.field(default="Sample", init=False)

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> NDArray[np.float64]:
        params = ledger.params
        releases = empty_releases(ledger.runs, stream.length, stream.dimensions)
        last = np.zeros((ledger.runs, stream.dimensions))
        for secret in stream:
            if (secret.t - 1) % params.w == 0:
                last = filtered(ledger.laplace(secret, params.epsilon, purpose="publication"), self.filtering)
            releases[:, secret.t - 1] = last
        return releases
