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

from budgetcheck._core import LedgerCore
from budgetcheck._errors import MechanismContractError
from budgetcheck._ledger import WindowLedger
from budgetcheck._params import WEventParams
from budgetcheck._personalized import PersonalizedLedger
from budgetcheck._policies import PolicyCollection
from budgetcheck._requirements import RequirementSet
from budgetcheck._stream import GuardedStream, PersonalizedStream
from budgetcheck._swellfish import SwellfishLedger

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


@runtime_checkable
class PersonalizedMechanism(Protocol):
    """A personalized w-event mechanism (``notion = "personalized"``): reads per-user data only
    through a :class:`PersonalizedLedger`; ``run`` returns shape (runs, T, d)."""

    @property
    def name(self) -> str: ...

    @property
    def notion(self) -> str: ...

    def run(self, stream: PersonalizedStream, ledger: PersonalizedLedger) -> FloatArray: ...


@runtime_checkable
class SwellfishMechanism(Protocol):
    """A Swellfish mechanism (``notion = "swellfish"``): reads the stream only through a
    :class:`SwellfishLedger`; ``run`` returns shape (runs, T, d)."""

    @property
    def name(self) -> str: ...

    @property
    def notion(self) -> str: ...

    def run(self, stream: GuardedStream, ledger: SwellfishLedger) -> FloatArray: ...


def notion_of(mechanism: object) -> str:
    """'w-event' unless the mechanism declares ``notion`` 'personalized' or 'swellfish'."""
    return str(getattr(mechanism, "notion", "w-event"))


@attrs.frozen(eq=False)
class Execution:
    """The releases of one execution (shape (runs, T, d)) and the ledger that paid for them."""

    releases: FloatArray
    ledger: WindowLedger


@attrs.frozen(eq=False)
class PersonalizedExecution:
    """The releases of a personalized execution and its ledger."""

    releases: FloatArray
    ledger: PersonalizedLedger


@attrs.frozen(eq=False)
class SwellfishExecution:
    """The releases of a Swellfish execution and its ledger."""

    releases: FloatArray
    ledger: SwellfishLedger


def _checked(name: str, releases: object, expected: tuple[int, int, int]) -> FloatArray:
    out = np.asarray(releases, dtype=np.float64)
    if out.shape != expected:
        raise MechanismContractError(f"{name}.run returned shape {out.shape}, expected (runs, T, d) = {expected}")
    if not np.isfinite(out).all():
        raise MechanismContractError(f"{name}.run returned non-finite releases")
    out.setflags(write=False)
    return out


def _bound(ledger: LedgerCore, stream: object) -> None:
    ledger.bind(stream)


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
    _bound(ledger, stream)
    releases = _checked(mechanism.name, mechanism.run(stream, ledger), (runs, stream.length, stream.dimensions))
    return Execution(releases=releases, ledger=ledger)


def execute_personalized(
    mechanism: PersonalizedMechanism,
    requirements: RequirementSet,
    bins: ArrayLike,
    *,
    dimensions: int,
    runs: int = 1,
    seed: int = 0,
) -> PersonalizedExecution:
    """Run a personalized mechanism on per-user ``bins`` (shape (T, n)) under ``requirements``."""
    stream = PersonalizedStream(requirements, bins, dimensions=dimensions)
    ledger = PersonalizedLedger(requirements, runs=runs, seed=seed)
    _bound(ledger, stream)
    releases = _checked(mechanism.name, mechanism.run(stream, ledger), (runs, stream.length, stream.dimensions))
    return PersonalizedExecution(releases=releases, ledger=ledger)


def execute_swellfish(
    mechanism: SwellfishMechanism,
    policies: PolicyCollection,
    data: ArrayLike,
    *,
    epsilon: float,
    runs: int = 1,
    seed: int = 0,
) -> SwellfishExecution:
    """Run a Swellfish mechanism on ``data`` (shape (T, d)) under (ε, Φ)."""
    stream = GuardedStream(data)
    ledger = SwellfishLedger(policies, epsilon=epsilon, runs=runs, seed=seed)
    _bound(ledger, stream)
    releases = _checked(mechanism.name, mechanism.run(stream, ledger), (runs, stream.length, stream.dimensions))
    return SwellfishExecution(releases=releases, ledger=ledger)
