"""Pieces shared by the built-in mechanisms; they use budgetcheck's public API only."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np
from numpy.typing import NDArray

from budgetcheck import GuardedStream, InvalidArgument, LiveStream, PersonalizedStream, SwellfishLedger, WindowLedger
from budgetcheck.ledger.grid import grid_session
from budgetcheck.ops import FLOAT, per_run
from budgetcheck.proving import AllocationRule, RuleEnv

FloatArray = NDArray[np.float64]
Ledger = WindowLedger | SwellfishLedger
Stream = GuardedStream | LiveStream


def rule_env(ledger: Ledger) -> RuleEnv:
    """(ε, w) of the rule: the ledger's; for Swellfish the w-event baseline w = max |J| (Theorem 4.3)."""
    if isinstance(ledger, SwellfishLedger):
        return RuleEnv(ledger.epsilon, ledger.policies.max_interval)
    return RuleEnv(ledger.epsilon, ledger.w)  # ε per run on a ledger of several ε (WindowLedger.with_epsilons)


def rule_start(rule: AllocationRule, ledger: Ledger) -> tuple[RuleEnv, tuple[Any, ...]]:
    """Where a rule-driven ``releases`` starts: the rule's (ε, w) on ``ledger`` (:func:`rule_env`)
    and its initial state, one per run (:func:`budgetcheck.ops.per_run`: ints stay int64)."""
    env = rule_env(ledger)
    return env, per_run(rule.initial(FLOAT, env), ledger.runs)


def per_run_budget(value: Any) -> float | FloatArray:
    """A budget a rule computed from ε: a float, or (on a ledger of several ε) the per-run array (runs,)."""
    return np.asarray(value, dtype=np.float64).reshape(-1) if np.ndim(value) else float(value)


def per_run_column(value: float | FloatArray) -> float | FloatArray:
    """A per-run value shaped to broadcast against (runs, d) arrays: a float stays a float."""
    return value if isinstance(value, float) else value.reshape(-1, 1)


def sensitivity_at(ledger: Ledger, t: int) -> float:
    """The sensitivity the noise of a release at t has: 1 (w-event), Δ_Q^t(Φ) (Swellfish, Theorem 4.1)."""
    return ledger.temporal_sensitivity(t) if isinstance(ledger, SwellfishLedger) else 1.0


def truncate(values: FloatArray) -> FloatArray:
    """The benchmark's FILTERING by truncation: max(0, round(p)) (Schäler et al. 2022, §2.2)."""
    return np.maximum(0.0, np.round(values))


def filtered(values: FloatArray, enabled: bool) -> FloatArray:
    """Apply truncation when ``enabled``; otherwise return the perturbed values unchanged."""
    return truncate(values) if enabled else values


def empty_releases(runs: int, length: int, dimensions: int) -> FloatArray:
    """The (runs, T, d) output array of a mechanism."""
    return np.zeros((runs, length, dimensions), dtype=np.float64)


class StepByStep:
    """Base of a mechanism that defines :meth:`releases` and gets :meth:`run` from it."""

    __slots__ = ()

    def releases(self, stream: Any, ledger: Any) -> Iterator[FloatArray]:
        """The release of every timestamp as it arrives (a live stream; ``budgetcheck publish``)."""
        raise NotImplementedError

    def run(self, stream: GuardedStream | PersonalizedStream, ledger: Any) -> FloatArray:
        """The (runs, T, d) array of :meth:`releases` over the whole stream."""
        return collect(self.releases(stream, ledger), stream, ledger.runs)


def collect(releases: Iterator[FloatArray], stream: GuardedStream | PersonalizedStream, runs: int) -> FloatArray:
    """The (runs, T, d) array of a mechanism's per-timestamp releases: a view of a time-major
    (T, runs, d) array, so that each timestamp's releases are written as one contiguous block."""
    out = np.zeros((stream.length, runs, stream.dimensions), dtype=np.float64)
    for t, values in enumerate(releases):
        out[t] = values
    return np.asarray(out.transpose(1, 0, 2), dtype=np.float64)


