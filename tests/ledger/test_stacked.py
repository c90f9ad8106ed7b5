"""Stacked streams (GuardedStream.stacked): S streams of one shape read by one WindowLedger, run
block by block (the benchmark's batches). Stacking must change nothing but which stream a run reads."""

from __future__ import annotations

import numpy as np
import pytest

from budgetcheck import GuardedStream, InvalidArgument, SecretAccess, WEventParams, WindowLedger, execute
from budgetcheck.bench.config import builtin_w_event
from budgetcheck.mechanism.loading import load_mechanism

W_EVENT = builtin_w_event()


def _stream(level: float, length: int = 40, d: int = 3, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return level + rng.poisson(5.0, size=(length, d)).astype(np.float64)


@pytest.mark.parametrize("name", W_EVENT)
def test_copies_of_one_stream_stacked_release_exactly_what_the_plain_stream_releases(name: str) -> None:
    data = _stream(50.0)
    plain = execute(load_mechanism(name), data, epsilon=1.0, w=5, runs=6, seed=11)
    stacked = execute(load_mechanism(name), GuardedStream.stacked([data] * 3), epsilon=1.0, w=5, runs=6, seed=11)
    assert np.array_equal(plain.releases, stacked.releases)
    assert [r.amounts.tolist() for r in plain.ledger.records] == [r.amounts.tolist() for r in stacked.ledger.records]


@pytest.mark.parametrize("name", W_EVENT)
def test_each_block_of_runs_reads_its_own_stream(name: str) -> None:
    levels = (0.0, 1_000.0, 100_000.0)
    streams = [_stream(level, seed=i) for i, level in enumerate(levels)]
    runs_per_stream = 2
    releases = execute(
        load_mechanism(name),
        GuardedStream.stacked(streams),
        epsilon=1000.0,
        w=2,
        runs=runs_per_stream * len(streams),
        seed=3,
    ).releases
    blocks = releases.reshape(len(streams), runs_per_stream, *releases.shape[1:])
    for s, block in enumerate(blocks):
        distance = [float(np.abs(block[:, 10:] - other[10:]).mean()) for other in streams]
        assert int(np.argmin(distance)) == s, (name, s, distance)
        assert distance[s] < 60.0, (name, s, distance)


def test_a_stacked_secret_shows_one_runs_shape_and_stays_secret() -> None:
    stream = GuardedStream.stacked([_stream(1.0), _stream(2.0)])
    assert (stream.streams, stream.length, stream.dimensions) == (2, 40, 3)
    secret = stream.secret(1)
    assert secret.shape == (3,)
    with pytest.raises(SecretAccess):
        np.asarray(secret)
    assert "streams=2" in repr(stream)


def test_bad_stacks_are_refused_with_the_reason() -> None:
    with pytest.raises(InvalidArgument, match="share one shape"):
        GuardedStream.stacked([_stream(1.0), _stream(1.0, length=30)])
    with pytest.raises(InvalidArgument, match="at least one stream"):
        GuardedStream.stacked([])
    with pytest.raises(InvalidArgument, match="runs=3 must be a multiple of 2"):
        WindowLedger(WEventParams(1.0, 3), runs=3, sampler="numpy-laplace", keep_records=True).bind(
            GuardedStream.stacked([_stream(1.0), _stream(2.0)])
        )


def test_notions_that_cannot_read_a_stack_refuse_it_and_footprints_are_refused() -> None:
    from budgetcheck import PolicyCollection, StreamPolicy, SwellfishLedger

    stacked = GuardedStream.stacked([_stream(1.0), _stream(2.0)])
    swellfish = SwellfishLedger(
        PolicyCollection([StreamPolicy(2, 3, [1.0])]),
        epsilon=1.0,
        runs=2,
        sampler="numpy-laplace",
        keep_records=True,
        trusted_code=True,
        allow_vouched=True,
    )
    with pytest.raises(InvalidArgument, match="only a WindowLedger reads stacked streams"):
        swellfish.bind(stacked)
    ledger = WindowLedger(
        WEventParams(1.0, 3), runs=2, sampler="numpy-laplace", keep_records=True, trusted_code=True, allow_vouched=True
    )
    ledger.bind(stacked)
    with pytest.raises(InvalidArgument, match="does not read stacked streams"):
        ledger.measure_footprint(lambda v: v.sum(axis=0), [stacked.secret(1)], sensitivity=1.0, epsilon=0.1)
    assert ledger.records == ()


def test_measure_gives_each_block_its_own_streams_value() -> None:
    stacked = GuardedStream.stacked([np.full((2, 2), 1.0), np.full((2, 2), 7.0)])
    ledger = WindowLedger(
        WEventParams(1e6, 1),
        runs=4,
        seed=0,
        sampler="numpy-laplace",
        keep_records=True,
        trusted_code=True,
        allow_vouched=True,
    )
    ledger.bind(stacked)
    sums = ledger.measure(np.sum, stacked.secret(1), sensitivity=1.0, epsilon=1e6)
    assert np.allclose(sums, [2.0, 2.0, 14.0, 14.0], atol=1e-3)
