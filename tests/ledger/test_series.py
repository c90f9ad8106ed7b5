"""WindowLedger.laplace_series against step-by-step laplace calls (the oracle), and its refusals."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import budgetcheck as bc
from budgetcheck.ops import Ops
from budgetcheck.proving import RuleEnv, State
from mechanisms._common import fixed_schedule, run_fixed_schedule
from mechanisms.rules import PeriodicRule

budget = st.sampled_from([0.0, 0.05, 0.1, 0.125, 1 / 3, 0.25, 0.5, 1.0])


@st.composite
def series_cases(draw: Any) -> dict[str, Any]:
    runs = draw(st.sampled_from([1, 2, 4]))
    length = draw(st.integers(2, 14))
    prior = draw(st.integers(0, length - 1))
    per_run = draw(st.booleans())
    shape = (length - prior, runs) if per_run else (length - prior,)
    return {
        "w": draw(st.integers(1, 5)),
        "epsilon": draw(st.sampled_from([0.5, 1.0])),
        "runs": runs,
        "length": length,
        "streams": draw(st.sampled_from([1, 2])) if runs % 2 == 0 else 1,
        "prior": [
            draw(st.lists(budget, min_size=runs, max_size=runs)) if draw(st.booleans()) else [draw(budget)] * runs
            for _ in range(prior)
        ],
        "series": np.array(draw(st.lists(budget, min_size=int(np.prod(shape)), max_size=int(np.prod(shape))))).reshape(
            shape
        ),
    }


def _ledger(case: dict[str, Any], epsilons: list[float] | None = None) -> tuple[bc.WindowLedger, list[bc.Secret]]:
    """The case's stream (stacked when it has several) bound to a ledger of its (ε, w), or of
    ``epsilons``, one per run."""
    rng = np.random.default_rng(7)
    data = [rng.integers(0, 50, (case["length"], 2)).astype(float) for _ in range(case["streams"])]
    stream = bc.GuardedStream.stacked(data) if case["streams"] > 1 else bc.GuardedStream(data[0])
    ledger = (
        bc.WindowLedger(
            bc.WEventParams(case["epsilon"], case["w"]),
            runs=case["runs"],
            seed=11,
            sampler="numpy-laplace",
            keep_records=True,
        )
        if epsilons is None
        else bc.WindowLedger.with_epsilons(epsilons, case["w"], seed=11, sampler="numpy-laplace", keep_records=True)
    )
    ledger.bind(stream)
    return ledger, list(stream)


def _state(ledger: bc.WindowLedger) -> tuple[Any, ...]:
    t = max(ledger.t, 1)
    return (_records(ledger), ledger.t, ledger.window_sum(t), ledger.refusals, ledger._rng.bit_generator.state)


def _records(ledger: bc.WindowLedger) -> list[tuple[Any, ...]]:
    return [
        (r.t, r.purpose, r.amounts.tolist(), None if r.noise_scale is None else r.noise_scale.tolist())
        for r in ledger.records
    ]


@settings(max_examples=300, deadline=None)
@given(series_cases())
def test_a_series_releases_and_records_what_step_by_step_calls_do_or_is_refused_as_a_whole(
    case: dict[str, Any],
) -> None:
    _series_against_steps(lambda: _ledger(case), case)


@st.composite
def several_epsilon_cases(draw: Any) -> dict[str, Any]:
    """A ledger of several ε (two or three distinct), prior spends and a series whose budgets are
    alike within each ε's runs (the per-group exact path, unless a prior spend differed within a
    group) or, sometimes, per run (spend by spend)."""
    runs = draw(st.sampled_from([2, 3, 4, 6]))
    choices = draw(st.lists(st.sampled_from([0.3, 0.5, 1.0]), min_size=2, max_size=3, unique=True))
    epsilons = [
        choices[r % len(choices)] if draw(st.booleans()) else draw(st.sampled_from(choices)) for r in range(runs)
    ]
    length = draw(st.integers(2, 12))
    prior = draw(st.integers(0, length - 1))

    def row(grouped: bool) -> list[float]:
        if grouped:
            by_epsilon = {e: draw(budget) for e in sorted(set(epsilons))}
            return [by_epsilon[e] for e in epsilons]
        drawn: list[float] = draw(st.lists(budget, min_size=runs, max_size=runs))
        return drawn

    return {
        "w": draw(st.integers(1, 5)),
        "epsilons": epsilons,
        "runs": runs,
        "length": length,
        "streams": draw(st.sampled_from([1, 2])) if runs % 2 == 0 else 1,
        "prior": [row(draw(st.booleans())) for _ in range(prior)],
        "series": np.array([row(grouped) for grouped in [draw(st.integers(0, 3)) > 0] for _ in range(length - prior)]),
    }


@settings(max_examples=300, deadline=None)
@given(several_epsilon_cases())
def test_a_series_on_a_ledger_of_several_epsilons_is_what_step_by_step_calls_do(case: dict[str, Any]) -> None:
    """Per-group exact checks (runs of one ε spending alike) decide, record and refuse what the
    spend-by-spend check does: the same releases, records, window sums and remaining budgets, or
    the same refusal (timestamp, run, its ε and window) with the ledger unchanged."""
    _series_against_steps(lambda: _ledger(case, case["epsilons"]), case)


def _series_against_steps(make: Callable[[], tuple[bc.WindowLedger, list[bc.Secret]]], case: dict[str, Any]) -> None:
    """After the case's prior spends, its series through ``laplace_series`` on one ledger and spend
    by spend on another: the same releases, records (and ledger file where there is one), window
    sums and remaining budgets over the next w timestamps; or, if a spend is refused step by step,
    the same refusal (run, window, window sum, ε, message), with the series' ledger unchanged."""
    (stepwise, secrets), (bulk, bulk_secrets) = make(), make()
    prior = len(case["prior"])
    for ledger, items in ((stepwise, secrets), (bulk, bulk_secrets)):
        for secret, amounts in zip(items, case["prior"]):
            try:
                ledger.laplace(secret, np.array(amounts))
            except bc.BudgetExceeded:
                return  # the prior spends alone overspend: nothing to compare
    before = _state(bulk)
    refusal: bc.BudgetExceeded | None = None
    releases = []
    try:
        for secret, amounts in zip(secrets[prior:], case["series"]):
            releases.append(stepwise.laplace(secret, amounts))
    except bc.BudgetExceeded as exc:
        refusal = exc
    if refusal is None:
        out = bulk.laplace_series(bulk_secrets[prior:], case["series"])
        np.testing.assert_array_equal(out, np.stack(releases, axis=1))
        assert _records(bulk) == _records(stepwise)
        if isinstance(bulk.epsilon, float):  # a ledger of several ε has no file format
            assert list(bulk.jsonl()) == list(stepwise.jsonl())
        for t in range(bulk.t, bulk.t + case["w"] + 1):
            assert bulk.window_sum(t) == stepwise.window_sum(t)
            np.testing.assert_array_equal(bulk.remaining(t), stepwise.remaining(t))
    else:
        with pytest.raises(bc.BudgetExceeded) as caught:
            bulk.laplace_series(bulk_secrets[prior:], case["series"])
        got = caught.value
        assert got.window == refusal.window  # the first spend step by step refuses
        assert (got.run, got.window_sum, got.epsilon) == (refusal.run, refusal.window_sum, refusal.epsilon)
        assert str(got) == str(refusal)
        after = _state(bulk)
        assert after[:3] == before[:3] and after[4] == before[4] and after[3] == before[3] + 1


