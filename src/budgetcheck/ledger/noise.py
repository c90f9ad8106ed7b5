"""Noise sources of the Laplace releases: numpy's fast sampler, or an exact discrete one.

``numpy-laplace`` (the default, and the benchmark's): float Laplace from a seeded
``numpy.random.Generator`` — fast and reproducible, but float sampling is attackable
(Mironov 2012, accounting rules §8). ``discrete-laplace``: the exact discrete Laplace sampler of
Canonne, Kamath, Steinke 2020 (Algorithms 1 and 2) with rational arithmetic and randomness from the
operating system's CSPRNG (``secrets``); no float ever touches the noise. Values lie on the grid
γ·Z: γ = 1 for counts (``integral``: the stream's values, checked integral when a ledger binds the
stream, or sums of them) at an integer sensitivity; otherwise (a measured fn, a dissimilarity, a
fractional sensitivity) γ = 2^(⌊log2 Δ⌋−20), the value is rounded to the grid and the scale
covers Δ + γ. Which grid applies depends on the operation only, never on the data.
"""

from __future__ import annotations

import math
import secrets
from fractions import Fraction
from typing import Final, Protocol, final

import numpy as np
from numpy.typing import NDArray

from budgetcheck import rounding
from budgetcheck.kernels import compiled
from budgetcheck.ledger.errors import InvalidArgument

FloatArray = NDArray[np.float64]
NUMPY: Final = "numpy-laplace"
DISCRETE: Final = "discrete-laplace"
SAMPLERS: Final = (NUMPY, DISCRETE)


class NoiseSource(Protocol):
    """Where a ledger's Laplace noise comes from (named in every record it pays for)."""

    @property
    def name(self) -> str: ...

    def scale(self, sensitivity: float, budgets: FloatArray, *, integral: bool) -> FloatArray:
        """The noise scale per budget (rounded up; inf where the budget is 0)."""

    def scale_value(self, sensitivity: float, budget: float, *, integral: bool) -> float | None:
        """:meth:`scale` of one budget > 0 as a double, bit for bit; None: use :meth:`scale`."""

    def perturb(self, values: FloatArray, scale: FloatArray, sensitivity: float, *, integral: bool) -> FloatArray:
        """values + noise of the given scale (same shape; scale broadcast against values)."""

    def perturb_values(self, values: list[float], scale: float, sensitivity: float, *, integral: bool) -> list[float]:
        """:meth:`perturb` of a few plain values under one scale: the same draws and the same doubles."""


@final
class NumpyLaplace:
    """Continuous Laplace from a seeded numpy Generator: Lap(Δ/ε), scale rounded up."""

    __slots__ = ("_rng",)

    def __init__(self, rng: np.random.Generator) -> None:
        self._rng = rng

    @property
    def name(self) -> str:
        return NUMPY

    def scale(self, sensitivity: float, budgets: FloatArray, *, integral: bool) -> FloatArray:
        return rounding.scale_up(sensitivity, budgets)

    def scale_value(self, sensitivity: float, budget: float, *, integral: bool) -> float | None:
        return rounding.scale_up_float(sensitivity, budget)

    def perturb(self, values: FloatArray, scale: FloatArray, sensitivity: float, *, integral: bool) -> FloatArray:
        noise = laplace_draws(self._rng, values.shape)
        noise *= scale  # in place: the same numbers as values + noise * scale, without temporaries
        noise += values
        return noise

    def perturb_values(self, values: list[float], scale: float, sensitivity: float, *, integral: bool) -> list[float]:
        """:meth:`perturb` on Python floats: one uniform per value (zeros skipped) turned into a Laplace
        draw by :func:`_laplace_in_place`'s formula with the same libm ``log``, then noise·scale + value,
        two roundings as in the array path. No numpy call beyond the generator's."""
        random, log, out = self._rng.random, math.log, []
        for value in values:
            u = random()
            while u == 0.0:  # numpy skips a zero uniform (probability 2**-53 each)
                u = random()
            doubled, complement = u + u, 2.0 - u - u
            magnitude = log(doubled if doubled < complement else complement)  # min of two positive doubles
            out.append(((0.0 - magnitude) if u >= 0.5 else (0.0 + magnitude)) * scale + value)
        return out


