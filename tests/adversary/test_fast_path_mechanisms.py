"""The one-run fast paths under the built-in mechanisms, a ledger file and kept records.

- BD and BA on one run step their rule on plain Python numbers (``mechanisms/_common.py``,
  ``_one_run_dissimilarity``); Uniform, Sample and Hybrid skip the array round trip. On streams
  whose every timestamp changes by far more than any noise, the publish decisions do not depend on
  the noise, so one run and two identical runs (the vectorised loop and the many-run ledger) must
  charge the same amounts at the same timestamps, bit for bit. Every window is checked by an exact
  Fraction oracle, and BD's and BA's own invariants (Kellaris et al. 2014, Theorems 4 and 5) too.
- A lean one-run ledger (no records, the unrecorded charge) stepped by a mechanism releases what a
  ledger that keeps records releases, and its per-timestamp charges (read back from ``window_sum``)
  are the records'.
- BDPanPrivate and BAPanPrivate on one run: Σ ε_t + the window's largest exposure <= ε, exactly.
- A one-run ledger file (``open_ledger``): decisions at the edge are the oracle's and a reopened
  file replays to the same exact sums.
- The one-run shared amount array that records keep cannot be made writable through its base.
- The rounding helpers every rule's budgets go through (``mul_down``, ``div_down``; scalar and
  compiled) are floors over every double: above 2**995 they rounded up, an overflow gave inf.
- At extreme ε (subnormal shares, the largest double) the plain one-run path and the vectorised loop
  charge and release the same, bit for bit.
"""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import budgetcheck as bc
from budgetcheck.ledger.validation import check_amounts
from mechanisms import BUILTIN

UNIT = 2**1127
TINY = 2.0**-1074


def _floor_double(value: Fraction) -> float:
    if value <= 0:
        return 0.0
    near = float(value)
    return math.nextafter(near, -math.inf) if Fraction(near) > value else near


def _per_t(records: Any, run: int) -> dict[int, list[tuple[str, Fraction]]]:
    """{t: [(purpose, exact amount of ``run``)]}, in record order."""
    out: dict[int, list[tuple[str, Fraction]]] = {}
    for record in records:
        out.setdefault(record.t, []).append((record.purpose, Fraction(float(record.amounts.reshape(-1)[run]))))
    return out


def _windows_within(charges: dict[int, list[tuple[str, Fraction]]], epsilon: float, w: int, length: int) -> None:
    """Every window [t − w + 1, t], t = 1..length: Σ charged + the largest exposure in it <= ε, exactly."""
    spent = {t: sum((a for p, a in items if p != "intrusion exposure"), Fraction(0)) for t, items in charges.items()}
    exposed = {t: sum((a for p, a in items if p == "intrusion exposure"), Fraction(0)) for t, items in charges.items()}
    for end in range(1, length + 1):
        inside = range(max(1, end - w + 1), end + 1)
        total = sum((spent.get(s, Fraction(0)) for s in inside), Fraction(0))
        largest = max((exposed.get(s, Fraction(0)) for s in inside), default=Fraction(0))
        assert total + largest <= Fraction(epsilon), f"window ending {end}: {total} + {largest} > {epsilon}"


def _jumping(length: int, d: int, seed: int) -> np.ndarray:
    """Counts that move by 10^6 or more at every timestamp (no noise at ε >= 1 can hide a change)."""
    rng = np.random.default_rng(seed)
    steps = rng.choice([-1.0, 1.0], size=(length, d)) * rng.integers(1, 5, size=(length, d)) * 1e6
    return np.cumsum(steps, axis=0) + 1e8


SCHEDULED = ("Uniform", "Sample", "Hybrid")
ADAPTIVE = ("BD", "BA")