def run_fixed_schedule(rule: AllocationRule, stream: GuardedStream, ledger: Ledger, filtering: bool) -> FloatArray:
    """:func:`fixed_schedule` over a whole stream: on a w-event ledger the schedule's releases are
    one ``laplace_series`` (the same records and releases, bit for bit, as the step-by-step run)."""
    if not isinstance(ledger, WindowLedger):
        return collect(fixed_schedule(rule, stream, ledger, filtering), stream, ledger.runs)
    env = rule_env(ledger)
    state = rule.initial(FLOAT, env)
    schedule: list[float | FloatArray | None] = []  # per timestamp: the budgets of its release, None: none
    first: dict[tuple[tuple[str, bytes], ...], int] = {}  # see _state_key: state -> index of its first timestamp
    for index in range(stream.length):
        key = _state_key(state)
        if key is not None:
            start = first.setdefault(key, index)
            if start < index:  # the state repeats, and with it the schedule: the rest follows the cycle
                period = index - start
                schedule += [schedule[start + (later - start) % period] for later in range(index, stream.length)]
                break
        (budget,) = rule.charges(FLOAT, env, state, True)
        schedule.append(per_run_budget(budget) if _scheduled(budget) else None)
        state = rule.advance(FLOAT, env, state, True, (budget,))
    released = np.array([budgets is not None for budgets in schedule], dtype=np.int64)
    secrets = [stream.secret(index + 1) for index in np.flatnonzero(released).tolist()]
    budgets = [budgets for budgets in schedule if budgets is not None]
    latest = np.cumsum(released)  # per t: how many releases so far (its latest is the last of them)
    if not secrets:
        return empty_releases(ledger.runs, stream.length, stream.dimensions)
    noisy = filtered(ledger.laplace_series(secrets, np.array(budgets), purpose="publication"), filtering)
    if latest[0] == 0:  # before the first release: zeros
        noisy = np.concatenate([empty_releases(ledger.runs, 1, stream.dimensions), noisy], axis=1)
        latest = latest + 1
    return noisy if len(secrets) == stream.length else np.asarray(noisy[:, latest - 1], dtype=np.float64)


def _state_key(state: Any) -> tuple[tuple[str, bytes], ...] | None:
    """The exact bits of a rule state made of scalars (a fixed schedule's counters), else None.

    A rule's charges and advance are functions of (ε, w, state) (what ``budgetcheck prove`` proves),
    so once a fixed schedule reaches a state it has been in, its schedule repeats from there:
    :func:`run_fixed_schedule` evaluates the rule until then (w or fewer times, not T)."""
    if not isinstance(state, tuple):
        return None
    parts = []
    for part in state:
        value = np.asarray(part)
        if value.ndim or value.dtype.kind not in "biuf":
            return None
        parts.append((value.dtype.str, value.tobytes()))
    return tuple(parts)


def _scheduled(budget: Any) -> bool:
    """Whether a data-independent rule releases now: its budget is > 0 in every run (or in none)."""
    positive = np.asarray(budget) > 0
    if positive.any() and not positive.all():
        raise InvalidArgument(
            "a fixed schedule must release in every run or in none; its budget is 0 in some runs only"
        )
    return bool(positive.all())


def run_dissimilarity_framework(
    rule: AllocationRule, stream: GuardedStream, ledger: Ledger, filtering: bool
) -> FloatArray:
    """:func:`dissimilarity_framework` over a whole stream."""
    return collect(dissimilarity_framework(rule, stream, ledger, filtering), stream, ledger.runs)


