"""What a stream mechanism is to budgetcheck, and the harness that runs one through a ledger.

This is the w-event framework of Schäler et al. 2022, Algorithm 1: at every timestamp a
sub-mechanism M_t receives the true result Q(D_t) (here an opaque Secret), decides whether to
sample (isSamplingPoint), allocates budget (budgetAllocation), perturbs through the ledger
(perturbation) and post-processes (filtering).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import attrs
import numpy as np
from numpy.typing import ArrayLike, NDArray

from budgetcheck._errors import MechanismContractError
from budgetcheck._ledger import WindowLedger
from budgetcheck._params import WEventParams
from budgetcheck._stream import GuardedStream

FloatArray = NDArray[np.float64]


@runtime_checkable
class StreamMechanism(Protocol):
    """A w-event mechanism: reads the stream only through the ledger, returns every release.

    ``run`` returns an array of shape (ledger.runs, stream.length, stream.dimensions): the value
    published (or approximated) at every timestamp of every run.
    """

    @property
    def name(self) -> str: ...

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> FloatArray: ...


@attrs.frozen(eq=False)
class Execution:
    """The releases of one execution (shape (runs, T, d)) and the ledger that paid for them."""

    releases: FloatArray
    ledger: WindowLedger


def execute(
    mechanism: StreamMechanism,
    data: ArrayLike,
    *,
    epsilon: float,
    w: int,
    runs: int = 1,
    seed: int = 0,
) -> Execution:
    """Run ``mechanism`` on ``data`` (shape (T, d)) under (ε, w) for ``runs`` seeded runs."""
    params = WEventParams(epsilon=epsilon, w=w)
    stream = GuardedStream(data)
    ledger = WindowLedger(params, runs=runs, seed=seed)
    ledger.bind(stream)
    releases = np.asarray(mechanism.run(stream, ledger), dtype=np.float64)
    expected = (runs, stream.length, stream.dimensions)
    if releases.shape != expected:
        raise MechanismContractError(
            f"{mechanism.name}.run returned shape {releases.shape}, expected (runs, T, d) = {expected}"
        )
    if not np.isfinite(releases).all():
        raise MechanismContractError(f"{mechanism.name}.run returned non-finite releases")
    releases.setflags(write=False)
    return Execution(releases=releases, ledger=ledger)
