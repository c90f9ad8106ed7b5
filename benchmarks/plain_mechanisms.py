"""Plain, unchecked numpy versions of the w-event mechanisms the benchmark harness and budgetcheck both run.

The reference for ``bench_speed.py``'s ratios: the same algorithms as ``src/mechanisms`` (the same
budgets, noise scales, tests and filters) with no ledger, no secrets, no exact arithmetic and no
records: floats as they come, one ``numpy.random.Generator``. Every function takes the true values of
each run, ``values`` (runs, T, d), the ε of each run, ``epsilon`` (runs,), the window w and a generator,
and returns the releases (runs, T, d), vectorised over runs.

Written for the benchmark's artificial grid (d = 1): RescueDP's dynamic grouping and AdaPub's
dimension grouping only act when d > 1 and are not written here (those two refuse d > 1).
PeGaSus's and AdaPub's grouper re-reads the open group at every timestep (O(w) per run and cell, as
the papers state it); ours keeps the groups ranked (``RankedRows``), so for those two the plain
version is the slower one. Never use these to publish: nothing bounds what they spend.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]
Plain = Callable[[FloatArray, FloatArray, int, np.random.Generator], FloatArray]


def _column(epsilon: FloatArray) -> FloatArray:
    return epsilon.reshape(-1, 1)


def _laplace(rng: np.random.Generator, scale: FloatArray, shape: tuple[int, ...]) -> FloatArray:
    return rng.laplace(0.0, 1.0, size=shape) * scale


def _dissimilarity(rng: np.random.Generator, current: FloatArray, last: FloatArray, budget: FloatArray) -> FloatArray:
    """Kellaris et al. 2014, Fig. 2 lines 3-4: the mean |c_t − o_l| over d plus Lap((1/d)/ε)."""
    d = current.shape[1]
    return np.asarray(np.abs(current - last).mean(axis=1) + rng.laplace(0.0, 1.0, size=budget.shape) / (d * budget))


def uniform(values: FloatArray, epsilon: FloatArray, w: int, rng: np.random.Generator) -> FloatArray:
    """Kellaris et al. 2014, §3: c_t + Lap(w/ε) at every t, the whole horizon in one draw."""
    return values + _laplace(rng, (w / epsilon)[:, None, None], values.shape)


def sample(values: FloatArray, epsilon: FloatArray, w: int, rng: np.random.Generator) -> FloatArray:
    """Kellaris et al. 2014, §3: c_t + Lap(1/ε) at t ≡ 1 (mod w), the last release repeated between."""
    runs, T, d = values.shape
    stamps = np.arange(0, T, w)
    noisy = values[:, stamps] + _laplace(rng, (1.0 / epsilon)[:, None, None], (runs, stamps.size, d))
    return np.asarray(noisy[:, np.arange(T) // w])


def bd(values: FloatArray, epsilon: FloatArray, w: int, rng: np.random.Generator) -> FloatArray:
    """BD (Kellaris et al. 2014, Fig. 2): dissimilarity at ε/(2w), publication at half of what the
    last w − 1 publications left of ε/2, published iff the noisy dissimilarity exceeds its noise scale."""
    runs, T, d = values.shape
    out = np.empty_like(values)
    last = np.zeros((runs, d))
    spent = np.zeros((runs, max(w - 1, 1)))  # ring buffer of the last w − 1 publication budgets
    window = np.zeros(runs)
    unit = epsilon / (2 * w)
    for t in range(T):
        current = values[:, t]
        dis = _dissimilarity(rng, current, last, unit)
        candidate = (epsilon / 2 - window) / 2
        publish = (candidate > 0) & (dis > 1.0 / candidate)
        budget = np.where(publish, candidate, 0.0)
        if publish.any():
            noisy = current + rng.laplace(0.0, 1.0, size=(runs, d)) / np.where(publish, budget, 1.0)[:, None]
            last = np.where(publish[:, None], noisy, last)
        out[:, t] = last
        if w > 1:
            slot = t % (w - 1)
            window += budget - spent[:, slot]
            spent[:, slot] = budget
    return out


def ba(values: FloatArray, epsilon: FloatArray, w: int, rng: np.random.Generator) -> FloatArray:
    """BA (Kellaris et al. 2014, Fig. 4): shares of ε/(2w); after a publication of k shares the next
    k − 1 timestamps are nullified, then up to w skipped shares are absorbed."""
    runs, T, d = values.shape
    out = np.empty_like(values)
    last = np.zeros((runs, d))
    unit = epsilon / (2 * w)
    age = np.ones(runs, dtype=np.int64)  # t − l, a virtual publication at l = 0 with one share
    shares = np.ones(runs, dtype=np.int64)
    for t in range(T):
        current = values[:, t]
        dis = _dissimilarity(rng, current, last, unit)  # paid at nullified timestamps too (the paper)
        nullified = age <= shares - 1
        absorbed = np.minimum(age - (shares - 1), w)
        candidate = np.where(nullified, 0.0, unit * absorbed)
        publish = ~nullified & (dis > 1.0 / np.where(nullified, 1.0, candidate))
        if publish.any():
            noisy = current + rng.laplace(0.0, 1.0, size=(runs, d)) / np.where(publish, candidate, 1.0)[:, None]
            last = np.where(publish[:, None], noisy, last)
        out[:, t] = last
        shares = np.where(publish, absorbed, shares)
        age = np.where(publish, 1, np.minimum(age + 1, 2 * w))
    return out


def fastw(values: FloatArray, epsilon: FloatArray, w: int, rng: np.random.Generator, ratio: float = 0.15) -> FloatArray:
    """FAST_w (Kellaris et al. 2014, §3; Fan & Xiong 2014): blocks of w, at most M = max(1, ⌊ratio·w⌋)
    samples of ε/(2M) per block; Kalman (P₀ 100, Q 10^5, R 10^6) and PID (0.9, 0.1, 0; T_i 5, θ 5, ξ 0.1)
    per cell; a sample of the whole vector when any cell's controller is due."""
    runs, T, d = values.shape
    samples = max(1, int(ratio * w))
    scale = (2 * samples / epsilon)[:, None]
    kp, ki, kd, window, theta, xi = 0.9, 0.1, 0.0, 5, 5.0, 0.1
    out = np.empty_like(values)
    for start in range(0, T, w):  # a fresh filter and controller per block
        estimate, variance, seen = np.zeros((runs, d)), np.full((runs, d), 100.0), np.zeros((runs, d), dtype=bool)
        errors = np.full((runs, d, window), np.nan)
        last_time, interval, next_time = np.zeros((runs, d)), np.ones((runs, d)), np.ones((runs, d))
        used = np.zeros(runs, dtype=np.int64)
        for t in range(start, min(start + w, T)):
            stamp = t + 1
            variance = variance + 1e5
            prior = estimate
            wants = (t - start < min(window, samples)) | (next_time <= stamp).any(axis=1)
            sampled = wants & (used < samples)
            used += sampled
            if not sampled.any():
                out[:, t] = prior
                continue
            noisy = values[:, t] + rng.laplace(0.0, 1.0, size=(runs, d)) * scale
            where = np.broadcast_to(sampled[:, None], (runs, d))
            gain = np.where(seen, variance / (variance + 1e6), 1.0)
            estimate = np.where(where, prior + gain * (noisy - prior), prior)
            variance = np.where(where & seen, (1.0 - gain) * variance, variance)
            seen = seen | where
            error = np.abs(estimate - prior) / np.maximum(estimate, 1.0)
            previous = errors[..., -1]
            pushed = np.concatenate([errors[..., 1:], error[..., None]], axis=-1)
            elapsed = np.maximum(stamp - last_time, 1.0)
            derivative = np.where(np.isnan(previous), 0.0, (error - np.nan_to_num(previous)) / elapsed)
            control = kp * error + ki * np.nansum(pushed, axis=-1) + kd * derivative
            step = np.floor(theta * (1.0 - np.exp(np.minimum((control - xi) / xi, 700.0))))
            errors = np.where(where[..., None], pushed, errors)
            interval = np.where(where, np.maximum(1.0, interval + step), interval)
            last_time = np.where(where, float(stamp), last_time)
            next_time = np.where(where, stamp + interval, next_time)
            out[:, t] = estimate
    return out


