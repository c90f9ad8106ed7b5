"""Composed products, claims and answer bounds where the outside attack stops short: nested compositions,
AboveThreshold over a composed query, and overflow inside a composition or from clip bounds."""

from __future__ import annotations

import numpy as np
import pytest

from budgetcheck import (
    Clipped,
    Composed,
    GuardedStream,
    InvalidArgument,
    Linear,
    Neighbours,
    Total,
    WindowLedger,
    deviation,
)


def _bound(d: int = 1) -> tuple[WindowLedger, GuardedStream]:
    stream = GuardedStream(np.ones((3, d)))
    ledger = WindowLedger(epsilon=1.0, w=3, seed=1, sampler="numpy-laplace", keep_records=True)
    ledger.bind(stream)
    return ledger, stream


def test_a_nested_composition_keeps_its_inner_product_exact() -> None:
    """The inner composition's product (2^53 + 5, −2^53)ᵀ rounds to 2^53 + 4 in doubles; the outer sum of
    the two is x ↦ 5x, sensitivity 5 under one_bin(), not the 4 the rounded inner product gives."""
    inner = Composed(outer=Linear(np.array([[1.0, 1.0], [-1.0, 0.0]])), inner=Linear(np.array([[2.0**53], [5.0]])))
    query = Composed(outer=Linear(np.array([[1.0, 1.0]])), inner=inner)
    assert query.sensitivity(Neighbours.one_bin(), 1) == 5.0
    ledger, stream = _bound()
    with pytest.raises(InvalidArgument, match="sensitivity=4.0 is below 5.0"):
        ledger.laplace_query(stream.secret(1), query, 0.5, sensitivity=4.0)


def test_above_threshold_over_a_composed_query_needs_twice_its_exact_sensitivity() -> None:
    """x ↦ 3x formed through 2^53 − 2^53: a deviation test over it needs sensitivity 6, not 2."""
    inner = Linear(np.array([[2.0**53], [1.0], [1.0], [1.0], [-(2.0**53)]]))
    query = Composed(outer=Linear(np.ones((1, 5))), inner=inner)
    ledger, stream = _bound()
    test = ledger.above_threshold(epsilon=0.1, sensitivity=2.0, cells=(1,), query=query)
    with pytest.raises(InvalidArgument, match="below 6.0"):
        test.query(stream.secret(1), deviation, 0.0)
    assert ledger.records == ()


@pytest.mark.parametrize(
    "query",
    [
        Composed(outer=Linear(np.array([[0.0]])), inner=Linear(np.array([[1e300]]))),  # 0·inf is NaN, 0·0 is 0
        Clipped(Total(), 1e307, 1e308),  # every bin clipped up to 1e308: their sum overflows
    ],
    ids=["inside-composed", "clip-bounds"],
)
def test_answers_that_can_overflow_are_refused_before_the_charge(query: object) -> None:
    ledger, stream = _bound(3)
    with pytest.raises(InvalidArgument, match="can reach"):
        ledger.laplace_query(stream.secret(1), query, 1.0)  # type: ignore[arg-type]
    assert ledger.records == ()


def test_clip_bounds_beyond_the_stream_values_are_not_refused() -> None:
    """clip(x, 0, 1e308) of values up to 2^53 stays below 2^53: nothing can overflow."""
    ledger, stream = _bound(3)
    ledger.laplace_query(stream.secret(1), Clipped(Total(), 0.0, 1e308), 1.0)
    assert len(ledger.records) == 1


@pytest.mark.parametrize("claimed", [2**1100, float("nan"), -1.0, True, "1"])
def test_a_claimed_sensitivity_that_is_no_finite_number_is_refused_by_name(claimed: object) -> None:
    with pytest.raises(InvalidArgument, match="claimed="):
        Linear(np.ones((1, 3)), claimed=claimed)  # type: ignore[arg-type]
