"""budgetcheck.ledger.noise.laplace_draws: numpy's Laplace sampler, the same doubles from the same state."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budgetcheck.ledger.noise import NumpyLaplace, laplace_draws

shapes = st.one_of(st.integers(0, 300), st.lists(st.integers(0, 12), min_size=1, max_size=3).map(tuple))
scales = st.floats(min_value=2.0**-30, max_value=2.0**30)


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**64 - 1), shape=shapes, scale=scales)
def test_laplace_draws_are_numpys_laplace_bit_for_bit_and_leave_the_generator_in_the_same_state(
    seed: int, shape: int | tuple[int, ...], scale: float
) -> None:
    numpy_rng, ours_rng = np.random.default_rng(seed), np.random.default_rng(seed)
    expected = numpy_rng.laplace(0.0, scale, shape)
    got = laplace_draws(ours_rng, shape, scale)
    assert got.shape == expected.shape
    assert np.array_equal(got.view(np.int64), expected.view(np.int64))  # signed zeros too
    assert ours_rng.bit_generator.state == numpy_rng.bit_generator.state


def test_laplace_draws_match_numpy_on_a_million_values() -> None:
    expected = np.random.default_rng(5).laplace(0.0, 1.0, 10**6)
    assert np.array_equal(laplace_draws(np.random.default_rng(5), 10**6), expected)


class _ScriptedUniforms:
    """A stand-in generator whose ``random(n)`` hands out a fixed sequence of uniforms, zeros included."""

    def __init__(self, uniforms: list[float]) -> None:
        self._uniforms = uniforms
        self.used = 0

    def random(self, count: int) -> np.ndarray:
        out = np.array(self._uniforms[self.used : self.used + count], dtype=np.float64)
        assert out.size == count, "the sampler asked for more uniforms than it needs"
        self.used += count
        return out


def _numpy_algorithm(uniforms: list[float], count: int, scale: float) -> tuple[list[float], int]:
    """numpy's random_laplace at loc 0, value by value: a zero uniform is skipped (the next one is used)."""
    out, used = [], 0
    while len(out) < count:
        u = uniforms[used]
        used += 1
        if u >= 0.5:
            out.append(0.0 - scale * math.log(2.0 - u - u))
        elif u > 0.0:
            out.append(0.0 + scale * math.log(u + u))
    return out, used


@pytest.mark.parametrize("zeros_at", [[0], [3], [5], [2, 3], [0, 1, 2, 7]])
def test_a_zero_uniform_is_skipped_as_numpy_skips_it(zeros_at: list[int]) -> None:
    uniforms = [0.5, 0.75, 0.25, 0.999, 1e-300, 0.5 + 2.0**-53, 0.3, 0.6, 0.1, 0.9, 0.2, 0.45]
    for index in zeros_at:
        uniforms[index] = 0.0
    count = 6
    expected, used = _numpy_algorithm(uniforms, count, 2.5)
    scripted = _ScriptedUniforms(uniforms)
    got = laplace_draws(scripted, count, 2.5)  # type: ignore[arg-type]  # only .random is used
    assert got.tolist() == expected
    assert scripted.used == used


def test_numpy_laplace_perturb_adds_numpys_noise_times_the_scale() -> None:
    values = np.arange(12.0).reshape(3, 4)
    scale = np.array([[0.5], [2.0], [10.0]])
    expected = values + np.random.default_rng(9).laplace(0.0, 1.0, values.shape) * scale
    got = NumpyLaplace(np.random.default_rng(9)).perturb(values, scale, 1.0, integral=True)
    assert np.array_equal(got, expected)