@settings(max_examples=25, deadline=None)
@given(
    name=st.sampled_from(ADAPTIVE + SCHEDULED),
    epsilon=st.sampled_from([1.0, 4.0, 1 / 3 * 10, 300.0, 1e6]),
    w=st.sampled_from([1, 2, 3, 7, 16]),
    seed=st.integers(0, 50),
)
def test_one_run_charges_what_two_identical_runs_charge(name: str, epsilon: float, w: int, seed: int) -> None:
    """Where the decisions cannot depend on the noise (every step jumps by 10^6; fixed schedules never
    do), the one-run plain path and two runs of the vectorised loop charge the same amounts at the same
    timestamps in the same order; every window of both is within ε exactly."""
    length = 4 * w + 3
    counts = _jumping(length, 2, seed)
    one = bc.execute(BUILTIN[name](), counts, epsilon=epsilon, w=w, runs=1, seed=seed)
    two = bc.execute(BUILTIN[name](), counts, epsilon=epsilon, w=w, runs=2, seed=seed)
    single = [(r.t, r.purpose, r.amounts.tobytes()) for r in one.ledger.records]
    for run in (0, 1):
        assert single == [(r.t, r.purpose, r.amounts[run : run + 1].tobytes()) for r in two.ledger.records]
    live = bc.WindowLedger(epsilon=epsilon, w=w, seed=seed, sampler="numpy-laplace", keep_records=True)
    stream = bc.LiveStream(((t + 1, row) for t, row in enumerate(counts)), dimensions=2)
    live.bind(stream)
    stepped = np.stack([np.array(v) for v in BUILTIN[name]().releases(stream, live)], axis=1)
    assert [(r.t, r.purpose, r.amounts.tobytes()) for r in live.records] == single  # plain budgets, step by step
    assert stepped.tobytes() == np.ascontiguousarray(one.releases).tobytes()
    charges = _per_t(one.ledger.records, 0)
    _windows_within(charges, epsilon, w, length)
    if name == "BD":  # Theorem 4: dissimilarities of ε/(2w) each, publications <= ε/2 in every window
        for end in range(1, length + 1):
            published = sum(
                (a for s in range(end - w + 1, end + 1) for p, a in charges.get(s, []) if p == "publication"),
                Fraction(0),
            )
            assert published <= Fraction(epsilon) / 2
        assert all(a * 2 * w <= Fraction(epsilon) for items in charges.values() for p, a in items if p != "publication")
        assert sum(p == "publication" for items in charges.values() for p, _ in items) >= min(length, 2)
    if name == "BA":  # a publication of k shares nullifies the next k − 1 timestamps
        unit = Fraction(bc.rounding.share(epsilon, 2 * w))
        for t, items in charges.items():
            for purpose, amount in items:
                if purpose == "publication":
                    shares = math.ceil(amount / unit - Fraction(1, 10**6))
                    assert 1 <= shares <= w and amount <= unit * shares
                    for later in range(t + 1, t + shares):
                        assert all(p != "publication" for p, _ in charges.get(later, []))


@pytest.mark.parametrize("name", ADAPTIVE + SCHEDULED + ("BDShifted", "BAShifted"))
@pytest.mark.parametrize(("epsilon", "w"), [(1.0, 4), (0.1, 9), (1e-300, 3), (1e300, 5), (0.7, 1)])
def test_a_lean_one_run_ledger_steps_a_mechanism_as_a_recording_one(name: str, epsilon: float, w: int) -> None:
    """The unrecorded one-run charge under a live mechanism: the same releases, bit for bit, as a ledger
    that keeps records (same seed), and the charge at every t read back from window_sum is the records'."""
    counts = np.random.default_rng(w).poisson(20.0, size=(6 * w + 4, 2)).astype(float)
    counts[2 * w : 3 * w] += 500.0
    releases, charges = {}, {}
    for keep in (False, True):
        ledger = bc.WindowLedger(epsilon=epsilon, w=w, seed=11, sampler="numpy-laplace", keep_records=keep)
        stream = bc.LiveStream(((t + 1, row) for t, row in enumerate(counts)), dimensions=2)
        ledger.bind(stream)
        out, sums = [], []
        for t, values in enumerate(BUILTIN[name]().releases(stream, ledger), start=1):
            out.append(np.array(values))
            sums.append(Fraction(ledger.window_sum(t)[0], UNIT))
        releases[keep] = np.stack(out).tobytes()
        spent: dict[int, Fraction] = {}
        for t, total in enumerate(sums, start=1):  # window(t) − window(t − 1) = spent(t) − spent(t − w)
            previous = sums[t - 2] if t > 1 else Fraction(0)
            spent[t] = total - previous + spent.get(t - w, Fraction(0))
        charges[keep] = spent
        if keep:
            recorded = {t: sum((a for _, a in items), Fraction(0)) for t, items in _per_t(ledger.records, 0).items()}
            assert {t: a for t, a in spent.items() if a} == {t: a for t, a in recorded.items() if a}
            _windows_within(_per_t(ledger.records, 0), epsilon, w, len(counts))
    assert releases[False] == releases[True]
    assert charges[False] == charges[True]


