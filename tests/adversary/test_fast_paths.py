"""Attacks from outside on the accounting's fast paths, against an exact ``Fraction`` oracle.

Targets (w-event privacy, Kellaris et al. 2014, Theorem 3: every window of w timestamps spends <= ε):

- the many-run float pre-check (``ledger/windows.py``: a double-double (hi, lo) kept >= the exact
  window sum; a spend it finds clearly within ε commits without exact sums);
- the one-run window sums as Python integers (``ledger/scalar_windows.py``) and the one-run charge
  that builds no record (``_charge_unrecorded``), with and without ``keep_records``;
- ``laplace_series``' shared-totals check in Python integers;
- their interaction with pan-private exposures (``held_laplace``) and footprint measurements.

The oracle holds every committed amount as the exact rational of its double. Spends are chosen at
the edge from the oracle's own arithmetic (never from ``remaining``, which would rebuild the pre-check
from the exact sums at every step): exactly what is left, one or a few ulps over and under, ε/3,
ε/w, subnormals, 1e-300, a fraction of what is left, at ε from subnormal to 1e300, w from 1 to 10^4,
timestamps that jump by w, w + 1 or 2^40 up to 2^62.

Regression tests for what these attacks found (each fixed in its own ``ledger:`` commit):
``laplace_series`` and ``measure_footprint`` did not count pan-private exposures (and exposures were
dropped before a footprint's windows could reach them); ``local_report_groups`` kept a view of the
caller's budget array, so reusing the buffer rewrote what was charged (window [1, 2] spent 1.25 > 1);
a refusal past the largest double raised OverflowError; the pre-check warned (RuntimeWarning) on a
run holding the largest double; a footprint built a dense list of 2w timestamps (MemoryError at
w = 2^40).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budgetcheck import (
    BudgetExceeded,
    GuardedStream,
    PersonalizedLedger,
    PersonalizedStream,
    RequirementSet,
    WindowLedger,
)

UNIT = 2**1127  # the ledger's exact unit: window sums are integers in units of 2**-1127
TINY = 2.0**-1074
BIG = float(np.finfo(np.float64).max)
MAX_T = 2**62


def _units(amount: float) -> int:
    """The exact value of a double in units of 2**-1127 (an integer)."""
    exact = Fraction(amount) * UNIT
    assert exact.denominator == 1
    return exact.numerator


def _floor_double(value: Fraction) -> float:
    """The largest double <= value (0 <= value within the double range)."""
    if value <= 0:
        return 0.0
    if value >= Fraction(BIG):
        return BIG
    near = float(value)
    return math.nextafter(near, -math.inf) if Fraction(near) > value else near


def _ulps(value: float, k: int) -> float:
    """``value`` moved k ulps (up if k > 0), clamped to [0, the largest double]."""
    for _ in range(abs(k)):
        value = math.nextafter(value, math.inf if k > 0 else 0.0)
    return min(max(value, 0.0), BIG)


class Oracle:
    """Exact w-event accounting, run by run: Σ over (t − w, t] of the committed amounts <= ε_r.

    Under a single unannounced intrusion (``held``) the window's largest exposure counts too."""

    def __init__(self, epsilons: list[float], w: int) -> None:
        self.eps = [Fraction(e) for e in epsilons]
        self.w = w
        # exact amounts in units of 2**-1127 (every double is a whole number of them): sums stay cheap
        self.spent: list[dict[int, int]] = [{} for _ in epsilons]
        self.exposed: list[dict[int, int]] = [{} for _ in epsilons]
        self.latest = 0

    def _window_units(self, r: int, t: int) -> int:
        return sum(v for s, v in self.spent[r].items() if t - self.w < s <= t)

    def _exposure_units(self, r: int, t: int) -> int:
        return max((v for s, v in self.exposed[r].items() if t - self.w < s <= t), default=0)

    def window(self, r: int, t: int) -> Fraction:
        return Fraction(self._window_units(r, t), UNIT)

    def exposure(self, r: int, t: int) -> Fraction:
        return Fraction(self._exposure_units(r, t), UNIT)

    def left(self, r: int, t: int) -> Fraction:
        return max(self.eps[r] - self.window(r, t) - self.exposure(r, t), Fraction(0))

    def fits(self, t: int, amounts: list[float]) -> bool:
        return all(
            self._window_units(r, t) + _units(a) + self._exposure_units(r, t) <= self.eps[r] * UNIT
            for r, a in enumerate(amounts)
        )

    def series_fits(self, stamps: list[int], rows: list[list[float]]) -> bool:
        """A series is allowed iff charging its rows one by one is (then commits nothing)."""
        saved = [dict(d) for d in self.spent], [dict(d) for d in self.exposed], self.latest
        ok = True
        for t, row in zip(stamps, rows, strict=True):
            if not self.fits(t, row):
                ok = False
                break
            self.commit(t, row)
        self.spent, self.exposed, self.latest = saved
        return ok

    def commit(self, t: int, amounts: list[float], *, exposure: list[float] | None = None) -> None:
        for r, a in enumerate(amounts):
            if a:
                self.spent[r][t] = self.spent[r].get(t, 0) + _units(a)
            if exposure is not None and exposure[r]:
                self.exposed[r][t] = self.exposed[r].get(t, 0) + _units(exposure[r])
        self.latest = max(self.latest, t)
        for table in (*self.spent, *self.exposed):  # what no later window can reach (2w: footprints reach back)
            for s in [s for s in table if s <= t - 2 * self.w]:
                del table[s]

    def check_windows(self, ends: Iterable[int]) -> None:
        """Every window ending at one of ``ends`` is within ε_r (with its largest exposure)."""
        for end in ends:
            for r in range(len(self.eps)):
                assert self.window(r, end) + self.exposure(r, end) <= self.eps[r], f"run {r}, window ending {end}"

    def check_every_window(self) -> None:
        """Every window ending at a kept timestamp (the windows that can hold the most) is within ε_r."""
        self.check_windows(sorted({s for table in (*self.spent, *self.exposed) for s in table}))


