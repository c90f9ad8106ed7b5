"""Kellaris et al. 2014 §4.5: column partitioning (BD/BAPartitioned) and shifted budget (BD/BAShifted).

Each test tries to break a claim of the docstrings from outside: the charges on crafted streams are
recomputed here from the paper's formulas and the decisions the records show, the grouping is
checked to see nothing of the data but the releases, and every window is audited.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budgetcheck import (
    GuardedStream,
    InvalidArgument,
    WEventParams,
    WindowLedger,
    audit_windows,
    execute,
    rounding,
)
from budgetcheck.verify.tap import install_tap
from mechanisms import (
    BA,
    BD,
    BUILTIN,
    BAPartitioned,
    BAShifted,
    BDPartitioned,
    BDShifted,
    partitioned,
)
from mechanisms.partitioned import column_groups

NEW = [BDPartitioned(), BAPartitioned(), BDShifted(), BAShifted()]


def _charges(records: Any, purpose: str, length: int) -> list[float]:
    """Run 0's charge per timestamp for ``purpose`` (0 where none)."""
    out = [0.0] * length
    for record in records:
        if record.purpose == purpose:
            out[record.t - 1] += float(record.amounts[0])
    return out


def _jumps(length: int, d: int, seed: int = 0) -> np.ndarray:
    """Counts that jump by about 10^6 at random timestamps and stay flat in between."""
    rng = np.random.default_rng(seed)
    levels = np.cumsum(rng.random(length) < 0.4) % 2 * 1e6
    return np.repeat(levels[:, None], d, axis=1) + np.arange(d)


@pytest.mark.parametrize("name", ["BDPartitioned", "BAPartitioned", "BDShifted", "BAShifted"])
def test_registered_and_named(name: str) -> None:
    assert BUILTIN[name]().name == name  # type: ignore[attr-defined]


@pytest.mark.parametrize("mechanism", NEW, ids=lambda m: m.name)
@settings(max_examples=15, deadline=None)
@given(
    length=st.integers(1, 30),
    d=st.integers(2, 40),
    w=st.integers(1, 8),
    runs=st.integers(1, 3),
    epsilon=st.sampled_from([0.1, 1.0, 3.0]),
    seed=st.integers(0, 2**16),
)
def test_shape_and_every_window_within_epsilon(
    mechanism: Any, length: int, d: int, w: int, runs: int, epsilon: float, seed: int
) -> None:
    """Outputs are (runs, T, d) and finite; the independent auditor finds no window over ε; nothing refused."""
    data = np.random.default_rng(seed).poisson(20, size=(length, d)).astype(float) * (
        1 + (np.arange(length) % 3 == 0)[:, None]
    )
    execution = execute(mechanism, data, epsilon=epsilon, w=w, runs=runs, seed=seed)
    assert execution.releases.shape == (runs, length, d)
    assert np.isfinite(execution.releases).all()
    assert execution.ledger.refusals == 0
    report = audit_windows(execution.ledger.records, epsilon=epsilon, w=w, runs=runs)
    assert report.ok, report.violations


# -- shifted budget -------------------------------------------------------------------------------


def test_bd_shifted_charges_follow_the_shifted_split_when_d_exceeds_2w() -> None:
    """d = 40 > 2w = 8: ε_{t,1} = ε/d at every t, and ε_{t,2} = (ε − w·ε/d − Σ recent ε_{k,2})/2."""
    epsilon, w, d, length = 1.0, 4, 40, 60
    execution = execute(BDShifted(), _jumps(length, d), epsilon=epsilon, w=w, runs=1, seed=3)
    dis = _charges(execution.ledger.records, "dissimilarity", length)
    pub = _charges(execution.ledger.records, "publication", length)
    assert dis == [rounding.share(epsilon, d)] * length
    pool = epsilon - w * epsilon / d  # 0.9: more than BD's ε/2
    for t in range(length):
        if pub[t]:
            assert pub[t] == pytest.approx((pool - sum(pub[max(0, t - w + 1) : t])) / 2, rel=1e-12, abs=1e-15)
    published = sum(1 for p in pub if p)
    assert 0 < published < length  # both decisions were exercised
    assert max(pub) == pytest.approx(pool / 2)  # the first publication gets half the shifted pool, 0.45ε > BD's 0.25ε


def test_ba_shifted_charges_follow_the_shifted_shares_when_d_exceeds_2w() -> None:
    """d = 40 > 2w: ε_{t,1} = ε/d; a publication takes min(t − (l + k_l − 1), w) shares of u = (ε − w·ε/d)/w
    and the k_l − 1 timestamps after it are nullified (Figure 4), recomputed here from the records."""
    epsilon, w, d, length = 1.0, 4, 40, 80
    execution = execute(BAShifted(), _jumps(length, d, seed=1), epsilon=epsilon, w=w, runs=1, seed=5)
    dis = _charges(execution.ledger.records, "dissimilarity", length)
    pub = _charges(execution.ledger.records, "publication", length)
    assert dis == [rounding.share(epsilon, d)] * length
    unit = (epsilon - w * epsilon / d) / w
    last, shares_last = 0, 1
    absorbed = set()
    for t in range(1, length + 1):
        if t - last <= shares_last - 1:
            assert pub[t - 1] == 0.0, f"t={t} is nullified"
            continue
        if pub[t - 1]:
            shares = min(t - (last + shares_last - 1), w)
            assert pub[t - 1] == pytest.approx(shares * unit, rel=1e-12)
            absorbed.add(shares)
            last, shares_last = t, shares
    assert absorbed & {1} and max(absorbed) > 1  # single shares and absorbed ones both occurred