@pytest.mark.parametrize("name", ["BDPanPrivate", "BAPanPrivate"])
@pytest.mark.parametrize("runs", [1, 2])
@pytest.mark.parametrize(("epsilon", "w"), [(1.0, 3), (0.5, 8), (3.0, 2)])
def test_pan_private_mechanisms_keep_every_window_with_its_exposure(
    name: str, runs: int, epsilon: float, w: int
) -> None:
    """One run (the integer path until the first exposure, then the exact one) and two: every window
    holds Σ ε_t + its largest exposure <= ε, from the records, exactly; a lean ledger releases the same."""
    counts = np.random.default_rng(3).poisson(30.0, size=(8 * w + 5, 2)).astype(float)
    counts[::3] += 400.0
    run = bc.execute(BUILTIN[name](), counts, epsilon=epsilon, w=w, runs=runs, seed=4)
    assert any(r.purpose == "intrusion exposure" for r in run.ledger.records)
    for r in range(runs):
        _windows_within(_per_t(run.ledger.records, r), epsilon, w, len(counts))
    if runs == 1:
        lean = bc.WindowLedger(epsilon=epsilon, w=w, seed=4, sampler="numpy-laplace")
        stream = bc.GuardedStream(counts)
        lean.bind(stream)
        assert BUILTIN[name]().run(stream, lean).tobytes() == np.ascontiguousarray(run.releases).tobytes()
        last = len(counts)
        assert lean.window_sum(last) == run.ledger.window_sum(last)
        assert lean.remaining(last).tolist() == run.ledger.remaining(last).tolist()


def test_a_one_run_ledger_file_decides_at_the_edge_and_replays_exactly(tmp_path: Path) -> None:
    """ε = 0.1, w = 7 in a file: thirds, what is left, one ulp over, subnormals, across timestamps; each
    decision the oracle's and a lean in-memory twin's. Reopened, the file gives the same exact sums,
    ``remaining`` is spendable and one ulp more is refused (and stays refused after another reopen)."""
    epsilon, w = 0.1, 7
    path = tmp_path / "one.db"

    def opened() -> bc.WindowLedger:
        ledger = bc.WindowLedger(epsilon=epsilon, w=w, sampler="numpy-laplace")
        return bc.open_ledger(path, ledger, durability="process")

    ledger, lean = opened(), bc.WindowLedger(epsilon=epsilon, w=w, sampler="numpy-laplace")
    spent: dict[int, Fraction] = {}
    accepted_spends: list[tuple[int, float]] = []

    def left(t: int) -> Fraction:
        return Fraction(epsilon) - sum((a for s, a in spent.items() if t - w < s <= t), Fraction(0))

    plan = [(1, "third"), (1, "third"), (2, "third"), (2, "over"), (2, "left"), (2, "tiny"), (8, "left")]
    plan += [(9, "tiny")] * 5 + [(9, "over"), (9, "third"), (15, "third"), (16, "left"), (16, "over")]
    for t, kind in plan:
        rest = _floor_double(left(t))
        amount = {
            "third": epsilon / 3,
            "left": rest,
            "over": math.nextafter(rest, math.inf),
            "tiny": TINY,
        }[kind]
        expected = left(t) >= Fraction(amount)
        for target in (ledger, lean):
            try:
                target.spend(t, amount, purpose=kind)
                accepted = True
            except bc.BudgetExceeded:
                accepted = False
            assert accepted == expected, (t, kind, target is lean)
        if expected:
            spent[t] = spent.get(t, Fraction(0)) + Fraction(amount)
            accepted_spends.append((t, amount))
    last = plan[-1][0]
    inside = (Fraction(epsilon) - left(last)) * UNIT
    assert inside.denominator == 1
    assert ledger.window_sum(last) == lean.window_sum(last) == (inside.numerator,)
    ledger.close()
    for _ in range(2):
        again = opened()
        assert Fraction(again.window_sum(last)[0], UNIT) == Fraction(epsilon) - left(last)
        rest = again.remaining(last)[0]
        assert rest == _floor_double(left(last))
        with pytest.raises(bc.BudgetExceeded):
            again.spend(last, math.nextafter(rest, math.inf), purpose="one ulp over")
        assert [(r.t, float(r.amounts[0])) for r in again.records] == accepted_spends  # refusals left no row
        again.close()
    final = opened()
    final.spend(last, final.remaining(last)[0], purpose="what is left")
    assert final.remaining(last).tolist() == [_floor_double(left(last) - Fraction(_floor_double(left(last))))]
    final.close()


def test_a_kept_one_run_amount_cannot_be_made_writable_through_its_base() -> None:
    """A one-run ledger shares one read-only array per positive amount between all its charges (and all
    ledgers of the process); records keep it. Neither it nor its base may become writable: else a
    record's amount, and the next charge of that amount in any ledger, could be rewritten."""
    kept = bc.WindowLedger(epsilon=1.0, w=2, sampler="numpy-laplace", keep_records=True)
    kept.spend(1, 0.3125, purpose="shared")
    amounts = kept.records[0].amounts
    assert amounts.tolist() == [0.3125] and not np.shares_memory(amounts, check_amounts(0.3125, 1))  # a copy
    chain: Any = amounts
    while isinstance(chain, np.ndarray):
        with pytest.raises(ValueError):
            chain.setflags(write=True)
        chain = chain.base
    other = bc.WindowLedger(epsilon=1.0, w=2, sampler="numpy-laplace")
    other.spend(1, 0.3125, purpose="charged in full")
    assert Fraction(other.window_sum(1)[0], UNIT) == Fraction(0.3125)
    assert kept.records[0].amounts.tolist() == [0.3125]


