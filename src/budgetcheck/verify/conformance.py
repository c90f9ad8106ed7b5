"""Rule conformance: the charges a run actually made are ones its proved allocation rule allows.

``budgetcheck prove`` proves a rule (``allocation_rule()``) as a transition system: from any state
satisfying its invariant, for either decision and any actual spends 0 <= x_p <= the rule's charge
for purpose p, every window stays within ε and the invariant holds again (proving.py, step 2). So
a run is covered by the proof exactly when some decision sequence explains its charges: at every
timestamp, for some decision, each purpose's spend is at most the rule's charge, and the rule's
state advances with that decision and those spends. This module simulates the rule's float
back-end (the code the mechanism runs) on the recorded charges, keeping every state a decision
consistent with them reaches, and names the first timestamp no state explains.

Per notion the rule runs with (ε, w) (w-event), (ε, max |J|) (Swellfish, Theorem 4.3), or per
requirement class with (ε_c, w_c) or the strictest requirement (personalized, Du et al. 2025).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from budgetcheck.ledger.notion import Notion
from budgetcheck.ledger.records import SpendRecord
from budgetcheck.ops import FLOAT, per_run
from budgetcheck.proving import AllocationRule, RuleEnv

if TYPE_CHECKING:  # explore imports this module to check each run: a Setting is only named here
    from budgetcheck.verify.explore import Setting

STATES_KEPT = 16  # states consistent with the charges so far; beyond this the check stops (never a false alarm)
UNDECIDED = "undecided: too many rule states explain the charges to follow them"


def _key(value: Any) -> Any:
    if isinstance(value, (tuple, list)):
        return tuple(_key(item) for item in value)
    if isinstance(value, (np.ndarray, np.generic, int, float, bool)):
        array = np.asarray(value)
        return (array.dtype.str, array.shape, array.tobytes())
    return repr(value)


def _distinct(states: list[Any]) -> list[Any]:
    """The states without repeats (by their exact bits)."""
    if len(states) < 2:
        return states
    kept: dict[Any, Any] = {}
    for state in states:
        kept.setdefault(_key(state), state)
    return list(kept.values())


def _scalar(value: Any) -> float:
    return float(np.asarray(value, dtype=np.float64).reshape(-1)[0])


def _charges_by_t(records: Sequence[SpendRecord], column: int | None) -> dict[int, dict[str, float]]:
    """Per timestamp, the (positive) amount charged per purpose of run 0 (column c: class c)."""
    spent: dict[int, dict[str, float]] = {}
    for record in records:
        amounts = np.asarray(record.amounts, dtype=np.float64)
        amount = float(amounts[0] if column is None else amounts[0, column])
        if amount > 0.0:
            row = spent.setdefault(record.t, {})
            row[record.purpose] = row.get(record.purpose, 0.0) + amount
    return spent


def departure(rule: AllocationRule, env: RuleEnv, spent: dict[int, dict[str, float]], length: int) -> str | None:
    """The first timestamp whose charges no decision of the rule allows, None if every step is
    explained, or :data:`UNDECIDED`.

    First follows one explanation where a step's spends are below both decisions' charges (the
    skip: e.g. a Swellfish timestamp released exactly for free), which keeps the states few; a
    departure found that way is confirmed by following every explanation (never a false alarm)."""
    found = _departure(rule, env, spent, length, prefer_skip=True)
    if found is None or found == UNDECIDED:
        return found
    return _departure(rule, env, spent, length, prefer_skip=False)


def _departure(
    rule: AllocationRule, env: RuleEnv, spent: dict[int, dict[str, float]], length: int, *, prefer_skip: bool
) -> str | None:
    purposes = tuple(rule.purposes)
    states: list[Any] = [per_run(rule.initial(FLOAT, env), 1)]
    for t in range(1, length + 1):
        observed = spent.get(t, {})
        unknown = sorted(set(observed) - set(purposes))
        if unknown:
            return f"t={t}: charged {unknown} ({observed}), a purpose the rule {list(purposes)} does not have"
        x = tuple(observed.get(p, 0.0) for p in purposes)
        exact: list[tuple[bool, Any]] = []
        within: list[tuple[bool, Any]] = []
        allowed: dict[bool, tuple[float, ...]] = {}
        for state in states:
            for decision in (False, True):
                choice = np.array([decision])
                charges = tuple(_scalar(c) for c in rule.charges(FLOAT, env, state, choice))
                allowed.setdefault(decision, charges)
                if all(0.0 <= xi <= ci for xi, ci in zip(x, charges, strict=True)):
                    following = rule.advance(FLOAT, env, state, choice, tuple(np.array([xi]) for xi in x))
                    (exact if x == charges else within).append((decision, following))
        if not exact and prefer_skip and any(not d for d, _ in within):
            within = [(d, state) for d, state in within if not d]
        found = _distinct([state for _, state in exact or within])
        if not found:
            rule_text = "; ".join(
                f"decision {d}: {dict(zip(purposes, c, strict=True))}" for d, c in sorted(allowed.items())
            )
            among = f", from the first of {len(states)} states" if len(states) > 1 else ""
            return (
                f"t={t}: the mechanism charged {dict(zip(purposes, x, strict=True))}, more than the rule allows "
                f"for any decision ({rule_text}{among})"
            )
        if len(found) > STATES_KEPT:
            return UNDECIDED  # too many explanations to follow: no verdict, never a false alarm
        states = found
    return None


def first_departure(rule: AllocationRule, setting: Setting, records: Sequence[SpendRecord]) -> str | None:
    """Where an explored run's charges leave the rule (see the module docstring), None, or :data:`UNDECIDED`.

    A rule whose split depends on the stream's d (``for_dimensions``, e.g. Kellaris §4.5's shifted
    budget) is followed as the run's stream made it."""
    for_dimensions = getattr(rule, "for_dimensions", None)
    if callable(for_dimensions):
        rule = for_dimensions(setting.dimensions)
    if setting.notion == Notion.PERSONALIZED:
        strictest = RuleEnv(min(eps for _, eps, _ in setting.classes), max(w for w, _, _ in setting.classes))
        for c, (w, eps, _) in enumerate(setting.classes):
            spent = _charges_by_t(records, c)
            own = departure(rule, RuleEnv(eps, w), spent, setting.length)
            if own is None:
                continue
            strict = departure(rule, strictest, spent, setting.length)
            if strict is None:
                continue
            if UNDECIDED in (own, strict):
                return UNDECIDED
            return f"class {c} (w={w}, epsilon={eps}): {own}"
        return None
    env = RuleEnv(setting.epsilon, setting.window)
    return departure(rule, env, _charges_by_t(records, None), setting.length)
