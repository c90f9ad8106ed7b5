"""The budget allocation rules of the built-in mechanisms, written once over ``budgetcheck.ops``.

Each mechanism runs its rule with ``budgetcheck.ops.FLOAT`` (numpy, vectorised over runs, budgets
rounded down); ``budgetcheck prove`` runs the *same* functions on Z3 terms with every
data-dependent decision a free Boolean. States are tuples; histories are oldest first. Each rule
also writes down the strengthened invariant that makes 1-induction go through.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import attrs

from budgetcheck import InvalidArgument
from budgetcheck.ops import Ops
from budgetcheck.proving import RuleEnv, State, symbol_int, symbol_real


def bd_candidate(ops: Ops, half_epsilon: Any, recent_publications: Sequence[Any]) -> Any:
    """BD's ε_{t,2} = (ε/2 − Σ_{k=t−w+1}^{t−1} ε_{k,2}) / 2 (Kellaris et al. 2014, Fig. 2 lines 5-6)."""
    return ops.half_down(ops.sub_down(half_epsilon, ops.sum_up(recent_publications)))


def ba_shares(ops: Ops, age: Any, last_shares: Any, w: int) -> tuple[Any, Any]:
    """BA's nullification and share count at t (Kellaris et al. 2014, Fig. 4 lines 5-9).

    ``age`` = t − l for the last publication l, which took ``last_shares`` shares of ε/(2w).
    Nullified iff t − l <= to_nullify = last_shares − 1; otherwise the publication budget is
    min(to_absorb, w) shares with to_absorb = t − (l + to_nullify).
    """
    to_nullify = last_shares - 1
    nullified = age <= to_nullify
    to_absorb = age - to_nullify
    shares = ops.where(nullified, 0, ops.minimum(to_absorb, w))
    return nullified, shares


@attrs.frozen
class BDRule:
    """BD (Kellaris et al. 2014, Fig. 2): dissimilarity share(ε, 2w), publication bd_candidate.

    State: the publication budgets of the last w − 1 timestamps. Invariant: each >= 0, their sum
    <= half := share(ε, 2), and every recent total <= share(ε, 2w) + its publication budget.
    """

    purposes: tuple[str, ...] = ("dissimilarity", "publication")

    def initial(self, ops: Ops, env: RuleEnv) -> State:
        return tuple(0.0 for _ in range(env.w - 1))

    def arbitrary(self, env: RuleEnv, tag: str) -> State:
        return tuple(symbol_real(f"{tag}_p{j}") for j in range(env.w - 1))

    def charges(self, ops: Ops, env: RuleEnv, state: State, decision: Any) -> tuple[Any, ...]:
        candidate = bd_candidate(ops, ops.share(env.epsilon, 2), state)
        return (ops.share(env.epsilon, 2 * env.w), ops.where(decision, candidate, 0))

    def advance(self, ops: Ops, env: RuleEnv, state: State, decision: Any, spent: tuple[Any, ...]) -> State:
        return ops.slide(state, spent[1])

    def invariant(self, ops: Ops, env: RuleEnv, state: State, recent: Sequence[Any]) -> Any:
        unit, half = ops.share(env.epsilon, 2 * env.w), ops.share(env.epsilon, 2)
        terms = [p >= 0 for p in state] + [ops.sum_up(state) <= half]
        terms += [r <= unit + p for r, p in zip(recent, state, strict=True)]
        return ops.all_of(terms)


