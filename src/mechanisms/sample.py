"""Sample (Kellaris et al. 2014, §3): the whole ε at one timestamp of every w."""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

import attrs
import numpy as np
from numpy.typing import NDArray

from budgetcheck import GuardedStream
from mechanisms._common import Ledger, Stream, fixed_schedule, run_fixed_schedule
from mechanisms.rules import PeriodicRule


@attrs.frozen
class Sample:
    """Publishes Q(D_t) + Lap(1/ε) when (t mod w) = 1 (every t when w = 1), else repeats the last release.

    t = 1 is always a sampling point, so there is always a last release to repeat.
    """

    filtering: bool = False
    name: str = attrs.field(default="Sample", init=False)
    max_stacked_runs: ClassVar[int] = (
        1_000  # one laplace_series; past ~2,000 runs its (T, runs) budget and scale arrays cost more than a pass per ε
    )

    def allocation_rule(self) -> PeriodicRule:
        return PeriodicRule()

    def run(self, stream: GuardedStream, ledger: Ledger) -> NDArray[np.float64]:
        return run_fixed_schedule(self.allocation_rule(), stream, ledger, self.filtering)

    def releases(self, stream: Stream, ledger: Ledger) -> Iterator[NDArray[np.float64]]:
        """The release of every timestamp as it arrives (a live stream; ``budgetcheck publish``)."""
        return fixed_schedule(self.allocation_rule(), stream, ledger, self.filtering)
