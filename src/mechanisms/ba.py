"""Budget Absorption, BA (Kellaris et al. 2014, §4.3, Figure 4)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

import attrs
import numpy as np
from numpy.typing import NDArray

from budgetcheck import GuardedStream
from mechanisms._common import Ledger, Stream, dissimilarity_framework, run_dissimilarity_framework
from mechanisms.rules import BARule


@attrs.frozen
class BA:
    """BA: uniform shares ε/(2w), skipped shares absorbed (at most w), followers nullified.

    At every t (Figure 4), with l the last publication and its share count k_l:
      lines 1-4 (as BD): dis = MAE(c_t, o_l) + Lap(2w/(εd)), charged ε/(2w);
      lines 5-6: nullified if t − l <= k_l − 1: output null;
      lines 8-9: otherwise shares = min(t − (l + k_l − 1), w), ε_{t,2} = shares · ε/(2w);
      lines 10-11: publish c_t + Lap(1/ε_{t,2})^d if dis > 1/ε_{t,2}, else null.
    The budget arithmetic is :class:`mechanisms.rules.BARule`, the code ``budgetcheck prove`` proves.
    Shares are counted as integers and (l, k_l) is updated on every publication (the published
    code never updates them and overspends up to (w+1)/2 · ε). Before any release: a virtual
    publication at l = 0 with one share, and o_l is the all-zero vector.
    ``dissimilarity_when_nullified``: the paper computes (and pays for) the dissimilarity at
    nullified timestamps (default, True); False skips it there as the benchmark harness does.
    """

    filtering: bool = False
    dissimilarity_when_nullified: bool = True
    name: str = attrs.field(default="BA", init=False)
    max_stacked_runs: ClassVar[int] = 100_000  # large passes keep paying (benchmarks/bench_speed.py)

    def allocation_rule(self) -> BARule:
        return BARule(dissimilarity_when_nullified=self.dissimilarity_when_nullified)

    def run(self, stream: GuardedStream, ledger: Ledger) -> NDArray[np.float64]:
        return run_dissimilarity_framework(self.allocation_rule(), stream, ledger, self.filtering)

    def releases(self, stream: Stream, ledger: Ledger) -> Iterator[NDArray[np.float64]]:
        """The release of every timestamp as it arrives (a live stream; ``budgetcheck publish``)."""
        return dissimilarity_framework(self.allocation_rule(), stream, ledger, self.filtering)
