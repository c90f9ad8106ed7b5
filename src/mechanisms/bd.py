"""Budget Distribution, BD (Kellaris et al. 2014, §4.2, Figure 2)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

import attrs
import numpy as np
from numpy.typing import NDArray

from budgetcheck import GuardedStream
from mechanisms._common import Ledger, Stream, dissimilarity_framework, run_dissimilarity_framework
from mechanisms.rules import BDRule


@attrs.frozen
class BD:
    """BD: fixed dissimilarity budget, exponentially decreasing publication budgets, recycling.

    At every t (Figure 2):
      lines 1-4: dis = MAE(c_t, o_l) + Lap(2w/(εd)), charged ε_{t,1} = ε/(2w) (rounded down);
      lines 5-6: ε_{t,2} = (ε/2 − Σ_{k=t−w+1}^{t−1} ε_{k,2}) / 2 (rounded down), λ = 1/ε_{t,2};
      lines 7-8: publish c_t + Lap(λ)^d if dis > λ, else null (o_l is repeated).
    The budget arithmetic is :class:`mechanisms.rules.BDRule`, the code ``budgetcheck prove`` proves.
    Choices where the paper is silent: before any release the last release o_l is the all-zero
    vector (so t = 1 runs the same test as every other t); ε_{k,2} = 0 for k <= 0 (as the paper
    states); the last release is the filtered value when filtering is on (post-processing).
    """

    filtering: bool = False
    name: str = attrs.field(default="BD", init=False)
    max_stacked_runs: ClassVar[int] = 100_000  # large passes keep paying (benchmarks/bench_speed.py)

    def allocation_rule(self) -> BDRule:
        return BDRule()

    def run(self, stream: GuardedStream, ledger: Ledger) -> NDArray[np.float64]:
        return run_dissimilarity_framework(self.allocation_rule(), stream, ledger, self.filtering)

    def releases(self, stream: Stream, ledger: Ledger) -> Iterator[NDArray[np.float64]]:
        """The release of every timestamp as it arrives (a live stream; ``budgetcheck publish``)."""
        return dissimilarity_framework(self.allocation_rule(), stream, ledger, self.filtering)