def dsatw(values: FloatArray, epsilon: FloatArray, w: int, rng: np.random.Generator, rate: float = 0.01) -> FloatArray:
    """DSAT_w as budgetcheck runs it (Li et al. 2015; the test charged into the window): a row count at
    ε/10, tests at 9(w − C)ε/(10w²), samples at 9ε/(10w), at most C = ⌈ρw⌉ per window, feedback threshold."""
    runs, T, d = values.shape
    C = min(w, max(1, math.ceil(rate * w)))
    unit = epsilon / (10 * w * w)
    count_budget, test_budget, sample_budget = unit * w * w, unit * 9 * (w - C), unit * 9 * w
    target, tolerance, gain = C / w, 0.05, 0.5
    out = np.empty_like(values)
    last = np.zeros((runs, d))
    threshold = np.full(runs, 0.025)
    taken = np.zeros(runs)
    flags = np.zeros((runs, max(w - 1, 1)), dtype=np.int64)  # ring buffer: samples at the last w − 1 timestamps
    in_window = np.zeros(runs, dtype=np.int64)
    rows = np.maximum(values[:, 0].sum(axis=1) + rng.laplace(0.0, 1.0, size=runs) / count_budget, 1.0)
    for t in range(T):
        current = values[:, t]
        distance = _dissimilarity(rng, current, last, test_budget) / rows
        sampled = ((distance >= threshold) | (t < 2)) & (in_window < C)
        if sampled.any():
            noisy = current + rng.laplace(0.0, 1.0, size=(runs, d)) / sample_budget[:, None]
            last = np.where(sampled[:, None], noisy, last)
        out[:, t] = last
        taken += sampled
        share = taken / (t + 1)
        step = gain * np.abs(np.abs(share - target) - tolerance) / tolerance
        threshold = np.clip(np.where(share < target, threshold - step, threshold + step), 0.0, 2.0)
        if w > 1:
            slot = t % (w - 1)
            in_window += sampled - flags[:, slot]
            flags[:, slot] = sampled
    return out


