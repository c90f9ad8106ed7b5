"""What a stream mechanism is to budgetcheck, and the harness that runs one through a ledger.

This is the w-event framework of Schäler et al. 2022, Algorithm 1: at every timestamp a
sub-mechanism M_t receives the true result Q(D_t) (here an opaque Secret), decides whether to
sample (isSamplingPoint), allocates budget (budgetAllocation), perturbs through the ledger
(perturbation) and post-processes (filtering).
"""

from __future__ import annotations

import inspect
import reprlib
from collections.abc import Iterable
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

import attrs
import numpy as np
from numpy.typing import ArrayLike, NDArray

from budgetcheck.ledger.core import LedgerCore
from budgetcheck.ledger.errors import InvalidArgument, MechanismContractError
from budgetcheck.ledger.noise import NUMPY
from budgetcheck.ledger.notion import Notion, check_notion
from budgetcheck.ledger.params import WEventParams
from budgetcheck.ledger.personalized import PersonalizedLedger
from budgetcheck.ledger.policies import PolicyCollection
from budgetcheck.ledger.requirements import RequirementSet
from budgetcheck.ledger.swellfish import SwellfishLedger
from budgetcheck.ledger.wevent import WindowLedger
from budgetcheck.stream.guarded import GuardedStream, PersonalizedStream

FloatArray = NDArray[np.float64]


@runtime_checkable
class StreamMechanism(Protocol):
    """A w-event mechanism: reads the stream only through the ledger, returns every release.

    ``run`` returns an array of shape (ledger.runs, stream.length, stream.dimensions): the value
    published (or approximated) at every timestamp of every run. A mechanism that reads the budget
    as ``ledger.epsilon`` (a float, or one per run) also runs on a ledger of several ε; declaring
    ``max_stacked_runs`` lets the benchmark use one (:func:`max_stacked_runs`).
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


def max_stacked_runs(mechanism: object) -> int:
    """How many runs the benchmark may put in one pass by running several ε of one w together, on
    a ledger of several ε (``WindowLedger.with_epsilons``); 0 (the default): one ε per pass.

    A mechanism declares it as a class attribute ``max_stacked_runs`` when it reads its budget as
    ``ledger.epsilon`` (a float, or one per run), never ``ledger.params``. The value is where a
    bigger pass stops paying: Python's per-timestamp cost is shared by every run of a pass, but a
    mechanism whose per-run work outgrows the caches gains nothing beyond some size (measured in
    benchmarks/bench_speed.py and noted on each built-in).
    """
    value = getattr(mechanism, "max_stacked_runs", 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgument(
            f"{getattr(mechanism, 'name', mechanism)!r} declares max_stacked_runs={value!r}; it must be an int >= 0"
        )
    return value


def notion_of(mechanism: object) -> Notion:
    """W_EVENT unless the mechanism declares ``notion`` 'personalized' or 'swellfish' (another
    value is :class:`InvalidArgument`, naming the mechanism)."""
    declared = getattr(mechanism, "notion", Notion.W_EVENT)
    return check_notion(declared, f"{type(mechanism).__name__}.notion")


L = TypeVar("L", bound=LedgerCore)


def check_mechanism(value: object, kind: str = "StreamMechanism", name: str = "mechanism") -> None:
    """``value`` is a mechanism (a ``name`` and a ``run(stream, ledger)``), else InvalidArgument naming it;
    a string is a mechanism's *name*, which :func:`budgetcheck.load_mechanism` resolves."""
    if isinstance(value, str):
        raise InvalidArgument(
            f"{name}={value!r} is a name, not a mechanism: pass load_mechanism({value!r}) or a mechanism object"
        )
    if isinstance(value, type):
        raise InvalidArgument(f"{name}={value.__name__} is a class, not a {kind}: pass an instance, {value.__name__}()")
    if not isinstance(value, StreamMechanism) or not callable(value.run):
        raise InvalidArgument(
            f"{name}={reprlib.repr(value)} is not a {kind} (it needs .name and .run(stream, ledger)), "
            f"got {type(value).__name__}"
        )


@attrs.frozen(eq=False)
class Execution(Generic[L]):
    """The releases of one execution (shape (runs, T, d)) and the ledger that paid for them."""

    releases: FloatArray
    ledger: L


def defined_at(method: Any) -> str:
    """`` (file:line)`` of a mechanism's method, where the user reads its code; empty when unknown."""
    code = getattr(inspect.unwrap(getattr(method, "__func__", method)), "__code__", None)
    return f" ({code.co_filename}:{code.co_firstlineno})" if code is not None else ""


def execute_on(mechanism: Any, stream: GuardedStream | PersonalizedStream, ledger: L) -> Execution[L]:
    """Bind the stream to the ledger, run the mechanism, check the (runs, T, d) finite contract."""
    ledger.bind(stream)
    out = np.asarray(mechanism.run(stream, ledger), dtype=np.float64)
    expected = (ledger.runs, stream.length, stream.dimensions)
    if out.shape != expected:
        raise MechanismContractError(
            f"{mechanism.name}.run{defined_at(mechanism.run)} returned shape {out.shape}, expected (runs, T, d) = "
            f"{expected}"
        )
    if not np.isfinite(out).all():
        raise MechanismContractError(f"{mechanism.name}.run{defined_at(mechanism.run)} returned non-finite releases")
    out.setflags(write=False)
    return Execution(releases=out, ledger=ledger)


