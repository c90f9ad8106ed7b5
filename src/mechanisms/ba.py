"""Budget Absorption, BA (Kellaris et al. 2014, §4.3, Figure 4)."""

from __future__ import annotations

import attrs
import numpy as np
from numpy.typing import NDArray

from budgetcheck import GuardedStream, WindowLedger, rounding
from mechanisms._common import empty_releases, filtered
from mechanisms._rules import ba_shares


@attrs.frozen
class BA:
    """BA: uniform shares ε/(2w), skipped shares absorbed (at most w), followers nullified.

    At every t (Figure 4), with l the last publication and its share count k_l:
      lines 1-4 (as BD): dis = MAE(c_t, o_l) + Lap(2w/(εd)), charged ε/(2w);
      lines 5-6: nullified if t − l <= k_l − 1: output null;
      lines 8-9: otherwise shares = min(t − (l + k_l − 1), w), ε_{t,2} = shares · ε/(2w);
      lines 10-11: publish c_t + Lap(1/ε_{t,2})^d if dis > 1/ε_{t,2}, else null.
    Shares are counted as integers and (l, k_l) is updated on every publication (the published
    code never updates them and overspends up to (w+1)/2 · ε). Before any release: a virtual
    publication at l = 0 with one share, and o_l is the all-zero vector.
    ``dissimilarity_when_nullified``: the paper computes (and pays for) the dissimilarity at
    nullified timestamps (default, True); False skips it there as the benchmark harness does.
    """

    filtering: bool = False
    dissimilarity_when_nullified: bool = True
    name: str = attrs.field(default="BA", init=False)

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> NDArray[np.float64]:
        params = ledger.params
        runs, w = ledger.runs, params.w
        unit = rounding.share(params.epsilon, 2 * w)
        last_t = np.zeros(runs, dtype=np.int64)
        last_shares = np.ones(runs, dtype=np.int64)
        last = np.zeros((runs, stream.dimensions))
        releases = empty_releases(runs, stream.length, stream.dimensions)
        for secret in stream:
            t = secret.t
            nullified, shares = ba_shares(t, last_t, last_shares, w)
            spend_dissimilarity = np.full(runs, True) if self.dissimilarity_when_nullified else ~nullified
            if spend_dissimilarity.any():
                dis = ledger.dissimilarity(secret, last, np.where(spend_dissimilarity, unit, 0.0))
            else:
                dis = np.full(runs, np.nan)
            budget = rounding.mul_down(unit, shares)
            with np.errstate(divide="ignore"):
                threshold = 1.0 / budget
            publish = ~nullified & (budget > 0.0) & (dis > threshold)
            if publish.any():
                noisy = ledger.laplace(secret, np.where(publish, budget, 0.0), purpose="publication")
                last = np.where(publish[:, None], filtered(np.nan_to_num(noisy), self.filtering), last)
                last_t = np.where(publish, t, last_t)
                last_shares = np.where(publish, shares, last_shares)
            releases[:, t - 1] = last
        return releases