def _amount(kind: str, k: int, frac: float, left: Fraction, epsilon: float, w: int) -> float:
    base = _floor_double(left)
    if kind == "left":
        return base
    if kind == "over":
        return _ulps(base, k)
    if kind == "under":
        return _ulps(base, -k)
    if kind == "third":
        return epsilon / 3
    if kind == "share":
        return epsilon / w  # rounded to nearest: may be a hair above ε/w
    if kind == "subnormal":
        return TINY * k
    if kind == "tiny":
        return 1e-300
    if kind == "fraction":
        return min(float(left * Fraction(frac)), BIG)
    if kind == "epsilon":
        return epsilon
    return 0.0


KINDS = ["left", "over", "under", "third", "share", "subnormal", "tiny", "fraction", "epsilon", "zero"]
EPSILONS = [1.0, 0.1, 1 / 3, 0.7, 1e-300, 1e300, 3 * TINY, 2.0**-1060, BIG, 2.0**-20]
WIDTHS = [1, 2, 3, 7, 128, 10**4]


@st.composite
def steps(draw: st.DrawFn, w: int, runs: int) -> list[tuple[int, list[tuple[str, int, float]], bool]]:
    gaps = st.sampled_from([0, 0, 1, 1, 1, 2, w - 1 if w > 1 else 1, w, w + 1, 2**40])
    kind = st.tuples(st.sampled_from(KINDS), st.integers(1, 3), st.floats(0.0, 1.0))
    return [
        (draw(gaps), [draw(kind) for _ in range(runs)], draw(st.integers(0, 9)) == 0)
        for _ in range(draw(st.integers(1, 40)))
    ]


def _ledger(layout: str, epsilons: list[float], w: int) -> WindowLedger:
    if layout == "one lean":
        return WindowLedger(epsilon=epsilons[0], w=w, sampler="numpy-laplace")
    if layout == "one kept":
        return WindowLedger(epsilon=epsilons[0], w=w, sampler="numpy-laplace", keep_records=True)
    if layout == "one of several eps":
        return WindowLedger.with_epsilons([epsilons[0]], w, sampler="numpy-laplace")
    if layout == "per-run eps":
        return WindowLedger.with_epsilons(epsilons, w, sampler="numpy-laplace")
    return WindowLedger(epsilon=epsilons[0], w=w, runs=len(epsilons), sampler="numpy-laplace")


def _sums(ledger: WindowLedger, t: int) -> tuple[tuple[int, ...], list[float]]:
    return ledger.window_sum(t), ledger.remaining(t).tolist()


def _exact_state(ledger: WindowLedger, oracle: Oracle, t: int) -> None:
    """window_sum(t) is the oracle's exact sum; remaining(t) the largest double <= what is left."""
    got = ledger.window_sum(t)
    assert [Fraction(units, UNIT) for units in got] == [oracle.window(r, t) for r in range(len(got))]
    assert ledger.remaining(t).tolist() == [_floor_double(oracle.left(r, t)) for r in range(len(got))]


def _refused(call: object) -> bool:
    try:
        call()  # type: ignore[operator]
    except BudgetExceeded:
        return True
    return False


LAYOUTS = {  # layout -> how many runs, whether every run spends alike
    "one lean": (1, True),
    "one kept": (1, True),
    "one of several eps": (1, True),
    "two alike": (2, True),
    "three differ": (3, False),
    "per-run eps": (3, False),
}


