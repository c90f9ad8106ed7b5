"""A ledger of several ε (WindowLedger.with_epsilons): run r is held to its own ε_r, exactly, and
every built-in mechanism spends and performs in each block as it does alone under that ε."""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budgetcheck import (
    BudgetExceeded,
    GuardedStream,
    InvalidArgument,
    WEventParams,
    WindowLedger,
    audit_windows_per_epsilon,
    deviation,
    open_ledger,
    rounding,
)
from budgetcheck.bench.config import builtin_w_event
from budgetcheck.mechanism.loading import load_mechanism
from budgetcheck.ops import FLOAT

budgets = st.sampled_from([1.0, 0.1, 0.3, 1 / 3, 0.7, 2.0**-20]) | st.floats(1e-3, 5.0)


class PerRunOracle:
    """Exact per-run totals per timestamp; a spend is legal iff every run's windows stay <= its ε."""

    def __init__(self, epsilons: list[float], w: int) -> None:
        self.epsilons, self.w = [Fraction(e) for e in epsilons], w
        self.totals: list[dict[int, Fraction]] = [{} for _ in epsilons]

    def window(self, run: int, t: int) -> Fraction:
        return sum((v for k, v in self.totals[run].items() if t - self.w < k <= t), Fraction(0))

    def allows(self, t: int, spend: list[float]) -> bool:
        return all(self.window(r, t) + Fraction(s) <= e for r, (s, e) in enumerate(zip(spend, self.epsilons)))

    def apply(self, t: int, spend: list[float]) -> None:
        for r, s in enumerate(spend):
            self.totals[r][t] = self.totals[r].get(t, Fraction(0)) + Fraction(s)


@st.composite
def per_run_sequences(draw: st.DrawFn) -> tuple[list[float], int, list[tuple[int, list[float]]]]:
    runs = draw(st.integers(2, 4))
    epsilons = [draw(budgets) for _ in range(runs)]
    w = draw(st.integers(1, 6))
    steps, t = [], 1
    for _ in range(draw(st.integers(1, 40))):
        t += draw(st.sampled_from([0, 1, 1, 1, 3]))
        pick = draw(st.sampled_from(["small", "near", "each"]))
        if pick == "small":  # well inside every window: the float pre-check commits these
            spend = [draw(st.floats(0.0, 1.0)) * e / (4 * w) for e in epsilons]
        elif pick == "near":  # one amount for every run: over for the smaller budgets
            spend = [draw(st.sampled_from(epsilons)) * draw(st.sampled_from([1.0, 0.5, 1 / w]))] * runs
        else:
            spend = [draw(st.floats(0.0, 1.5)) * e for e in epsilons]
        steps.append((t, spend))
    return epsilons, w, steps


@settings(max_examples=150, deadline=None)
@given(per_run_sequences())
def test_each_run_is_held_to_its_own_epsilon_exactly(
    case: tuple[list[float], int, list[tuple[int, list[float]]]],
) -> None:
    """Accept iff every run's windows stay <= its ε (brute force in exact rationals); a refusal
    changes nothing; remaining(t) is each run's exact remainder rounded down; the exact window sums
    are the oracle's; each run's records pass the audit under its own ε."""
    epsilons, w, steps = case
    ledger = WindowLedger.with_epsilons(epsilons, w, sampler="numpy-laplace", keep_records=True)
    oracle = PerRunOracle(epsilons, w)
    for t, spend in steps:
        if oracle.allows(t, spend):
            ledger.spend(t, spend, purpose="publication")
            oracle.apply(t, spend)
        else:
            before = (ledger.records, ledger.t, ledger.window_sum(t))
            with pytest.raises(BudgetExceeded):
                ledger.spend(t, spend, purpose="publication")
            assert (ledger.records, ledger.t, ledger.window_sum(t)) == before
        left = ledger.remaining(t)
        for r, e in enumerate(oracle.epsilons):
            exact = e - oracle.window(r, t)
            assert Fraction(float(left[r])) <= exact < Fraction(math.nextafter(float(left[r]), math.inf))
    last = steps[-1][0]
    assert [Fraction(u, 2**1127) for u in ledger.window_sum(last)] == [
        oracle.window(r, last) for r in range(len(epsilons))
    ]
    assert all(report.ok for report in audit_windows_per_epsilon(ledger.records, epsilons=epsilons, w=w).values())


