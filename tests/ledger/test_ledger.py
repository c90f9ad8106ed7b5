"""The w-event ledger against a brute-force exact oracle (Kellaris et al. 2014, Theorem 3)."""

from __future__ import annotations

import io
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from budgetcheck import (
    BudgetExceeded,
    GuardedStream,
    InvalidArgument,
    WEventParams,
    WindowLedger,
    audit_windows,
    load_lines,
)

amounts = st.one_of(
    st.sampled_from([0.0, 0.1, 0.2, 0.3, 1 / 3, 0.5, 1.0, 2.0**-1074]),
    st.floats(min_value=0.0, max_value=1.5),
)


class Oracle:
    """Exact per-run totals per timestamp; a spend is legal iff every window stays <= ε."""

    def __init__(self, epsilon: float, w: int, runs: int) -> None:
        self.epsilon, self.w, self.runs = Fraction(epsilon), w, runs
        self.totals: list[dict[int, Fraction]] = [{} for _ in range(runs)]

    def window(self, run: int, t: int) -> Fraction:
        return sum((v for k, v in self.totals[run].items() if t - self.w < k <= t), Fraction(0))

    def allows(self, t: int, spend: list[float]) -> bool:
        # Only windows containing t change; the heaviest of them is [t-w+1, t] (no future spends).
        return all(self.window(r, t) + Fraction(spend[r]) <= self.epsilon for r in range(self.runs))

    def apply(self, t: int, spend: list[float]) -> None:
        for r in range(self.runs):
            self.totals[r][t] = self.totals[r].get(t, Fraction(0)) + Fraction(spend[r])

    def remaining(self, run: int, t: int) -> Fraction:
        return self.epsilon - self.window(run, t)


@st.composite
def spend_sequences(draw: st.DrawFn) -> tuple[float, int, int, list[tuple[int, list[float]]]]:
    epsilon = draw(st.sampled_from([1.0, 0.1, 0.3, 1 / 3, 0.7, 2.0**-20]) | st.floats(1e-3, 5.0))
    w = draw(st.integers(1, 8))
    runs = draw(st.integers(1, 3))
    steps = []
    t = 1
    for _ in range(draw(st.integers(1, 30))):
        t += draw(st.sampled_from([0, 0, 1, 1, 1, 2, 5]))
        scale = draw(st.sampled_from([epsilon, epsilon / w, 1.0]))
        steps.append((t, [draw(amounts) * scale for _ in range(runs)]))
    return epsilon, w, runs, steps


@given(spend_sequences())
def test_ledger_accepts_exactly_what_the_oracle_accepts(
    case: tuple[float, int, int, list[tuple[int, list[float]]]],
) -> None:
    """Random spend sequences, scalar and batched: accept iff every window stays <= ε, exactly."""
    epsilon, w, runs, steps = case
    ledger = WindowLedger(WEventParams(epsilon, w), runs=runs, sampler="numpy-laplace", keep_records=True)
    oracle = Oracle(epsilon, w, runs)
    for t, spend in steps:
        expected = oracle.allows(t, spend)
        before = (ledger.records, ledger.t, ledger.window_sum(t))
        if expected:
            ledger.spend(t, spend, purpose="publication")
            oracle.apply(t, spend)
        else:
            with pytest.raises(BudgetExceeded):
                ledger.spend(t, spend, purpose="publication")
            assert (ledger.records, ledger.t, ledger.window_sum(t)) == before
        for r in range(runs):
            left = float(ledger.remaining(t)[r])
            exact = oracle.remaining(r, t)
            assert Fraction(left) <= exact < Fraction(math.nextafter(left, math.inf))
    report = audit_windows(ledger.records, epsilon=epsilon, w=w, runs=runs)
    assert report.ok


@st.composite
def long_sequences(draw: st.DrawFn) -> tuple[float, int, int, list[tuple[int, list[float], bool]]]:
    """Many small spends (the float pre-check commits them without exact sums) with some near ε and
    an occasional probe (remaining / window_sum, which catches the exact sums up)."""
    epsilon = draw(st.sampled_from([1.0, 0.1, 1 / 3, 2.0**-20]))
    w, runs = draw(st.integers(1, 6)), draw(st.integers(1, 3))
    small = st.floats(0.0, 1.0).map(lambda x: x * epsilon / (4 * w))
    near = st.sampled_from([epsilon / w, epsilon, epsilon / 2, 0.0]) | small
    steps, t = [], 1
    for _ in range(draw(st.integers(1, 80))):
        t += draw(st.sampled_from([0, 1, 1, 1, 3]))
        pick = near if draw(st.integers(0, 9)) == 0 else small
        same = draw(st.booleans())
        first = draw(pick)
        spend = [first] * runs if same else [draw(pick) for _ in range(runs)]
        steps.append((t, spend, draw(st.integers(0, 15)) == 0))
    return epsilon, w, runs, steps


