"""Sample (Kellaris et al. 2014, §3): the whole ε at one timestamp of every w."""

from __future__ import annotations

import attrs
import numpy as np
from numpy.typing import NDArray

from budgetcheck import GuardedStream, WindowLedger
from budgetcheck.ops import FLOAT
from budgetcheck.proving import RuleEnv
from mechanisms._common import empty_releases, filtered
from mechanisms.rules import SampleRule


@attrs.frozen
class Sample:
    """Publishes Q(D_t) + Lap(1/ε) when (t mod w) = 1 (every t when w = 1), else repeats the last release.

    t = 1 is always a sampling point, so there is always a last release to repeat.
    """

    filtering: bool = False
    name: str = attrs.field(default="Sample", init=False)

    def allocation_rule(self) -> SampleRule:
        return SampleRule()

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> NDArray[np.float64]:
        rule, env = self.allocation_rule(), RuleEnv(ledger.params.epsilon, ledger.params.w)
        releases = empty_releases(ledger.runs, stream.length, stream.dimensions)
        last = np.zeros((ledger.runs, stream.dimensions))
        state = rule.initial(FLOAT, env)
        for secret in stream:
            (budget,) = rule.charges(FLOAT, env, state, True)
            if budget > 0:
                last = filtered(ledger.laplace(secret, float(budget), purpose="publication"), self.filtering)
            state = rule.advance(FLOAT, env, state, True, (budget,))
            releases[:, secret.t - 1] = last
        return releases