def laplace_draws(rng: np.random.Generator, shape: int | tuple[int, ...], scale: float = 1.0) -> FloatArray:
    """``rng.laplace(0.0, scale, shape)``: the same doubles, and the generator left in the same state,
    in about half the time.

    numpy draws one uniform U per value (skipping U = 0) and returns 0 − scale·log((2 − U) − U)
    for U >= 0.5, else 0 + scale·log(U + U), one value at a time. Here the uniforms come in one
    call and one compiled pass turns them into the values in place, by the same formula, branch-free,
    with the same libm ``log``.
    """
    count = math.prod(shape) if isinstance(shape, tuple) else shape
    out = rng.random(count)
    done = _laplace_in_place(out, scale, 0)
    while done < count:  # out[done] is a zero uniform, which numpy skips (probability 2**-53 each)
        rest = out[done:]
        kept = rest[rest != 0.0]
        rest[: kept.size] = kept
        rest[kept.size :] = rng.random(rest.size - kept.size)
        done = _laplace_in_place(out, scale, done)
    return out.reshape(shape)


@compiled
def _laplace_in_place(values: FloatArray, scale: float, start: int) -> int:
    """numpy's ``random_laplace`` at loc 0 on each uniform from ``start`` on, in place; returns the
    index of the first zero uniform (left as it is, with those after it), or the size when there is none."""
    for i in range(start, values.size):
        u = values[i]
        if u == 0.0:
            return i
        magnitude = scale * math.log(min(u + u, 2.0 - u - u))  # U + U <= 1 exactly when U < 0.5
        values[i] = (0.0 - magnitude) if u >= 0.5 else (0.0 + magnitude)
    return values.size


def granularity(sensitivity: float, *, integral: bool = True) -> Fraction:
    """γ of the discrete sampler: 1 for integral values at an integer sensitivity, else 2^(⌊log2 Δ⌋−20)
    (Δ = 0: 1 for integral values, else 2^-1074, on which every double lies)."""
    if integral and sensitivity >= 1.0 and float(sensitivity).is_integer():
        return Fraction(1)
    if sensitivity == 0.0:  # nothing to hide (a Swellfish timestamp no policy covers): the finest grid, exact
        return Fraction(1) if integral else Fraction(2) ** -1074
    return Fraction(2) ** (math.floor(math.log2(sensitivity)) - 20)