def test_a_series_checks_its_arguments_before_it_charges() -> None:
    ledger = bc.WindowLedger(bc.WEventParams(1.0, 3), runs=2, sampler="numpy-laplace", keep_records=True)
    stream = bc.GuardedStream(np.ones((5, 1)))
    ledger.bind(stream)
    secrets = list(stream)
    with pytest.raises(bc.InvalidArgument, match="at least one"):
        ledger.laplace_series([], [])
    with pytest.raises(bc.InvalidArgument, match="increasing"):
        ledger.laplace_series([secrets[1], secrets[0]], [0.1, 0.1])
    with pytest.raises(bc.InvalidArgument, match=r"shape \(3,\)"):
        ledger.laplace_series(secrets[:2], [0.1, 0.1, 0.1])
    with pytest.raises(bc.InvalidArgument, match=r"epsilon\[1\]=nan"):
        ledger.laplace_series(secrets[:2], [0.1, float("nan")])
    with pytest.raises(bc.InvalidArgument, match=r"epsilon\[0, 1\]=-0.1"):
        ledger.laplace_series(secrets[:2], [[0.1, -0.1], [0.1, 0.1]])
    with pytest.raises(bc.InvalidArgument, match="Secrets"):
        ledger.laplace_series([secrets[0], 3], [0.1, 0.1])  # type: ignore[list-item]
    assert ledger.records == ()
    ledger.laplace(secrets[2], 0.1)
    with pytest.raises(bc.TimestampOrder):
        ledger.laplace_series(secrets[1:3], [0.1, 0.1])
    assert len(ledger.records) == 1


