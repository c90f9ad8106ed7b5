"""BD and BA with budget shifted from dissimilarity to publication (Kellaris et al. 2014, §4.5)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

import attrs
import numpy as np
from numpy.typing import NDArray

from budgetcheck import GuardedStream
from mechanisms._common import (
    Ledger,
    Stream,
    dissimilarity_framework,
    run_dissimilarity_framework,
)
from mechanisms.rules import ShiftedBARule, ShiftedBDRule


@attrs.frozen
class _ShiftedFramework:
    """The fields and run of BDShifted and BAShifted: Kellaris et al.'s framework (Figure 1) with the
    shifted rule fixed for the stream's dimension d (its dissimilarity budget is ε/d when d > 2w)."""

    filtering: bool = False
    max_stacked_runs: ClassVar[int] = 100_000

    def allocation_rule(self) -> ShiftedBDRule | ShiftedBARule:
        raise NotImplementedError

    def run(self, stream: GuardedStream, ledger: Ledger) -> NDArray[np.float64]:
        rule = self.allocation_rule().for_dimensions(stream.dimensions)
        return run_dissimilarity_framework(rule, stream, ledger, self.filtering)

    def releases(self, stream: Stream, ledger: Ledger) -> Iterator[NDArray[np.float64]]:
        """The release of every timestamp as it arrives (a live stream; ``budgetcheck publish``)."""
        rule = self.allocation_rule().for_dimensions(stream.dimensions)
        return dissimilarity_framework(rule, stream, ledger, self.filtering)


@attrs.frozen
class BDShifted(_ShiftedFramework):
    """BD (Figure 2) with ε_{t,1} = ε/d when d > 2w (§4.5, "Shifting budget from M_{i,1} to M_{i,2}").

    The paper's reasoning: BD spends ε/(2w) on the dissimilarity at every t, whose noise scale is
    then 2w/(εd) because MAE has sensitivity 1/d; when d ≫ w that scale is needlessly small while
    half of every window's budget is gone. Fixing the scale at 1/ε, "which yields high accuracy in
    other scenarios", costs ε/d < ε/(2w) and leaves ε − w·ε/d > ε/2 for publication; BD's
    exponentially decreasing publication budgets then halve that pool instead of ε/2. For d <= 2w
    the shift would leave less than ε/2, so the split stays BD's and this is BD exactly.
    Budget arithmetic: :class:`mechanisms.rules.ShiftedBDRule` (one proof for every d).
    """

    name: str = attrs.field(default="BDShifted", init=False)

    def allocation_rule(self) -> ShiftedBDRule:
        return ShiftedBDRule()


@attrs.frozen
class BAShifted(_ShiftedFramework):
    """BA (Figure 4) with ε_{t,1} = ε/d when d > 2w (§4.5), publication shares (ε − w·ε/d)/w.

    As for :class:`BDShifted`: the dissimilarity noise scale is fixed at 1/ε when d > 2w; the
    budget saved over a window, w·(ε/(2w) − ε/d), goes to publication, spread as BA spreads it: a
    share u = (ε − w·ε/d)/w per timestamp, absorbed (at most w shares) and nullified as in BA.
    For d <= 2w this is BA exactly. Budget arithmetic: :class:`mechanisms.rules.ShiftedBARule`.
    """

    name: str = attrs.field(default="BAShifted", init=False)

    def allocation_rule(self) -> ShiftedBARule:
        return ShiftedBARule()
