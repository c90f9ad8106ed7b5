"""The components of the data-adaptive mechanisms (Kalman, PID controllers, smoothers, grouping)
against hand-computed sequences and their whole-array forms."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adaptive_groups import growing_groups
from budgetcheck import (
    InvalidArgument,
    execute,
)
from mechanisms import PeGaSus, RescueDP
from mechanisms._control import FastPID, Kalman, RescuePID
from mechanisms._smoothing import SMOOTHERS, GroupHistory, smooth
from mechanisms.adapub import _pid_close, _pid_threshold, pivot_buckets
from mechanisms.rescuedp import group_locations


# -- components against hand-computed sequences ------------------------------------------------
def test_kalman_filter_by_hand() -> None:
    kalman = Kalman.start((1,), initial_variance=1.0, process_noise=1.0, measurement_noise=2.0)
    assert kalman.predict().tolist() == [0.0]
    assert kalman.correct(np.array([10.0]), np.array([True])).tolist() == [10.0]  # first observation
    kalman.predict()  # P = 2 + 1 = 3
    assert kalman.correct(np.array([4.0]), np.array([True])).tolist() == pytest.approx([6.4])  # K = 3/5
    assert kalman.variance.tolist() == pytest.approx([1.2])
    kalman.predict()
    assert kalman.correct(np.array([100.0]), np.array([False])).tolist() == pytest.approx([6.4])


def test_fast_pid_by_hand() -> None:
    pid = FastPID.start((1,), integral_window=2, kp=1.0, ki=0.5, kd=0.0, theta=5.0, xi=0.1)
    pid.update(1, np.array([0.0]), np.array([10.0]), np.array([True]))  # e = 1: Δ = 1.5, interval 1
    pid.update(2, np.array([10.0]), np.array([10.1]), np.array([True]))  # e = 0.0099, Δ = 0.515: interval 1
    assert pid.interval.tolist() == [1.0] and pid.next.tolist() == [3.0]
    pid.update(3, np.array([10.1]), np.array([10.1]), np.array([True]))  # e = 0: Δ = 0.00495
    # ⌊5(1 − exp((0.00495 − 0.1)/0.1))⌋ = ⌊5 · 0.6134⌋ = 3
    assert pid.interval.tolist() == [4.0] and pid.next.tolist() == [7.0] and pid.due(7).all() and not pid.due(6).any()


def test_rescue_pid_by_hand() -> None:
    pid = RescuePID.start((1,), integral_window=2, kp=1.0, ki=0.5, kd=0.0, theta=10.0)
    pid.update(1, np.array([5.0]), np.array([True]), np.array([2.0]))  # E = 0: I = 1 + 10
    assert pid.interval.tolist() == [11.0] and pid.next.tolist() == [12.0]
    pid.update(12, np.array([9.0]), np.array([True]), np.array([2.0]))  # E = 4, δ = 4 + 0.5·2 = 5, (δ/λ)² = 6.25
    assert pid.interval.tolist() == [1.0] and pid.next.tolist() == [13.0]
    pid.update(13, np.array([10.0]), np.array([True]), np.array([np.inf]))  # nothing left: λ = inf
    assert pid.interval.tolist() == [11.0] and pid.next.tolist() == [24.0]


def _rescue_update_oracle(
    pid: RescuePID, t: int, release: np.ndarray, where: np.ndarray, noise_scale: np.ndarray
) -> None:
    """RescuePID.update written with whole-array numpy operations (the kernel's earlier form)."""
    error = np.where(np.isnan(pid.last_release), 0.0, np.abs(release - np.nan_to_num(pid.last_release)))
    errors = np.concatenate([pid.errors[..., 1:], error[..., None]], axis=-1)
    elapsed = np.maximum(t - pid.last_time, 1.0)
    seen = ~np.isnan(errors)
    mean = np.where(seen, errors, 0.0).sum(axis=-1) / seen.sum(axis=-1)
    control = pid.kp * error + pid.ki * mean + pid.kd * error / elapsed
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(np.isfinite(noise_scale), control / noise_scale, 0.0)
    interval = np.maximum(1.0, pid.interval + pid.theta * (1.0 - ratio**2))
    pid.errors = np.where(where[..., None], errors, pid.errors)
    pid.last_release = np.where(where, release, pid.last_release)
    pid.interval = np.where(where, interval, pid.interval)
    pid.last_time = np.where(where, float(t), pid.last_time)
    pid.next = np.where(where, t + np.floor(pid.interval), pid.next)


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 4), st.integers(1, 5), st.floats(0.0, 1.0))
def test_rescue_pid_update_matches_the_whole_array_form_bit_for_bit(
    seed: int, width: int, cells: int, kd: float
) -> None:
    """The compiled controller step against the same equations as whole-array numpy operations, over
    steps with sampled and skipped cells, a run whose budget is spent (λ = inf) and a shared λ per run."""
    rng = np.random.default_rng(seed)
    gains = {
        "kp": float(rng.uniform(0, 2)),
        "ki": float(rng.uniform(0, 1)),
        "kd": kd,
        "theta": float(rng.uniform(1, 20)),
    }
    pids = [RescuePID.start((3, cells), integral_window=width, **gains) for _ in range(2)]
    for t in range(1, 30):
        release = np.round(rng.normal(0, 50, size=(3, cells)), int(rng.integers(0, 3)))
        where = rng.random((3, cells)) < 0.6
        scale = np.where(rng.random((3, 1)) < 0.2, np.inf, rng.uniform(0.1, 30, size=(3, 1)))
        pids[0].update(t, release, where, scale)
        _rescue_update_oracle(pids[1], t, release, where, np.broadcast_to(scale, (3, cells)))
        for name in ("errors", "last_release", "last_time", "interval", "next"):
            np.testing.assert_array_equal(getattr(pids[0], name), getattr(pids[1], name), err_msg=f"{name} at t={t}")


