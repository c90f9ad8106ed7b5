"""Swellfish mechanisms (Tex, Schäler, Böhm; Algorithms 2-4, Table 2).

All follow the framework of Algorithm 2: where no policy is relevant (Δ_Q^t = 0) the true value is
released for free (``ledger.release_exact``); elsewhere the mechanism samples or not and perturbs
with Laplace of scale Δ/ε_t. Every budget is charged to a :class:`SwellfishLedger`, which checks
Theorem 4.2 (TOP_δ(J) sums) exactly before any release.

- TSUniform, TSSample, TSBD, TSBA: the w-event mechanisms with w = max |J| (Theorem 4.3) and the
  temporal sensitivity Δ_Q^t instead of the global one (Table 2, TEAS effect). Their budgets are the
  w-event rules', so those proofs cover them (TOP_δ(J) sum <= Σ_J ε_t <= window sum, |J| <= w).
- UnicornIS: at most one sample per relevance interval, with the full ε (§4.2.3).
- UnicornPS: a sample at every relevant timestamp, ε_t by Algorithm 3 (ε^op = ε).
- Unicorn: dissimilarity-based sampling (Algorithm 4) with ε_t^s = ε/(2 max_{φ∈Φ_t} δ(J)) and
  Algorithm 3 with ε^op = ε/2.
- TINARUniform = UnicornPS with sub-strategy 1 only, TINARSample = UnicornIS, both with the global
  sensitivity max_t Δ_Q^t (Table 2, TINAR effect).

Algorithm 3 is garbled in the paper's text; we implement what its prose and the public code say:
for every relevant policy φ, ε_{t,c1} = ε^op/δ(J) (uniform), ε_{rm,φ} = ε^op − Σ TOP_δ(J){ε^op_k}
+ min TOP_δ(J){ε^op_k} (the smallest budget of a full TOP set does not count: a new budget
replaces it; our TOP sets are padded with zeros, so the same formula covers non-full sets),
ε_{t,c2} = ε_{rm,φ}/(J.end − t + 1), ε_{t,φ} = max(c1, c2); ε_t^op = min over relevant φ. The op
budgets are tracked per policy by the mechanism (vectorised over runs), and the amount spent is
additionally capped by ``ledger.remaining(t)`` so that float rounding can never trigger a refusal;
the tests check that the cap only ever trims rounding, i.e. the paper's rule is sound as written.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from fractions import Fraction
from typing import Any

import attrs
import numpy as np
from numpy.typing import NDArray

from budgetcheck import GuardedStream, PolicyCollection, StreamPolicy, SwellfishLedger
from mechanisms._common import StepByStep, Stream, filtered
from mechanisms.ba import BA
from mechanisms.bd import BD
from mechanisms.rules import BARule, BDRule, PeriodicRule
from mechanisms.sample import Sample
from mechanisms.uniform import Uniform

FloatArray = NDArray[np.float64]


@attrs.frozen
class TemporalSensitivity:
    """A w-event mechanism run on a Swellfish ledger: w = max |J|, noise scaled by Δ_Q^t (TS variants)."""

    base: Uniform | Sample | BD | BA
    name: str
    notion: str = attrs.field(default="swellfish", init=False)

    def allocation_rule(self) -> PeriodicRule | BDRule | BARule:
        return self.base.allocation_rule()

    def run(self, stream: GuardedStream, ledger: SwellfishLedger) -> FloatArray:
        return self.base.run(stream, ledger)

    def releases(self, stream: Stream, ledger: SwellfishLedger) -> Iterator[FloatArray]:
        return self.base.releases(stream, ledger)


def TSUniform() -> TemporalSensitivity:
    """Uniform with w = max |J| over the policies (Tex et al., Theorem 4.3): Lap at every t, ε/w each."""
    return TemporalSensitivity(Uniform(), "TSUniform")


def TSSample() -> TemporalSensitivity:
    """Sample with w = max |J| over the policies (Tex et al., Theorem 4.3): the full ε every w-th t."""
    return TemporalSensitivity(Sample(), "TSSample")


def TSBD() -> TemporalSensitivity:
    """BD with w = max |J| over the policies (Tex et al., Theorem 4.3): budget distribution."""
    return TemporalSensitivity(BD(), "TSBD")


def TSBA() -> TemporalSensitivity:
    """BA with w = max |J| over the policies (Tex et al., Theorem 4.3): budget absorption."""
    return TemporalSensitivity(BA(), "TSBA")


class _OpBudgets:
    """Per policy and run, the δ(J) largest output-perturbation budgets spent so far (zero-padded).

    ``exact`` keeps Fractions (object arrays) instead of floats: the bounded proof runs this code.
    """

    def __init__(self, ledger: SwellfishLedger | _Shape, exact: bool = False) -> None:
        policies = ledger.policies
        self.deltas = [policies.delta(i) for i in range(len(policies))]
        zero: object = Fraction(0) if exact else 0.0
        self.tops = [np.full((ledger.runs, d), zero, dtype=object if exact else np.float64) for d in self.deltas]

    def allocation(self, ledger: SwellfishLedger | _Shape, t: int, total: Any, uniform_only: bool) -> Any:
        """Algorithm 3: min over relevant φ of max(ε^op/δ(J), ε_{rm,φ}/open timestamps) per run."""
        best = np.full(ledger.runs, np.inf)
        for index in ledger.policies.relevant(t):
            c1 = np.full(ledger.runs, total / self.deltas[index])
            if not uniform_only:
                top = self.tops[index]
                remaining = total - top.sum(axis=1) + top.min(axis=1)
                open_timestamps = ledger.policies.policies[index].end - t + 1
                c1 = np.maximum(c1, remaining / open_timestamps)
            best = np.minimum(best, c1)
        return best

    def record(self, relevant: Sequence[int], spent: Any) -> None:
        rows = np.arange(spent.size)
        for index in relevant:
            top = self.tops[index]
            slot = top.argmin(axis=1)
            replace = spent > top[rows, slot]
            top[rows[replace], slot[replace]] = spent[replace]


@attrs.frozen
class _Shape:
    """What the allocation needs from a ledger: the policies and the number of runs."""

    policies: PolicyCollection
    runs: int


def bounded_proof(mechanism: _BoundedProof, horizon: int = 5, max_policies: int = 2) -> tuple[bool, int, str]:
    """Exhaustive exact check of Theorem 4.2 for the mechanism's allocation (Algorithm 3/4, UnicornIS).

    Every collection of 1..max_policies policies with intervals inside [1, horizon] and patterns of
    length 1-2, every publish/skip decision sequence (Unicorn; UnicornPS/IS have none), ε = 1 in
    exact Fractions, without the ledger's rounding cap. All budgets are homogeneous of degree 1 in
    ε, so ε = 1 covers every ε > 0. Returns (holds, collections checked, first failure or "").
    """
    shapes = [
        StreamPolicy(a, b, [1.0] * T)
        for a in range(1, horizon + 1)
        for b in range(a, horizon + 1)
        for T in (1, 2)
        if T <= b - a + 1
    ]
    collections = [list(c) for k in range(1, max_policies + 1) for c in itertools.combinations(shapes, k)]
    decisions = (
        np.array(list(itertools.product([False, True], repeat=horizon)))
        if isinstance(mechanism, Unicorn)
        else np.ones((1, horizon), bool)
    )
    one, half = Fraction(1), Fraction(1, 2)
    for policies_list in collections:
        policies = PolicyCollection(policies_list)
        shape = _Shape(policies, len(decisions))
        tops = _OpBudgets(shape, exact=True)
        sampled: set[int] = set()
        totals = []
        for t in range(1, horizon + 1):
            relevant = policies.relevant(t)
            zero = np.full(shape.runs, Fraction(0), dtype=object)
            if not relevant:
                totals.append(zero)
                continue
            if isinstance(mechanism, UnicornIS):
                budget = zero + (0 if sampled.intersection(relevant) else one)
                sampled.update(relevant)
                totals.append(budget)
                continue
            if isinstance(mechanism, UnicornPS):
                budget = tops.allocation(shape, t, one, mechanism.uniform_only)
                tops.record(relevant, budget)
                totals.append(budget)
                continue
            sampling = half / max(tops.deltas[i] for i in relevant)
            spent = np.where(decisions[:, t - 1], tops.allocation(shape, t, half, False), zero)
            tops.record(relevant, spent)
            totals.append(spent + sampling)
        for index, policy in enumerate(policies.policies):
            inside = np.stack(totals[policy.start - 1 : policy.end], axis=1)
            top = -np.sort(-inside, axis=1)[:, : policies.delta(index)]
            worst = top.sum(axis=1).max()
            if worst > one:
                return False, len(collections), f"{policies_list!r}: policy {index} TOP_delta sum {worst} > epsilon"
    return True, len(collections), ""


class _BoundedProof:
    """The proof hook ``verify``/``prove`` call for the Unicorn family (no Z3 rule: see :func:`bounded_proof`)."""

    def bounded_proof(self) -> tuple[bool, int, str]:
        """Theorem 4.2 checked exhaustively and exactly on a bounded family."""
        return bounded_proof(self)


class _NamedByLabel:
    """A mechanism named by its ``label`` field: UnicornPS and UnicornIS, which the TINAR baselines relabel."""

    __slots__ = ()
    label: str

    @property
    def name(self) -> str:
        return self.label


def _noise_sensitivity(ledger: SwellfishLedger, delta: float, global_sensitivity: bool) -> float:
    """The multiplier of Δ_Q^t the ledger applies: 1, or max_t Δ_Q^t / Δ_Q^t for the TINAR baselines."""
    return ledger.policies.global_sensitivity() / delta if global_sensitivity else 1.0


def _capped(ledger: SwellfishLedger, t: int, wanted: FloatArray) -> FloatArray:
    return np.asarray(np.minimum(wanted, ledger.remaining(t)), dtype=np.float64)


@attrs.frozen
class UnicornPS(StepByStep, _BoundedProof, _NamedByLabel):
    """UnicornPermanentSample: a release at every relevant t with Algorithm 3's budget (ε^op = ε).

    ``uniform_only`` keeps sub-strategy 1 (ε/δ(J)); ``global_sensitivity`` uses max_t Δ_Q^t
    instead of Δ_Q^t (together: TINARUniform).
    """

    uniform_only: bool = False
    global_sensitivity: bool = False
    label: str = "UnicornPS"
    notion: str = attrs.field(default="swellfish", init=False)

    def releases(self, stream: Stream, ledger: SwellfishLedger) -> Iterator[FloatArray]:
        tops = _OpBudgets(ledger)
        for secret in stream:
            t = secret.t
            delta = ledger.temporal_sensitivity(t)
            if delta == 0.0:
                yield ledger.release_exact(secret)
                continue
            budget = _capped(ledger, t, tops.allocation(ledger, t, ledger.epsilon, self.uniform_only))
            sensitivity = _noise_sensitivity(ledger, delta, self.global_sensitivity)
            released = np.nan_to_num(ledger.laplace(secret, budget, sensitivity=sensitivity))
            tops.record(ledger.policies.relevant(t), budget)
            yield released


@attrs.frozen
class UnicornIS(StepByStep, _BoundedProof, _NamedByLabel):
    """UnicornIntervalSample: sample with the full ε at t iff no policy relevant at t has had a sample.

    Each policy therefore sees at most one sample (of ε) in its interval. ``global_sensitivity``
    uses max_t Δ_Q^t (TINARSample). Before the first sample the last release is all-zero.
    """

    global_sensitivity: bool = False
    label: str = "UnicornIS"
    notion: str = attrs.field(default="swellfish", init=False)

    def releases(self, stream: Stream, ledger: SwellfishLedger) -> Iterator[FloatArray]:
        sampled: set[int] = set()
        last = np.zeros((ledger.runs, stream.dimensions))
        for secret in stream:
            t = secret.t
            relevant = ledger.policies.relevant(t)
            delta = ledger.temporal_sensitivity(t)
            if delta == 0.0:
                last = ledger.release_exact(secret)
            elif not sampled.intersection(relevant):
                budget = _capped(ledger, t, np.full(ledger.runs, ledger.epsilon))
                sensitivity = _noise_sensitivity(ledger, delta, self.global_sensitivity)
                last = np.nan_to_num(ledger.laplace(secret, budget, sensitivity=sensitivity))
                sampled.update(relevant)
            yield last


@attrs.frozen
class Unicorn(StepByStep, _BoundedProof):
    """Unicorn (Algorithm 4 + Algorithm 3 with ε^op = ε/2): data-adaptive sampling.

    At a relevant t: ε_t^s = (ε/2)/max_{φ∈Φ_t} δ(J), dis = mean |Q(D_t) − r_l| + Lap(Δ_t/(d ε_t^s));
    ε_t^op from Algorithm 3; sample iff dis > Δ_t/ε_t^op. Only sampled op budgets enter the TOP sets
    (as in the public code). Before the first release r_l is all-zero.
    """

    filtering: bool = False
    notion: str = attrs.field(default="swellfish", init=False)
    name: str = attrs.field(default="Unicorn", init=False)

    def releases(self, stream: Stream, ledger: SwellfishLedger) -> Iterator[FloatArray]:
        tops = _OpBudgets(ledger)
        half = ledger.epsilon / 2.0
        last = np.zeros((ledger.runs, stream.dimensions))
        for secret in stream:
            t = secret.t
            relevant = ledger.policies.relevant(t)
            delta = ledger.temporal_sensitivity(t)
            if delta == 0.0:
                last = ledger.release_exact(secret)
                yield last
                continue
            sampling = half / max(tops.deltas[i] for i in relevant)
            dis = ledger.dissimilarity(secret, last, _capped(ledger, t, np.full(ledger.runs, sampling)))
            budget = _capped(ledger, t, tops.allocation(ledger, t, half, False))
            with np.errstate(divide="ignore"):
                publish = (budget > 0) & (dis > delta / budget)
            spent = np.where(publish, budget, 0.0)
            if publish.any():
                noisy = ledger.laplace(secret, spent)
                last = np.where(publish[:, None], filtered(np.nan_to_num(noisy), self.filtering), last)
                tops.record(relevant, spent)
            yield last


def TINARUniform() -> UnicornPS:
    """UnicornPS with its uniform sub-strategy only and the global sensitivity max_t Δ_Q^t (Tex et al., Table 2)."""
    return UnicornPS(uniform_only=True, global_sensitivity=True, label="TINARUniform")


def TINARSample() -> UnicornIS:
    """UnicornIS with the global sensitivity max_t Δ_Q^t (Tex et al., Table 2, the TINAR effect)."""
    return UnicornIS(global_sensitivity=True, label="TINARSample")