def fixed_schedule(rule: AllocationRule, stream: Stream, ledger: Ledger, filtering: bool) -> Iterator[FloatArray]:
    """A data-independent rule with one 'publication' charge: release when it allots a budget, else repeat.

    Used by Uniform, Sample and Hybrid (and TSUniform/TSSample on a Swellfish ledger, which release
    the true value for free where Δ_Q^t = 0); the schedule is the rule's, so the proof covers it.
    """
    env = rule_env(ledger)
    state = rule.initial(FLOAT, env)
    last = np.zeros((ledger.runs, stream.dimensions))
    steps: dict[tuple[int, ...], tuple[Any, Any]] = {}  # see _int_state
    temporal = isinstance(ledger, SwellfishLedger)  # asked once: a w-event ledger's sensitivity is 1 at every t
    for secret in stream:
        key = _int_state(state)
        step = steps.get(key) if key is not None else None
        if step is None:
            (budget,) = rule.charges(FLOAT, env, state, True)
            step = (budget, rule.advance(FLOAT, env, state, True, (budget,)))
            if key is not None:
                if len(steps) >= _STATES_KEPT:
                    steps.clear()
                steps[key] = step
        budget, after = step
        if temporal and sensitivity_at(ledger, secret.t) == 0.0:
            assert isinstance(ledger, SwellfishLedger)
            last = ledger.release_exact(secret)
            after = rule.advance(FLOAT, env, state, True, (0.0,))
        elif type(budget) in (float, int):  # a rule on plain numbers (a float ε): no array round trip
            if budget > 0:
                last = filtered(ledger.laplace(secret, float(budget), purpose="publication"), filtering)
        elif _scheduled(budget):
            last = filtered(ledger.laplace(secret, per_run_budget(budget), purpose="publication"), filtering)
        state = after
        yield last


_STATES_KEPT = 4096  # rule states remembered by fixed_schedule (a periodic rule has w or fewer)


def _int_state(state: Any) -> tuple[int, ...] | None:
    """A rule state of plain Python ints (a fixed schedule's counters, one run), else None.

    The rule's charges and advance are functions of (ε, w, state), what ``budgetcheck prove`` proves,
    so :func:`fixed_schedule` evaluates them once per state it reaches and reuses the results, as
    :func:`_state_key` lets :func:`run_fixed_schedule` do for a whole stream."""
    if type(state) is not tuple:
        return None
    for part in state:
        if type(part) is not int:
            return None
    return state


def dissimilarity_framework(
    rule: AllocationRule, stream: Stream, ledger: Ledger, filtering: bool
) -> Iterator[FloatArray]:
    """Kellaris et al. 2014, Figure 1: M_{t,1} (noisy dissimilarity) then M_{t,2} (publish or null).

    The rule gives (dissimilarity budget, publication budget ε_{t,2}) per run; the run publishes
    iff ε_{t,2} > 0 and the noisy dissimilarity exceeds the noise error Δ/ε_{t,2} (BD line 7, BA
    line 10; Δ = 1, or Δ_Q^t for the TS variants on a Swellfish ledger, which release the true
    value for free where Δ_Q^t = 0 and then spend nothing, a skip the rule's proof covers). Before
    any release the last release is the all-zero vector. Vectorised over runs; one run under one ε
    (a live publisher) runs the rule on plain numbers instead (:func:`_one_run_dissimilarity`).
    """
    env = rule_env(ledger)
    if ledger.runs == 1 and type(env.epsilon) is float:
        yield from _one_run_dissimilarity(rule, env, stream, ledger, filtering)
    else:
        yield from _dissimilarity_runs(rule, env, stream, ledger, filtering)


