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
            terms.append(
                ops.where(
                    m > a,
                    ops.all_of([flag == 0, value == 0]),
                    value <= test + ops.mul_down(sample, flag, at_most=1) + ops.where(m == a, count, 0),
                )
            )
        return ops.all_of(terms)


def shifted_split(ops: Ops, env: RuleEnv, dimensions: int | None) -> tuple[Any, Any]:
    """(ε_{t,1}, publication pool) of Kellaris et al. 2014 §4.5, "shifting budget from M_{i,1} to M_{i,2}".

    The noise scale of the dissimilarity is λ_{i,1} = 1/ε instead of 2w/(εd): ε_{t,1} = ε/d, which
    leaves ε − w·ε/d for publication in any window. The shift is taken only when d > 2w (then
    ε/d < ε/(2w) and the pool is more than ε/2); otherwise the split is BD's (ε/(2w), ε/2).
    ``dimensions`` None: no shift. Both parts are rounded down, so w·ε_{t,1} + pool <= ε.
    """
    parts = max(2 * env.w, dimensions or 0)
    return ops.share(env.epsilon, parts), ops.fraction_down(env.epsilon, parts - env.w, parts)


def _check_dimensions(instance: object, attribute: object, value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise InvalidArgument(f"dimensions={value!r} must be an integer >= 1 or None")


@attrs.frozen
class ShiftedBDRule:
    """BD with budget shifted to publication (Kellaris et al. 2014, §4.5; Fig. 2 otherwise).

    State (δ, P, p_1..p_{w−1}): the dissimilarity budget δ and the publication pool P of the split
    (:func:`shifted_split`, fixed at the start from d), then BD's recent publication budgets.
    Charges: (δ, (P − Σ p)/2 if publishing). δ and P are symbols in the proof, constrained only by
    δ, P >= 0 and w·δ + P <= ε, so one proof covers every d (and d <= 2w, where it is BD).
    Invariant: each p >= 0, Σ p <= P, every recent total <= δ + its publication budget.
    ``dimensions`` is the stream's d; the mechanism sets it per stream (``for_dimensions``).
    """

    dimensions: int | None = attrs.field(default=None, validator=_check_dimensions)
    purposes: tuple[str, ...] = ("dissimilarity", "publication")

    def for_dimensions(self, dimensions: int) -> ShiftedBDRule:
        """The rule a run on a stream of ``dimensions`` columns follows."""
        return attrs.evolve(self, dimensions=dimensions)

    def initial(self, ops: Ops, env: RuleEnv) -> State:
        return (*shifted_split(ops, env, self.dimensions), *(0.0 for _ in range(env.w - 1)))

    def arbitrary(self, env: RuleEnv, tag: str) -> State:
        return (
            symbol_real(f"{tag}_delta"),
            symbol_real(f"{tag}_pool"),
            *(symbol_real(f"{tag}_p{j}") for j in range(env.w - 1)),
        )

    def charges(self, ops: Ops, env: RuleEnv, state: State, decision: Any) -> tuple[Any, ...]:
        delta, pool, recent = state[0], state[1], state[2:]
        return (delta, ops.where(decision, ops.half_down(ops.sub_down(pool, ops.sum_up(recent))), 0))

    def advance(self, ops: Ops, env: RuleEnv, state: State, decision: Any, spent: tuple[Any, ...]) -> State:
        return (state[0], state[1], *ops.slide(state[2:], spent[1]))

    def invariant(self, ops: Ops, env: RuleEnv, state: State, recent: Sequence[Any]) -> Any:
        delta, pool, published = state[0], state[1], state[2:]
        terms = [delta >= 0, pool >= 0, delta * env.w + pool <= env.epsilon]
        terms += [p >= 0 for p in published] + [ops.sum_up(published) <= pool]
        terms += [r <= delta + p for r, p in zip(recent, published, strict=True)]
        return ops.all_of(terms)


@attrs.frozen
class ShiftedBARule:
    """BA with budget shifted to publication (Kellaris et al. 2014, §4.5; Fig. 4 otherwise).

    The split of :func:`shifted_split` gives δ = ε_{t,1} and the publication share u = P/w (BA's
    ε/(2w) when unshifted); absorption, nullification and the cap of w shares are BA's
    (:func:`ba_shares`). State (δ, u, a, k, S) with (a, k, S) as in :class:`BARule`; δ and u are
    symbols in the proof with δ, u >= 0 and w·δ + w·u <= ε, so one proof covers every d. The
    dissimilarity is computed (and paid) at nullified timestamps too, as the paper's Figure 4 does.
    """

    dimensions: int | None = attrs.field(default=None, validator=_check_dimensions)
    purposes: tuple[str, ...] = ("dissimilarity", "publication")

    def for_dimensions(self, dimensions: int) -> ShiftedBARule:
        """The rule a run on a stream of ``dimensions`` columns follows."""
        return attrs.evolve(self, dimensions=dimensions)

    def initial(self, ops: Ops, env: RuleEnv) -> State:
        delta, pool = shifted_split(ops, env, self.dimensions)
        unit = ops.fraction_down(pool, 1, env.w)
        return (delta, unit, 1, 1, ops.ghost(lambda: tuple(0.0 for _ in range(env.w - 1))))

    def arbitrary(self, env: RuleEnv, tag: str) -> State:
        return (
            symbol_real(f"{tag}_delta"),
            symbol_real(f"{tag}_u"),
            symbol_int(f"{tag}_a"),
            symbol_int(f"{tag}_k"),
            tuple(symbol_real(f"{tag}_S{m}") for m in range(1, env.w)),
        )

    def charges(self, ops: Ops, env: RuleEnv, state: State, decision: Any) -> tuple[Any, ...]:
        delta, unit, age, last_shares = state[0], state[1], state[2], state[3]
        nullified, shares = ba_shares(ops, age, last_shares, env.w)
        publish = ops.both(decision, ops.negate(nullified))
        return (delta, ops.where(publish, ops.mul_down(unit, shares, at_most=env.w), 0))

    def advance(self, ops: Ops, env: RuleEnv, state: State, decision: Any, spent: tuple[Any, ...]) -> State:
        delta, unit, age, last_shares, prefix = state
        nullified, shares = ba_shares(ops, age, last_shares, env.w)
        publish = ops.both(decision, ops.negate(nullified))
        following_age = ops.where(publish, 1, ops.minimum(age + 1, 2 * env.w))
        following_shares = ops.where(publish, shares, last_shares)
        sums = ops.ghost(lambda: tuple(spent[1] + previous for previous in (0, *prefix[:-1])) if env.w > 1 else ())
        return (delta, unit, following_age, following_shares, sums)

    def invariant(self, ops: Ops, env: RuleEnv, state: State, recent: Sequence[Any]) -> Any:
        w = env.w
        delta, unit, age, last_shares, sums = state
        last_budget = ops.mul_down(unit, last_shares, at_most=w)
        age_budget = ops.mul_down(unit, age, at_most=2 * w)
        terms = [delta >= 0, unit >= 0, delta * w + unit * w <= env.epsilon]
        terms += [last_shares >= 1, last_shares <= w, age >= 1, age <= 2 * w]
        previous: Any = 0
        for m in range(1, w):
            current = sums[m - 1]
            bound = unit * m + last_budget
            terms += [current >= previous, recent[w - 1 - m] <= delta + current - previous]
            terms.append(ops.where(m < age, current == 0, current + age_budget <= bound))
            previous = current
        terms.append(previous <= unit * w)
        return ops.all_of(terms)