def execute(
    mechanism: StreamMechanism,
    data: ArrayLike | GuardedStream,
    *,
    epsilon: float | ArrayLike,
    w: int,
    runs: int = 1,
    seed: int = 0,
    sampler: str = NUMPY,
    intrusions: Iterable[int] = (),
    trusted_code: bool = False,
    allow_vouched: bool = False,
) -> Execution[WindowLedger]:
    """Run ``mechanism`` on ``data`` (shape (T, d), or a GuardedStream, stacked or not) under (ε, w)
    for ``runs`` seeded runs; ``epsilon`` may give one ε per run (``WindowLedger.with_epsilons``).
    ``intrusions``: timestamps announced as intruded before the run (multiple announced intrusions,
    Kellaris et al. 2014, §4.5: ``ledger.announce_intrusion``, the ledger forces those publications).

    An experiment, not a publication: the ledger keeps its records (for audits) and its noise is reproducible from
    ``seed`` (``numpy-laplace``)
    unless ``sampler`` names another; to publish, use a ledger file (:func:`budgetcheck.publish`).

    ``trusted_code``, ``allow_vouched``: the ledger owner's consent (see :class:`WindowLedger`) to the mechanism's
    in-process code (``isolation='trusted'``) and vouched sensitivities (``measure``); both refused by default.

    Example:
        >>> import numpy as np
        >>> from budgetcheck import audit_windows, execute, load_mechanism
        >>> execution = execute(load_mechanism("Uniform"), np.ones((20, 2)), epsilon=1.0, w=5, runs=3, seed=0)
        >>> execution.releases.shape  # (runs, T, d)
        (3, 20, 2)
        >>> audit_windows(execution.ledger.records, epsilon=1.0, w=5, runs=3).ok
        True
    """
    check_mechanism(mechanism)
    stream = data if isinstance(data, GuardedStream) else GuardedStream(data)
    if np.ndim(epsilon) == 0:
        ledger = WindowLedger(
            WEventParams(epsilon=epsilon, w=w),
            runs=runs,
            seed=seed,
            sampler=sampler,
            keep_records=True,
            trusted_code=trusted_code,
            allow_vouched=allow_vouched,
        )
    else:
        ledger = WindowLedger.with_epsilons(
            epsilon,
            w,
            seed=seed,
            sampler=sampler,
            keep_records=True,
            trusted_code=trusted_code,
            allow_vouched=allow_vouched,
        )
        if ledger.runs != runs:
            raise InvalidArgument(f"epsilon has {ledger.runs} budgets but runs={runs!r}; give one ε per run")
    for t in intrusions:
        ledger.announce_intrusion(t)
    return execute_on(mechanism, stream, ledger)


def execute_personalized(
    mechanism: PersonalizedMechanism,
    requirements: RequirementSet,
    bins: ArrayLike,
    *,
    dimensions: int,
    runs: int = 1,
    seed: int = 0,
    sampler: str = NUMPY,
    trusted_code: bool = False,
    allow_vouched: bool = False,
) -> Execution[PersonalizedLedger]:
    """Run a personalized mechanism on per-user ``bins`` (shape (T, n)) under ``requirements``
    (an experiment: reproducible noise from ``seed``, and the owner's consent, as :func:`execute`)."""
    check_mechanism(mechanism, "PersonalizedMechanism")
    stream = PersonalizedStream(requirements, bins, dimensions=dimensions)
    ledger = PersonalizedLedger(
        requirements,
        runs=runs,
        seed=seed,
        sampler=sampler,
        keep_records=True,
        trusted_code=trusted_code,
        allow_vouched=allow_vouched,
    )
    return execute_on(mechanism, stream, ledger)


def execute_swellfish(
    mechanism: SwellfishMechanism,
    policies: PolicyCollection,
    data: ArrayLike,
    *,
    epsilon: float,
    runs: int = 1,
    seed: int = 0,
    sampler: str = NUMPY,
    trusted_code: bool = False,
    allow_vouched: bool = False,
) -> Execution[SwellfishLedger]:
    """Run a Swellfish mechanism on ``data`` (shape (T, d)) under (ε, Φ) (an experiment: reproducible
    noise from ``seed``, and the owner's consent, as :func:`execute`)."""
    check_mechanism(mechanism, "SwellfishMechanism")
    ledger = SwellfishLedger(
        policies,
        epsilon=epsilon,
        runs=runs,
        seed=seed,
        sampler=sampler,
        keep_records=True,
        trusted_code=trusted_code,
        allow_vouched=allow_vouched,
    )
    return execute_on(mechanism, GuardedStream(data), ledger)
