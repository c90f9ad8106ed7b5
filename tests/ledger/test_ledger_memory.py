"""An in-memory ledger's memory is flat over the stream: records are kept only when asked for
(they grew ~250 bytes per spend: 2.8 GiB at 10^7 timestamps), and the per-timestamp state is
bounded by what the composition check needs (the last w timestamps and w - 1 before them for
w-event, max w_i for personalized, the open relevance intervals for Swellfish, the capped
footprints of AboveThreshold)."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import budgetcheck as bc

STEPS = 20_000  # the default run; the slow test below runs 200,000
LONG = 200_000

Step = Callable[[Any, int], object]


def growth(make: Callable[[int], tuple[Any, Step]], steps: int, warm: int) -> int:
    """Bytes traced (still allocated) after ``steps`` steps minus after the first ``warm`` steps."""
    ledger, step = make(steps)
    for t in range(1, warm + 1):
        step(ledger, t)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for t in range(warm + 1, steps + 1):
            step(ledger, t)
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    return after - before


REQUIREMENTS = bc.RequirementSet.from_counts([((3, 1.0), 5), ((5, 2.0), 5)])
POLICIES = bc.PolicyCollection([bc.StreamPolicy(1, 5, [1.0])])


def _plain(make: Callable[[], Any], step: Step) -> Callable[[int], tuple[Any, Step]]:
    return lambda steps: (make(), step)


def _laplace_on(stream_of: Callable[[int], Any]) -> Callable[[int], tuple[Any, Step]]:
    """A live release at every t: the ledger reads the bound stream's secrets one by one."""

    def make(steps: int) -> tuple[Any, Step]:
        ledger = bc.WindowLedger(epsilon=1.0, w=10, sampler="numpy-laplace")
        stream = stream_of(steps)
        ledger.bind(stream)
        secrets = iter(stream)
        return ledger, lambda ledger, t: ledger.laplace(next(secrets), 0.05)

    return make


def _threshold(steps: int) -> tuple[Any, Step]:
    """An AboveThreshold query at every t (footprints capped at 8): the instances' true values kept
    are those of the open footprints only."""
    ledger = bc.WindowLedger(epsilon=1.0, w=10, sampler="numpy-laplace", trusted_code=True, allow_vouched=True)
    values = np.arange(steps, dtype=np.float64) % 5
    stream = bc.GuardedStream(values)
    ledger.bind(stream)
    secrets = iter(stream)
    test = ledger.above_threshold(epsilon=0.05, sensitivity=1.0, cells=(1,), max_footprint=8)
    statistic = lambda rows: np.nansum(rows, axis=1)  # noqa: E731
    return ledger, lambda ledger, t: test.query(next(secrets), statistic, 6.0, isolation="trusted")  # memory, not forks


CASES: dict[str, Callable[[int], tuple[Any, Step]]] = {
    "window spend": _plain(
        lambda: bc.WindowLedger(epsilon=1.0, w=10), lambda ledger, t: ledger.spend(t, 0.05, purpose="a")
    ),
    "several epsilons": _plain(
        lambda: bc.WindowLedger.with_epsilons([1.0, 0.5, 2.0], 10),
        lambda ledger, t: ledger.spend(t, [0.05, 0.02, 0.1], purpose="a"),
    ),
    "laplace on a GuardedStream": _laplace_on(
        lambda steps: bc.GuardedStream(np.arange(2 * steps, dtype=np.float64).reshape(steps, 2) % 7)
    ),
    "laplace on a LiveStream": _laplace_on(
        lambda steps: bc.LiveStream(((t, [t % 7, 3]) for t in range(1, steps + 1)), dimensions=2)
    ),
    "above threshold": _threshold,
    "personalized": _plain(
        lambda: bc.PersonalizedLedger(REQUIREMENTS), lambda ledger, t: ledger.spend(t, [0.1, 0.2], purpose="a")
    ),
    "swellfish": _plain(
        lambda: bc.SwellfishLedger(POLICIES, epsilon=1.0),
        lambda ledger, t: ledger.spend(t, 0.1 if t <= 5 else 0.0, purpose="a"),
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_memory_is_flat_without_kept_records(name: str) -> None:
    """15,000 steps after a warm-up of 5,000 add less than 8 bytes a step (a kept record took ~250)."""
    assert growth(CASES[name], STEPS, STEPS // 4) < 8 * (STEPS - STEPS // 4)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
def test_memory_is_flat_over_200000_timestamps(name: str) -> None:
    """The issue's bound: from t = 50,000 to 200,000 the traced memory grows by less than 1 MB
    (kept records would add ~37 MB)."""
    assert growth(CASES[name], LONG, LONG // 4) < 10**6


def test_kept_records_are_what_grows() -> None:
    """The bound above has power: the same ledger keeping its records grows by about a record per step."""
    kept = _plain(
        lambda: bc.WindowLedger(epsilon=1.0, w=10, keep_records=True),
        lambda ledger, t: ledger.spend(t, 0.05, purpose="a"),
    )
    assert growth(kept, STEPS, STEPS // 4) > 100 * (STEPS - STEPS // 4)


def test_an_open_footprint_is_what_grows() -> None:
    """The threshold case has power too: an instance that never closes and has no cap keeps the true
    value of every timestamp of its footprint (its queries read them all), and the bound sees that."""

    def uncapped(steps: int) -> tuple[Any, Step]:
        ledger = bc.WindowLedger(epsilon=1.0, w=10, sampler="numpy-laplace", trusted_code=True, allow_vouched=True)
        stream = bc.GuardedStream(np.arange(steps, dtype=np.float64) % 5)
        ledger.bind(stream)
        secrets = iter(stream)
        test = ledger.above_threshold(epsilon=0.05, sensitivity=1.0, cells=(1,))
        return ledger, lambda ledger, t: test.query(
            next(secrets), lambda rows: np.nansum(rows, axis=1), 1e12, isolation="trusted"
        )

    assert growth(uncapped, STEPS, STEPS // 4) > 8 * (STEPS - STEPS // 4)


def test_records_of_a_ledger_that_keeps_none_are_refused_clearly() -> None:
    ledger = bc.WindowLedger(epsilon=1.0, w=3)
    ledger.spend(1, 0.5, purpose="a")
    with pytest.raises(bc.InvalidArgument, match="keep_records=True"):
        _ = ledger.records
    with pytest.raises(bc.InvalidArgument, match="keep_records=True"):
        list(ledger.jsonl())
    kept = bc.WindowLedger(epsilon=1.0, w=3, keep_records=True)
    kept.spend(1, 0.5, purpose="a")
    assert [r.purpose for r in kept.records] == ["a"] and len(list(kept.jsonl())) == 2
    with pytest.raises(bc.InvalidArgument, match="keep_records"):
        bc.WindowLedger(epsilon=1.0, w=3, keep_records="yes")  # type: ignore[arg-type]
    assert np.isclose(float(ledger.remaining(1)[0]), 0.5)  # the accounting is unchanged by keeping nothing