def _adapub_pid_reference(
    last: np.ndarray, x: np.ndarray, feedback: np.ndarray, epsilon: np.ndarray | float, kp: float, ki: float, kd: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """AdaPub's PID threshold as whole-array numpy operations (the form the compiled pass replaced)."""
    error = np.abs(last - x) / np.maximum(x, 1.0)
    total, count = feedback[1] + error, feedback[2] + 1.0
    control = kp * error + ki * total / count + kd * (error - feedback[0])
    return np.maximum(1.0, control**2 / epsilon), error, total, count


@settings(max_examples=100, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.integers(1, 4),
    st.integers(1, 6),
    st.booleans(),
    st.sampled_from([0.0, 0.3, 1.0]),
    st.sampled_from([0.0, 0.1, 0.7]),
    st.sampled_from([0.0, 0.5]),
)
def test_adapub_pid_threshold_matches_the_whole_array_form_bit_for_bit(
    seed: int, runs: int, d: int, per_run: bool, kp: float, ki: float, kd: float
) -> None:
    """The compiled threshold and feedback steps against the same equations in numpy, over steps with
    releases below 1, negative and exactly 1, ε shared or one per run, clusters opening at random."""
    rng = np.random.default_rng(seed)
    epsilon: np.ndarray | float = rng.uniform(0.001, 2.0, size=(runs, 1)) if per_run else 0.05
    run_epsilon = np.ascontiguousarray(np.broadcast_to(epsilon, (runs, 1))[:, 0])
    feedback, oracle = np.zeros((3, runs, d)), np.zeros((3, runs, d))
    pending, threshold = np.empty((3, runs, d)), np.empty((runs, d))
    last = np.zeros((runs, d))
    for _ in range(12):
        x = np.where(
            rng.random((runs, d)) < 0.2,
            rng.choice([1.0, 0.5, -0.0, -3.0, np.nan], size=(runs, d)),
            rng.normal(20, 30, size=(runs, d)),
        )
        _pid_threshold(
            last.reshape(-1),
            x.reshape(-1),
            feedback.reshape(3, -1),
            run_epsilon,
            kp,
            ki,
            kd,
            pending.reshape(3, -1),
            threshold.reshape(-1),
        )
        expected, error, total, count = _adapub_pid_reference(last, x, oracle, epsilon, kp, ki, kd)
        assert threshold.tobytes() == expected.tobytes()
        fresh = rng.random((runs, d)) < 0.3
        _pid_close(fresh.reshape(-1), pending.reshape(3, -1), feedback.reshape(3, -1))
        oracle[0], oracle[1], oracle[2] = error, np.where(fresh, error, total), np.where(fresh, 1.0, count)
        assert feedback.tobytes() == oracle.tobytes()
        last = x


def test_rescue_pid_refuses_state_it_cannot_update_in_place() -> None:
    pid = RescuePID.start((2, 2))
    pid.interval = np.ones((2, 4))[:, ::2]  # a strided view: an update would be lost
    with pytest.raises(InvalidArgument, match="contiguous"):
        pid.update(1, np.zeros((2, 2)), np.ones((2, 2), dtype=bool), np.ones((2, 1)))


def test_smoothers_by_hand() -> None:
    rows = np.array([[np.nan, 1.0, 5.0, 3.0], [2.0, 4.0, 6.0, 20.0]])
    assert smooth(rows, "median", 10.0).tolist() == [3.0, 5.0]
    assert smooth(rows, "average", 10.0).tolist() == [3.0, 8.0]
    # James–Stein: k = 4, mean 8, Σ(x − mean)² = 200, factor 1 − 10/200 = 0.95 → 8 + 0.95 · 12
    assert smooth(rows, "james-stein", 10.0).tolist() == pytest.approx([3.0, 19.4])


@settings(max_examples=150, deadline=None)
@given(st.data(), st.integers(1, 6), st.sampled_from([1, 2, 3, 5, 8, 9, 16, 17, 40, 70]), st.sampled_from(SMOOTHERS))
def test_sorted_group_history_matches_smoothing_the_group_in_time_order(
    data: Any, rows: int, capacity: int, smoother: str
) -> None:
    """The incremental sorted groups give what :func:`smooth` gives on the group's releases in time
    order (the brute-force oracle): medians exactly, averages and James–Stein to rounding."""
    history = GroupHistory(capacity)
    for new, restart, _, matrix in growing_groups(data, rows, capacity, capacity + 4):
        history.add(new, restart)
        expected = smooth(matrix, smoother, 4.0)
        got = history.smoothed(smoother, 4.0)
        if smoother == "median":
            assert got.tolist() == expected.tolist()
        else:
            np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-6)


