"""Budget Distribution, BD (Kellaris et al. 2014, §4.2, Figure 2)."""

from __future__ import annotations

import attrs
import numpy as np
from numpy.typing import NDArray

from budgetcheck import GuardedStream, WindowLedger, rounding
from mechanisms._common import empty_releases, filtered
from mechanisms._rules import FloatOps, bd_publication_budget

_OPS = FloatOps()


@attrs.frozen
class BD:
    """BD: fixed dissimilarity budget, exponentially decreasing publication budgets, recycling.

    At every t (Figure 2):
      lines 1-4: dis = MAE(c_t, o_l) + Lap(2w/(εd)), charged ε_{t,1} = ε/(2w) (rounded down);
      lines 5-6: ε_{t,2} = (ε/2 − Σ_{k=t−w+1}^{t−1} ε_{k,2}) / 2 (rounded down), λ = 1/ε_{t,2};
      lines 7-8: publish c_t + Lap(λ)^d if dis > λ, else null (o_l is repeated).
    Choices where the paper is silent: before any release the last release o_l is the all-zero
    vector (so t = 1 runs the same test as every other t); ε_{k,2} = 0 for k <= 0 (as the paper
    states); the last release is the filtered value when filtering is on (post-processing).
    """

    filtering: bool = False
    name: str = attrs.field(default="BD", init=False)

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> NDArray[np.float64]:
        params = ledger.params
        runs, w = ledger.runs, params.w
        dissimilarity_budget = rounding.share(params.epsilon, 2 * w)
        half_epsilon = rounding.share(params.epsilon, 2)
        recent = np.zeros((runs, w))  # slot t % w: publication budget spent at t
        last = np.zeros((runs, stream.dimensions))
        releases = empty_releases(runs, stream.length, stream.dimensions)
        for secret in stream:
            t = secret.t
            dis = ledger.dissimilarity(secret, last, dissimilarity_budget)
            recent[:, t % w] = 0.0  # drop t − w: the slots now hold t−w+1 .. t−1
            budget = bd_publication_budget(np.full(runs, half_epsilon), recent, _OPS)
            with np.errstate(divide="ignore"):
                threshold = 1.0 / budget
            publish = (budget > 0.0) & (dis > threshold)
            if publish.any():
                noisy = ledger.laplace(secret, np.where(publish, budget, 0.0), purpose="publication")
                last = np.where(publish[:, None], filtered(np.nan_to_num(noisy), self.filtering), last)
                recent[:, t % w] = np.where(publish, budget, 0.0)
            releases[:, t - 1] = last
        return releases