def _dissimilarity_runs(
    rule: AllocationRule, env: RuleEnv, stream: Stream, ledger: Ledger, filtering: bool
) -> Iterator[FloatArray]:
    """:func:`dissimilarity_framework` vectorised over the ledger's runs."""
    runs = ledger.runs
    state = per_run(rule.initial(FLOAT, env), runs)  # ints stay int64
    wants = np.full(runs, True)
    last = np.zeros((runs, stream.dimensions))
    # the benchmark's pass: the ledger's operations as one compiled check-and-commit and draw each (the same
    # charges, records and releases; ledger.grid)
    session = grid_session(ledger, stream, ("dissimilarity", "publication"))
    if session is not None:  # and the proved rule compiled from its own source (kernel_ops), where it applies
        from mechanisms._compiled import compiled_runs

        compiled = compiled_runs(rule, env, stream, session, runs, stream.dimensions, filtering)
        if compiled is not None:
            yield from compiled
            return
    charged: Any = session or ledger
    for secret in stream:
        dissimilarity_budget, candidate = rule.charges(FLOAT, env, state, wants)
        delta = sensitivity_at(ledger, secret.t)
        if delta == 0.0:
            assert isinstance(ledger, SwellfishLedger)
            last = ledger.release_exact(secret)
            nothing = np.zeros(runs)
            state = rule.advance(FLOAT, env, state, np.full(runs, False), (nothing, nothing))
            yield last
            continue
        dissimilarity_budget = np.broadcast_to(dissimilarity_budget, (runs,))
        if (dissimilarity_budget > 0).any():
            dis = charged.dissimilarity(secret, last, dissimilarity_budget)
        else:
            dis = np.full(runs, np.nan)
        with np.errstate(divide="ignore", over="ignore"):  # ε = 0: inf; a subnormal ε: inf (never publishes)
            threshold = delta / candidate
        publish = (candidate > 0.0) & (dis > threshold)
        spent = np.where(publish, candidate, 0.0)
        if publish.any():
            noisy = charged.laplace(secret, spent, purpose="publication")
            last = np.where(publish[:, None], filtered(noisy, filtering), last)  # NaN only in the rows not taken
        state = rule.advance(FLOAT, env, state, publish, (dissimilarity_budget, spent))
        yield last


def _one_run_dissimilarity(
    rule: AllocationRule, env: RuleEnv, stream: Stream, ledger: Ledger, filtering: bool
) -> Iterator[FloatArray]:
    """:func:`dissimilarity_framework` for one run: the rule's state, budgets and decisions are plain
    Python numbers (``FLOAT`` on scalars gives the doubles it gives on arrays of one run), so a step
    costs the ledger's two charged operations and little else. The same charges, in the same order,
    with the same amounts and releases, bit for bit, as :func:`_dissimilarity_runs` on one run."""
    state = rule.initial(FLOAT, env)
    last = np.zeros((1, stream.dimensions))
    temporal = isinstance(ledger, SwellfishLedger)  # asked once: a w-event ledger's sensitivity is 1 at every t
    for secret in stream:
        dissimilarity_budget, candidate = rule.charges(FLOAT, env, state, True)
        if type(dissimilarity_budget) is not float or type(candidate) is not float:
            dissimilarity_budget, candidate = _plain(dissimilarity_budget), _plain(candidate)
        delta = sensitivity_at(ledger, secret.t) if temporal else 1.0
        if delta == 0.0:
            assert isinstance(ledger, SwellfishLedger)
            last = ledger.release_exact(secret)
            state = rule.advance(FLOAT, env, state, False, (0.0, 0.0))
            yield last
            continue
        dis = (
            float(ledger.dissimilarity(secret, last, dissimilarity_budget)[0])
            if dissimilarity_budget > 0.0
            else math.nan
        )
        publish = candidate > 0.0 and dis > delta / candidate  # a NaN dissimilarity never publishes
        spent = candidate if publish else 0.0
        if publish:
            last = np.array(filtered(ledger.laplace(secret, spent, purpose="publication"), filtering), dtype=np.float64)
        state = rule.advance(FLOAT, env, state, publish, (dissimilarity_budget, spent))
        yield last


def _plain(value: Any) -> float:
    """A rule's budget for one run as a Python float (it is one already when ε is a float)."""
    return value if type(value) is float else float(np.asarray(value, dtype=np.float64).reshape(()))