@attrs.frozen
class BARule:
    """BA (Kellaris et al. 2014, Fig. 4) with integer shares of u = share(ε, 2w).

    State (a, k, S): a = t − l for the last publication l (kept at most 2w: any a >= w + k − 1
    behaves the same), k its share count, and a ghost S = (S_1..S_{w−1}) (``ops.ghost``: only the
    invariant reads it, the float back-end skips it), S_m = the publication budget actually spent
    at the last m timestamps (prefix sums keep the proof linear in w). Initially a
    virtual publication at l = 0 with one share: (1, 1, 0, ...). Invariant (Kellaris Theorem 5,
    made inductive): 1 <= k <= w, 1 <= a <= 2w, 0 <= S_1 <= S_2 <= ...; S_m = 0 if m < a and
    S_m <= u·(m − a + k) otherwise; S_{w−1} <= u·w; the recent total at age m is at most
    u + S_m − S_{m−1}. Products u·k stay linear in Z3 through ``mul_down(..., at_most=...)``.
    """

    dissimilarity_when_nullified: bool = True
    purposes: tuple[str, ...] = ("dissimilarity", "publication")

    def initial(self, ops: Ops, env: RuleEnv) -> State:
        return (1, 1, ops.ghost(lambda: tuple(0.0 for _ in range(env.w - 1))))

    def arbitrary(self, env: RuleEnv, tag: str) -> State:
        return (
            symbol_int(f"{tag}_a"),
            symbol_int(f"{tag}_k"),
            tuple(symbol_real(f"{tag}_S{m}") for m in range(1, env.w)),
        )

    def publishes(self, ops: Ops, env: RuleEnv, state: State, decision: Any) -> tuple[Any, Any, Any]:
        """(nullified, shares, publish) at this timestamp."""
        nullified, shares = ba_shares(ops, state[0], state[1], env.w)
        return nullified, shares, ops.both(decision, ops.negate(nullified))

    def charges(self, ops: Ops, env: RuleEnv, state: State, decision: Any) -> tuple[Any, ...]:
        unit = ops.share(env.epsilon, 2 * env.w)
        nullified, shares, publish = self.publishes(ops, env, state, decision)
        dissimilarity = unit if self.dissimilarity_when_nullified else ops.where(nullified, 0, unit)
        return (dissimilarity, ops.where(publish, ops.mul_down(unit, shares, at_most=env.w), 0))

    def advance(self, ops: Ops, env: RuleEnv, state: State, decision: Any, spent: tuple[Any, ...]) -> State:
        _, shares, publish = self.publishes(ops, env, state, decision)
        age = ops.where(publish, 1, ops.minimum(state[0] + 1, 2 * env.w))
        last_shares = ops.where(publish, shares, state[1])
        prefix = state[2]
        sums = ops.ghost(lambda: tuple(spent[1] + previous for previous in (0, *prefix[:-1])) if env.w > 1 else ())
        return (age, last_shares, sums)

    def invariant(self, ops: Ops, env: RuleEnv, state: State, recent: Sequence[Any]) -> Any:
        w = env.w
        unit = ops.share(env.epsilon, 2 * w)
        age, last_shares, sums = state
        last_budget = ops.mul_down(unit, last_shares, at_most=w)
        age_budget = ops.mul_down(unit, age, at_most=2 * w)
        terms = [last_shares >= 1, last_shares <= w, age >= 1, age <= 2 * w]
        previous: Any = 0
        for m in range(1, w):
            current = sums[m - 1]
            bound = ops.mul_down(unit, m) + last_budget
            terms += [current >= previous, recent[w - 1 - m] <= unit + current - previous]
            terms.append(ops.where(m < age, current == 0, current + age_budget <= bound))
            previous = current
        terms.append(previous <= ops.mul_down(unit, w))
        return ops.all_of(terms)