def test_records_keep_what_was_charged_and_share_one_frozen_copy_of_it() -> None:
    """The records of a series are read-only views of one copy of the budgets (no copy per record);
    the records of laplace_bins and laplace_groups keep a read-only per-run maximum. Changing the
    caller's arrays afterwards changes no record."""
    ledger = bc.WindowLedger(bc.WEventParams(1.0, 4), runs=2, sampler="numpy-laplace", keep_records=True)
    stream = bc.GuardedStream(np.ones((6, 3)))
    ledger.bind(stream)
    secrets = list(stream)
    budgets = np.array([0.1, 0.2])
    ledger.laplace_series(secrets[:2], budgets)
    bins = np.array([[0.05, 0.1, 0.02], [0.01, 0.01, 0.03]])
    ledger.laplace_bins(secrets[2], bins)
    groups = np.array([[0.1, 0.05], [0.02, 0.04]])
    ledger.laplace_groups(secrets[3], np.array([0, 1, 1]), groups)
    budgets[:], bins[:], groups[:] = 9.0, 9.0, 9.0
    first, second, binned, grouped = ledger.records
    assert first.amounts.strides == second.amounts.strides == (0,)  # views of one budget per spend, not copies
    for record, expected in zip(ledger.records, ([0.1, 0.1], [0.2, 0.2], [0.1, 0.03], [0.1, 0.04]), strict=True):
        assert record.amounts.tolist() == expected
        assert not record.amounts.flags.writeable
        with pytest.raises(ValueError):
            record.amounts[0] = 0.0


@attrs.frozen
class _FirstReleaseLater(PeriodicRule):
    """A fixed schedule whose first release is at t = 3 (before it, the release is all zeros)."""

    def initial(self, ops: Ops, env: RuleEnv) -> State:
        return (self.period(env) - 2,)


@pytest.mark.parametrize("rule", [PeriodicRule(every=1), PeriodicRule(every=None), _FirstReleaseLater(every=None)])
def test_the_whole_stream_run_of_a_fixed_schedule_is_the_step_by_step_run(rule: PeriodicRule) -> None:
    data = np.arange(40.0).reshape(20, 2)
    outs, files = [], []
    for whole in (True, False):
        stream = bc.GuardedStream(data)
        ledger = bc.WindowLedger(bc.WEventParams(1.0, 4), runs=3, seed=5, sampler="numpy-laplace", keep_records=True)
        ledger.bind(stream)
        outs.append(
            run_fixed_schedule(rule, stream, ledger, False)
            if whole
            else np.stack(list(fixed_schedule(rule, stream, ledger, False)), axis=1)
        )
        files.append(list(ledger.jsonl()))
    np.testing.assert_array_equal(outs[0], outs[1])
    assert files[0] == files[1]
    if isinstance(rule, _FirstReleaseLater):
        assert (outs[0][:, :2] == 0).all() and not (outs[0][:, 2] == 0).all()


@attrs.define
class _CountingRule:
    """PeriodicRule(every=None), counting its evaluations; ``array_state`` holds the counter as a
    1-element array (a state the whole-stream run must evaluate step by step)."""

    array_state: bool
    calls: int = 0
    inner: PeriodicRule = PeriodicRule(every=None)

    def initial(self, ops: Ops, env: RuleEnv) -> State:
        return (np.zeros(1, dtype=np.int64),) if self.array_state else self.inner.initial(ops, env)

    def charges(self, ops: Ops, env: RuleEnv, state: State, decision: Any) -> tuple[Any, ...]:
        self.calls += 1
        return (ops.where(np.asarray(state[0]).reshape(()) == 0, self.inner.share(ops, env), 0),)

    def advance(self, ops: Ops, env: RuleEnv, state: State, decision: Any, spent: tuple[Any, ...]) -> State:
        (after,) = self.inner.advance(ops, env, (np.asarray(state[0]).reshape(()),), decision, spent)
        return (np.asarray(after).reshape(1),) if self.array_state else (after,)


