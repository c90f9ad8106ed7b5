"""Noise nobody can predict: the attacks of the durable-ledger issue, tried from outside.

Before: every ledger drew float Laplace from ``default_rng(seed)`` (a file: ``[seed, session]``,
seed 0 by default), so whoever knew the session number subtracted the noise and read the true
counts. Now the ledgers' default is the exact discrete sampler fed by the OS CSPRNG, the other
randomness (the Sampling Mechanism's draws) comes from 256 bits of OS entropy, ``publish`` refuses
reproducible noise, and a ledger file keeps the sampler it was opened with.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import budgetcheck as bc
from budgetcheck.cli import main

COUNTS = np.array([[120.0, 7.0, 0.0]] * 6)


def _released(path: Path, *, seed: int = 0, sampler: str | None = None) -> tuple[np.ndarray, tuple[int, ...]]:
    """Laplace releases of COUNTS through a ledger file, and the file's session entropy (counter, head)."""
    kwargs = {} if sampler is None else {"sampler": sampler}
    ledger = bc.open_ledger(
        path, bc.WindowLedger(epsilon=6.0, w=6, seed=seed, **kwargs, keep_records=True), durability="process"
    )
    stream = bc.GuardedStream(COUNTS)
    ledger.bind(stream)
    out = np.stack([ledger.laplace(secret, 1.0)[0] for secret in stream])
    assert ledger.journal is not None
    session = ledger.journal.session_entropy
    ledger.close()
    return out, session


def _attacker(seed: int, session: tuple[int, ...], shape: tuple[int, ...]) -> np.ndarray:
    """The issue's attack: recompute the noise from default_rng([seed, *session]) and subtract it (the
    session entropy is public: the counter and the chain's head at open)."""
    return np.random.default_rng([seed, *session]).laplace(0.0, 1.0, shape)  # scale Δ/ε = 1


def test_the_attack_works_on_reproducible_noise_asked_for_by_name(tmp_path: Path) -> None:
    """The attack is real: with numpy-laplace (named) the counts come back exactly."""
    released, session = _released(tmp_path / "l.db", sampler="numpy-laplace")
    np.testing.assert_allclose(released - _attacker(0, session, released.shape), COUNTS, atol=1e-9)


def test_the_attack_fails_on_the_default_noise(tmp_path: Path) -> None:
    released, session = _released(tmp_path / "l.db")
    assert all(float(v).is_integer() for v in released.ravel())  # the discrete sampler
    guess = released - _attacker(0, session, released.shape)
    assert not np.allclose(guess, COUNTS, atol=0.5)
    assert np.abs(released - COUNTS).max() > 0  # noise was added at all


def test_two_ledgers_opened_alike_on_the_same_data_draw_different_noise(tmp_path: Path) -> None:
    first, _ = _released(tmp_path / "a.db", seed=7)
    second, _ = _released(tmp_path / "b.db", seed=7)
    assert not np.array_equal(first, second)
    memory = [bc.WindowLedger(epsilon=6.0, w=6, seed=7, keep_records=True) for _ in range(2)]
    outs = []
    for ledger in memory:
        stream = bc.GuardedStream(COUNTS)
        ledger.bind(stream)
        outs.append(np.stack([ledger.laplace(secret, 1.0)[0] for secret in stream]))
    assert not np.array_equal(outs[0], outs[1])


def test_the_sampling_mechanisms_draws_are_unpredictable_unless_named(tmp_path: Path) -> None:
    """Which users the Sampling Mechanism keeps is part of its privacy: not recomputable from the seed."""
    requirements = bc.RequirementSet.from_counts([((1, 0.05), 400), ((1, 2.0), 5)])  # w = 1: a release at every t
    bins = np.zeros((2, 405), dtype=np.int64)

    def releases(sampler: str | None) -> np.ndarray:
        kwargs = {} if sampler is None else {"sampler": sampler}
        ledger = bc.PersonalizedLedger(requirements, runs=50, seed=3, **kwargs, keep_records=True)
        stream = bc.PersonalizedStream(requirements, bins, dimensions=1)
        ledger.bind(stream)
        return np.stack([ledger.sample_release(secret, [0.05, 2.0]) for secret in stream])

    np.testing.assert_array_equal(releases("numpy-laplace"), releases("numpy-laplace"))  # reproducible by name
    assert not np.array_equal(releases(None), releases(None))


def test_a_ledger_file_keeps_its_sampler(tmp_path: Path) -> None:
    path = tmp_path / "l.db"
    bc.open_ledger(path, bc.WindowLedger(epsilon=1.0, w=3, keep_records=True)).close()
    with pytest.raises(bc.InvalidArgument, match="kept under sampler='discrete-laplace', not sampler='numpy-laplace'"):
        bc.open_ledger(path, bc.WindowLedger(epsilon=1.0, w=3, sampler="numpy-laplace", keep_records=True))
    with bc.open_ledger(path, bc.WindowLedger(epsilon=1.0, w=3, keep_records=True)) as again:
        assert again.sampler == "discrete-laplace"