@settings(max_examples=150, deadline=None)
@given(long_sequences())
def test_quick_commits_decide_as_the_oracle_and_catch_up_exactly(
    case: tuple[float, int, int, list[tuple[int, list[float], bool]]],
) -> None:
    """Long runs of quick (float pre-checked) commits, mixed with exact ones: every decision is the
    oracle's, and the exact window sums asked for at the probes and at the end are the oracle's."""
    epsilon, w, runs, steps = case
    ledger = WindowLedger(WEventParams(epsilon, w), runs=runs, sampler="numpy-laplace", keep_records=True)
    oracle = Oracle(epsilon, w, runs)
    for t, spend, probe in steps:
        if oracle.allows(t, spend):
            ledger.spend(t, spend, purpose="publication")
            oracle.apply(t, spend)
        else:
            with pytest.raises(BudgetExceeded):
                ledger.spend(t, spend, purpose="publication")
        if probe:
            assert [Fraction(u, 2**1127) for u in ledger.window_sum(t)] == [oracle.window(r, t) for r in range(runs)]
    last = steps[-1][0]
    assert [Fraction(u, 2**1127) for u in ledger.window_sum(last)] == [oracle.window(r, last) for r in range(runs)]
    assert audit_windows(ledger.records, epsilon=epsilon, w=w, runs=runs).ok


@given(spend_sequences(), st.integers(0, 2**31))
def test_spending_remaining_or_a_fraction_is_never_refused(
    case: tuple[float, int, int, list[tuple[int, list[float]]]], fraction_bits: int
) -> None:
    """remaining(t) is rounded down: spending it, or any fraction of it, always succeeds."""
    epsilon, w, runs, steps = case
    ledger = WindowLedger(WEventParams(epsilon, w), runs=runs, sampler="numpy-laplace", keep_records=True)
    fraction = (fraction_bits % 1000) / 1000
    for t, _ in steps:
        ledger.spend(t, ledger.remaining(t) * fraction, purpose="a")
        ledger.spend(t, ledger.remaining(t), purpose="b")
    assert audit_windows(ledger.records, epsilon=epsilon, w=w, runs=runs).ok


@pytest.mark.parametrize("epsilon", [1.0, 0.3, 1 / 3, 0.1 + 0.2, 7.0, 2.0**-1000])
@pytest.mark.parametrize("runs", [1, 100])
def test_one_ulp_over_is_refused_and_exact_fill_is_accepted(epsilon: float, runs: int) -> None:
    """After 0.1 and 0.2, the window takes exactly remaining(3) and refuses its successor."""
    ledger = WindowLedger(WEventParams(epsilon, 3), runs=runs, sampler="numpy-laplace", keep_records=True)
    ledger.spend(1, 0.1 * epsilon, purpose="a")
    ledger.spend(2, 0.2 * epsilon, purpose="b")
    left = ledger.remaining(3)
    exact = Fraction(epsilon) - Fraction(0.1 * epsilon) - Fraction(0.2 * epsilon)
    assert Fraction(float(left[0])) <= exact
    over = np.nextafter(left, np.inf)
    if Fraction(float(over[0])) > exact:
        with pytest.raises(BudgetExceeded, match=r"window \[1, 3\]"):
            ledger.spend(3, over, purpose="c")
    ledger.spend(3, left, purpose="c")
    assert len(ledger.records) == 3


def test_exact_numbers_are_charged_exactly_or_refused() -> None:
    """A Fraction a double equals is charged as that double (one ulp over still refused); a Fraction, an
    integer or a long double no double equals is refused before anything changes, never rounded."""
    ledger = WindowLedger(WEventParams(1.0, 3), runs=2, sampler="numpy-laplace", keep_records=True)
    ledger.spend(1, [Fraction(1, 4), Fraction(3, 4)], purpose="a")
    left = ledger.remaining(1)
    assert left.tolist() == [0.75, 0.25]
    for amount in (Fraction(1, 3), [Fraction(1, 3), 0.0], 2**53 + 1, np.array([2**53 + 1, 0]), np.longdouble(1) / 3):
        with pytest.raises(InvalidArgument, match=r"which no double equals \(the nearest is "):
            ledger.spend(1, amount, purpose="inexact")
    assert ledger.remaining(1).tolist() == left.tolist() and len(ledger.records) == 1
    with pytest.raises(BudgetExceeded):
        ledger.spend(1, [Fraction(math.nextafter(0.75, 1.0)), Fraction(0)], purpose="one ulp over")
    ledger.spend(1, [Fraction(3, 4), Fraction(1, 4)], purpose="exactly the rest")
    assert ledger.remaining(1).tolist() == [0.0, 0.0]


