"""The Uniform–Sample hybrid (Schäler et al. 2022, §6: the recommendation to practitioners)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

import attrs
import numpy as np
from numpy.typing import NDArray

from budgetcheck import GuardedStream, InvalidArgument
from mechanisms._common import Ledger, Stream, fixed_schedule, run_fixed_schedule
from mechanisms.rules import PeriodicRule


def _every(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidArgument(f"every={value!r} must be an integer >= 1")
    return value


@attrs.frozen
class Hybrid:
    """Samples every x-th timestamp with ε/ceil(w/x) and repeats the last release in between.

    x = 1 is Uniform and x = w is Sample. Budget arithmetic: :class:`mechanisms.rules.PeriodicRule`.
    """

    every: int = attrs.field(default=2, converter=_every)
    filtering: bool = False
    name: str = attrs.field(default="Hybrid", init=False)
    max_stacked_runs: ClassVar[int] = (
        1_000  # one laplace_series; past ~2,000 runs its (T, runs) budget and scale arrays cost more than a pass per ε
    )

    def allocation_rule(self) -> PeriodicRule:
        return PeriodicRule(self.every)

    def run(self, stream: GuardedStream, ledger: Ledger) -> NDArray[np.float64]:
        return run_fixed_schedule(self.allocation_rule(), stream, ledger, self.filtering)

    def releases(self, stream: Stream, ledger: Ledger) -> Iterator[NDArray[np.float64]]:
        """The release of every timestamp as it arrives (a live stream; ``budgetcheck publish``)."""
        return fixed_schedule(self.allocation_rule(), stream, ledger, self.filtering)