def test_group_history_refuses_a_group_beyond_its_capacity() -> None:
    history = GroupHistory(2)
    history.add(np.array([1.0]), np.array([True]))
    history.add(np.array([2.0]), np.array([False]))
    with pytest.raises(InvalidArgument, match="capacity=2"):
        history.add(np.array([3.0]), np.array([False]))


def test_pegasus_groups_and_medians_on_a_noiseless_ledger() -> None:
    data = np.array([[5.0], [5.0], [5.0], [500.0], [500.0], [500.0]])
    execution = execute(PeGaSus(threshold_factor=5e-6), data, epsilon=1e12, w=2, seed=0)
    # θ = 5e-6/ε_g = 25: groups {1, 2, 3}, then the jump closes {4} alone, {5, 6} grow again
    np.testing.assert_allclose(execution.releases[0, :, 0], [5.0, 5.0, 5.0, 500.0, 500.0, 500.0], atol=1e-3)


def test_kalman_takes_a_per_cell_measurement_noise() -> None:
    kalman = Kalman.start((2,), initial_variance=100.0, process_noise=0.0, measurement_noise=100.0)
    kalman.correct(np.array([10.0, 10.0]), np.array([True, True]))  # first observations: taken as they are
    kalman.predict()
    # K = 100/(100 + R): R = 100 halves the step, R = 9900 takes 1%
    posterior = kalman.correct(np.array([20.0, 20.0]), np.array([True, True]), np.array([100.0, 9900.0]))
    np.testing.assert_allclose(posterior, [15.0, 10.1])


def test_rescuedp_does_not_follow_samples_its_shrinking_budget_made_noisy() -> None:
    """With the paper's fixed R the filter follows samples of budget ~1e−10 and the release diverges
    (a wave around 30,000 at ε = 1, w = 200); with R floored at each sample's own variance it stays
    within a few thousand."""
    data = np.full((400, 1), 30000.0) + 2000.0 * np.sin(np.arange(400) / 20.0)[:, None]
    errors = {}
    for sample_noise in (True, False):
        ex = execute(RescueDP(sample_noise=sample_noise), data, epsilon=1.0, w=200, runs=10, seed=1)
        errors[sample_noise] = float(np.abs(ex.releases[..., 0] - data[None, :, 0]).mean())
    assert errors[True] < 10_000 and errors[False] > 1e6


def test_rescuedp_grouping_by_hand() -> None:
    predictions = np.array([1.0, 5.0, 100.0, 3.0, 40.0, 2.0, 7.0])
    histories = np.array(
        [[1, 2, 3], [2, 4, 6], [0, 0, 0], [3, 2, 1], [1, 1, 1], [np.nan, 1, 1], [1, 2, 3]], dtype=float
    )
    due = np.array([True, True, True, True, True, True, False])
    labels = group_locations(predictions, histories, due, size_limit=30.0, value_gap=25.0, correlation=0.5)
    # alone: 2 (100 > τ₁), 4 (40 > τ₁), 5 (no full history); then pivot 0 skips 3 (correlation −1)
    # and takes 1; 3 forms its own group; 6 is not due
    assert labels.tolist() == [3, 3, 0, 4, 1, 2, -1]


def test_adapub_pivot_buckets_by_hand() -> None:
    assert pivot_buckets(np.array([[0.0, 5.0, 10.0, 15.0]]), np.array([[12.0, 4.0]])).tolist() == [[0, 1, 1, 2]]
