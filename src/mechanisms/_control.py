"""Kalman filters and PID controllers of FAST and RescueDP, on arrays of cells (runs × dimensions).

Post-processing only: they see released values, never the true stream.
"""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np
from numpy.typing import ArrayLike, NDArray

from budgetcheck import InvalidArgument, libm
from budgetcheck.kernels import compiled

FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]


def pushed(history: FloatArray, value: FloatArray) -> FloatArray:
    """The rolling window ``history`` (last axis, newest last) with ``value`` appended, oldest dropped."""
    return np.concatenate([history[..., 1:], value[..., None]], axis=-1)


@attrs.define
class Kalman:
    """A random-walk Kalman filter per cell (Fan & Xiong 2014, §3.2; Wang et al. 2016, §IV-E).

    State x_k = x_{k−1} + N(0, Q), observation z_k = x_k + N(0, R). ``predict`` adds Q to the
    variance P (the prediction is the last posterior); ``correct`` at the cells that observed z:
    K = P/(P + R), x ← x + K(z − x), P ← (1 − K)P. Q may be a per-cell array. A cell's first
    observation becomes its estimate (the papers leave x̂₀ open; starting from 0 would drag every
    early release towards 0 because R >> P₀).
    """

    estimate: FloatArray
    variance: FloatArray
    process_noise: FloatArray | float
    measurement_noise: FloatArray | float
    seen: BoolArray

    @classmethod
    def start(
        cls,
        shape: tuple[int, ...],
        *,
        initial_variance: float,
        process_noise: FloatArray | float,
        measurement_noise: FloatArray | float,
    ) -> Kalman:
        """R may be a float or broadcast to ``shape`` (e.g. per run, on a ledger of several ε)."""
        noise = measurement_noise if isinstance(measurement_noise, np.ndarray) else float(measurement_noise)
        return cls(
            np.zeros(shape), np.full(shape, float(initial_variance)), process_noise, noise, np.zeros(shape, dtype=bool)
        )

    def predict(self) -> FloatArray:
        """Advance one step: P ← P + Q; return the prior (the last posterior)."""
        self.variance = self.variance + self.process_noise
        return self.estimate.copy()

    def correct(
        self, observed: FloatArray, where: BoolArray, measurement_noise: FloatArray | None = None
    ) -> FloatArray:
        """Fold the observations in where ``where`` holds; return the posterior everywhere.

        ``measurement_noise`` (per cell) replaces R for this step, e.g. each sample's own noise variance."""
        noise = self.measurement_noise if measurement_noise is None else measurement_noise
        gain = np.where(self.seen, self.variance / (self.variance + noise), 1.0)
        self.estimate = np.where(where, self.estimate + gain * (observed - self.estimate), self.estimate)
        self.variance = np.where(where & self.seen, (1.0 - gain) * self.variance, self.variance)
        self.seen = self.seen | where
        return self.estimate.copy()


@attrs.define
class SamplingPID:
    """What the PID sampling controllers of FAST and RescueDP share, per cell: the last T_i feedback
    errors (newest last, NaN: none yet), the time of the last sample, the sampling interval and the
    next sampling time, and the gains C_p, C_i, C_d. A controller starts with no error, interval 1
    and its first sample due at t = 1."""

    errors: FloatArray  # (..., T_i) the last T_i errors, newest last (NaN: none yet)
    last_time: FloatArray
    interval: FloatArray
    next: FloatArray
    kp: float = 0.9
    ki: float = 0.1
    kd: float = 0.0

    @staticmethod
    def fresh_cells(
        shape: tuple[int, ...], integral_window: int
    ) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
        """(errors, last_time, interval, next) of a controller that has not sampled yet."""
        return np.full((*shape, integral_window), np.nan), np.zeros(shape), np.ones(shape), np.ones(shape)

    def due(self, t: int) -> BoolArray:
        """The cells whose next sampling time has come at t."""
        return np.asarray(self.next <= t)


@attrs.define
class FastPID(SamplingPID):
    """FAST's PID sampling controller per cell (Fan & Xiong 2014, §3.3, Eq. 9-10).

    At the n-th sample (timestamp k_n) the feedback error is e_n = |x̂ − x̂⁻| / max(x̂, 1) (posterior
    vs prior); Δ = C_p e_n + C_i Σ_{last T_i} e + C_d (e_n − e_{n−1})/(k_n − k_{n−1}); the interval
    becomes I ← max(1, I + ⌊θ(1 − exp((Δ − ξ)/ξ))⌋). ``next`` is k_n + I.
    """

    theta: float = 5.0
    xi: float = 0.1

    @classmethod
    def start(cls, shape: tuple[int, ...], *, integral_window: int = 5, **gains: float) -> FastPID:
        errors, last_time, interval, next_time = cls.fresh_cells(shape, integral_window)
        return cls(errors, last_time, interval, next_time, **gains)

    def update(self, t: int, prior: FloatArray, posterior: FloatArray, where: BoolArray) -> None:
        """A sample at t in the cells ``where``: update the error history and the next sampling time."""
        error = np.abs(posterior - prior) / np.maximum(posterior, 1.0)
        previous = self.errors[..., -1]
        errors = pushed(self.errors, error)
        integral = np.nansum(errors, axis=-1)
        elapsed = np.maximum(t - self.last_time, 1.0)
        derivative = np.where(np.isnan(previous), 0.0, (error - np.nan_to_num(previous)) / elapsed)
        control = self.kp * error + self.ki * integral + self.kd * derivative
        step = np.floor(self.theta * (1.0 - libm.exp(np.minimum((control - self.xi) / self.xi, 700.0))))
        interval = np.maximum(1.0, self.interval + step)
        self.errors = np.where(where[..., None], errors, self.errors)
        self.interval = np.where(where, interval, self.interval)
        self.last_time = np.where(where, float(t), self.last_time)
        self.next = np.where(where, t + self.interval, self.next)