@pytest.mark.parametrize("array_state", [False, True])
def test_a_fixed_schedule_evaluates_each_state_of_its_rule_once(array_state: bool) -> None:
    """A whole-stream run evaluates the rule once per distinct scalar state (w = 4: four states,
    not T = 40), with the same releases and records as the step-by-step run; a state that is not
    made of scalars is evaluated at every timestamp."""
    data = np.arange(80.0).reshape(40, 2)
    outs, files, calls = [], [], []
    for whole in (True, False):
        rule = _CountingRule(array_state)
        stream = bc.GuardedStream(data)
        ledger = bc.WindowLedger(bc.WEventParams(1.0, 4), runs=3, seed=5, sampler="numpy-laplace", keep_records=True)
        ledger.bind(stream)
        outs.append(
            run_fixed_schedule(rule, stream, ledger, False)
            if whole  # type: ignore[arg-type]
            else np.stack(list(fixed_schedule(rule, stream, ledger, False)), axis=1)
        )  # type: ignore[arg-type]
        files.append(list(ledger.jsonl()))
        calls.append(rule.calls)
    np.testing.assert_array_equal(outs[0], outs[1])
    assert files[0] == files[1]
    assert calls == ([40, 40] if array_state else [4, 40])


def test_a_state_key_holds_the_exact_bits_of_scalar_states_only() -> None:
    from mechanisms._common import _state_key

    assert _state_key((0, 1.5, np.int64(3), np.float64(2.0), np.bool_(True))) is not None
    assert _state_key((0.0,)) != _state_key((-0.0,))  # equal values, different bits
    assert _state_key((1,)) != _state_key((1.0,))
    assert _state_key((np.float64(0.1) + np.float64(0.2),)) != _state_key((0.3,))
    assert _state_key(()) == ()
    assert _state_key((np.zeros(2),)) is None
    assert _state_key((np.zeros(1),)) is None
    assert _state_key(("c",)) is None
    assert _state_key([0]) is None


def test_a_series_on_a_ledger_file_persists_and_a_refused_one_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "series.db"
    params = bc.WEventParams(1.0, 4)
    ledger = bc.open_ledger(
        path, bc.WindowLedger(params, runs=2, seed=3, sampler="numpy-laplace", keep_records=True), durability="process"
    )
    stream = bc.GuardedStream(np.arange(16.0).reshape(8, 2))
    ledger.bind(stream)
    secrets = list(stream)
    ledger.laplace_series(secrets[:4], [0.25, 0.25, 0.25, 0.25])
    journal = ledger.journal
    assert journal is not None
    head = journal.head()
    with pytest.raises(bc.BudgetExceeded):
        ledger.laplace_series(secrets[4:6], [0.25, 0.5])
    assert journal.head() == head and ledger.t == 4
    ledger.close()
    again = bc.open_ledger(
        path, bc.WindowLedger(params, runs=2, seed=3, sampler="numpy-laplace", keep_records=True), durability="process"
    )
    assert again.t == 4 and len(again.records) == 4
    assert again.window_sum(4) == (bc.rounding.to_units(1.0),) * 2
    assert bc.audit_file(path).ok


@pytest.mark.parametrize("runs", [1, 3])
def test_a_series_is_checked_exactly_at_the_boundary(runs: int) -> None:
    """0.1 + 0.2 exceeds the double 0.3 by 2.8e-17 (refused) and fits in 0.1 + 0.2 rounded (allowed)."""
    for epsilon, allowed in ((0.3, False), (0.1 + 0.2, True)):
        ledger = bc.WindowLedger(bc.WEventParams(epsilon, 2), runs=runs, sampler="numpy-laplace", keep_records=True)
        stream = bc.GuardedStream(np.ones((2, 1)))
        ledger.bind(stream)
        if allowed:
            ledger.laplace_series(list(stream), [0.1, 0.2])
            assert len(ledger.records) == 2
        else:
            with pytest.raises(bc.BudgetExceeded, match=r"window \[1, 2\]"):
                ledger.laplace_series(list(stream), [0.1, 0.2])
            assert ledger.records == () and ledger.refusals == 1
