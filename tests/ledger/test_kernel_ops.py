"""The compiled ops back-end (``budgetcheck.kernel_ops``) gives the doubles ``ops.FLOAT`` gives, operation by
operation: the rule compiled from its own source computes what the proved rule computes on FLOAT."""

from __future__ import annotations

import numpy as np
import pytest

from budgetcheck import rounding
from budgetcheck.kernel_ops import (
    Window,
    k_div_down,
    k_half_down,
    k_mul_down,
    k_share,
    k_slide,
    k_sub_down,
    kernel_ops,
)
from budgetcheck.ledger.sliding import SlidingValues
from budgetcheck.ops import FLOAT

pytestmark = pytest.mark.bitwise


def _doubles(seed: int, size: int = 400) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.random(size) * np.exp2(rng.integers(-60, 60, size=size).astype(np.float64))


def _bits(value: float) -> int:
    return int(np.array(value, dtype=np.float64).view(np.int64))


def test_directed_roundings_are_the_library_kernels() -> None:
    xs, ys = _doubles(1), _doubles(2)
    tiny = np.exp2(-np.arange(1021.0, 1074.0))
    assert [_bits(k_sub_down(x, y)) for x, y in zip(xs, ys, strict=True)] == [
        _bits(v) for v in rounding.sub_down(xs, ys)
    ]
    assert [_bits(k_mul_down(x, y)) for x, y in zip(xs, ys, strict=True)] == [
        _bits(v) for v in rounding.mul_down(xs, ys)
    ]
    assert [_bits(k_div_down(x, y)) for x, y in zip(xs, ys, strict=True)] == [
        _bits(v) for v in rounding.div_down(xs, ys)
    ]
    values = np.concatenate([xs, tiny * 3.0])
    assert [_bits(k_half_down(x)) for x in values] == [_bits(v) for v in rounding.half_down(values)]


@pytest.mark.parametrize("parts", [1, 2, 3, 7, 10, 240, 2 * 120, 10 * 120 * 120, 99_991])
def test_shares_are_the_largest_double_below(parts: int) -> None:
    totals = np.concatenate([_doubles(parts)[:100] + 2.0**-700, [0.1, 1.0, 1.5, 3.0, 1e300, 2.0**-799]])
    assert [_bits(k_share(float(total), parts)) for total in totals] == [
        _bits(rounding.share(float(total), parts)) for total in totals
    ]


@pytest.mark.parametrize("width", [1, 2, 5, 119])
def test_a_slid_window_keeps_the_bound_float_keeps(width: int) -> None:
    """k_slide over a ring against FLOAT.slide/sum_up over tuples: the same bound at every step, through
    several fresh sums."""
    rng = np.random.default_rng(width)
    runs = 3
    items = tuple(np.zeros(runs) for _ in range(width))
    ring = np.zeros((width, runs))
    state: tuple[object, ...] = items
    windows = [Window(r, 0, 0.0, width - 1) for r in range(runs)]
    for step in range(3 * width + 5):
        newest = rng.random(runs) * np.exp2(rng.integers(-20, 3, size=runs).astype(np.float64))
        state = FLOAT.slide(state, newest)
        windows = [k_slide(ring, window, float(newest[r])) for r, window in enumerate(windows)]
        expected = np.broadcast_to(FLOAT.sum_up(state), (runs,))
        assert [_bits(window.total) for window in windows] == [_bits(v) for v in expected], step
    assert isinstance(state, SlidingValues)


def test_the_back_end_is_an_object_the_rule_calls() -> None:
    ops = kernel_ops(np.zeros((3, 1)))
    assert ops.share(1.0, 3) == rounding.share(1.0, 3)
    assert ops.where(True, 1.5, 0) == 1.5 and ops.where(False, 1.5, 0) == 0.0
    assert ops.half_down(ops.sub_down(0.5, 0.125)) == 0.1875
