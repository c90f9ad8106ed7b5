"""Uniform (Kellaris et al. 2014, §3): Laplace at every timestamp with ε/w."""

from __future__ import annotations

import attrs
import numpy as np
from numpy.typing import NDArray

from budgetcheck import GuardedStream, WindowLedger
from budgetcheck.ops import FLOAT
from budgetcheck.proving import RuleEnv
from mechanisms._common import empty_releases, filtered
from mechanisms.rules import UniformRule


@attrs.frozen
class Uniform:
    """Publishes Q(D_t) + Lap(w/ε) at every t; ε_t is ε/w rounded down so w·ε_t <= ε exactly."""

    filtering: bool = False
    name: str = attrs.field(default="Uniform", init=False)

    def allocation_rule(self) -> UniformRule:
        return UniformRule()

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> NDArray[np.float64]:
        rule, env = self.allocation_rule(), RuleEnv(ledger.params.epsilon, ledger.params.w)
        releases = empty_releases(ledger.runs, stream.length, stream.dimensions)
        for secret in stream:
            (budget,) = rule.charges(FLOAT, env, (), True)
            noisy = ledger.laplace(secret, budget, purpose="publication")
            releases[:, secret.t - 1] = filtered(noisy, self.filtering)
        return releases