@final
class DiscreteLaplace:
    """Exact discrete Laplace on γ·Z from the OS CSPRNG (Canonne, Kamath, Steinke 2020)."""

    __slots__ = ()

    @property
    def name(self) -> str:
        return DISCRETE

    def scale(self, sensitivity: float, budgets: FloatArray, *, integral: bool) -> FloatArray:
        """Δ/ε rounded up per budget; refused (before any charge) where a paid budget's scale passes
        the largest double: the sampler draws on a rational scale, which must be finite."""
        covered = self._covered(sensitivity, integral)
        scale = rounding.scale_up(covered, budgets)
        if not np.isfinite(scale).all():
            beyond = (budgets > 0.0) & ~np.isfinite(np.broadcast_to(scale, budgets.shape))
            if beyond.any():
                raise InvalidArgument(
                    f"epsilon={float(budgets[beyond].min())!r} is too small for the discrete-laplace sampler: its "
                    f"noise scale {covered!r}/epsilon passes the largest double"
                )
        return scale

    def scale_value(self, sensitivity: float, budget: float, *, integral: bool) -> float | None:
        scale = rounding.scale_up_float(self._covered(sensitivity, integral), budget)
        return scale if scale is not None and scale < math.inf else None  # None: the array path refuses it

    @staticmethod
    def _covered(sensitivity: float, integral: bool) -> float:
        """The sensitivity the noise must cover on the grid γ·Z (one more γ unless γ = 1)."""
        gamma = granularity(sensitivity, integral=integral)
        if gamma == 1:
            return sensitivity
        try:
            return float(Fraction(sensitivity) + gamma)
        except OverflowError:  # Δ + γ past the largest double: no finite scale covers it
            raise InvalidArgument(
                f"sensitivity={sensitivity!r} is too large for the discrete-laplace sampler: Δ plus its grid step "
                "passes the largest double"
            ) from None

    def perturb(self, values: FloatArray, scale: FloatArray, sensitivity: float, *, integral: bool) -> FloatArray:
        gamma = granularity(sensitivity, integral=integral)
        if gamma == 1 and not np.array_equal(values, np.round(values)):  # bind() admits integral streams only
            raise AssertionError(
                "the discrete-laplace sampler was handed non-integer counts after bind() admitted the stream"
            )
        scales = np.broadcast_to(scale, values.shape)
        out = np.empty(values.shape, dtype=np.float64)
        for index in np.ndindex(values.shape):
            units = Fraction(float(scales[index])) / gamma
            noise = discrete_laplace(units) if units > 0 else 0
            grid = round(Fraction(float(values[index])) / gamma)  # exact for every finite value (no float overflow)
            out[index] = _nearest_double((grid + noise) * gamma)
        return out

    def perturb_values(self, values: list[float], scale: float, sensitivity: float, *, integral: bool) -> list[float]:
        """:meth:`perturb` of plain values (its rational arithmetic costs far more than the arrays)."""
        noisy = self.perturb(np.array(values, dtype=np.float64), np.array(scale), sensitivity, integral=integral)
        return [float(value) for value in noisy]


def _nearest_double(value: Fraction) -> float:
    """``float(value)``, and ±inf beyond the largest double (a draw at a scale near it may land there;
    rounding a drawn value is post-processing)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def bernoulli(p: Fraction) -> bool:
    """True with probability p in [0, 1], exactly."""
    return secrets.randbelow(p.denominator) < p.numerator


def bernoulli_exp(gamma: Fraction) -> bool:
    """True with probability exp(−γ), γ >= 0 rational (CKS 2020, Algorithm 1)."""
    return _bernoulli_exp(gamma.numerator, gamma.denominator)


def _bernoulli_exp(numerator: int, denominator: int) -> bool:
    """exp(−n/d) on integers: the same algorithm as :func:`bernoulli_exp` without Fraction objects
    (each Bernoulli(γ/k) is one draw below d·k)."""
    while numerator > denominator:  # exp(−γ) = exp(−1) · exp(−(γ − 1))
        if not _bernoulli_exp_at_most_one(1, 1):
            return False
        numerator -= denominator
    return _bernoulli_exp_at_most_one(numerator, denominator)


def _bernoulli_exp_at_most_one(numerator: int, denominator: int) -> bool:
    k = 1
    while secrets.randbelow(denominator * k) < numerator:
        k += 1
    return k % 2 == 1


def discrete_laplace(scale: Fraction) -> int:
    """An integer x with P(x) ∝ exp(−|x|/scale), scale > 0 rational (CKS 2020, Algorithm 2), on
    integers throughout (cheaper than on Fractions; the same distribution)."""
    t, s = scale.numerator, scale.denominator
    randbelow = secrets.randbelow
    while True:
        u = randbelow(t)
        if not _bernoulli_exp(u, t):
            continue
        v = 0
        while _bernoulli_exp_at_most_one(1, 1):
            v += 1
        y = (u + t * v) // s
        negative = randbelow(2) == 1
        if negative and y == 0:
            continue
        return -y if negative else y


def make_noise(sampler: str, rng: np.random.Generator) -> NoiseSource:
    """The noise source named ``sampler`` (one of SAMPLERS)."""
    if sampler == NUMPY:
        return NumpyLaplace(rng)
    if sampler == DISCRETE:
        return DiscreteLaplace()
    raise InvalidArgument(f"sampler={sampler!r} must be one of {list(SAMPLERS)}")