@pytest.mark.parametrize("mechanism", ["AdaPub", "PeGaSus"])
def test_adapub_and_pegasus_publish_with_secure_noise_and_resume(tmp_path: Path, mechanism: str) -> None:
    rows = "".join(f"{t},{(t * 7) % 11},{3 + (t % 4)},{t % 2}\n" for t in range(1, 41))
    args = [
        "publish",
        mechanism,
        "--ledger",
        str(tmp_path / "l.db"),
        "--epsilon",
        "1",
        "--w",
        "5",
        "-d",
        "3",
        "--out",
        str(tmp_path / "out.csv"),
    ]
    first = CliRunner().invoke(main, args, input="".join(rows.splitlines(keepends=True)[:15]))
    assert first.exit_code == 0, first.output
    again = CliRunner().invoke(main, args, input=rows)
    assert again.exit_code == 0 and "replayed 15" in again.output, again.output
    lines = (tmp_path / "out.csv").read_text().splitlines()
    assert [int(line.split(",")[0]) for line in lines] == list(range(1, 41))
    with bc.open_ledger(tmp_path / "l.db", bc.WindowLedger(epsilon=1.0, w=5, keep_records=True)) as ledger:
        samplers = {r.sampler for r in ledger.records}
    assert samplers == {"discrete-laplace"}
    assert bc.audit_file(tmp_path / "l.db").ok


def _threshold_rate(sampler: str, gap: float, runs: int = 2000) -> float:
    """P(q + ν >= θ + ρ) for one AboveThreshold query at q − θ = gap (Δ = 1, ε = 1), over ``runs`` runs."""
    ledger = bc.WindowLedger(
        epsilon=1.0, w=2, runs=runs, sampler=sampler, keep_records=True, trusted_code=True, allow_vouched=True
    )
    stream = bc.GuardedStream(np.array([[0.0], [0.0]]))
    ledger.bind(stream)
    test = ledger.above_threshold(epsilon=0.5, sensitivity=1.0, cells=(1,))
    first, second = stream
    test.query(first, lambda v: np.zeros((v.shape[0], 1)), 0.0, deadline=5.0)  # every instance opens (draws ρ)
    # a forked statistic past its deadline (a loaded machine) would answer its default, 0.0, and move the rates
    answer = test.query(second, lambda v: np.full((v.shape[0], 1), gap), 0.0, deadline=5.0)
    assert not ledger.failures
    return float(answer.above.mean())


def test_the_discrete_threshold_test_answers_as_the_continuous_one() -> None:
    """Same shape as AboveThreshold with float noise (scales 4Δ/ε and 2Δ/ε): within sampling error
    at every gap, and monotone in q − θ."""
    gaps = [-12.0, -4.0, 0.0, 4.0, 12.0]
    discrete = [_threshold_rate("discrete-laplace", gap) for gap in gaps]
    continuous = [_threshold_rate("numpy-laplace", gap) for gap in gaps]
    for p, q in zip(discrete, continuous, strict=True):
        error = 5 * np.sqrt(max(q * (1 - q), 1e-4) * 2 / 2000)
        assert abs(p - q) <= error, (discrete, continuous)
    assert discrete == sorted(discrete) and discrete[0] < 0.2 and discrete[-1] > 0.8


@pytest.mark.parametrize("epsilon", [5e-324, 1e-323, 2.0**-1060])
def test_a_budget_whose_discrete_scale_passes_the_largest_double_is_refused_before_the_charge(epsilon: float) -> None:
    """Δ/ε beyond the largest double: the rational sampler cannot draw (it raised OverflowError after
    the charge); now InvalidArgument names ε, and nothing is charged, in one run and in several."""
    for runs, amount in ((1, epsilon), (2, np.array([0.5, epsilon]))):
        ledger = bc.WindowLedger(epsilon=1.0, w=2, runs=runs, keep_records=True)
        stream = bc.GuardedStream(COUNTS)
        ledger.bind(stream)
        with pytest.raises(bc.InvalidArgument, match=r"epsilon=.* too small for the discrete-laplace sampler"):
            ledger.laplace(stream.secret(1), amount)
        assert not ledger.records
        assert ledger.laplace(stream.secret(1), 0.5).shape == (runs, 3)  # the ledger goes on


def test_discrete_draws_past_the_largest_double_release_infinities_not_a_traceback() -> None:
    """A scale near the largest double: some draws land beyond it (about 1 in 40 at ε = 2e-308); the
    release rounds them to ±inf (post-processing of the draw) instead of failing after the charge."""
    ledger = bc.WindowLedger(epsilon=1.0, w=2, keep_records=True)
    stream = bc.GuardedStream(np.zeros((1, 2000)))
    ledger.bind(stream)
    released = ledger.laplace(stream.secret(1), 2e-308)
    assert len(ledger.records) == 1 and not np.isnan(released).any()
    assert np.isinf(released).any() and (np.abs(released[np.isfinite(released)]) <= np.finfo(float).max).all()


def test_the_discrete_sampler_releases_a_timestamp_no_policy_covers_exactly() -> None:
    """Swellfish: where no policy applies the temporal sensitivity is 0; the discrete sampler raised a
    math domain error there (log2 of 0). It now releases on the finest grid: the exact counts, and an
    exact dissimilarity, as the float sampler does."""
    ledger = bc.SwellfishLedger(
        bc.PolicyCollection([bc.StreamPolicy(3, 4, [1.0])]), epsilon=1.0, sampler="discrete-laplace", keep_records=True
    )
    stream = bc.GuardedStream(np.array([[1.0, 2.0]] * 6))
    ledger.bind(stream)
    assert ledger.temporal_sensitivity(1) == 0.0
    assert ledger.laplace(stream.secret(1), 0.5).tolist() == [[1.0, 2.0]]
    assert ledger.dissimilarity(stream.secret(2), np.array([[0.5, 0.25]]), 0.5).tolist() == [1.125]