def _grouped_median(
    values: FloatArray,
    epsilon_group: FloatArray,
    thresholds: Callable[[int, FloatArray], FloatArray],
    perturbed: Callable[[int, FloatArray], FloatArray],
    w: int,
    rng: np.random.Generator,
    after: Callable[[FloatArray, FloatArray], None],
) -> FloatArray:
    """The Grouper/Smoother loop of PeGaSus and AdaPub: per run and cell an AboveThreshold on the group
    deviation Σ|c − mean| of the true counts (sensitivity 2: query noise Lap(8/ε_g), threshold noise
    Lap(4/ε_g)), groups capped at w timestamps, the release the median of the group's perturbed values.

    ``perturbed(t, last)`` gives x_t from the last release; ``thresholds(t, x)`` the θ of every cell;
    ``after(x, fresh)`` sees t's perturbed values and the cells whose group restarted."""
    runs, T, d = values.shape
    out = np.empty_like(values)
    query_scale, offset_scale = (8.0 / epsilon_group)[:, None], (4.0 / epsilon_group)[:, None]
    truth = np.full((w, runs, d), np.nan)  # the last w timestamps, newest at row t % w
    ranked = np.full((w, runs, d), np.nan)  # the group's perturbed values, ascending, in its first rows
    start = np.zeros((runs, d), dtype=np.int64)  # first timestamp of the open instance, 0: none
    offsets = np.zeros((runs, d))
    group = np.zeros((runs, d), dtype=np.int64)  # the smoothing group's length
    slots = np.arange(w)
    last = np.zeros((runs, d))
    for t in range(T):
        stamp, row = t + 1, t % w
        x = perturbed(t, last)
        theta = thresholds(t, x)
        truth[row] = values[:, t]
        opened = (start == 0) | (stamp - start + 1 > w)
        footprint = np.where(opened, 0, stamp - start + 1)
        recent = (row - slots[: max(int(footprint.max()), 1)]) % w  # newest first: only as far back as a footprint goes
        inside = slots[: recent.size, None, None] < footprint
        members = truth[recent]
        mean = np.where(inside, members, 0.0).sum(axis=0) / np.maximum(footprint, 1)
        spread = np.where(inside, np.abs(members - mean), 0.0).sum(axis=0)
        above = ~opened & (spread + rng.laplace(0.0, 1.0, size=(runs, d)) * query_scale >= theta + offsets)
        fresh_offsets = rng.laplace(0.0, 1.0, size=(runs, d)) * offset_scale
        offsets = np.where(opened, fresh_offsets, offsets)
        start = np.where(above, 0, np.where(opened, stamp, start))
        restart = above | opened
        group = np.where(restart, 1, np.minimum(group + 1, w))
        # a group only grows by t or restarts at {t} (a cap restarts it): one sorted insertion per cell;
        # rows at or past a cell's group length are never read (stale after a restart)
        top = int(group.max())
        head = ranked[:top]
        rows = slots[:top, None, None]
        position = ((head < x) & (rows < group - 1)).sum(axis=0)
        shifted = np.concatenate([np.full((1, runs, d), np.nan), head[:-1]])
        inserted = np.where(rows < position, head, np.where(rows == position, x, shifted))
        ranked[:top] = np.where(restart, np.where(rows == 0, x, np.nan), inserted)
        low = np.take_along_axis(ranked, ((group - 1) // 2)[None], axis=0)[0]
        high = np.take_along_axis(ranked, (group // 2)[None], axis=0)[0]
        last = (low + high) / 2.0
        after(x, restart)
        out[:, t] = last
    return out


def pegasus(values: FloatArray, epsilon: FloatArray, w: int, rng: np.random.Generator) -> FloatArray:
    """PeGaSus (Chen et al. 2017), w-event: Perturber at 0.8ε/w, Grouper at 0.2ε/w, θ = 5/ε_g, median Smoother."""
    perturb, group = 0.8 * epsilon / w, 0.2 * epsilon / w
    theta = (5.0 / group)[:, None]
    return _grouped_median(
        values,
        group,
        lambda t, x: theta,
        lambda t, last: values[:, t] + rng.laplace(0.0, 1.0, size=last.shape) / perturb[:, None],
        w,
        rng,
        lambda x, fresh: None,
    )


def adapub(values: FloatArray, epsilon: FloatArray, w: int, rng: np.random.Generator) -> FloatArray:
    """AdaPub (Wang et al. 2019), d = 1: perturbation at 0.8ε/w, time clustering at 0.2ε/w with the PID
    threshold θ_t = max(1, δ_t²/ε), δ_t = 0.9E_t + 0.1·mean(E since the cluster opened),
    E_t = |r_{t−1} − x_t|/max(x_t, 1)."""
    if values.shape[2] != 1:
        raise ValueError(f"the plain AdaPub has no dimension grouping: d must be 1, got {values.shape[2]}")
    perturb, cluster = 0.8 * epsilon / w, 0.2 * epsilon / w
    column = _column(epsilon)
    shape = values.shape[0], values.shape[2]
    feedback = [np.zeros(shape), np.zeros(shape), np.zeros(shape)]  # E_{t−1}, Σ E, count
    pending: list[FloatArray] = []
    previous = [np.zeros(shape)]

    def perturbed(t: int, last: FloatArray) -> FloatArray:
        previous[0] = last
        return values[:, t] + rng.laplace(0.0, 1.0, size=last.shape) / perturb[:, None]

    def thresholds(t: int, x: FloatArray) -> FloatArray:
        error = np.abs(previous[0] - x) / np.maximum(x, 1.0)
        total, count = feedback[1] + error, feedback[2] + 1.0
        control = 0.9 * error + 0.1 * total / count + 0.0 * (error - feedback[0])
        pending[:] = [error, total, count]
        return np.maximum(control * control / column, 1.0)

    def after(x: FloatArray, fresh: FloatArray) -> None:
        error, total, count = pending
        feedback[:] = [error, np.where(fresh, error, total), np.where(fresh, 1.0, count)]

    return _grouped_median(values, cluster, thresholds, perturbed, w, rng, after)


def rescuedp(values: FloatArray, epsilon: FloatArray, w: int, rng: np.random.Generator) -> FloatArray:
    """RescueDP (Wang et al. 2016), d = 1, one shared window: ε_t = min(p·ε_rm, 0.6ε_rm, ε/5) with
    p = min(0.2 ln(I + 1), 0.6) at the PID's sampling points (0.9, 0.1, 0; π 3, θ 10); Kalman with
    R = max((w/ε)², 2/ε_t²) and q the running variance of the releases, floored at 1."""
    runs, T, d = values.shape
    if d != 1:
        raise ValueError(f"the plain RescueDP has no dynamic grouping: d must be 1, got {d}")
    column = _column(epsilon)
    out = np.empty_like(values)
    spent = np.zeros((runs, max(w - 1, 1)))
    window = np.zeros(runs)
    estimate, variance, seen = np.zeros((runs, d)), np.full((runs, d), 100.0), np.zeros((runs, d), dtype=bool)
    fixed_noise = (w / column) ** 2
    process = np.ones((runs, d))
    errors = np.full((runs, d, 3), np.nan)
    last_release, last_time = np.full((runs, d), np.nan), np.zeros((runs, d))
    interval, next_time = np.ones((runs, d)), np.ones((runs, d))
    moments = np.zeros((3, runs, d))
    left = np.broadcast_to(column, (runs, d))
    for t in range(T):
        stamp = t + 1
        due = next_time <= stamp
        variance = variance + process
        prior = estimate
        fraction = np.minimum(0.2 * np.log(interval + 1.0), 0.6)
        budgets = np.where(due, np.minimum(left * fraction, np.minimum(0.6 * left, column / 5)), 0.0)
        sampled = budgets > 0
        if sampled.any():
            safe = np.where(sampled, budgets, 1.0)
            observed = values[:, t] + rng.laplace(0.0, 1.0, size=(runs, d)) / safe
            noise = np.maximum(fixed_noise, np.where(sampled, 2.0 / safe**2, 0.0))
            gain = np.where(seen, variance / (variance + noise), 1.0)
            estimate = np.where(sampled, prior + gain * (observed - prior), prior)
            variance = np.where(sampled & seen, (1.0 - gain) * variance, variance)
            seen = seen | sampled
        charge = budgets.max(axis=1)
        if w > 1:
            slot = t % (w - 1)
            window += charge - spent[:, slot]
            spent[:, slot] = charge
        left = np.broadcast_to((epsilon - window)[:, None], (runs, d))
        if sampled.any():
            scale = np.where(left > 0, 1.0 / np.where(left > 0, left, 1.0), np.inf)
            error = np.where(np.isnan(last_release), 0.0, np.abs(estimate - last_release))
            pushed = np.concatenate([errors[..., 1:], error[..., None]], axis=-1)
            mean = np.nanmean(pushed, axis=-1)
            control = 0.9 * error + 0.1 * mean + 0.0 * error / np.maximum(stamp - last_time, 1.0)
            ratio = np.where(np.isfinite(scale), control / np.where(np.isfinite(scale), scale, 1.0), 0.0)
            stepped = np.maximum(interval + 10.0 * (1.0 - ratio * ratio), 1.0)
            errors = np.where(sampled[..., None], pushed, errors)
            interval = np.where(sampled, stepped, interval)
            last_release = np.where(sampled, estimate, last_release)
            last_time = np.where(sampled, float(stamp), last_time)
            next_time = np.where(sampled, stamp + np.floor(interval), next_time)
        taken = np.where(sampled, estimate, 0.0)
        moments[0] += sampled
        moments[1] += taken
        moments[2] += taken * taken
        count = np.maximum(moments[0], 1.0)
        process = np.maximum(moments[2] / count - (moments[1] / count) ** 2, 1.0)
        out[:, t] = np.where(sampled, estimate, prior)
    return out


PLAIN: dict[str, Plain] = {
    "Uniform": uniform,
    "Sample": sample,
    "BD": bd,
    "BA": ba,
    "FASTw": fastw,
    "DSATw": dsatw,
    "RescueDP": rescuedp,
    "PeGaSus": pegasus,
    "AdaPub": adapub,
}