@attrs.frozen
class PeriodicRule:
    """share(ε, ceil(w/x)) at every x-th timestamp: Uniform (x = 1), Sample (x = w, the default)
    and the Uniform–Sample hybrid in between (Kellaris et al. 2014, §3; Schäler et al. 2022).

    A window of w timestamps holds at most ceil(w/x) sampling points. (The benchmark states the
    hybrid as x·ε/w, which equals this when x divides w and overspends otherwise, e.g. w = 5,
    x = 2: 6ε/5.) State: c = (t − 1) mod x for the next t. Invariant: 0 <= c < x; a recent
    timestamp of age a spent at most the share if a ≡ c (mod x), else nothing.
    """

    every: int | None = None
    purposes: tuple[str, ...] = ("publication",)

    def period(self, env: RuleEnv) -> int:
        return env.w if self.every is None else self.every

    def share(self, ops: Ops, env: RuleEnv) -> Any:
        return ops.share(env.epsilon, -(-env.w // self.period(env)))

    def initial(self, ops: Ops, env: RuleEnv) -> State:
        return (0,)

    def arbitrary(self, env: RuleEnv, tag: str) -> State:
        return (symbol_int(f"{tag}_c"),)

    def charges(self, ops: Ops, env: RuleEnv, state: State, decision: Any) -> tuple[Any, ...]:
        return (ops.where(state[0] == 0, self.share(ops, env), 0),)

    def advance(self, ops: Ops, env: RuleEnv, state: State, decision: Any, spent: tuple[Any, ...]) -> State:
        return (ops.where(state[0] == self.period(env) - 1, 0, state[0] + 1),)

    def invariant(self, ops: Ops, env: RuleEnv, state: State, recent: Sequence[Any]) -> Any:
        (c,) = state
        period, unit = self.period(env), self.share(ops, env)
        terms = [c >= 0, c <= period - 1]
        for age in range(1, env.w):
            value = recent[env.w - 1 - age]
            terms.append(ops.where(c == age % period, value <= unit, value == 0))  # 0 <= c < period
        return ops.all_of(terms)


@functools.lru_cache(maxsize=256)
def _fraction_parts(value: float, name: str) -> tuple[int, int]:
    """A float in (0, 1] as an exact (numerator, denominator) with a small denominator."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < value <= 1.0:
        raise InvalidArgument(f"{name}={value!r} must be a number in (0, 1]")
    exact = Fraction(str(value)).limit_denominator(10_000)
    return exact.numerator, exact.denominator


@attrs.frozen
class SplitUniformRule:
    """ε/w at every timestamp, split in integer weights between purposes (PeGaSus, AdaPub).

    With u = share(ε, w·Σweights) purpose i gets weights[i]·u at every timestamp (default 4:1, the
    0.8/0.2 perturbation/grouping split of PeGaSus and AdaPub). Invariant: every recent total is
    in [0, w_total·u].
    """

    weights: tuple[int, ...] = (4, 1)
    purposes: tuple[str, ...] = ("perturbation", "grouping")

    def unit(self, ops: Ops, env: RuleEnv) -> Any:
        return ops.share(env.epsilon, env.w * sum(self.weights))

    def initial(self, ops: Ops, env: RuleEnv) -> State:
        return ()

    def arbitrary(self, env: RuleEnv, tag: str) -> State:
        return ()

    def charges(self, ops: Ops, env: RuleEnv, state: State, decision: Any) -> tuple[Any, ...]:
        unit = self.unit(ops, env)
        return tuple(ops.mul_down(unit, weight) for weight in self.weights)

    def advance(self, ops: Ops, env: RuleEnv, state: State, decision: Any, spent: tuple[Any, ...]) -> State:
        return ()

    def invariant(self, ops: Ops, env: RuleEnv, state: State, recent: Sequence[Any]) -> Any:
        top = ops.mul_down(self.unit(ops, env), sum(self.weights))
        return ops.all_of([r >= 0 for r in recent] + [r <= top for r in recent])


@attrs.frozen
class BlockRule:
    """FAST_w (Kellaris et al. 2014, §3, after Fan & Xiong 2014): disjoint blocks of w timestamps,
    each a FAST run with α = ε/2 and at most M samples of α/M = share(ε, 2M).

    A window touches at most two blocks, so it holds at most 2M samples. The decision is "the
    PID controller asks for a sample"; the rule grants it while the block has used fewer than M.
    State (j, m): position in the block and samples used in it. Invariant: 0 <= j < w,
    0 <= m <= M, every recent total in [0, u], the recent totals of this block (ages <= j) sum to
    at most m·u and the older ones to at most M·u.
    """

    ratio: float = 0.15
    purposes: tuple[str, ...] = ("publication",)

    def samples(self, env: RuleEnv) -> int:
        """M = max(1, ⌊ratio·w⌋): FAST's sample limit for a block of N = w timestamps."""
        return max(1, int(self.ratio * env.w))

    def unit(self, ops: Ops, env: RuleEnv) -> Any:
        return ops.share(env.epsilon, 2 * self.samples(env))

    def initial(self, ops: Ops, env: RuleEnv) -> State:
        return (0, 0)

    def arbitrary(self, env: RuleEnv, tag: str) -> State:
        return (symbol_int(f"{tag}_j"), symbol_int(f"{tag}_m"))

    def grants(self, ops: Ops, env: RuleEnv, state: State, decision: Any) -> Any:
        return ops.both(decision, state[1] < self.samples(env))

    def charges(self, ops: Ops, env: RuleEnv, state: State, decision: Any) -> tuple[Any, ...]:
        return (ops.where(self.grants(ops, env, state, decision), self.unit(ops, env), 0),)

    def advance(self, ops: Ops, env: RuleEnv, state: State, decision: Any, spent: tuple[Any, ...]) -> State:
        j, m = state
        used = m + ops.where(self.grants(ops, env, state, decision), 1, 0)
        last = j == env.w - 1
        return (ops.where(last, 0, j + 1), ops.where(last, 0, used))

    def invariant(self, ops: Ops, env: RuleEnv, state: State, recent: Sequence[Any]) -> Any:
        j, m = state
        unit = self.unit(ops, env)
        ages = range(1, env.w)
        current = ops.sum_up([ops.where(age <= j, recent[env.w - 1 - age], 0) for age in ages])
        older = ops.sum_up([ops.where(age > j, recent[env.w - 1 - age], 0) for age in ages])
        samples = self.samples(env)
        terms = [j >= 0, j <= env.w - 1, m >= 0, m <= samples]
        terms += [r >= 0 for r in recent] + [r <= unit for r in recent]
        terms += [current <= ops.mul_down(unit, m, at_most=samples), older <= ops.mul_down(unit, samples)]
        return ops.all_of(terms)


@attrs.frozen
class RemainingFractionRule:
    """RescueDP's adaptive budget (Wang et al. 2016, §IV-C): ε_t = min(p·ε_rm, ε_max), where
    ε_rm = ε − Σ_{k=t−w+1}^{t−1} ε_k, p <= p_max and ε_max = ε/cap_parts.

    The rule grants the largest such budget, p = p_max; the mechanism spends p_l·ε_rm <= it for
    each location and the ledger charges the maximum over locations (accounting rules §2), which
    the prover's "actual spend <= budget" covers. State: the w − 1 recent totals. Invariant: each
    >= 0 and their sum <= ε.
    """

    max_fraction: float = 0.6
    cap_parts: int = 5
    purposes: tuple[str, ...] = ("publication",)

    def remaining(self, ops: Ops, env: RuleEnv, state: State) -> Any:
        return ops.sub_down(env.epsilon, ops.sum_up(state))

    def initial(self, ops: Ops, env: RuleEnv) -> State:
        return tuple(0.0 for _ in range(env.w - 1))

    def arbitrary(self, env: RuleEnv, tag: str) -> State:
        return tuple(symbol_real(f"{tag}_r{j}") for j in range(env.w - 1))

    def grant(self, ops: Ops, env: RuleEnv, remaining: Any) -> Any:
        """min(p_max·remaining, ε/cap_parts): the most a location may spend given what remains."""
        numerator, denominator = _fraction_parts(self.max_fraction, "max_fraction")
        return ops.minimum(ops.fraction_down(remaining, numerator, denominator), ops.share(env.epsilon, self.cap_parts))

    def charges(self, ops: Ops, env: RuleEnv, state: State, decision: Any) -> tuple[Any, ...]:
        return (ops.where(decision, self.grant(ops, env, self.remaining(ops, env, state)), 0),)

    def advance(self, ops: Ops, env: RuleEnv, state: State, decision: Any, spent: tuple[Any, ...]) -> State:
        return ops.slide(state, spent[0])

    def invariant(self, ops: Ops, env: RuleEnv, state: State, recent: Sequence[Any]) -> Any:
        terms = [s >= 0 for s in state] + [ops.sum_up(list(state)) <= env.epsilon]
        terms += [r == s for r, s in zip(recent, state, strict=True)]
        return ops.all_of(terms)


@attrs.frozen
class DistanceTestRule:
    """DSAT_w made sound (Li et al. 2015; accounting rules §4-5): a private row count, a distance
    test charged into every window, and at most C samples per window.

    With u = share(ε, 10w²): the row count takes w²·u <= ε/10 once, at t = 1; of the remaining
    ε' = 9w²·u the tests take ε₁ = (1 − C/w)ε' (9(w − C)·u each, w per window) and a sample ε'/w
    = 9w·u (the paper's Theorem 5.4 k saturates at 1 − C/w), at most C per window. State (a,
    (f_1..f_{w−1})): a = min(t − 1, w) and the sample flags of the last w − 1 timestamps (a window
the float back-end keeps a running count of: ``ops.slide``/``ops.count``). Invariant:
    flags in {0, 1} and 0 where the timestamp is before t = 1; recent totals bounded by their
    test, flagged sample and (at age a) the count.
    """

    rate: float = 0.01
    purposes: tuple[str, ...] = ("row count", "distance test", "publication")

    def samples(self, env: RuleEnv) -> int:
        """C = ⌈ρ·w⌉, at most w."""
        return min(env.w, max(1, math.ceil(self.rate * env.w)))

    def units(self, ops: Ops, env: RuleEnv) -> tuple[Any, Any, Any]:
        """(row count, test, sample) budgets."""
        w, unit = env.w, ops.share(env.epsilon, 10 * env.w * env.w)
        return ops.mul_down(unit, w * w), ops.mul_down(unit, 9 * (w - self.samples(env))), ops.mul_down(unit, 9 * w)

    def initial(self, ops: Ops, env: RuleEnv) -> State:
        return (0, tuple(0 for _ in range(env.w - 1)))

    def arbitrary(self, env: RuleEnv, tag: str) -> State:
        return (symbol_int(f"{tag}_a"), tuple(symbol_int(f"{tag}_f{j}") for j in range(env.w - 1)))

    def grants(self, ops: Ops, env: RuleEnv, state: State, decision: Any) -> Any:
        return ops.both(decision, ops.count(state[1]) < self.samples(env))

    def charges(self, ops: Ops, env: RuleEnv, state: State, decision: Any) -> tuple[Any, ...]:
        count, test, sample = self.units(ops, env)
        return (ops.where(state[0] == 0, count, 0), test, ops.where(self.grants(ops, env, state, decision), sample, 0))

    def advance(self, ops: Ops, env: RuleEnv, state: State, decision: Any, spent: tuple[Any, ...]) -> State:
        flag = ops.where(self.grants(ops, env, state, decision), 1, 0)
        age = ops.minimum(state[0] + 1, env.w)
        return (age, ops.slide(state[1], flag))

    def invariant(self, ops: Ops, env: RuleEnv, state: State, recent: Sequence[Any]) -> Any:
        count, test, sample = self.units(ops, env)
        a, flags = state
        terms = [a >= 0, a <= env.w, ops.count(flags) <= self.samples(env)]
        for m in range(1, env.w):
            flag, value = flags[env.w - 1 - m], recent[env.w - 1 - m]
            terms += [flag >= 0, flag <= 1, value >= 0]
            terms.append(ops.where(m > a, ops.all_of([flag == 0, value == 0]),
                                   value <= test + ops.mul_down(sample, flag, at_most=1) + ops.where(m == a, count, 0)))
        return ops.all_of(terms)