@pytest.mark.parametrize(("plain", "shifted"), [(BD(), BDShifted()), (BA(), BAShifted())], ids=["BD", "BA"])
def test_shifted_is_the_plain_mechanism_bit_for_bit_when_d_is_at_most_2w(plain: Any, shifted: Any) -> None:
    """d = 8 = 2w: the shift would leave at most ε/2, so no shift: the releases and charges of BD/BA."""
    data = _jumps(50, 8, seed=2)
    a = execute(plain, data, epsilon=1.0, w=4, runs=3, seed=11)
    b = execute(shifted, data, epsilon=1.0, w=4, runs=3, seed=11)
    # the same decisions and budgets; the split is held per run in the state, so a budget may round
    # differently in the last bit (an ulp of ε, never above it: the auditor checks every window)
    assert [(r.t, r.purpose) for r in a.ledger.records] == [(r.t, r.purpose) for r in b.ledger.records]
    for x, y in zip(a.ledger.records, b.ledger.records, strict=True):
        np.testing.assert_allclose(x.amounts, y.amounts, rtol=1e-14, atol=0)
    np.testing.assert_allclose(a.releases, b.releases, rtol=1e-12, atol=1e-9)
    assert audit_windows(b.ledger.records, epsilon=1.0, w=4, runs=3).ok


def test_shifted_rule_refuses_a_bad_dimension() -> None:
    with pytest.raises(InvalidArgument, match="dimensions=0"):
        BDShifted().allocation_rule().for_dimensions(0)


# -- column partitioning --------------------------------------------------------------------------