@settings(max_examples=120, deadline=None)
@given(
    layout=st.sampled_from(sorted(LAYOUTS)),
    epsilon=st.sampled_from(EPSILONS),
    others=st.lists(st.sampled_from(EPSILONS), min_size=2, max_size=2),
    w=st.sampled_from(WIDTHS),
    data=st.data(),
)
def test_every_spend_decision_is_the_exact_oracles(
    layout: str, epsilon: float, others: list[float], w: int, data: st.DataObject
) -> None:
    """Each spend is accepted iff the oracle's exact window sum with it is <= ε in every run; a refusal
    (one run over is enough) changes no sum, no ``remaining`` and no record; at the end the exact sums
    and ``remaining`` are the oracle's, ``remaining`` is accepted and one ulp more is refused."""
    runs, alike = LAYOUTS[layout]
    epsilons = [epsilon, *others] if layout == "per-run eps" else [epsilon] * runs
    ledger = _ledger(layout, epsilons, w)
    oracle = Oracle(epsilons, w)
    t = 1
    for gap, kinds, probe in data.draw(steps(w, 1 if alike else runs)):
        t = min(t + gap, MAX_T)
        amounts = [
            _amount(kind, k, frac, oracle.left(r, t), epsilons[r], w)
            for r, (kind, k, frac) in enumerate(kinds * runs if alike else kinds)
        ]
        if alike:
            amounts = [amounts[0]] * runs
        argument: float | np.ndarray = amounts[0] if alike else np.array(amounts)
        expected = oracle.fits(t, amounts)
        before = _sums(ledger, t) if probe else None  # reads rebuild the pre-check: only now and then
        records = len(ledger.records) if layout == "one kept" else 0
        refused = _refused(lambda: ledger.spend(t, argument, purpose="edge"))
        assert refused != expected, f"t={t}: {amounts} with {[oracle.left(r, t) for r in range(runs)]} left"
        if refused:
            if before is not None:
                assert _sums(ledger, t) == before
            if layout == "one kept":
                assert len(ledger.records) == records
        else:
            oracle.commit(t, amounts)
        oracle.check_windows([t])  # the only window an accepted spend at t changes
    oracle.check_every_window()
    _exact_state(ledger, oracle, t)
    rest = ledger.remaining(t)
    over = np.array([_ulps(x, 1) for x in rest.tolist()])
    if (over > rest).any() and not oracle.fits(t, over.tolist()):
        assert _refused(lambda: ledger.spend(t, over, purpose="one ulp over"))
    ledger.spend(t, rest, purpose="what is left")
    oracle.commit(t, rest.tolist())
    _exact_state(ledger, oracle, t)
    assert ledger.remaining(t).tolist() == [_floor_double(oracle.left(r, t)) for r in range(runs)]


@settings(max_examples=60, deadline=None)
@given(epsilon=st.sampled_from(EPSILONS), w=st.sampled_from(WIDTHS), data=st.data())
def test_one_run_a_ledger_of_one_eps_and_two_or_three_alike_runs_decide_alike(
    epsilon: float, w: int, data: st.DataObject
) -> None:
    """The one-run integer path (lean and keeping records), a one-run ledger built by ``with_epsilons``,
    two alike runs and three runs of which two spend alike and one spends nothing (the pre-check and
    the limbs) make the same decision at every spend, the oracle's, and end with the same exact sums."""
    ledgers = {
        "lean": WindowLedger(epsilon=epsilon, w=w, sampler="numpy-laplace"),
        "kept": WindowLedger(epsilon=epsilon, w=w, sampler="numpy-laplace", keep_records=True),
        "with_epsilons": WindowLedger.with_epsilons([epsilon], w, sampler="numpy-laplace"),
        "two": WindowLedger(epsilon=epsilon, w=w, runs=2, sampler="numpy-laplace"),
        "three": WindowLedger(epsilon=epsilon, w=w, runs=3, sampler="numpy-laplace"),
    }
    oracle = Oracle([epsilon], w)
    t = 1
    for gap, ((kind, k, frac),), _ in data.draw(steps(w, 1)):
        t = min(t + gap, MAX_T)
        amount = _amount(kind, k, frac, oracle.left(0, t), epsilon, w)
        expected = oracle.fits(t, [amount])
        for name, ledger in ledgers.items():
            spent = np.array([amount, 0.0, amount]) if name == "three" else amount
            assert _refused(lambda: ledger.spend(t, spent, purpose="alike")) != expected, name
        if expected:
            oracle.commit(t, [amount])
    exact = Fraction(oracle.window(0, t) * UNIT)
    assert exact.denominator == 1
    for name, ledger in ledgers.items():
        sums = ledger.window_sum(t)
        assert sums[0] == exact and sums[-1] == exact, name
        assert ledger.remaining(t)[0] == _floor_double(oracle.left(0, t)), name


@pytest.mark.parametrize("runs", [1, 2, 3])
@pytest.mark.parametrize(("epsilon", "w"), [(1.0, 128), (0.1, 3), (1 / 3, 10**4), (1e300, 1), (7.0, 2)])
def test_thirds_fill_a_window_to_the_last_ulp(runs: int, epsilon: float, w: int) -> None:
    """ε/3 three times (not ε: rounding), then exactly what is left; one smallest subnormal more is
    refused in every run, spent one timestamp at a time and three at one timestamp."""
    for stride in (1, 0):
        ledger = WindowLedger(epsilon=epsilon, w=w, runs=runs, sampler="numpy-laplace")
        oracle = Oracle([epsilon] * runs, w)
        t = 1
        for _ in range(3):  # ε/3 is rounded to nearest: three of them may be over ε (7/3)
            expected = oracle.fits(t, [epsilon / 3] * runs)
            assert _refused(lambda: ledger.spend(t, epsilon / 3, purpose="third")) != expected
            if expected:
                oracle.commit(t, [epsilon / 3] * runs)
            t += stride if w > 3 else 0
        left = _floor_double(oracle.left(0, t))
        assert (oracle.left(0, t) > 0) == (left > 0)
        assert _refused(lambda: ledger.spend(t, _ulps(left, 1), purpose="over"))
        ledger.spend(t, left, purpose="rest")
        oracle.commit(t, [left] * runs)
        expected_tiny = oracle.fits(t, [TINY] * runs)
        assert _refused(lambda: ledger.spend(t, TINY, purpose="tiny")) != expected_tiny
        _exact_state(ledger, oracle, t)