@attrs.define
class RescuePID(SamplingPID):
    """RescueDP's adaptive sampling controller per cell (Wang et al. 2016, §IV-B, Eq. 4-5).

    At the n-th sample of a location (timestamp k_n, release r): E_n = |r_{k_n} − r_{k_{n−1}}|;
    δ = K_p E_n + K_i mean(last π E) + K_d E_n/(k_n − k_{n−1}); with λ = Δ/ε_remaining(t + 1) the
    interval becomes I ← max(1, I + θ(1 − (δ/λ)²)); the next sample is at k_n + ⌊I⌋. T_i is π.
    """

    theta: float = 10.0
    last_release: FloatArray = attrs.field(kw_only=True)  # r_{k_n} per cell (NaN: none yet)

    @classmethod
    def start(cls, shape: tuple[int, ...], *, integral_window: int = 3, **gains: float) -> RescuePID:
        errors, last_time, interval, next_time = cls.fresh_cells(shape, integral_window)
        return cls(errors, last_time, interval, next_time, last_release=np.full(shape, np.nan), **gains)

    def update(self, t: int, release: FloatArray, where: BoolArray, noise_scale: FloatArray) -> None:
        """A sample at t where ``where``; ``noise_scale`` is λ = Δ/ε_remaining(t + 1) (inf: nothing left).

        One compiled pass over the sampled cells (:func:`_rescue_update`); the state arrays change in place."""
        shape = self.interval.shape
        state = (self.errors, self.last_release, self.last_time, self.interval, self.next)
        if not all(a.dtype == np.float64 and a.flags.c_contiguous and a.flags.writeable for a in state):
            raise InvalidArgument("the controller's state arrays must be writable contiguous float64 arrays")
        _rescue_update(
            float(t),
            _flat(release, shape, np.float64),
            _flat(where, shape, np.bool_),
            _flat(noise_scale, shape, np.float64),
            self.errors.reshape(-1, self.errors.shape[-1]),
            self.last_release.reshape(-1),
            self.last_time.reshape(-1),
            self.interval.reshape(-1),
            self.next.reshape(-1),
            self.kp,
            self.ki,
            self.kd,
            self.theta,
        )


def _flat(values: ArrayLike, shape: tuple[int, ...], dtype: type[np.generic]) -> NDArray[Any]:
    """``values`` broadcast to ``shape``, as a contiguous 1-d array of ``dtype``."""
    return np.ascontiguousarray(np.broadcast_to(np.asarray(values, dtype=dtype), shape)).reshape(-1)


@compiled
def _rescue_update(
    t: float,
    release: FloatArray,
    where: BoolArray,
    noise_scale: FloatArray,
    errors: FloatArray,
    last_release: FloatArray,
    last_time: FloatArray,
    interval: FloatArray,
    next_time: FloatArray,
    kp: float,
    ki: float,
    kd: float,
    theta: float,
) -> None:
    """RescuePID.update per sampled cell (Wang et al. 2016, Eq. 4-5), each operation in the order of
    the whole-array form (the same doubles)."""
    width = errors.shape[1]
    for cell in range(release.size):
        if not where[cell]:
            continue
        last = last_release[cell]
        error = 0.0 if np.isnan(last) else abs(release[cell] - last)
        row = errors[cell]
        for k in range(width - 1):
            row[k] = row[k + 1]
        row[width - 1] = error
        total, count = 0.0, 0
        for k in range(width):  # in order, as numpy's reduction of a short row adds them
            if not np.isnan(row[k]):
                total += row[k]
                count += 1
        mean = total / count
        elapsed = max(t - last_time[cell], 1.0)
        control = kp * error + ki * mean + kd * error / elapsed
        scale = noise_scale[cell]
        ratio = control / scale if np.isfinite(scale) else 0.0
        stepped = interval[cell] + theta * (1.0 - ratio * ratio)
        interval[cell] = stepped if stepped > 1.0 else 1.0
        last_release[cell] = release[cell]
        last_time[cell] = t
        next_time[cell] = t + np.floor(interval[cell])