def test_classic_float_drift_is_not_refused() -> None:
    """Ten spends of share(1.0, 10) fit a window of 10 (0.1 * 10 > 1.0 in exact arithmetic)."""
    from budgetcheck import rounding

    ledger = WindowLedger(WEventParams(1.0, 10), sampler="numpy-laplace", keep_records=True)
    for t in range(1, 11):
        ledger.spend(t, rounding.share(1.0, 10), purpose="publication")
    assert ledger.remaining(10)[0] < 1e-15
    # Round-to-nearest 0.1 is above 1/10: the tenth spend overshoots by 5.55e-17 and is refused,
    # though the float sum of the window prints as 1.0.
    float_ledger = WindowLedger(WEventParams(1.0, 10), sampler="numpy-laplace", keep_records=True)
    for t in range(1, 10):
        float_ledger.spend(t, 0.1, purpose="publication")
    with pytest.raises(BudgetExceeded, match=r"window \[1, 10\] sum to 1\.0 > epsilon=1\.0 \(over by 5\.55e-17\)"):
        float_ledger.spend(10, 0.1, purpose="publication")


def test_refusal_message_names_window_sum_epsilon_and_remaining() -> None:
    ledger = WindowLedger(WEventParams(1.0, 5), runs=3, sampler="numpy-laplace", keep_records=True)
    ledger.spend(13, [0.5, 0.9, 0.1], purpose="publication")
    with pytest.raises(BudgetExceeded) as info:
        ledger.spend(17, 0.15, purpose="publication")
    message = str(info.value)
    assert "spend of 0.15 at t=17 (purpose 'publication', run 1) would make window [13, 17] sum to 1.05" in message
    assert "> epsilon=1.0" in message and "ledger.remaining(17) is 0.09999999999999998" in message
    assert (info.value.run, info.value.window, info.value.epsilon) == (1, (13, 17), 1.0)
    assert ledger.refusals == 1


def test_refused_release_draws_no_noise_and_releases_nothing() -> None:
    """A refused laplace leaves the generator untouched: later noise equals a fresh ledger's."""
    params = WEventParams(1.0, 2)
    stream = GuardedStream([[5.0], [6.0], [7.0]])
    refused = WindowLedger(params, seed=7, sampler="numpy-laplace", keep_records=True)
    fresh = WindowLedger(params, seed=7, sampler="numpy-laplace", keep_records=True)
    secrets = list(stream)
    refused.spend(1, 0.75, purpose="x")
    fresh.spend(1, 0.75, purpose="x")
    with pytest.raises(BudgetExceeded):
        refused.laplace(secrets[1], 0.5)
    got = refused.laplace(secrets[2], 0.5)
    expected = fresh_ledger_noise = fresh.laplace(GuardedStream([[5.0], [6.0], [7.0]]).secret(3), 0.5)
    np.testing.assert_array_equal(got, expected)
    assert fresh_ledger_noise.shape == (1, 1)


def test_batched_ledger_matches_independent_scalar_ledgers() -> None:
    """One ledger of R runs refuses exactly when one of R scalar ledgers would."""
    rng = np.random.default_rng(3)
    params = WEventParams(0.7, 4)
    batched = WindowLedger(params, runs=50, sampler="numpy-laplace", keep_records=True)
    scalars = [WindowLedger(params, sampler="numpy-laplace", keep_records=True) for _ in range(50)]
    for t in range(1, 40):
        amounts = rng.uniform(0, 0.2, size=50)
        amounts = np.minimum(amounts, batched.remaining(t))
        batched.spend(t, amounts, purpose="p")
        for r, ledger in enumerate(scalars):
            ledger.spend(t, float(amounts[r]), purpose="p")
        np.testing.assert_array_equal(batched.remaining(t), [float(s.remaining(t)[0]) for s in scalars])


