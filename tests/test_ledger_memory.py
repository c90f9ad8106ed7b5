"""An in-memory ledger's memory is flat over the stream: records are kept only when asked for
(they grew ~250 bytes per spend: 2.8 GiB at 10^7 timestamps)."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import budgetcheck as bc

STEPS = 20_000


def growth_per_step(make: Callable[[], Any], step: Callable[[Any, int], None]) -> float:
    """Bytes traced per step between the first quarter of the stream and its end."""
    ledger = make()
    for t in range(1, STEPS // 4 + 1):
        step(ledger, t)
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for t in range(STEPS // 4 + 1, STEPS + 1):
        step(ledger, t)
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return (after - before) / (STEPS - STEPS // 4)


REQUIREMENTS = bc.RequirementSet.from_counts([((3, 1.0), 5), ((5, 2.0), 5)])
POLICIES = bc.PolicyCollection([bc.StreamPolicy(1, 5, [1.0])])


def _live_laplace(ledger: bc.WindowLedger) -> Callable[[Any, int], None]:
    stream = bc.LiveStream(((t, [t % 7, 3]) for t in range(1, STEPS + 1)), dimensions=2)
    ledger.bind(stream)
    secrets = iter(stream)
    return lambda ledger, t: ledger.laplace(next(secrets), 0.05)


CASES: dict[str, tuple[Callable[[], Any], Callable[[Any, int], None]]] = {
    "window spend": (lambda: bc.WindowLedger(epsilon=1.0, w=10), lambda ledger, t: ledger.spend(t, 0.05, purpose="a")),
    "several epsilons": (lambda: bc.WindowLedger.with_epsilons([1.0, 0.5, 2.0], 10),
                         lambda ledger, t: ledger.spend(t, [0.05, 0.02, 0.1], purpose="a")),
    "personalized": (lambda: bc.PersonalizedLedger(REQUIREMENTS), lambda ledger, t: ledger.spend(t, [0.1, 0.2], purpose="a")),
    "swellfish": (lambda: bc.SwellfishLedger(POLICIES, epsilon=1.0),
                  lambda ledger, t: ledger.spend(t, 0.1 if t <= 5 else 0.0, purpose="a")),
}


@pytest.mark.parametrize("name", list(CASES))
def test_memory_is_flat_without_kept_records(name: str) -> None:
    make, step = CASES[name]
    assert growth_per_step(make, step) < 8  # bytes per step (records took ~250)


def test_a_live_laplace_release_keeps_memory_flat() -> None:
    ledger = bc.WindowLedger(epsilon=1.0, w=10, sampler="numpy-laplace")
    step = _live_laplace(ledger)
    assert growth_per_step(lambda: ledger, step) < 8


def test_kept_records_are_what_grows() -> None:
    """The bound above has power: the same ledger keeping its records grows by about a record per step."""
    make, step = CASES["window spend"]
    assert growth_per_step(lambda: bc.WindowLedger(epsilon=1.0, w=10, keep_records=True), step) > 100


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
