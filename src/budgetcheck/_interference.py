"""Stage (b), second half: non-interference of the true stream with everything but charged outputs.

A mechanism that reads data only through charged ledger operations computes its releases and its
spends from the outputs of those operations, public parameters and its own seed. So run it on a
stream A, record every output, then run it on a different stream B of the same shape while the
ledger hands back A's outputs in order (the operations still run on B, charged as usual). Any
difference in the releases, the charges or the sequence of operations means some true value of B
reached the mechanism another way: a payload kept by a ``measure`` function, a statistic that
stashes its input, state shared with another ledger. Dynamic secret checks cannot see those.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import numpy as np
from numpy.typing import NDArray

from budgetcheck._core import LedgerCore
from budgetcheck._ledger import WindowLedger
from budgetcheck._mechanism import _run
from budgetcheck._params import WEventParams
from budgetcheck._personalized import PersonalizedLedger
from budgetcheck._policies import PolicyCollection, StreamPolicy
from budgetcheck._requirements import RequirementSet
from budgetcheck._stream import GuardedStream, PersonalizedStream

FloatArray = NDArray[np.float64]


@attrs.frozen
class _Setting:
    """A ledger factory and two streams of the same shape with different values."""

    label: str
    ledger: Callable[[], LedgerCore]
    first: Callable[[], GuardedStream | PersonalizedStream]
    second: Callable[[], GuardedStream | PersonalizedStream]


class _Diverged(Exception):
    """The second run asked for an operation the first run did not."""


def _settings(notion: str) -> Iterator[_Setting]:
    rng = np.random.default_rng(20261121)
    length = 24
    if notion == "personalized":
        requirements = RequirementSet([(2, 0.5)] * 3 + [(3, 1.0)] * 3)
        low = rng.integers(0, 2, size=(length, requirements.n_users))
        high = 1 - low
        yield _Setting("6 users in two classes, 2 bins", lambda: PersonalizedLedger(requirements, runs=3, seed=1, sampler="numpy-laplace", keep_records=True),
                       lambda: PersonalizedStream(requirements, low, dimensions=2),
                       lambda: PersonalizedStream(requirements, high, dimensions=2))
        return
    small = rng.poisson(3.0, size=(length, 3)).astype(np.float64)
    large = rng.poisson(40.0, size=(length, 3)).astype(np.float64)
    if notion == "swellfish":
        from budgetcheck._swellfish import SwellfishLedger

        policies = PolicyCollection([StreamPolicy(4, 8, (2.0, 1.0)), StreamPolicy(2, 3, (1.0,))])
        yield _Setting("epsilon=1, J=[4, 8] and [2, 3]", lambda: SwellfishLedger(policies, epsilon=1.0, runs=3, seed=1, sampler="numpy-laplace", keep_records=True),
                       lambda: GuardedStream(small), lambda: GuardedStream(large))
        return
    for epsilon, w in ((1.0, 3), (0.5, 1), (2.0, 8)):
        yield _Setting(f"epsilon={epsilon}, w={w}", functools.partial(WindowLedger, WEventParams(epsilon=epsilon, w=w), runs=3, seed=1,
                                                                   sampler="numpy-laplace", keep_records=True),
                       lambda: GuardedStream(small), lambda: GuardedStream(large))


def _charges(ledger: LedgerCore) -> list[tuple[int, str, tuple[float, ...]]]:
    return [(r.t, r.purpose, tuple(np.asarray(r.amounts, dtype=np.float64).ravel().tolist())) for r in ledger.records]


@attrs.frozen
class Flow:
    """What the check found: ``leak`` (the second stream changed the run), ``nondeterministic``
    (the first stream again, with the same outputs, already changed it: unseeded randomness, a
    clock, state kept across runs; nothing can be concluded about the data) or ``unchecked`` (the
    mechanism failed on a setting's first stream)."""

    kind: str
    detail: str


def interference(mechanism: Any, notion: str) -> Flow | None:
    """How the releases or spends depend on the stream beyond the charged outputs, or None if no
    difference shows on the built-in stream pairs (see the module docstring).

    A mechanism that fails on a first stream is stage (a)'s finding; here that setting is not
    judged, and if no difference shows elsewhere the result is ``unchecked`` (never a silent pass).
    """
    failures: list[str] = []
    for setting in _settings(notion):
        outputs: list[Any] = []

        def keep(result: Any) -> Any:
            outputs.append(copy.deepcopy(result))
            return result

        first_ledger = setting.ledger()
        first_ledger._tap = keep
        try:
            first = _run(mechanism, setting.first(), first_ledger).releases
        except Exception as exc:
            failures.append(f"{setting.label}: {type(exc).__name__}: {exc}")
            continue
        for kind, stream in (("nondeterministic", setting.first), ("leak", setting.second)):
            found = _replayed_difference(mechanism, setting, stream, outputs, first_ledger, first)
            if found is not None:
                return Flow(kind, f"{setting.label}: with every charged output held equal, {found}"
                            + (" on a second run of the same stream" if kind == "nondeterministic" else ""))
    return Flow("unchecked", f"it failed on the first stream of {'; '.join(failures)}") if failures else None


def _replayed_difference(mechanism: Any, setting: _Setting, stream: Callable[[], GuardedStream | PersonalizedStream],
                         outputs: list[Any], first_ledger: LedgerCore, first: FloatArray) -> str | None:
    """Run on ``stream`` while the ledger hands back ``outputs`` in order; how the run differs from the first."""
    stored = iter(outputs)

    def hand_back(result: Any) -> Any:
        try:
            return copy.deepcopy(next(stored))
        except StopIteration:
            raise _Diverged("it made more charged operations than on the first stream") from None

    ledger = setting.ledger()
    ledger._tap = hand_back
    try:
        releases = _run(mechanism, stream(), ledger).releases
    except _Diverged as exc:
        return str(exc)
    except Exception as exc:
        return f"it failed where the first run did not ({type(exc).__name__}: {exc})"
    found = _difference(_charges(first_ledger), _charges(ledger), first, releases)
    if found is None and next(stored, None) is not None:
        found = "it made fewer charged operations than on the first stream"
    return found


def _difference(first_charges: list[Any], second_charges: list[Any], first: FloatArray, second: FloatArray) -> str | None:
    for one, other in zip(first_charges, second_charges, strict=False):
        if one != other:
            return f"the charges differ: {one} in the first run, {other} in this one"
    if len(first_charges) != len(second_charges):
        return f"the number of charges differs: {len(first_charges)} vs {len(second_charges)}"
    if first.shape != second.shape:
        return f"the releases have different shapes: {first.shape} vs {second.shape}"
    if not np.array_equal(first, second):
        run, t = (int(i) for i in np.argwhere(first != second)[0][:2])
        return f"the releases differ (first at t={t + 1}, run {run})"
    return None