def test_export_load_audit_round_trip_and_tamper_detection() -> None:
    ledger = WindowLedger(WEventParams(0.5, 3), runs=2, seed=1, sampler="numpy-laplace", keep_records=True)
    stream = GuardedStream([[1.0, 2.0]] * 6)
    ledger.bind(stream)
    for secret in stream:
        ledger.dissimilarity(secret, np.zeros((2, 2)), 0.05)
        ledger.laplace(secret, [0.1, 0.0])
    buffer = io.StringIO()
    ledger.export(buffer)
    header, records = load_lines(buffer.getvalue().splitlines())
    assert (header.epsilon, header.w, header.runs) == (0.5, 3, 2)
    assert [r.to_json() for r in records] == [r.to_json() for r in ledger.records]
    assert records[1].noise_scale is not None and records[1].noise_scale[1] == np.inf
    assert audit_windows(records, epsilon=0.5, w=3, runs=2).ok
    # A tighter ε, or a longer window, than the ledger kept is caught by the auditor.
    report = audit_windows(records, epsilon=0.4, w=3, runs=2)
    assert not report.ok and report.violations[0].describe(0.4).startswith("run 0: window [1, 3]")


def test_records_are_read_only() -> None:
    ledger = WindowLedger(WEventParams(1.0, 2), sampler="numpy-laplace", keep_records=True)
    ledger.spend(1, 0.5, purpose="p")
    record = ledger.records[0]
    with pytest.raises(ValueError, match="read-only"):
        record.amounts[0] = 0.0
    with pytest.raises(AttributeError):
        record.t = 3  # type: ignore[misc]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([1.0, 2.0, 3.0]),
            st.lists(st.sampled_from([0.0, 1e-3, 0.01, 1 / 30, 0.05]), min_size=2, max_size=2),
        ),
        min_size=1,
        max_size=30,
    )
)
def test_every_release_gets_the_noise_scale_of_its_own_budget_and_sensitivity(
    calls: list[tuple[float, list[float]]],
) -> None:
    """The ledger remembers the scales of budgets it saw (a mechanism's constant budgets); every
    record still holds sensitivity/ε rounded up for its own call, whatever came before it."""
    from budgetcheck import rounding

    ledger = WindowLedger(WEventParams(1e9, 1), runs=2, sampler="numpy-laplace", keep_records=True)
    stream = GuardedStream(np.ones((len(calls), 1)))
    ledger.bind(stream)
    for secret, (sensitivity, budgets) in zip(stream, calls, strict=True):
        ledger.laplace(secret, np.array(budgets), sensitivity=sensitivity)
    for record, (sensitivity, budgets) in zip(ledger.records, calls, strict=True):
        assert record.noise_scale is not None and record.sensitivity == sensitivity
        assert record.noise_scale.tobytes() == rounding.scale_up(sensitivity, np.array(budgets)).tobytes()


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a", "b"]), st.sampled_from([1.0, 2.0]), st.sampled_from(["same", "one", "edge", "sign"])
        ),
        min_size=1,
        max_size=12,
    )
)
def test_large_budget_arrays_repeated_bit_for_bit_share_one_copy_and_scale(calls: list[tuple[str, float, str]]) -> None:
    """Budgets beyond the memo's size are not keyed by their bytes; a spend whose budgets are bit for
    bit those of the last spend of its purpose, at the same sensitivity, shares that record's arrays.
    Every record holds its own call's budgets and sensitivity/ε rounded up, whatever came before:
    one budget changed (away from the probed entries, or at the last), or −0.0 for 0.0, is new."""
    from budgetcheck import rounding
    from budgetcheck.ledger.core import _SCALE_MEMO_SIZE

    runs = _SCALE_MEMO_SIZE + 3
    ledger = WindowLedger(WEventParams(1e9, 1), runs=runs, sampler="numpy-laplace", keep_records=True)
    stream = GuardedStream(np.ones((len(calls), 1)))
    ledger.bind(stream)
    base = np.linspace(0.01, 0.2, runs)
    base[0] = 0.0
    variants = {"same": base, "one": base.copy(), "edge": base.copy(), "sign": base.copy()}
    variants["one"][7] = 0.3
    variants["edge"][-1] = 0.3
    variants["sign"][0] = -0.0
    for secret, (purpose, sensitivity, variant) in zip(stream, calls, strict=True):
        ledger.laplace(secret, variants[variant], sensitivity=sensitivity, purpose=purpose)
    last: dict[str, tuple[float, str, object]] = {}
    for record, (purpose, sensitivity, variant) in zip(ledger.records, calls, strict=True):
        budgets = variants[variant]
        assert record.amounts.tobytes() == budgets.tobytes()
        assert record.noise_scale is not None
        assert record.noise_scale.tobytes() == rounding.scale_up(sensitivity, budgets).tobytes()
        before = last.get(purpose)
        shared = before is not None and before[:2] == (sensitivity, variant)
        # one copy kept: the records hold the same immutable bytes (each access hands out a copy of them)
        assert (before is not None and record[2][0] is before[2]) is shared
        assert not np.shares_memory(record.amounts, record.amounts)
        last[purpose] = (sensitivity, variant, record[2][0])
    assert ledger._scale_memo == {}