def _two_speed_stream(length: int) -> np.ndarray:
    """d = 8: the even columns jump by 10^6 every third timestamp, the odd ones stay at 1000."""
    data = np.full((length, 8), 1000.0)
    data[:, ::2] += ((np.arange(length) // 3) % 2 * 1e6)[:, None]
    return data


@pytest.mark.parametrize("mechanism", [BDPartitioned(groups=2), BAPartitioned(groups=2)], ids=lambda m: m.name)
def test_partitioned_charges_max_over_groups_on_a_crafted_stream(mechanism: Any) -> None:
    """One dissimilarity charge ε/(2w) per t (the max over groups), noise Δ/ε_{t,1} on each group's sum
    (MAE_g noise 1/(n_g ε_{t,1})); one publication charge per t, the shared ε_{t,2} of BD/BA; only the
    columns of publishing groups change; the charges are a BD/BA trajectory (re-derived here)."""
    epsilon, w, length = 1.0, 4, 60
    data = _two_speed_stream(length)
    ledger = WindowLedger(
        WEventParams(epsilon=epsilon, w=w), runs=1, seed=7, sampler="numpy-laplace", keep_records=True
    )
    releases = mechanism.run(GuardedStream(data), ledger)[0]
    records = ledger.records
    dis_records = [r for r in records if r.purpose == "dissimilarity"]
    assert [r.t for r in dis_records] == list(range(1, length + 1))
    for record in dis_records:
        assert float(record.amounts[0]) == rounding.share(epsilon, 2 * w)
        assert record.noise_scale is not None and record.noise_scale.shape == (1, 2)  # one noise per group
        assert np.all(record.noise_scale == pytest.approx(1.0 / rounding.share(epsilon, 2 * w)))
    pub = _charges(records, "publication", length)
    if isinstance(mechanism, BDPartitioned):
        for t in range(length):
            if pub[t]:
                assert pub[t] == pytest.approx((epsilon / 2 - sum(pub[max(0, t - w + 1) : t])) / 2, rel=1e-12)
    else:
        unit, last, shares_last = epsilon / (2 * w), 0, 1
        for t in range(1, length + 1):
            if t - last <= shares_last - 1:
                assert pub[t - 1] == 0.0
            elif pub[t - 1]:
                shares = min(t - (last + shares_last - 1), w)
                assert pub[t - 1] == pytest.approx(shares * unit, rel=1e-12)
                last, shares_last = t, shares
    changed = np.abs(np.diff(releases, axis=0)) > 0  # (T−1, d): which columns got a new release
    assert changed[:, ::2].any()  # the fast group published
    assert changed[:, ::2].sum() > 2 * changed[:, 1::2].sum()  # ... far more often than the flat one
    for t in range(1, length):  # a column changes only at a charged publication
        if changed[t - 1].any():
            assert pub[t] > 0


def test_partitioned_publishes_fast_columns_without_touching_slow_ones() -> None:
    """Kellaris's point: with one group (BD) every column gets fresh noise at a publication; with the
    even (changing) columns grouped apart, the odd (flat) columns keep their old release more often."""
    data = _two_speed_stream(90)
    grouped = execute(BDPartitioned(groups=2), data, epsilon=1.0, w=6, runs=20, seed=1).releases
    single = execute(BDPartitioned(groups=1), data, epsilon=1.0, w=6, runs=20, seed=1).releases
    fresh_grouped = (np.diff(grouped[:, :, 1::2], axis=1) != 0).mean()
    fresh_single = (np.diff(single[:, :, 1::2], axis=1) != 0).mean()
    assert fresh_grouped < fresh_single / 2


def test_column_groups_rank_by_rms_of_released_change() -> None:
    history = np.zeros((1, 5, 6))
    history[0, :, 4] = [0, 9, 0, 9, 0]  # most change
    history[0, :, 1] = [0, 1, 0, 1, 0]
    labels = column_groups(history, 3)
    assert labels.shape == (1, 6)
    assert labels[0, 4] == 2 and labels[0, 1] == 2  # the two changing columns share the top group
    assert np.bincount(labels[0]).tolist() == [2, 2, 2]
    np.testing.assert_array_equal(column_groups(np.zeros((2, 1, 6)), 3), [[0, 0, 1, 1, 2, 2]] * 2)
    with pytest.raises(InvalidArgument, match="count=7"):
        column_groups(history, 7)


def test_grouping_is_recomputed_only_from_the_releases(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run on stream A, then on a stream B with other true counts while the ledger hands back A's
    charged outputs: every regrouping sees the same history and returns the same labels, and that
    history is exactly the mechanism's own releases. Non-vacuous: the grouping does move in A."""
    calls: list[tuple[np.ndarray, np.ndarray]] = []
    original = partitioned.column_groups

    def spy(history: np.ndarray, count: int) -> np.ndarray:
        labels = original(history, count)
        calls.append((history.copy(), labels.copy()))
        return labels

    monkeypatch.setattr(partitioned, "column_groups", spy)
    a = _two_speed_stream(40)
    b = np.random.default_rng(0).poisson(5, size=a.shape).astype(float)
    outputs: list[Any] = []

    def run(data: np.ndarray, tap: Any) -> np.ndarray:
        ledger = WindowLedger(
            WEventParams(epsilon=1.0, w=4), runs=2, seed=1, sampler="numpy-laplace", keep_records=True
        )
        install_tap(ledger, tap)
        return BDPartitioned(groups=2).run(GuardedStream(data), ledger)

    def keep(result: Any) -> Any:
        outputs.append(np.copy(result))
        return result

    first = run(a, keep)
    first_calls, calls[:] = list(calls), []
    replay = iter(outputs)
    second = run(b, lambda result: next(replay))
    np.testing.assert_array_equal(first, second)
    assert len(first_calls) == len(calls) == 10  # the start, then t = 5, 9, ..., 37 (every w = 4)
    for (h1, l1), (h2, l2) in zip(first_calls, calls, strict=True):
        np.testing.assert_array_equal(h1, h2)
        np.testing.assert_array_equal(l1, l2)
    for k, (history, _) in enumerate(first_calls[1:], start=1):  # regrouping at t = 4k + 1 reads releases 4k−4..4k
        np.testing.assert_array_equal(history, first[:, max(0, 4 * k - 5) : 4 * k])
    assert any(not np.array_equal(first_calls[0][1], labels) for _, labels in first_calls[1:])


def test_partitioned_bad_input_names_argument_and_value() -> None:
    with pytest.raises(InvalidArgument, match="groups=0"):
        BDPartitioned(groups=0)
    with pytest.raises(InvalidArgument, match="period=-2"):
        BAPartitioned(period=-2)


def test_dissimilarity_groups_refuses_before_charging() -> None:
    """Bad labels or a paid empty group are refused and charge nothing."""
    ledger = WindowLedger(WEventParams(epsilon=1e9, w=2), runs=1, seed=1, sampler="numpy-laplace", keep_records=True)
    stream = GuardedStream(np.ones((3, 4)))
    secret = stream.secret(1)
    with pytest.raises(InvalidArgument, match="labels must lie"):
        ledger.dissimilarity_groups(secret, np.zeros((1, 4)), np.array([0, 0, 1, 2]), [0.1, 0.1])
    with pytest.raises(InvalidArgument, match="group 1 of run 0"):
        ledger.dissimilarity_groups(secret, np.zeros((1, 4)), np.array([0, 0, 0, 0]), [0.1, 0.1])
    assert ledger.records == ()
    out = ledger.dissimilarity_groups(secret, np.zeros((1, 4)), np.array([0, 0, 1, -1]), [1e9, 0.0])
    assert out.shape == (1, 2) and out[0, 0] == pytest.approx(1.0, abs=1e-6) and np.isnan(out[0, 1])
    assert [float(r.amounts[0]) for r in ledger.records] == [1e9]