@pytest.mark.parametrize("runs", [1, 2])
def test_four_thousand_subnormals_fill_a_subnormal_epsilon_exactly(runs: int) -> None:
    """ε = 4096 · 2**-1074: 4096 spends of the smallest subnormal at w = 10^4 (spread over timestamps,
    several per timestamp) fill it exactly; one more is refused, and so is one more 1e-300 at t."""
    epsilon = 4096 * TINY
    ledger = WindowLedger(epsilon=epsilon, w=10**4, runs=runs, sampler="numpy-laplace")
    for i in range(4096):
        ledger.spend(1 + i // 3, TINY, purpose="subnormal")
    t = 1 + 4095 // 3
    assert ledger.window_sum(t) == (4096 * (UNIT >> 1074),) * runs
    assert ledger.remaining(t).tolist() == [0.0] * runs
    assert _refused(lambda: ledger.spend(t, TINY, purpose="one more"))
    assert _refused(lambda: ledger.spend(t + 9999, 1e-300, purpose="one more"))
    ledger.spend(t + 10**4, epsilon, purpose="the window has moved on")


@pytest.mark.parametrize("runs", [1, 2, 3])
def test_far_timestamps_up_to_two_to_the_62(runs: int) -> None:
    """Timestamps 1, 2^61, 2^62 − 1, 2^62 at w = 10^4 and w = 2^40: what a window holds is decided by
    the timestamps, not their count."""
    for w in (10**4, 2**40):
        ledger = WindowLedger(epsilon=1.0, w=w, runs=runs, sampler="numpy-laplace")
        oracle = Oracle([1.0] * runs, w)
        for t, amount in ((1, 0.75), (2**61, 0.75), (MAX_T - 1, 0.5), (MAX_T, 0.5), (MAX_T, TINY)):
            expected = oracle.fits(t, [amount] * runs)
            assert _refused(lambda: ledger.spend(t, amount, purpose="far")) != expected
            if expected:
                oracle.commit(t, [amount] * runs)
        _exact_state(ledger, oracle, MAX_T)
        assert ledger.remaining(MAX_T).tolist() == [0.0] * runs


@settings(max_examples=60, deadline=None)
@given(
    runs=st.sampled_from([1, 2, 3]),
    epsilon=st.sampled_from([1.0, 0.1, 1 / 3, 1e-300]),
    w=st.sampled_from([1, 2, 5, 128]),
    data=st.data(),
)
def test_a_refused_spend_or_laplace_leaves_no_trace(runs: int, epsilon: float, w: int, data: st.DataObject) -> None:
    """A twin ledger never sees the refused calls: after every step both have the same sums,
    ``remaining``, records, refusals counted apart, and the next release is the same draw (no noise
    was drawn before a refusal). Refused calls: one run over (the others well within), one ulp over."""
    stream, twin_stream = (GuardedStream(np.arange(600, dtype=float).reshape(200, 3)) for _ in range(2))
    attacked, twin = (
        WindowLedger(epsilon=epsilon, w=w, runs=runs, seed=3, sampler="numpy-laplace", keep_records=True)
        for _ in range(2)
    )
    attacked.bind(stream)
    twin.bind(twin_stream)
    oracle = Oracle([epsilon] * runs, w)
    t = 1
    for _ in range(data.draw(st.integers(1, 25))):
        t += data.draw(st.sampled_from([0, 1, 1, 2, w]))
        if t > 200:
            break
        left = [_floor_double(oracle.left(r, t)) for r in range(runs)]
        victim = data.draw(st.integers(0, runs - 1))
        over = [x / 2 for x in left]
        over[victim] = _ulps(left[victim], data.draw(st.integers(1, 2)))
        assert not oracle.fits(t, over)
        laplace = data.draw(st.booleans())
        secret, twin_secret = stream.secret(t), twin_stream.secret(t)
        if laplace:
            assert _refused(lambda: attacked.laplace(secret, np.array(over)))
        else:
            assert _refused(lambda: attacked.spend(t, np.array(over), purpose="over"))
        share = [x * data.draw(st.sampled_from([0.0, 0.5, 1.0])) for x in left]
        if laplace:
            np.testing.assert_array_equal(
                attacked.laplace(secret, np.array(share)), twin.laplace(twin_secret, np.array(share))
            )
        else:
            attacked.spend(t, np.array(share), purpose="within")
            twin.spend(t, np.array(share), purpose="within")
        oracle.commit(t, share)
        assert _sums(attacked, t) == _sums(twin, t)
        assert [(r.t, r.purpose, r.amounts.tobytes()) for r in attacked.records] == [
            (r.t, r.purpose, r.amounts.tobytes()) for r in twin.records
        ]
    _exact_state(attacked, oracle, t)


@settings(max_examples=50, deadline=None)
@given(
    runs=st.sampled_from([1, 2, 3]),
    epsilon=st.sampled_from([1.0, 0.1, 1 / 3, 1e300]),
    second=st.sampled_from([None, 1.0, 0.1, 2.0**-1060]),
    w=st.sampled_from([1, 3, 8]),
    data=st.data(),
)
def test_laplace_series_is_refused_as_a_whole_exactly_when_a_step_would_be(
    runs: int, epsilon: float, second: float | None, w: int, data: st.DataObject
) -> None:
    """``laplace_series`` (Python-integer checks per group of runs of one ε when they spend alike, spend
    by spend otherwise; ``second``: the last run held to another ε, ``with_epsilons``): allowed iff
    charging its rows in turn is, by the oracle; a refusal changes nothing."""
    stream = GuardedStream(np.ones((400, 2)))
    epsilons = [epsilon] * runs if second is None or runs == 1 else [epsilon] * (runs - 1) + [second]
    if len(set(epsilons)) > 1:
        ledger = WindowLedger.with_epsilons(epsilons, w, sampler="numpy-laplace", keep_records=True)
    else:
        ledger = WindowLedger(epsilon=epsilon, w=w, runs=runs, sampler="numpy-laplace", keep_records=True)
    ledger.bind(stream)
    oracle = Oracle(epsilons, w)
    t = 0
    for _ in range(data.draw(st.integers(1, 8))):
        start = t + data.draw(st.integers(1, 3))
        stamps = sorted({start + data.draw(st.integers(0, 2 * w)) for _ in range(data.draw(st.integers(1, 5)))})
        if stamps[-1] > 400:
            break
        alike = runs == 1 or data.draw(st.booleans())
        rows: list[list[float]] = []
        for _stamp in stamps:
            kinds = [data.draw(st.sampled_from(["share", "third", "over", "left", "fraction"]))] * (
                runs if alike else 1
            )
            if not alike:
                kinds += [data.draw(st.sampled_from(["share", "third", "zero", "epsilon"])) for _ in range(runs - 1)]
            row = [_amount(kind, 1, 0.4, oracle.left(r, stamps[0]), epsilons[r], w) for r, kind in enumerate(kinds)]
            rows.append([row[0]] * runs if alike else row)
        budgets = np.array([row[0] for row in rows]) if alike else np.array(rows)
        expected = oracle.series_fits(stamps, rows)
        before = _sums(ledger, stamps[0]), len(ledger.records)
        secrets = [stream.secret(s) for s in stamps]
        refused = _refused(lambda: ledger.laplace_series(secrets, budgets))
        assert refused != expected
        if refused:
            assert (_sums(ledger, stamps[0]), len(ledger.records)) == before
        else:
            for stamp, row in zip(stamps, rows, strict=True):
                oracle.commit(stamp, row)
            t = stamps[-1]
        oracle.check_every_window()
    if t:
        _exact_state(ledger, oracle, t)


# ---------------------------------------------------------------- pan-private exposures (held_laplace)


def _held_ledger(runs: int, w: int = 3) -> tuple[GuardedStream, WindowLedger]:
    stream = GuardedStream(np.zeros((40, 2)))
    ledger = WindowLedger(
        epsilon=1.0, w=w, runs=runs, sampler="numpy-laplace", keep_records=True, trusted_code=True, allow_vouched=True
    )
    ledger.bind(stream)
    return stream, ledger


@pytest.mark.parametrize("runs", [1, 2])
def test_a_series_after_a_discarded_held_value_counts_its_exposure(runs: int) -> None:
    """Under a single unannounced intrusion every window keeps Σ ε_t + its largest exposure <= ε. A held
    value of 0.5 discarded at t = 1, then 0.75 at t = 2: ``laplace`` refuses it (1.25 > 1) and so must
    ``laplace_series``, whose shared-totals check in Python integers did not count the exposure."""
    stream, ledger = _held_ledger(runs)
    ledger.held_laplace(stream.secret(1), 0.5, False)
    assert ledger.remaining(2).tolist() == [0.5] * runs
    assert _refused(lambda: ledger.laplace(stream.secret(2), 0.75))
    assert _refused(lambda: ledger.laplace_series([stream.secret(2)], np.array([0.75])))
    assert _refused(lambda: ledger.laplace_series([stream.secret(2), stream.secret(3)], np.array([0.25, 0.5])))
    assert ledger.remaining(2).tolist() == [0.5] * runs
    ledger.laplace_series([stream.secret(2), stream.secret(3)], np.array([0.25, 0.25]))  # 0.5 + 0.5 = ε
    assert ledger.remaining(3).tolist() == [0.0] * runs
    ledger.laplace_series([stream.secret(4)], np.array([0.25]))  # t = 1 has left window [2, 4]
    assert ledger.remaining(4).tolist() == [0.25] * runs


@pytest.mark.parametrize("runs", [1, 2])
def test_a_footprint_after_a_discarded_held_value_counts_its_exposure(runs: int) -> None:
    """``measure_footprint`` charges ε at each timestamp it reads and rechecks every window it changes;
    under a single intrusion those windows hold the largest exposure too: 0.4 at t = 1 and 2 with 0.5
    exposed at t = 1 makes window [1, 2] 0.8 + 0.5 > 1 (refused, nothing charged); 0.25 each fits."""
    stream, ledger = _held_ledger(runs)
    ledger.held_laplace(stream.secret(1), 0.5, False)

    def total(x: np.ndarray) -> np.ndarray:
        return np.asarray(x.sum())

    secrets = [stream.secret(1), stream.secret(2)]
    assert _refused(lambda: ledger.measure_footprint(total, secrets, sensitivity=1.0, epsilon=0.4, isolation="trusted"))
    assert ledger.remaining(2).tolist() == [0.5] * runs
    ledger.measure_footprint(total, secrets, sensitivity=1.0, epsilon=0.25, isolation="trusted")
    assert ledger.remaining(2).tolist() == [0.0] * runs
    oracle = Oracle([1.0] * runs, 3)
    oracle.commit(1, [0.0] * runs, exposure=[0.5] * runs)
    oracle.commit(2, [0.25] * runs)
    oracle.commit(1, [0.25] * runs)
    oracle.check_every_window()


@pytest.mark.parametrize("runs", [1, 2])
def test_a_footprint_reaching_back_past_an_older_exposure_counts_it(runs: int) -> None:
    """An exposure of 0.75 at t = 1, one of 2**-10 at t = 4 (w = 3); a footprint read at t = 4 that
    charges 0.375 at t = 3 and 4 changes window [1, 3], which holds the exposure of t = 1: 1.125 > 1.
    (Window [2, 4] alone would be 0.75 + 2**-10.)"""
    stream, ledger = _held_ledger(runs)
    ledger.held_laplace(stream.secret(1), 0.75, False)
    ledger.held_laplace(stream.secret(4), 2.0**-10, False)

    def footprint(epsilon: float) -> None:
        ledger.measure_footprint(
            lambda x: np.asarray(x.sum()),
            [stream.secret(3), stream.secret(4)],
            sensitivity=1.0,
            epsilon=epsilon,
            isolation="trusted",
        )

    assert _refused(lambda: footprint(0.375))
    footprint(0.25)  # window [1, 3]: 0.25 + 0.75 = 1
    assert ledger.remaining(4).tolist() == [1.0 - 0.5 - 2.0**-10] * runs


@settings(max_examples=60, deadline=None)
@given(runs=st.sampled_from([1, 2]), w=st.sampled_from([1, 2, 4]), data=st.data())
def test_pan_private_exposures_hold_on_every_path(runs: int, w: int, data: st.DataObject) -> None:
    """held_laplace (published or discarded per run), spend (one-run lean path before any exposure),
    laplace, laplace_series and measure_footprint mixed on one ledger: each accepted iff the oracle of
    Σ ε_t + the window's largest exposure <= ε allows it; every window within ε at the end."""
    stream = GuardedStream(np.zeros((300, 1)))
    ledger = WindowLedger(
        epsilon=1.0,
        w=w,
        runs=runs,
        sampler="numpy-laplace",
        keep_records=data.draw(st.booleans()),
        trusted_code=True,
        allow_vouched=True,
    )
    ledger.bind(stream)
    oracle = Oracle([1.0] * runs, w)
    t = 0
    for _ in range(data.draw(st.integers(1, 20))):
        t += data.draw(st.sampled_from([1, 1, 2, w + 1]))
        if t + 2 > 300:
            break
        op = data.draw(st.sampled_from(["held", "spend", "laplace", "series", "footprint"]))
        amount = data.draw(st.sampled_from([0.125, 0.25, 0.375, 0.5, 0.75, 1.0]))
        if op == "held":
            publish = np.array([data.draw(st.booleans()) for _ in range(runs)])
            expected = oracle.fits(t, [amount] * runs)  # checked as if every held value were published
            refused = _refused(lambda: ledger.held_laplace(stream.secret(t), amount, publish))
            if not refused:
                oracle.commit(
                    t,
                    [amount if p else 0.0 for p in publish],
                    exposure=[0.0 if p else amount for p in publish],
                )
        elif op == "spend" or op == "laplace":
            expected = oracle.fits(t, [amount] * runs)
            if op == "spend":
                refused = _refused(lambda: ledger.spend(t, amount, purpose="spend"))
            else:
                refused = _refused(lambda: ledger.laplace(stream.secret(t), amount))
            if not refused:
                oracle.commit(t, [amount] * runs)
        elif op == "series":
            stamps = [t, t + 1]
            rows = [[amount] * runs, [amount / 2] * runs]
            expected = oracle.series_fits(stamps, rows)
            secrets = [stream.secret(s) for s in stamps]
            refused = _refused(lambda: ledger.laplace_series(secrets, np.array([amount, amount / 2])))
            if not refused:
                for stamp, row in zip(stamps, rows, strict=True):
                    oracle.commit(stamp, row)
                t += 1
        else:
            stamps = sorted({t, max(t - data.draw(st.integers(0, w - 1)), 1)})
            trial = Oracle([1.0] * runs, w)
            trial.spent, trial.exposed = [dict(d) for d in oracle.spent], oracle.exposed
            for s in stamps:
                trial.spent = [{**d, s: d.get(s, 0) + _units(amount)} for d in trial.spent]
            expected = all(
                trial.window(r, end) + trial.exposure(r, end) <= 1
                for r in range(runs)
                for end in range(stamps[0], t + 1)
            )
            secrets = [stream.secret(s) for s in stamps]
            refused = _refused(
                lambda: ledger.measure_footprint(
                    lambda x: np.asarray(x.sum()),
                    secrets,
                    sensitivity=1.0,
                    epsilon=amount,
                    isolation="trusted",
                )
            )
            if not refused:
                for s in stamps:
                    oracle.commit(s, [amount] * runs)
        assert refused != expected, (op, t, amount)
        oracle.check_every_window()
    if ledger.t:
        for r, rest in enumerate(ledger.remaining(ledger.t).tolist()):
            assert rest == _floor_double(oracle.left(r, ledger.t))


# ---------------------------------------------------------------- personalized: grouped amounts


def test_a_reused_group_budget_array_does_not_rewrite_what_was_charged() -> None:
    """``local_report_groups`` takes the budgets as an array of shape (runs, classes, groups). A mechanism
    that keeps one such array and writes the next timestamp's budgets into it must not change what the
    ledger holds as charged: 0.5 at t = 1, the buffer then zeroed, 0.75 at t = 2 is over ε = 1 (w = 2)."""
    requirements = RequirementSet.from_counts([((2, 1.0), 4)])
    stream = PersonalizedStream(requirements, np.zeros((6, 4), dtype=np.int64), dimensions=2)
    ledger = PersonalizedLedger(requirements, runs=1, sampler="numpy-laplace", keep_records=True)
    ledger.bind(stream)
    buffer = np.full((1, 1, 1), 0.5)
    ledger.local_report_groups(stream.secret(1), buffer, groups=1)
    buffer[...] = 0.0  # reused for the next timestamp's budgets
    assert ledger.window_sum(1) == ((UNIT // 2,),)
    assert _refused(lambda: ledger.local_report_groups(stream.secret(2), np.full((1, 1, 1), 0.75), groups=1))
    buffer[...] = 0.5
    ledger.local_report_groups(stream.secret(2), buffer, groups=1)
    buffer[...] = 1.0  # the pre-check subtracts what leaves the window: not this
    assert Fraction(ledger.window_sum(2)[0][0], UNIT) == 1
    assert ledger.remaining(2).tolist() == [[0.0]]
    assert _refused(lambda: ledger.local_report_groups(stream.secret(3), np.full((1, 1, 1), 0.75), groups=1))
    ledger.local_report_groups(stream.secret(3), np.full((1, 1, 1), 0.5), groups=1)
    assert Fraction(ledger.window_sum(3)[0][0], UNIT) == 1


# ---------------------------------------------------------------- more edges: tiny amounts, sliding shares


@pytest.mark.parametrize("runs", [1, 2, 3])
@pytest.mark.parametrize(("epsilon", "amount"), [(1e-297, 1e-300), (0.1, 0.001), (1.0, 1 / 3 / 64)])
def test_many_small_amounts_accumulate_to_the_oracles_count(runs: int, epsilon: float, amount: float) -> None:
    """``amount`` spent again and again at one timestamp (w = 10^4) until refused: accepted exactly as
    often as the exact sum allows, then what is left is spendable and one ulp more is not."""
    ledger = WindowLedger(epsilon=epsilon, w=10**4, runs=runs, sampler="numpy-laplace")
    allowed = math.floor(Fraction(epsilon) / Fraction(amount))
    accepted = 0
    while not _refused(lambda: ledger.spend(5, amount, purpose="small")):
        accepted += 1
        assert accepted <= allowed
    assert accepted == allowed
    left = Fraction(epsilon) - allowed * Fraction(amount)
    assert ledger.remaining(5).tolist() == [_floor_double(left)] * runs
    if _floor_double(left) < left or left == 0:
        assert _refused(lambda: ledger.spend(5, _ulps(_floor_double(left), 1), purpose="over"))
    ledger.spend(10**4 + 4, _floor_double(left), purpose="what is left")  # t = 5 still inside


@pytest.mark.parametrize("w", [1, 7, 128])
def test_sliding_rounded_shares_on_runs_of_different_epsilon(w: int) -> None:
    """``with_epsilons([1, 0.1, 1/3])``: every run spends its ε/w rounded to nearest (a hair above the
    exact share for some ε) at every timestamp for 4w timestamps, and probes a few ulps around what is
    left every w/2 timestamps, never reading ``remaining`` (the pre-check carries its bound all along):
    every decision, the whole spend refused when one run would go over, is the oracle's."""
    epsilons = [1.0, 0.1, 1 / 3]
    ledger = WindowLedger.with_epsilons(epsilons, w, sampler="numpy-laplace")
    oracle = Oracle(epsilons, w)
    refusals = 0
    for t in range(1, 4 * w + 1):
        amounts = [e / w for e in epsilons]
        if t % max(w // 2, 1) == 0:
            amounts = [_ulps(_floor_double(oracle.left(r, t)), k) for r, k in enumerate((1, 0, -1))]
        expected = oracle.fits(t, amounts)
        assert _refused(lambda: ledger.spend(t, np.array(amounts), purpose="share")) != expected
        refusals += not expected
        if expected:
            oracle.commit(t, amounts)
            oracle.check_windows([t])
    assert refusals >= 1
    _exact_state(ledger, oracle, 4 * w)


# ---------------------------------------------------------------- the top of the doubles


BIGGEST = float(np.finfo(np.float64).max)


@pytest.mark.parametrize("runs", [1, 3])
def test_a_refusal_beyond_the_largest_double_is_a_budget_refusal(runs: int) -> None:
    """ε = the largest double: a second spend of it in the window is refused with BudgetExceeded (its sum
    is past every double; the refusal message once raised OverflowError), and nothing changes."""
    ledger = WindowLedger(epsilon=BIGGEST, w=2, runs=runs, sampler="numpy-laplace")
    ledger.spend(1, BIGGEST, purpose="all of it")
    with pytest.raises(BudgetExceeded) as refusal:
        ledger.spend(2, BIGGEST, purpose="all of it again")
    assert refusal.value.window_sum == math.inf
    assert ledger.worst_refused_ratio == math.inf
    assert ledger.remaining(2).tolist() == [0.0] * runs
    assert Fraction(ledger.window_sum(2)[0], UNIT) == Fraction(BIGGEST)
    ledger.spend(3, BIGGEST, purpose="the window moved on")


def test_a_run_at_the_largest_double_leaves_the_pre_check_quiet() -> None:
    """Runs of ε = 1 and the largest double, the second spending all of it: after exact commits the
    pre-check rebuilds its bound from a sum whose float bound is inf; that fails every check without
    a RuntimeWarning (an error here: pytest turns warnings into errors) and every decision is exact."""
    ledger = WindowLedger.with_epsilons([1.0, BIGGEST], 1, sampler="numpy-laplace")
    oracle = Oracle([1.0, BIGGEST], 1)
    plan = [[0.5, BIGGEST], [0.75, 0.0]] + [[0.0, 0.0]] * 9 + [[0.5, 0.0], [TINY, 0.0], [0.0, TINY]]
    for amounts in plan:
        expected = oracle.fits(1, amounts)
        assert _refused(lambda: ledger.spend(1, np.array(amounts), purpose="top")) != expected
        if expected:
            oracle.commit(1, amounts)
    _exact_state(ledger, oracle, 1)


# ---------------------------------------------------------------- personalized classes (their pre-check)


@settings(max_examples=50, deadline=None)
@given(
    classes=st.lists(
        st.tuples(st.sampled_from([1, 2, 5, 64]), st.sampled_from([1.0, 0.1, 1 / 3, 2.0**-1060])),
        min_size=1,
        max_size=3,
        unique=True,
    ),
    runs=st.sampled_from([1, 2]),
    data=st.data(),
)
def test_personalized_spends_are_decided_class_by_class_exactly(
    classes: list[tuple[int, float]], runs: int, data: st.DataObject
) -> None:
    """Every class keeps its own (w_c, ε_c) window through the same pre-check: a spend of shape
    (runs, classes) is accepted iff every class of every run stays within its ε_c (oracle per class
    and run), one class over refuses the whole spend, and the exact sums end as the oracle's."""
    requirements = RequirementSet.from_counts([((w, e), 2) for w, e in classes])
    ordered = [(r.w, r.epsilon) for r in requirements.classes]
    ledger = PersonalizedLedger(requirements, runs=runs, sampler="numpy-laplace")
    oracles = [Oracle([e] * runs, w) for w, e in ordered]
    t = 1
    for _ in range(data.draw(st.integers(1, 30))):
        t += data.draw(st.sampled_from([0, 1, 1, 2, 65]))
        amounts = np.array(
            [
                [
                    _amount(
                        data.draw(st.sampled_from(["left", "over", "under", "share", "third", "subnormal", "zero"])),
                        1,
                        0.5,
                        oracle.left(r, t),
                        e,
                        w,
                    )
                    for oracle, (w, e) in zip(oracles, ordered, strict=True)
                ]
                for r in range(runs)
            ]
        )
        expected = all(o.fits(t, amounts[:, c].tolist()) for c, o in enumerate(oracles))
        assert _refused(lambda: ledger.spend(t, amounts, purpose="per class")) != expected
        if expected:
            for c, o in enumerate(oracles):
                o.commit(t, amounts[:, c].tolist())
    sums = ledger.window_sum(t)
    for c, o in enumerate(oracles):
        assert [Fraction(u, UNIT) for u in sums[c]] == [o.window(r, t) for r in range(runs)]
    assert ledger.remaining(t).tolist() == [[_floor_double(o.left(r, t)) for o in oracles] for r in range(runs)]


# ---------------------------------------------------------------- footprints at a large w


@pytest.mark.parametrize(("runs", "w"), [(1, 2**40), (1, 10**6), (3, 10**5)])
def test_a_footprint_costs_what_its_stamps_span_not_w(runs: int, w: int) -> None:
    """A footprint read at t rechecks the windows ending from its earliest stamp to t. Both window
    structures built a dense list of the 2w timestamps before it (one run at w = 2**40: MemoryError;
    several runs: 2w exact vectors). Now only kept entries are read; the checks stay exact: a footprint
    that would put the window over ε is refused, what is left is spendable, and the sums are the oracle's."""
    stream = GuardedStream(np.zeros((10, 1)))
    ledger = WindowLedger(epsilon=1.0, w=w, runs=runs, sampler="numpy-laplace", trusted_code=True, allow_vouched=True)
    ledger.bind(stream)
    oracle = Oracle([1.0] * runs, w)

    def footprint(stamps: list[int], epsilon: float) -> None:
        ledger.measure_footprint(
            lambda x: np.asarray(x.sum()),
            [stream.secret(s) for s in stamps],
            sensitivity=1.0,
            epsilon=epsilon,
            isolation="trusted",
        )

    ledger.spend(1, 0.25, purpose="first")
    oracle.commit(1, [0.25] * runs)
    ledger.spend(3, 0.125, purpose="later")
    oracle.commit(3, [0.125] * runs)
    assert _refused(lambda: footprint([2, 4], 0.375))  # window ending 4: 0.25 + 0.125 + 0.75 > 1
    footprint([2, 4], 0.3125)
    for s in (2, 4):
        oracle.commit(s, [0.3125] * runs)
    oracle.check_every_window()
    _exact_state(ledger, oracle, 4)
    assert ledger.remaining(4).tolist() == [0.0] * runs
