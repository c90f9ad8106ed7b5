"""The plain numpy baselines of benchmarks/bench_speed.py run the same algorithms as the built-in mechanisms.

Their speed ratios mean something only if they do the same work: same shapes and the same error
distribution (each run's MAE) on benchmark streams, within the noise of the runs.
"""

from __future__ import annotations

import numpy as np
import pytest
from benchmarks.plain_mechanisms import PLAIN

from budgetcheck import GuardedStream, execute
from budgetcheck.bench import Benchmark
from budgetcheck.bench.runner import stream_data
from budgetcheck.mechanism.loading import load_mechanism


@pytest.mark.parametrize("name", sorted(PLAIN))
def test_plain_baseline_releases_every_run_and_timestamp(name: str) -> None:
    """A tiny stream, two ε stacked as the benchmark stacks them: (runs, T, d), finite, and at ε = 10^6
    releases that follow the stream."""
    rng = np.random.default_rng(1)
    truth = rng.integers(0, 50, size=(30, 1)).astype(np.float64)
    values = np.broadcast_to(truth, (6, *truth.shape))
    releases = PLAIN[name](values, np.repeat([0.5, 1e6], 3), 4, np.random.default_rng(2))
    assert releases.shape == values.shape and releases.dtype == np.float64
    assert np.isfinite(releases).all()
    assert not np.array_equal(releases[0], releases[1])  # noise per run, not one draw shared
    # at ε = 10^6 every release is a (filtered) near-exact sample: inside the stream's range
    assert truth.min() - 1.0 <= releases[3:].min() and releases[3:].max() <= truth.max() + 1.0
    if name not in ("FASTw", "DSATw"):  # the Kalman filter lags, DSAT repeats a sample until its test fires
        stamps = np.arange(0, 30, 4) if name == "Sample" else np.arange(30)  # Sample: at its sampling points
        assert np.abs(releases[3:, stamps] - truth[stamps]).max() < 25.0


@pytest.mark.parametrize("name", ["RescueDP", "AdaPub"])
def test_plain_baselines_without_dimension_grouping_refuse_d_above_one(name: str) -> None:
    with pytest.raises(ValueError, match="d must be 1, got 2"):
        PLAIN[name](np.zeros((2, 5, 2)), np.ones(2), 3, np.random.default_rng(0))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PLAIN))
def test_plain_baseline_has_the_error_of_ours(name: str) -> None:
    """Mean per-run MAE of ours and of the plain version on two benchmark streams and two settings agree
    within 4.5 standard errors (independent seeds: the agreement is statistical, not the same draws)."""
    paper = Benchmark.paper(real=())
    runs = 400
    for spec in (paper.streams[0], paper.streams[12]):
        data = stream_data(spec, paper.seed)
        for epsilon, w in ((1.0, 40), (0.3, 120)):
            ours = execute(load_mechanism(name), GuardedStream(data), epsilon=epsilon, w=w, runs=runs, seed=11).releases
            values = np.broadcast_to(data, (runs, *data.shape))
            plain = PLAIN[name](values, np.full(runs, epsilon), w, np.random.default_rng(12))
            a, b = np.abs(ours - data).mean(axis=(1, 2)), np.abs(plain - data).mean(axis=(1, 2))
            error = np.sqrt(a.var(ddof=1) / runs + b.var(ddof=1) / runs)
            assert abs(a.mean() - b.mean()) <= 4.5 * error + 1e-9 * a.mean(), (
                spec.name,
                epsilon,
                w,
                a.mean(),
                b.mean(),
            )
