"""Uniform (Kellaris et al. 2014, §3): Laplace at every timestamp with ε/w."""

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
class Uniform:
    """Publishes Q(D_t) + Lap(w/ε) at every t; ε_t is ε/w rounded down so w·ε_t <= ε exactly."""

    filtering: bool = False
    name: str = attrs.field(default="Uniform", init=False)
    max_stacked_runs: ClassVar[int] = (
        1_000  # one laplace_series; past ~2,000 runs its (T, runs) budget and scale arrays cost more than a pass per ε
    )

    def allocation_rule(self) -> PeriodicRule:
        return PeriodicRule(every=1)

    def run(self, stream: GuardedStream, ledger: Ledger) -> NDArray[np.float64]:
        return run_fixed_schedule(self.allocation_rule(), stream, ledger, self.filtering)

    def releases(self, stream: Stream, ledger: Ledger) -> Iterator[NDArray[np.float64]]:
        """The release of every timestamp as it arrives (a live stream; ``budgetcheck publish``)."""
        return fixed_schedule(self.allocation_rule(), stream, ledger, self.filtering)