class LedgerMachine(RuleBasedStateMachine):
    """spend / remaining / refuse / export / audit in any order, against the oracle."""

    def __init__(self) -> None:
        super().__init__()
        self.ledger = WindowLedger(WEventParams(0.9, 4), runs=2, sampler="numpy-laplace", keep_records=True)
        self.oracle = Oracle(0.9, 4, 2)
        self.t = 1

    @rule(step=st.sampled_from([0, 1, 1, 3]))
    def advance(self, step: int) -> None:
        self.t += step

    @rule(a=amounts, b=amounts)
    def spend(self, a: float, b: float) -> None:
        spend = [a * 0.5, b * 0.5]
        if self.oracle.allows(self.t, spend):
            self.ledger.spend(self.t, spend, purpose="p")
            self.oracle.apply(self.t, spend)
        else:
            records = self.ledger.records
            with pytest.raises(BudgetExceeded):
                self.ledger.spend(self.t, spend, purpose="p")
            assert self.ledger.records == records

    @rule()
    def spend_remaining(self) -> None:
        left = self.ledger.remaining(self.t)
        self.ledger.spend(self.t, left, purpose="fill")
        self.oracle.apply(self.t, left.tolist())

    @precondition(lambda self: self.ledger.records)
    @rule()
    def export_and_audit(self) -> None:
        header, records = load_lines(list(self.ledger.jsonl()))
        assert audit_windows(records, epsilon=header.epsilon, w=header.w, runs=header.runs).ok

    @invariant()
    def remaining_is_the_floor(self) -> None:
        for r in range(2):
            left = Fraction(float(self.ledger.remaining(self.t)[r]))
            exact = self.oracle.remaining(r, self.t)
            assert left <= exact < left + Fraction(2.0**-1074) + exact * Fraction(2.0**-52)


TestLedgerMachine = LedgerMachine.TestCase
TestLedgerMachine.settings = settings(max_examples=50, stateful_step_count=30, deadline=None)


def test_histogram_release_is_charged_the_maximum_over_bins() -> None:
    """One person, one bin per timestamp: bins released at 0.1, 0.3, 0 cost 0.3 (accounting §2)."""
    stream = GuardedStream([[10.0, 20.0, 30.0]] * 4)
    ledger = WindowLedger(WEventParams(1.0, 3), runs=2, seed=3, sampler="numpy-laplace", keep_records=True)
    ledger.bind(stream)
    out = ledger.laplace_bins(stream.secret(1), [[0.1, 0.3, 0.0], [0.5, 0.0, 0.0]])
    assert out.shape == (2, 3)
    assert np.isnan(out[0, 2]) and np.isnan(out[1, 1:]).all() and np.isfinite(out[0, :2]).all()
    np.testing.assert_array_equal(ledger.records[0].amounts, [0.3, 0.5])
    assert ledger.records[0].noise_scale is not None and ledger.records[0].noise_scale.shape == (2, 3)
    # Sampling different bins at different timestamps still adds up per person: 0.3 + 0.3 + 0.5 > 1.
    ledger.laplace_bins(stream.secret(2), [0.0, 0.0, 0.3])
    with pytest.raises(BudgetExceeded, match=r"window \[1, 3\]"):
        ledger.laplace_bins(stream.secret(3), [[0.0, 0.5, 0.0], [0.0, 0.0, 0.2]])
    header, records = load_lines(list(ledger.jsonl()))
    assert records[0].noise_scale is not None and records[0].noise_scale[0, 2] == np.inf
    assert audit_windows(records, epsilon=1.0, w=3, runs=2).ok


def test_histogram_release_rejects_bad_budgets() -> None:
    from budgetcheck import InvalidArgument

    stream = GuardedStream([[1.0, 2.0]])
    ledger = WindowLedger(WEventParams(1.0, 3), runs=2, sampler="numpy-laplace", keep_records=True)
    with pytest.raises(InvalidArgument, match=r"epsilon has shape \(3,\); expected \(2, 2\) or \(2,\)"):
        ledger.laplace_bins(stream.secret(1), [0.1, 0.1, 0.1])
    with pytest.raises(InvalidArgument, match=r"epsilon\[1, 0\]=nan must be a finite number >= 0"):
        ledger.laplace_bins(stream.secret(1), [[0.1, 0.1], [np.nan, 0.1]])
    assert ledger.records == ()