@pytest.mark.parametrize("name", ["BD", "BA", "BDShifted", "BAShifted"])
@pytest.mark.parametrize("epsilon", [7 * TINY, 1e-310, 1e-300, 1e308, float(np.finfo(np.float64).max)])
def test_the_plain_one_run_rule_is_the_vectorised_one_at_extreme_epsilons(name: str, epsilon: float) -> None:
    """At ε where shares are subnormal (the scalar rounding helpers fall back to the kernels; the
    vectorised loop's threshold 1/ε_{t,2} overflowed with a RuntimeWarning) or near the top of the
    doubles (BDShifted's pool ε·(2w − w)/(2w) overflowed mul_down to inf, refused as a budget), the
    plain-number path and the vectorised loop on the same one-run ledger charge and release the same,
    bit for bit; every window is within ε exactly."""
    from mechanisms import _common

    w = 3
    counts = _jumping(4 * w + 2, 2, 7)
    results = []
    for plain in (True, False):
        ledger = bc.WindowLedger(epsilon=epsilon, w=w, seed=2, sampler="numpy-laplace", keep_records=True)
        stream = bc.GuardedStream(counts)
        ledger.bind(stream)
        mechanism = BUILTIN[name]()
        rule, filtering = mechanism.allocation_rule(), mechanism.filtering
        env = _common.rule_env(ledger)
        steps = (
            _common._one_run_dissimilarity(rule, env, stream, ledger, filtering)
            if plain
            else _common._dissimilarity_runs(rule, env, stream, ledger, filtering)
        )
        releases = np.stack([np.array(v) for v in steps])
        _windows_within(_per_t(ledger.records, 0), epsilon, w, len(counts))
        results.append(
            (
                releases.tobytes(),
                [(r.t, r.purpose, r.amounts.tobytes(), r.noise_scale.tobytes()) for r in ledger.records],
            )
        )
    assert results[0][1] == results[1][1]
    assert results[0][0] == results[1][0]


BIGGEST = float(np.finfo(np.float64).max)
doubles = st.floats(min_value=0.0, max_value=BIGGEST, allow_subnormal=True) | st.sampled_from(
    [0.0, TINY, 2.0**-1022, 2.0**995, 2.0**996, 1.3e300, 1.4e300, 1e305, 1e308, BIGGEST]
)


def _is_floor(got: float, exact: Fraction, tiny_operand: bool = False) -> bool:
    """The largest double <= exact; where the helpers always step down (a result, or a dividend, below
    2**-900: Dekker's error terms could underflow there) <= exact and at most one step below the floor."""
    if Fraction(got) > exact:
        return False
    if exact >= Fraction(BIGGEST):
        return got == BIGGEST
    above = math.nextafter(got, math.inf)
    if got < 2.0**-900 or tiny_operand:
        above = math.nextafter(above, math.inf)
    return exact < Fraction(above)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(doubles, doubles), min_size=1, max_size=6))
def test_mul_down_and_div_down_are_floors_over_every_double(pairs: list[tuple[float, float]]) -> None:
    """The rules' rounding helpers (scalar path and compiled arrays): x·y and x/y rounded down over the
    whole range. Above 2**995 Veltkamp's split overflowed and results came out one ulp *above* the
    exact value (9,000 of 20,000 random products in [1.4e300, 1e305]); an overflowing product gave inf."""
    xs = np.array([x for x, _ in pairs])
    ys = np.array([y for _, y in pairs])
    products = bc.rounding.mul_down(xs, ys)
    for (x, y), array_result in zip(pairs, products.tolist(), strict=True):
        exact = Fraction(x) * Fraction(y)
        assert _is_floor(float(bc.rounding.mul_down(x, y)), exact), ("mul", x, y)
        assert _is_floor(array_result, exact), ("mul array", x, y)
    divisors = np.where(ys > 0.0, ys, 1.0)
    quotients = bc.rounding.div_down(xs, divisors)
    for x, y, array_result in zip(xs.tolist(), divisors.tolist(), quotients.tolist(), strict=True):
        exact = Fraction(x) / Fraction(y)
        tiny = 0.0 < x < 2.0**-900
        assert _is_floor(float(bc.rounding.div_down(x, y)), exact, tiny), ("div", x, y)
        assert _is_floor(array_result, exact, tiny), ("div array", x, y)
