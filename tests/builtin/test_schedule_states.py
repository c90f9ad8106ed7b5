"""A fixed schedule stepped live evaluates its rule once per state: the same spends and releases.

``fixed_schedule`` (Uniform, Sample, Hybrid and the TS variants, one timestamp at a time) reuses the
rule's (budget, next state) for a state of plain ints it has reached before. Against the same loop
evaluating the rule at every timestamp, on the w-event ledger and on a Swellfish ledger whose
policies leave timestamps with temporal sensitivity 0 (released exactly, charged nothing), every
release and every record must agree bit for bit; a rule whose states never repeat keeps at most
``_STATES_KEPT`` of them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import budgetcheck as bc
from budgetcheck.ops import FLOAT
from budgetcheck.proving import RuleEnv
from mechanisms import BUILTIN, _common

POLICIES = bc.PolicyCollection([bc.StreamPolicy(3, 10, [1.0]), bc.StreamPolicy(14, 30, [2.0, 1.0])])


def _counts(length: int = 45, d: int = 2) -> np.ndarray:
    counts = np.random.default_rng(4).poisson(20, size=(length, d)).astype(float)
    counts[12:15] += 300
    return counts


def _signature(releases: np.ndarray, ledger: Any) -> tuple[bytes, list[tuple[Any, ...]]]:
    records = [(r.t, r.purpose, r.amounts.tobytes(), r.sensitivity) for r in ledger.records]
    return np.ascontiguousarray(releases).tobytes(), records


def _live(name: str, swellfish: bool) -> tuple[bytes, list[tuple[Any, ...]]]:
    counts = _counts()
    ledger: bc.WindowLedger | bc.SwellfishLedger
    if swellfish:
        ledger = bc.SwellfishLedger(POLICIES, epsilon=0.9, seed=6, sampler="numpy-laplace", keep_records=True)
    else:
        ledger = bc.WindowLedger(epsilon=0.9, w=7, seed=6, sampler="numpy-laplace", keep_records=True)
    stream = bc.LiveStream(((t + 1, row) for t, row in enumerate(counts)), dimensions=2)
    ledger.bind(stream)
    releases = np.stack([np.array(values) for values in BUILTIN[name]().releases(stream, ledger)], axis=1)
    return _signature(releases, ledger)


CASES = [(name, False) for name in ("Uniform", "Sample", "Hybrid")] + [
    (name, True) for name in ("TSUniform", "TSSample")
]


@pytest.mark.parametrize(("name", "swellfish"), CASES)
def test_remembered_states_spend_and_release_what_evaluating_every_step_does(
    name: str, swellfish: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    remembered = _live(name, swellfish)
    with monkeypatch.context() as patch:
        patch.setattr(_common, "_int_state", lambda state: None)  # the rule at every timestamp
        evaluated = _live(name, swellfish)
    assert remembered[1] == evaluated[1]
    assert remembered[0] == evaluated[0]
    assert len(remembered[1]) >= 3


def test_swellfish_steps_of_sensitivity_zero_occur_in_the_comparison() -> None:
    """Guard the test above: the Swellfish stream has timestamps released exactly, for free."""
    ledger = bc.SwellfishLedger(POLICIES, epsilon=0.9, seed=6, sampler="numpy-laplace")
    assert any(ledger.temporal_sensitivity(t) == 0.0 for t in range(1, 46))
    assert any(ledger.temporal_sensitivity(t) > 0.0 for t in range(1, 46))


class _Counter:
    """A rule whose state (a counter) never repeats: ε/w at every timestamp."""

    purposes = ("publication",)

    def initial(self, ops: Any, env: RuleEnv) -> tuple[int]:
        return (0,)

    def charges(self, ops: Any, env: RuleEnv, state: tuple[int], decision: Any) -> tuple[Any, ...]:
        return (ops.share(env.epsilon, env.w),)

    def advance(self, ops: Any, env: RuleEnv, state: tuple[int], decision: Any, spent: Any) -> tuple[int]:
        return (state[0] + 1,)


def _counter_run() -> tuple[bytes, list[tuple[Any, ...]]]:
    ledger = bc.WindowLedger(epsilon=1.0, w=5, seed=1, sampler="numpy-laplace", keep_records=True)
    stream = bc.LiveStream(((t + 1, [float(t % 9), 2.0]) for t in range(100)), dimensions=2)
    ledger.bind(stream)
    steps: Iterator[np.ndarray] = _common.fixed_schedule(_Counter(), stream, ledger, False)  # type: ignore[arg-type]
    return _signature(np.stack([np.array(values) for values in steps], axis=1), ledger)


def test_a_rule_whose_states_never_repeat_releases_the_same_past_the_memo_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_common, "_STATES_KEPT", 16)  # cleared six times over 100 new states
    bounded = _counter_run()
    monkeypatch.setattr(_common, "_int_state", lambda state: None)
    evaluated = _counter_run()
    assert bounded == evaluated
    assert len(bounded[1]) == 100
    assert FLOAT.share(1.0, 5) * 5 <= 1.0


class _Lasso:
    """A rule whose states run 0, 1, ..., 5 and then cycle 4, 5, 4, 5, ...: a prefix before the cycle.
    It releases at states 0, 2 and 5, at a tenth of ε/w (never refused)."""

    purposes = ("publication",)

    def initial(self, ops: Any, env: RuleEnv) -> tuple[int]:
        return (0,)

    def charges(self, ops: Any, env: RuleEnv, state: tuple[int], decision: Any) -> tuple[Any, ...]:
        return (ops.where(state[0] in (0, 2, 5), ops.share(env.epsilon, 10 * env.w), 0),)

    def advance(self, ops: Any, env: RuleEnv, state: tuple[int], decision: Any, spent: Any) -> tuple[int]:
        return (state[0] + 1 if state[0] < 5 else 4,)


def _whole_and_stepped(rule: Any, length: int, w: int, runs: int) -> tuple[Any, Any]:
    """(run_fixed_schedule's releases and records, the same rule stepped timestamp by timestamp)."""
    counts = np.random.default_rng(length + w).poisson(30, size=(length, 2)).astype(float)
    out = []
    for whole in (True, False):
        if runs == 1:
            ledger = bc.WindowLedger(epsilon=0.9, w=w, seed=3, sampler="numpy-laplace", keep_records=True)
        else:  # several ε in one pass, as the benchmark stacks them
            ledger = bc.WindowLedger.with_epsilons(
                np.linspace(0.5, 2.0, runs), w, seed=3, sampler="numpy-laplace", keep_records=True
            )
        stream = bc.GuardedStream(counts)
        ledger.bind(stream)
        if whole:
            releases = _common.run_fixed_schedule(rule, stream, ledger, False)
        else:
            releases = _common.collect(_common.fixed_schedule(rule, stream, ledger, False), stream, runs)
        out.append(_signature(releases, ledger))
    return out[0], out[1]


@pytest.mark.parametrize("length", [1, 2, 7, 45])
@pytest.mark.parametrize("w", [1, 4, 10])
@pytest.mark.parametrize("runs", [1, 3])
def test_the_whole_stream_schedule_follows_the_cycle_of_the_rules_states(length: int, w: int, runs: int) -> None:
    """run_fixed_schedule stops evaluating the rule at the first repeated state and repeats the
    schedule from there: against the rule stepped at every timestamp, the same records and releases,
    bit for bit, for Uniform, Sample, a hybrid of period 3, a rule with a prefix before its cycle and
    one whose states never repeat."""
    for rule in (BUILTIN["Uniform"]().allocation_rule(), BUILTIN["Sample"]().allocation_rule(), _Lasso()):
        whole, stepped = _whole_and_stepped(rule, length, w, runs)
        assert whole[1] == stepped[1] and whole[0] == stepped[0]
    hybrid = type(BUILTIN["Uniform"]().allocation_rule())(every=3)
    assert _whole_and_stepped(hybrid, length, w, runs)[0] == _whole_and_stepped(hybrid, length, w, runs)[1]
    counter = _whole_and_stepped(_Counter(), length, w, runs)
    assert counter[0] == counter[1] and len(counter[0][1]) == length