def test_one_ulp_over_its_own_epsilon_is_refused_and_named() -> None:
    ledger = WindowLedger.with_epsilons([0.3, 1.0], 2, sampler="numpy-laplace", keep_records=True)
    ledger.spend(1, [0.3, 1.0], purpose="fill")  # each run's window exactly full
    assert ledger.remaining(2).tolist() == [0.0, 0.0]
    with pytest.raises(BudgetExceeded, match=r"run 0.*epsilon=0\.3"):
        ledger.spend(1, [2.0**-1074, 0.0], purpose="over")
    ledger.spend(3, [0.3, 0.0], purpose="next window")
    with pytest.raises(BudgetExceeded, match=r"run 1.*epsilon=1\.0"):
        ledger.spend(3, [0.0, math.nextafter(1.0, 2.0)], purpose="over")
    assert len(ledger.records) == 2


def test_what_a_ledger_of_several_epsilon_says_about_itself(tmp_path: Path) -> None:
    ledger = WindowLedger.with_epsilons([0.5, 0.5, 1.0], 4, seed=3, sampler="numpy-laplace", keep_records=True)
    assert ledger.runs == 3 and ledger.w == 4
    assert isinstance(ledger.epsilon, np.ndarray) and ledger.epsilon.tolist() == [0.5, 0.5, 1.0]
    with pytest.raises(ValueError):
        ledger.epsilon[0] = 2.0  # read-only
    with pytest.raises(InvalidArgument, match=r"params: .*\[0\.5, 1\.0\].*ledger\.epsilon"):
        ledger.params
    with pytest.raises(InvalidArgument, match="a ledger file or dump holds one epsilon"):
        ledger.header()  # no stored format
    with pytest.raises(InvalidArgument, match="a ledger file or dump holds one epsilon"):
        open_ledger(tmp_path / "several.db", ledger)
    assert not (tmp_path / "several.db").exists()
    assert "epsilon=[0.5, 1.0]" in repr(ledger)
    alike = WindowLedger.with_epsilons(
        [0.5, 0.5], 4, sampler="numpy-laplace", keep_records=True
    )  # one ε: an ordinary ledger
    assert alike.epsilon == 0.5 and alike.params == WEventParams(0.5, 4)


@pytest.mark.parametrize(
    ("epsilons", "message"),
    [
        ([], r"epsilons=\[\] must be a non-empty 1-d"),
        ([[0.1, 0.2]], r"must be a non-empty 1-d"),
        ([0.1, float("nan")], r"epsilons\[1\]=nan"),
        ([0.1, -1.0], r"epsilons\[1\]=-1\.0"),
        ([0.1, 0.0], r"epsilons\[1\]=0\.0"),
        ([True, 0.2], r"epsilons\[0\]=True"),
        (["0.1"], r"epsilons\[0\]='0\.1'"),
    ],
)
def test_bad_per_run_budgets_are_refused_by_name(epsilons: object, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        WindowLedger.with_epsilons(epsilons, 3, sampler="numpy-laplace", keep_records=True)  # type: ignore[arg-type]
    as_floats = np.array(epsilons, dtype=object)
    if (
        as_floats.ndim == 1 and as_floats.size and all(type(v) is float for v in as_floats)
    ):  # a float array: one vectorised check
        with pytest.raises(InvalidArgument, match=message):
            WindowLedger.with_epsilons(
                np.array(epsilons, dtype=np.float64), 3, sampler="numpy-laplace", keep_records=True
            )
    with pytest.raises(InvalidArgument, match="w=0"):
        WindowLedger.with_epsilons([0.1], 0, sampler="numpy-laplace", keep_records=True)


@given(st.lists(budgets, min_size=1, max_size=6), st.integers(1, 400))
def test_a_share_of_per_run_budgets_is_each_runs_share(epsilons: list[float], parts: int) -> None:
    totals = np.array(epsilons)
    totals.setflags(write=False)  # as a ledger's ε: its shares are remembered
    for _ in range(2):
        shares = FLOAT.share(totals, parts)
        assert shares.tolist() == [rounding.share(e, parts) for e in epsilons]


def test_a_share_of_a_read_only_view_of_a_writeable_array_is_not_remembered() -> None:
    """Only an array nothing can change is a cache key: a read-only view of a writeable array can
    change under it, so its shares are computed afresh."""
    base = np.array([0.5, 1.0])
    view = base[:]
    view.setflags(write=False)
    assert FLOAT.share(view, 4).tolist() == [rounding.share(0.5, 4), rounding.share(1.0, 4)]
    base[:] = [2.0, 3.0]
    assert FLOAT.share(view, 4).tolist() == [rounding.share(2.0, 4), rounding.share(3.0, 4)]


def test_above_threshold_charges_each_run_its_own_epsilon() -> None:
    data = np.arange(1.0, 41.0).reshape(20, 2)
    ledger = WindowLedger.with_epsilons([0.2, 0.2, 2.0], 5, seed=1, sampler="numpy-laplace", keep_records=True)
    stream = GuardedStream(data)
    ledger.bind(stream)
    test = ledger.above_threshold(epsilon=np.array([0.02, 0.02, 0.2]), sensitivity=2.0, cells=(2,), max_footprint=5)
    for secret in stream:
        test.query(secret, deviation, thresholds=15.0)
    assert all(record.amounts.tolist() == [0.02, 0.02, 0.2] for record in ledger.records)
    with pytest.raises(InvalidArgument, match=r"array of 3 of them"):
        ledger.above_threshold(epsilon=np.array([0.1, 0.1]), sensitivity=1.0)
    with pytest.raises(InvalidArgument, match=r"epsilon=array\(\[ 0\.1, -1\. ,  0\.1\]\)"):
        ledger.above_threshold(epsilon=np.array([0.1, -1.0, 0.1]), sensitivity=1.0)


RUNS = 120


def _mean_errors(name: str, data: np.ndarray, ledger: WindowLedger) -> np.ndarray:
    stream = GuardedStream(data)
    ledger.bind(stream)
    releases = load_mechanism(name).run(stream, ledger)
    return np.asarray(np.abs(releases - data[None]).mean(axis=(1, 2)))


@pytest.mark.parametrize("name", builtin_w_event())
def test_every_builtin_mechanism_spends_and_errs_per_block_as_it_does_alone(name: str) -> None:
    """Blocks of ε = 0.1 and ε = 1 in one ledger: each run's records pass the audit under its own ε,
    and each block's mean MAE is within 12% of the same mechanism run alone under that ε (a
    mechanism that read one ε for every run would be off by several times)."""
    rng = np.random.default_rng(5)
    data = np.abs(100 + np.cumsum(rng.normal(0, 5, size=(120, 2)), axis=0)).round()
    w, epsilons = 10, (0.1, 1.0)
    ledger = WindowLedger.with_epsilons(
        np.repeat(epsilons, RUNS), w, seed=1, sampler="numpy-laplace", keep_records=True
    )
    stacked = _mean_errors(name, data, ledger)
    reports = audit_windows_per_epsilon(ledger.records, epsilons=np.repeat(epsilons, RUNS).tolist(), w=w)
    assert sorted(reports) == list(epsilons) and all(r.ok and r.runs == RUNS for r in reports.values())
    for k, epsilon in enumerate(epsilons):
        block = slice(k * RUNS, (k + 1) * RUNS)
        alone = _mean_errors(
            name,
            data,
            WindowLedger(WEventParams(epsilon, w), runs=RUNS, seed=2 + k, sampler="numpy-laplace", keep_records=True),
        )
        assert stacked[block].mean() == pytest.approx(alone.mean(), rel=0.12), (name, epsilon)
