"""A corpus of deliberately broken mechanisms that `budgetcheck verify` must reject."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import numpy as np
from numpy.typing import NDArray

from budgetcheck import (
    BudgetExceeded,
    GuardedStream,
    PersonalizedLedger,
    PersonalizedStream,
    SwellfishLedger,
    WindowLedger,
    rounding,
)
from budgetcheck.ops import FLOAT, per_run
from budgetcheck.proving import RuleEnv
from mechanisms.dsat import DSATw
from mechanisms.rules import BDRule, DistanceTestRule, PeriodicRule

FloatArray = NDArray[np.float64]


@attrs.frozen
class BAAsPublished:
    """BA as in the published artifact: the last publication (l, ε_l) is never updated.

    Nothing is ever nullified and every publication absorbs up to w shares: (w+1)/2 · ε per window.
    """

    name: str = "BA-as-published"

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> FloatArray:
        w = ledger.params.w
        unit = rounding.share(ledger.params.epsilon, 2 * w)
        last = np.zeros((ledger.runs, stream.dimensions))
        out = np.zeros((ledger.runs, stream.length, stream.dimensions))
        for secret in stream:
            t = secret.t
            dis = ledger.dissimilarity(secret, last, unit)
            shares = min(t, w)  # l = 0 and one share, forever
            budget = rounding.mul_down(unit, shares)
            publish = dis > 1.0 / budget
            if publish.any():
                noisy = ledger.laplace(secret, np.where(publish, budget, 0.0))
                last = np.where(publish[:, None], np.nan_to_num(noisy), last)
            out[:, t - 1] = last
        return out


def _uniform_releases(stream: GuardedStream, ledger: WindowLedger, budget: float) -> FloatArray:
    """Release every timestamp with ``budget`` (the Uniform skeleton the mutants below break)."""
    out = np.zeros((ledger.runs, stream.length, stream.dimensions))
    for secret in stream:
        out[:, secret.t - 1] = ledger.laplace(secret, budget)
    return out


@attrs.frozen
class UniformFullEpsilon:
    """Spends the whole ε at every timestamp."""

    name: str = "Uniform-full-epsilon"

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> FloatArray:
        return _uniform_releases(stream, ledger, ledger.params.epsilon)


@attrs.frozen
class DeclaresEpsilonPerRunReadsParams:
    """Uniform that asks the benchmark for a ledger of several ε but reads ``ledger.params``."""

    name: str = "Uniform-declares-several-eps-reads-params"
    max_stacked_runs = 1_000

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> FloatArray:
        return _uniform_releases(stream, ledger, rounding.share(ledger.params.epsilon, ledger.params.w))


@attrs.frozen
class DeclaresEpsilonPerRunSpendsTheLargest:
    """Uniform that declares ``max_stacked_runs`` and spends the largest run's ε/w in every run."""

    name: str = "Uniform-several-eps-largest"
    max_stacked_runs = 1_000

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> FloatArray:
        return _uniform_releases(stream, ledger, rounding.share(float(np.max(ledger.epsilon)), ledger.w))


@attrs.frozen
class SwallowsRefusals:
    """Asks for ε at every timestamp and silently repeats the last release when refused."""

    name: str = "swallows-refusals"

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> FloatArray:
        out = np.zeros((ledger.runs, stream.length, stream.dimensions))
        last = np.zeros((ledger.runs, stream.dimensions))
        for secret in stream:
            try:
                last = ledger.laplace(secret, ledger.params.epsilon)
            except BudgetExceeded:
                pass
            out[:, secret.t - 1] = last
        return out


@attrs.frozen
class ReadsSecret:
    """Thresholds on the true count directly (a non-private parameter, benchmark M-R4)."""

    name: str = "reads-secret"

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> FloatArray:
        out = np.zeros((ledger.runs, stream.length, stream.dimensions))
        budget = rounding.share(ledger.params.epsilon, ledger.params.w)
        for secret in stream:
            if np.max(secret) > 10:  # type: ignore[call-overload]
                out[:, secret.t - 1] = ledger.laplace(secret, budget)
        return out


@attrs.frozen
class SecondLedger:
    """Reads the stream through a private ledger of its own, so its spends never reach the record."""

    name: str = "second-ledger"

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> FloatArray:
        shadow = WindowLedger(ledger.params, runs=ledger.runs, seed=1, sampler="numpy-laplace")
        out = np.zeros((ledger.runs, stream.length, stream.dimensions))
        budget = rounding.share(ledger.params.epsilon, ledger.params.w)
        for secret in stream:
            out[:, secret.t - 1] = shadow.laplace(secret, budget)
        return out


@attrs.frozen
class FloatUniform:
    """Uniform with ε/w in round-to-nearest floats: w of them can exceed ε by an ulp (e.g. w = 10)."""

    name: str = "float-uniform"

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> FloatArray:
        return _uniform_releases(stream, ledger, ledger.params.epsilon / ledger.params.w)


# --- mistakes in allocation rules, run by the real mechanism code (caught by proof and replay) ---


from budgetcheck.ops import Ops  # noqa: E402
from budgetcheck.proving import State  # noqa: E402
from mechanisms import BA, BD  # noqa: E402
from mechanisms.rules import BARule, bd_candidate  # noqa: E402


@attrs.frozen
class _BAWithoutNullification(BARule):
    def publishes(self, ops: Ops, env: RuleEnv, state: State, decision: Any) -> tuple[Any, Any, Any]:
        shares = ops.minimum(state[0], env.w)  # absorbs every skipped share, never nullifies
        return decision != decision, shares, decision  # nullified is always False


@attrs.frozen
class BAWithoutNullification(BA):
    """BA that absorbs skipped shares but never nullifies the following timestamps."""

    name: str = attrs.field(default="BA-without-nullification", init=False)

    def allocation_rule(self) -> BARule:
        return _BAWithoutNullification()


@attrs.frozen
class _BAAbsorbsOneMore(BARule):
    def publishes(self, ops: Ops, env: RuleEnv, state: State, decision: Any) -> tuple[Any, Any, Any]:
        to_nullify = state[1] - 1
        nullified = state[0] <= to_nullify
        shares = ops.where(nullified, 0, ops.minimum(state[0] - to_nullify, env.w + 1))  # w + 1: off by one
        return nullified, shares, ops.both(decision, ops.negate(nullified))

    def charges(self, ops: Ops, env: RuleEnv, state: State, decision: Any) -> tuple[Any, ...]:
        unit = ops.share(env.epsilon, 2 * env.w)
        _, shares, publish = self.publishes(ops, env, state, decision)
        return (unit, ops.where(publish, ops.mul_down(unit, shares, at_most=env.w + 1), 0))


@attrs.frozen
class BAAbsorbsOneMore(BA):
    """BA whose absorption cap is w + 1 shares instead of w."""

    name: str = attrs.field(default="BA-absorbs-one-more", init=False)

    def allocation_rule(self) -> BARule:
        return _BAAbsorbsOneMore()


@attrs.frozen
class _BANullifiesOneTooFew(BARule):
    def publishes(self, ops: Ops, env: RuleEnv, state: State, decision: Any) -> tuple[Any, Any, Any]:
        to_nullify = state[1] - 2  # one nullified timestamp too few
        nullified = state[0] <= to_nullify
        shares = ops.where(nullified, 0, ops.minimum(state[0] - (state[1] - 1), env.w))
        return nullified, shares, ops.both(decision, ops.negate(nullified))


@attrs.frozen
class BANullifiesOneTooFew(BA):
    """BA that nullifies k − 2 instead of k − 1 timestamps after absorbing k − 1 shares."""

    name: str = attrs.field(default="BA-nullifies-one-too-few", init=False)

    def allocation_rule(self) -> BARule:
        return _BANullifiesOneTooFew()


@attrs.frozen
class _BDRecyclesEarly(BDRule):
    def charges(self, ops: Ops, env: RuleEnv, state: State, decision: Any) -> tuple[Any, ...]:
        candidate = bd_candidate(ops, ops.share(env.epsilon, 2), state[1:])  # forgets the oldest publication
        return (ops.share(env.epsilon, 2 * env.w), ops.where(decision, candidate, 0))


@attrs.frozen
class BDRecyclesEarly(BD):
    """BD whose remaining budget sums only the last w − 2 publications (a window one too short)."""

    name: str = attrs.field(default="BD-recycles-early", init=False)

    def allocation_rule(self) -> BDRule:
        return _BDRecyclesEarly()


# --- mistakes in hand-written mechanisms (caught by ledger replay) ---


@attrs.frozen
class SampleEveryWMinusOne:
    """Sample with period w − 1: two samples of ε in some windows."""

    name: str = "sample-every-w-1"

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> FloatArray:
        period = max(1, ledger.params.w - 1)
        out = np.zeros((ledger.runs, stream.length, stream.dimensions))
        last = np.zeros((ledger.runs, stream.dimensions))
        for secret in stream:
            if (secret.t - 1) % period == 0:
                last = ledger.laplace(secret, ledger.params.epsilon)
            out[:, secret.t - 1] = last
        return out


@attrs.frozen
class UniformOverWMinusOne:
    """Uniform with ε/(w − 1) per timestamp."""

    name: str = "uniform-eps-over-w-1"

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> FloatArray:
        budget = rounding.share(ledger.params.epsilon, max(1, ledger.params.w - 1))
        out = np.zeros((ledger.runs, stream.length, stream.dimensions))
        for secret in stream:
            out[:, secret.t - 1] = ledger.laplace(secret, budget)
        return out


@attrs.frozen
class FirstTimestampTwice:
    """Uniform that also spends a 'warm-up' release of ε/w at t = 1."""

    name: str = "first-timestamp-twice"

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> FloatArray:
        budget = rounding.share(ledger.params.epsilon, ledger.params.w)
        out = np.zeros((ledger.runs, stream.length, stream.dimensions))
        for secret in stream:
            if secret.t == 1:
                ledger.laplace(secret, budget, purpose="warm-up")
            out[:, secret.t - 1] = ledger.laplace(secret, budget)
        return out


@attrs.frozen
class RestartedEveryFive:
    """Uniform-with-recycling whose own window history is reset every 5 timestamps (a restart)."""

    name: str = "restarted-every-5"

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> FloatArray:
        out = np.zeros((ledger.runs, stream.length, stream.dimensions))
        spent: list[float] = []
        for secret in stream:
            if (secret.t - 1) % 5 == 0:
                spent = []  # fresh history after the restart
            window = spent[-(ledger.params.w - 1) :] if ledger.params.w > 1 else []
            budget = rounding.sub_down(ledger.params.epsilon, sum(window)) / 2
            out[:, secret.t - 1] = ledger.laplace(secret, float(budget))
            spent.append(float(budget))
        return out


@attrs.frozen
class PerDimensionSample:
    """Samples dimension j at timestamps t ≡ j (mod w) with ε each: per-dimension windows."""

    name: str = "per-dimension-windows"

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> FloatArray:
        w, d = ledger.params.w, stream.dimensions
        out = np.zeros((ledger.runs, stream.length, d))
        last = np.zeros((ledger.runs, d))
        for secret in stream:
            for j in range(d):
                if (secret.t - 1) % w == j % w:
                    last[:, j] = ledger.measure(
                        lambda v, j=j: v[j], secret, sensitivity=1.0, epsilon=ledger.params.epsilon
                    )
            out[:, secret.t - 1] = last
        return out


@attrs.frozen
class SpendsAllThatRemains:
    """BD-like: spends everything the ledger says remains on the dissimilarity, leaving nothing."""

    name: str = "spends-all-remaining"

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> FloatArray:
        out = np.zeros((ledger.runs, stream.length, stream.dimensions))
        unit = rounding.share(ledger.params.epsilon, 2 * ledger.params.w)
        last = np.zeros((ledger.runs, stream.dimensions))
        for secret in stream:
            ledger.dissimilarity(secret, last, unit)
            last = ledger.laplace(secret, ledger.remaining(secret.t))
            out[:, secret.t - 1] = last
        return out


@attrs.frozen
class HomeMadeWindowOffByOne:
    """Keeps its own window and sums only the last w − 2 spends before spending what is 'left'."""

    name: str = "home-made-window-off-by-one"

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> FloatArray:
        w, epsilon = ledger.params.w, ledger.params.epsilon
        out = np.zeros((ledger.runs, stream.length, stream.dimensions))
        spent: list[float] = []
        for secret in stream:
            window = spent[-(w - 2) :] if w > 2 else []
            budget = float(rounding.sub_down(epsilon, sum(window))) * 0.5
            out[:, secret.t - 1] = ledger.laplace(secret, budget)
            spent.append(budget)
        return out


@attrs.frozen
class GreedyTwice:
    """Spends what remains, then asks for a little more at the same timestamp."""

    name: str = "greedy-twice"

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> FloatArray:
        out = np.zeros((ledger.runs, stream.length, stream.dimensions))
        for secret in stream:
            out[:, secret.t - 1] = ledger.laplace(secret, ledger.remaining(secret.t))
            ledger.spend(secret.t, ledger.params.epsilon * 1e-3, purpose="extra")
        return out


# --- wrong sensitivity (a declared one below the stream's relation is refused at run time; a vouched one
# (measure) is caught by the statistical audit) ---


@attrs.frozen
class UniformHalfSensitivity:
    """Uniform that declares sensitivity 1/2 for a count whose sensitivity is 1."""

    name: str = "uniform-half-sensitivity"

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> FloatArray:
        budget = rounding.share(ledger.params.epsilon, ledger.params.w)
        out = np.zeros((ledger.runs, stream.length, stream.dimensions))
        for secret in stream:
            out[:, secret.t - 1] = ledger.laplace(secret, budget, sensitivity=0.5)
        return out


@attrs.frozen
class SeriesOverWMinusOne:
    """Uniform as one laplace_series of ε/(w − 1) per timestamp: the whole series is refused."""

    name: str = "series-eps-over-w-1"

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> FloatArray:
        budget = rounding.share(ledger.params.epsilon, max(1, ledger.params.w - 1))
        secrets = list(stream)
        return ledger.laplace_series(secrets, np.full(len(secrets), budget))


@attrs.frozen
class SeriesHalfSensitivity:
    """Uniform as one laplace_series that declares sensitivity 1/2 for counts (sensitivity 1)."""

    name: str = "series-half-sensitivity"

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> FloatArray:
        budget = rounding.share(ledger.params.epsilon, ledger.params.w)
        secrets = list(stream)
        return ledger.laplace_series(secrets, np.full(len(secrets), budget), sensitivity=0.5)


@attrs.frozen
class MeasureTinySensitivity:
    """Releases the counts through measure() with a made-up sensitivity of 0.01."""

    name: str = "measure-tiny-sensitivity"

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> FloatArray:
        budget = rounding.share(ledger.params.epsilon, ledger.params.w)
        out = np.zeros((ledger.runs, stream.length, stream.dimensions))
        for secret in stream:
            out[:, secret.t - 1] = ledger.measure(
                lambda v: v, secret, sensitivity=0.01, epsilon=budget, isolation="trusted", shape=secret.shape
            )
        return out


@attrs.frozen
class RescueDPGroupMeanNoise:
    """RescueDP's schedule on a steady stream (a sample at t = 1 and every θ = 10 timestamps with
    ε_max = ε/5, the prediction repeated in between), each sample released alone with the noise of a
    group mean over 8 locations (a vouched sensitivity of 1/8): one individual's loss at a sample is
    8ε/5. The changes placed inside a later window sit where it only predicts."""

    name: str = "RescueDP-group-mean-noise"

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> FloatArray:
        interval = 10
        samples_per_window = -(-ledger.params.w // interval)
        budget = rounding.share(ledger.params.epsilon, 5 * samples_per_window)
        out = np.zeros((ledger.runs, stream.length, stream.dimensions))
        last = np.zeros((ledger.runs, stream.dimensions))
        for secret in stream:
            if (secret.t - 1) % interval == 0:
                last = ledger.measure(lambda v: v, secret, sensitivity=1 / 8, epsilon=budget, shape=secret.shape)
            out[:, secret.t - 1] = last
        return out


@attrs.frozen
class MeasureKeepsPayload:
    """Measures the noisy total at ε/w (sensitivity 1) and splits it over the dimensions by the
    true proportions, which its measure function kept aside: no read of a Secret, yet a leak. Only
    possible with the opt-out isolation='trusted' (a forked fn keeps nothing: tests/ledger/test_isolation.py)."""

    name: str = "measure-keeps-payload"

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> FloatArray:
        budget = rounding.share(ledger.params.epsilon, ledger.params.w)
        out = np.zeros((ledger.runs, stream.length, stream.dimensions))
        kept: list[FloatArray] = []

        def total(values: FloatArray) -> float:
            kept.append(np.array(values))
            return float(values.sum())

        for secret in stream:
            noisy = ledger.measure(total, secret, sensitivity=1.0, epsilon=budget, isolation="trusted")
            share = kept[-1] / max(float(kept[-1].sum()), 1.0)
            out[:, secret.t - 1] = noisy[:, None] * share[None, :]
        return out


@attrs.frozen
class UnicornPSOverDeltaMinusOne:
    """Swellfish: ε/(δ(J) − 1) at every relevant t, i.e. a TOP sum of only δ(J) − 1 budgets is kept within ε."""

    name: str = "UnicornPS-delta-minus-one"
    notion: str = "swellfish"

    def run(self, stream: GuardedStream, ledger: SwellfishLedger) -> FloatArray:
        out = np.zeros((ledger.runs, stream.length, stream.dimensions))
        for secret in stream:
            relevant = ledger.policies.relevant(secret.t)
            if ledger.temporal_sensitivity(secret.t) == 0.0:
                out[:, secret.t - 1] = ledger.release_exact(secret)
                continue
            budget = min(ledger.epsilon / max(1, ledger.policies.delta(i) - 1) for i in relevant)
            out[:, secret.t - 1] = ledger.laplace(secret, budget)
        return out


@attrs.frozen
class SwellfishTrueValuesEverywhere:
    """Swellfish: treats every timestamp as free, releasing true values where policies are relevant."""

    name: str = "Swellfish-true-values"
    notion: str = "swellfish"

    def run(self, stream: GuardedStream, ledger: SwellfishLedger) -> FloatArray:
        return np.stack([np.stack([ledger.release_exact(secret)[0] for secret in stream])] * ledger.runs)


@attrs.frozen
class PBDMostGenerous:
    """Personalized: PBD with every class at the most generous requirement (min w_i, max ε_i)."""

    name: str = "PBD-most-generous"
    notion: str = "personalized"

    def run(self, stream: PersonalizedStream, ledger: PersonalizedLedger) -> FloatArray:
        C = ledger.requirements.n_classes
        w = min(r.w for r in ledger.requirements.classes)
        eps = max(r.epsilon for r in ledger.requirements.classes)
        last = np.zeros((ledger.runs, stream.dimensions))
        out = np.zeros((ledger.runs, stream.length, stream.dimensions))
        for secret in stream:
            ledger.sample_dissimilarity(secret, last, np.full(C, eps / (2 * w)))
            last = np.nan_to_num(ledger.sample_release(secret, np.full(C, eps / 2)))
            out[:, secret.t - 1] = last
        return out


@attrs.frozen
class _HomeMadePBA:
    """PBA (Du et al. 2025, Algorithm 5) with its own (l, k) bookkeeping per class, as the artifact does.

    ``bound`` folds the classes' nullification ends t_{i,N} = l_i + k_i − 1 (runs, C) into the
    cross-user t̃_N: the paper's maximum, or the artifact's 'minimum' / integer 'average'.
    A class publishes min(t − t̃_N, w_i) shares of ε_i/(2 w_i). ``record_minimum`` stores the
    smallest class's share count as everyone's k (the class minimum charged to everyone).
    With the maximum and no ``record_minimum`` this is a correct (unproved) PBA: the control.
    """

    bound: str = "maximum"
    record_minimum: bool = False
    name: str = "home-made-PBA"
    notion: str = "personalized"

    def run(self, stream: PersonalizedStream, ledger: PersonalizedLedger) -> FloatArray:
        classes = ledger.requirements.classes
        w = np.array([r.w for r in classes])
        unit = np.array([rounding.share(r.epsilon, 2 * r.w) for r in classes])
        last_time = np.zeros((ledger.runs, len(classes)), dtype=np.int64)  # a virtual publication at l = 0 ...
        shares = np.ones((ledger.runs, len(classes)), dtype=np.int64)  # ... holding one share
        last = np.zeros((ledger.runs, stream.dimensions))
        out = np.zeros((ledger.runs, stream.length, stream.dimensions))
        for secret in stream:
            t = secret.t
            ends = last_time + shares - 1
            end = {
                "maximum": ends.max(axis=1),
                "minimum": ends.min(axis=1),
                "average": ends.sum(axis=1) // len(classes),
            }[self.bound]
            candidate = np.where((t > end)[:, None], rounding.mul_down(unit, np.minimum(t - end[:, None], w)), 0.0)
            dis = ledger.sample_dissimilarity(secret, last, np.broadcast_to(unit, candidate.shape))
            _, error = ledger.reporting_error(candidate)
            publish = (candidate.max(axis=1) > 0.0) & (dis > np.sqrt(error))
            if publish.any():
                spent = np.where(publish[:, None], candidate, 0.0)
                last = np.where(publish[:, None], np.nan_to_num(ledger.sample_release(secret, spent)), last)
                taken = np.rint(candidate / unit).astype(np.int64)
                if self.record_minimum:
                    taken = np.broadcast_to(taken.min(axis=1, keepdims=True), taken.shape)
                last_time = np.where(publish[:, None], t, last_time)
                shares = np.where(publish[:, None], taken, shares)
            out[:, t - 1] = last
        return out


def HomeMadePBAControl() -> _HomeMadePBA:
    """The home-made PBA with the paper's maximum bound: correct, so verify must not reject it."""
    return _HomeMadePBA()


def PBANullificationMinimum() -> _HomeMadePBA:
    """The artifact's 'minimum' cross-user nullification bound (overspends up to 1.375×)."""
    return _HomeMadePBA(bound="minimum", name="PBA-nullification-minimum")


def PBANullificationAverage() -> _HomeMadePBA:
    """The artifact's 'average' cross-user nullification bound (overspends up to 1.25×)."""
    return _HomeMadePBA(bound="average", name="PBA-nullification-average")


def PBAClassMinimumToEveryone() -> _HomeMadePBA:
    """Records the smallest class's absorbed shares as every class's: the others nullify too little."""
    return _HomeMadePBA(record_minimum=True, name="PBA-class-minimum-to-everyone")


class _TestChargedOncePerRun(DistanceTestRule):
    """DSAT as published: each distance test is budgeted as if ε₁ were spent once, not per window."""

    def units(self, ops: Any, env: RuleEnv) -> tuple[Any, Any, Any]:
        count, test, sample = super().units(ops, env)
        return count, ops.mul_down(test, env.w), sample


@attrs.frozen
class DSATUnchargedTest(DSATw):
    """DSAT_w whose every distance test takes the whole ε₁ (accounting rules §5)."""

    name: str = attrs.field(default="DSAT-uncharged-test", init=False)

    def allocation_rule(self) -> DistanceTestRule:
        return _TestChargedOncePerRun(self.sample_rate)


class RescueDPIgnoresRemaining:
    """RescueDP that always samples every location at ε_max = ε/5, whatever the window has left."""

    name: str = "RescueDP-ignores-remaining"

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> FloatArray:
        out = np.zeros((ledger.runs, stream.length, stream.dimensions))
        for secret in stream:
            out[:, secret.t - 1] = np.nan_to_num(ledger.laplace(secret, ledger.params.epsilon / 5))
        return out


class AdaPubRereadsClusters:
    """AdaPub as published: the cluster test re-reads every true count of the open cluster each step
    (here honestly charged through a footprint measurement, so the window overflows)."""

    name: str = "AdaPub-rereads-clusters"

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> FloatArray:
        w, eps = ledger.params.w, ledger.params.epsilon
        out = np.zeros((ledger.runs, stream.length, stream.dimensions))
        cluster: list[object] = []
        for secret in stream:
            cluster = [*cluster[-(w - 1) :], secret] if w > 1 else [secret]
            ledger.measure_footprint(lambda v: v.std(axis=0), cluster, sensitivity=2.0, epsilon=eps / (5 * w))
            out[:, secret.t - 1] = np.nan_to_num(ledger.laplace(secret, rounding.share(eps, 5 * w) * 4))
        return out


class _DissimilarityOverPopulation:
    """A ledger view whose dissimilarity is a measure() with the sensitivity divided by ``users``."""

    def __init__(self, ledger: WindowLedger, users: int = 100) -> None:
        self._ledger = ledger
        self._users = users

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ledger, name)

    def dissimilarity(
        self, secret: Any, last_release: Any, epsilon: Any, *, purpose: str = "dissimilarity"
    ) -> FloatArray:
        d = int(np.prod(secret.shape))
        noisy = self._ledger.measure(
            lambda v: v,
            secret,
            sensitivity=1.0 / (self._users * d),
            epsilon=epsilon,
            purpose=purpose,
            shape=secret.shape,
        )
        return np.asarray(np.abs(np.asarray(last_release) - noisy).reshape(noisy.shape[0], -1).mean(axis=1))


@attrs.frozen
class BDDissimilarityOverPopulation(BD):
    """BD whose dissimilarity sensitivity is divided by the population (100): its charges are right,
    but its publish/skip decision is almost the true one. Only the decision flip shows it."""

    name: str = "BD-dissimilarity-over-population"

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> FloatArray:
        return super().run(stream, _DissimilarityOverPopulation(ledger))  # type: ignore[arg-type]


@attrs.frozen
class BDDissimilarityHalfSensitivity(BD):
    """BD whose dissimilarity is charged at half its sensitivity (1/(2d) instead of 1/d)."""

    name: str = "BD-dissimilarity-half-sensitivity"

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> FloatArray:
        return super().run(stream, _DissimilarityOverPopulation(ledger, users=2))  # type: ignore[arg-type]


@attrs.frozen
class SampleDecidesOnTrueValue:
    """Sample that publishes early when the true count jumps: the decision reads the raw value."""

    name: str = "sample-decides-on-true-value"

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> FloatArray:
        budget = rounding.share(ledger.params.epsilon, ledger.params.w)
        out = np.zeros((ledger.runs, stream.length, stream.dimensions))
        previous = 0.0
        for secret in stream:
            value = float(np.asarray(secret).sum())  # the mistake: a raw read outside any charge
            if abs(value - previous) > 10 or (secret.t - 1) % ledger.params.w == 0:
                out[:, secret.t - 1] = ledger.laplace(secret, budget)
            previous = value
        return out


@attrs.frozen
class SwellfishThresholdUnits:
    """Swellfish: TSUniform whose noise takes the policy thresholds in kW for data in W (Δ_Q / 1000)."""

    name: str = "Swellfish-threshold-units"
    notion: str = "swellfish"

    def run(self, stream: GuardedStream, ledger: SwellfishLedger) -> FloatArray:
        w = max(policy.length for policy in ledger.policies.policies)
        out = np.zeros((ledger.runs, stream.length, stream.dimensions))
        for secret in stream:
            if ledger.temporal_sensitivity(secret.t) == 0.0:
                out[:, secret.t - 1] = ledger.release_exact(secret)
            else:
                out[:, secret.t - 1] = ledger.laplace(secret, rounding.share(ledger.epsilon, w), sensitivity=1e-3)
        return out


@attrs.frozen
class SwellfishMeasureThresholdUnits:
    """SwellfishThresholdUnits through measure: a vouched sensitivity of Δ_Q / 1000 is not refused at
    run time (the library cannot know fn), so only the statistical audit can catch it."""

    name: str = "Swellfish-measure-threshold-units"
    notion: str = "swellfish"

    def run(self, stream: GuardedStream, ledger: SwellfishLedger) -> FloatArray:
        w = max(policy.length for policy in ledger.policies.policies)
        out = np.zeros((ledger.runs, stream.length, stream.dimensions))
        for secret in stream:
            if ledger.temporal_sensitivity(secret.t) == 0.0:
                out[:, secret.t - 1] = ledger.release_exact(secret)
            else:
                out[:, secret.t - 1] = ledger.measure(
                    lambda v: v,
                    secret,
                    sensitivity=1e-3,
                    epsilon=rounding.share(ledger.epsilon, w),
                    shape=secret.shape,
                )
        return out


@attrs.frozen
class RescueDPKalmanFromTrueSeries:
    """RescueDP whose Kalman process noise q is the variance of the true series (the public code's
    choice), computed from the raw values before the run."""

    name: str = "RescueDP-kalman-q-from-true-series"

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> FloatArray:
        from mechanisms.rescuedp import RescueDP

        q = float(np.var([np.asarray(secret) for secret in stream]))  # the mistake: raw reads
        return np.asarray(RescueDP(process_noise=q).run(stream, ledger))


# (mutant, the stage that must catch it)
# -- class 1 of issue 28: a correct rule, code that spends differently in some regime --------------
# Written as a third party would: the public API and the built-in rules, nothing else. Each exposes a
# rule ``budgetcheck prove`` proves; the code departs from it only where replay (w <= 40, T <= 60)
# does not look, so only exploration and rule conformance (stage e) catch them.


@attrs.frozen
class _HandBD:
    """BD by hand (Kellaris et al. 2014, Fig. 2) over the proved BDRule's float back-end; the
    subclasses change one budget in one regime (the hooks)."""

    name: str = "hand-bd"

    def allocation_rule(self) -> BDRule:
        return BDRule()

    def dissimilarity_budget(self, unit: FloatArray, w: int) -> FloatArray:
        return unit

    def publication_budget(
        self, candidate: FloatArray, quiet: FloatArray, since: FloatArray, half: float
    ) -> FloatArray:
        """``quiet``: consecutive skips before t; ``since``: 1 if t - 1 ended a quiet spell of 56 or more."""
        return candidate

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> FloatArray:
        rule, env = self.allocation_rule(), RuleEnv(ledger.params.epsilon, ledger.params.w)
        runs = ledger.runs
        state = per_run(rule.initial(FLOAT, env), runs)
        last = np.zeros((runs, stream.dimensions))
        quiet, since = np.zeros(runs), np.zeros(runs)  # consecutive skips; whether t - 1 ended a long quiet spell
        half = rounding.share(ledger.params.epsilon, 2)
        out = np.zeros((runs, stream.length, stream.dimensions))
        for secret in stream:
            unit, candidate = rule.charges(FLOAT, env, state, np.full(runs, True))
            dissimilarity = self.dissimilarity_budget(np.broadcast_to(unit, (runs,)), env.w)
            dis = ledger.dissimilarity(secret, last, dissimilarity)
            candidate = self.publication_budget(np.broadcast_to(candidate, (runs,)), quiet, since, half)
            with np.errstate(divide="ignore"):
                publish = (candidate > 0) & (dis > 1.0 / candidate)
            spent = np.where(publish, candidate, 0.0)
            if publish.any():
                last = np.where(publish[:, None], ledger.laplace(secret, spent), last)
            since = np.where(publish & (quiet >= 56), 1.0, 0.0)
            quiet = np.where(publish, 0.0, quiet + 1)
            state = rule.advance(FLOAT, env, state, publish, (dissimilarity, spent))
            out[:, secret.t - 1] = last
        return out


@attrs.frozen
class BDLargeWindowDissimilarity(_HandBD):
    """For w > 40 the author 'simplified' the dissimilarity budget to ε/w (the rule's is ε/(2w)):
    the dissimilarities alone fill a window, so any publication overspends — but only for w > 40."""

    name: str = "bd-large-window-dissimilarity"

    def dissimilarity_budget(self, unit: FloatArray, w: int) -> FloatArray:
        return unit * 2.0 if w > 40 else unit


@attrs.frozen
class BDCatchesUpAfterQuiet(_HandBD):
    """After a quiet spell (56 or more consecutive skips) the author 'catches up': the publication
    that ends it and the next one each take the whole half budget ε/2, whatever the window already
    holds. Only that decision sequence triggers it (replay's streams, T <= 60, hardly produce it)."""

    name: str = "bd-catches-up-after-quiet"

    def publication_budget(
        self, candidate: FloatArray, quiet: FloatArray, since: FloatArray, half: float
    ) -> FloatArray:
        return np.where((quiet >= 56) | (since == 1), half, candidate)


@attrs.frozen
class UniformRecalibratesLate:
    """Uniform (ε/w per timestamp, the proved PeriodicRule) that, once warmed up (after 3w
    timestamps), adds a recalibration release at every 64th timestamp: two charges of ε/w at such
    a t. Replay's streams (T <= 60) never reach one."""

    name: str = "uniform-recalibrates-late"

    def allocation_rule(self) -> PeriodicRule:
        return PeriodicRule(every=1)

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> FloatArray:
        w = ledger.params.w
        budget = rounding.share(ledger.params.epsilon, w)
        out = np.zeros((ledger.runs, stream.length, stream.dimensions))
        for secret in stream:
            out[:, secret.t - 1] = ledger.laplace(secret, budget)
            if secret.t > 3 * w and secret.t % 64 == 0:
                again = ledger.laplace(secret, budget, purpose="recalibration")
                out[:, secret.t - 1] = (out[:, secret.t - 1] + again) / 2
        return out


# --- issue 28, class 2: leaks that only a property of the data triggers (caught by secret access) ---


def _keeping_uniform(
    stream: GuardedStream, ledger: WindowLedger, leak: Callable[[list[FloatArray]], bool]
) -> FloatArray:
    """Uniform through measure() whose measured function keeps each payload aside (possible only
    with the opt-out isolation='trusted': a forked fn keeps nothing); where ``leak`` says so on what
    it kept, the release is the kept true value itself."""
    budget = rounding.share(ledger.params.epsilon, ledger.params.w)
    out = np.zeros((ledger.runs, stream.length, stream.dimensions))
    kept: list[FloatArray] = []

    def counts(values: FloatArray) -> FloatArray:
        kept.append(np.array(values))
        return np.asarray(values)

    for secret in stream:
        noisy = ledger.measure(counts, secret, sensitivity=1.0, epsilon=budget, isolation="trusted", shape=secret.shape)
        out[:, secret.t - 1] = kept[-1][None, :] if leak(kept) else noisy
    return out


@attrs.frozen
class LeaksAboveAMillion:
    """Uniform that publishes a timestamp's true counts whenever one of them exceeds 10^6 (a large
    count "needs no noise"): the fixed Poisson(3)/Poisson(40) pair never triggers it."""

    name: str = "leaks-above-a-million"

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> FloatArray:
        return _keeping_uniform(stream, ledger, lambda kept: bool(kept[-1].max() > 1e6))


@attrs.frozen
class LeaksOnThreeEqualCounts:
    """Uniform that publishes the true counts when the first count was the same, above 100, at three
    consecutive timestamps (a "stable" series): only a pattern in the data opens it."""

    name: str = "leaks-on-three-equal-counts"

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> FloatArray:
        def stable(kept: list[FloatArray]) -> bool:
            last = [float(k[0]) for k in kept[-3:]]
            return len(last) == 3 and last[0] == last[1] == last[2] > 100

        return _keeping_uniform(stream, ledger, stable)


# --- issue 28, class 3: a vector query whose sensitivity only shows for d >= 2 (statistical audit) ---


@attrs.frozen
class PrefixCountsDeclaresOne:
    """Publishes the cumulative histogram (count of bins 0..j, per column j) through measure() at ε/w
    with sensitivity 1: one individual added to bin 0 moves every prefix, L1 sensitivity d. At d = 1
    it is a plain count (sensitivity 1, correct), so a one-column audit cannot see it."""

    name: str = "prefix-counts-declares-one"

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> FloatArray:
        budget = rounding.share(ledger.params.epsilon, ledger.params.w)
        out = np.zeros((ledger.runs, stream.length, stream.dimensions))
        for secret in stream:
            out[:, secret.t - 1] = ledger.measure(
                np.cumsum, secret, sensitivity=1.0, epsilon=budget, shape=secret.shape
            )
        return out


# --- issue 28, class 4: public routes around the guard (caught by secret access) ---


@attrs.frozen
class VaultThroughGlobalsAndGc:
    """Finds the vault from a method's ``__globals__`` and ``gc.get_referents`` (whatever holds the
    payloads), and publishes the true counts: the guard cannot stop introspection, non-interference must."""

    name: str = "vault-through-globals-and-gc"

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> FloatArray:
        import gc

        out = np.zeros((ledger.runs, stream.length, stream.dimensions))
        for secret in stream:
            ledger.laplace(secret, rounding.share(ledger.params.epsilon, ledger.params.w))  # looks like Uniform
            namespace = next(  # the module of the secret's class, through any of its Python functions
                f.__globals__ for f in vars(type(secret)).values() if hasattr(f, "__globals__")
            )
            pending = list(namespace.values())
            for _ in range(3):  # three levels of referents from the module's names
                pending = [r for x in pending for r in gc.get_referents(x)]
                for found in pending:
                    if isinstance(found, dict) and id(secret) in found:
                        out[:, secret.t - 1] = found[id(secret)]
        return out


# --- pan-private variants that under-reserve for an intrusion (refused by the ledger's exposure check) ---
from mechanisms.panprivate import BAPanPrivate, BDPanPrivate  # noqa: E402


@attrs.frozen
class BDPanPrivateAsBD(BDPanPrivate):
    """Pan-private BD with BD's ε_rm/2 and no exposure in ε_rm: a skip exposes ε/4 on top of ε/2."""

    name: str = attrs.field(default="BDPanPrivate-as-BD", init=False)

    def candidate(self, half: FloatArray, spent: FloatArray, exposed: FloatArray) -> FloatArray:
        return np.asarray(bd_candidate(FLOAT, half, tuple(spent)), dtype=np.float64)


@attrs.frozen
class BDPanPrivateAsSketched(BDPanPrivate):
    """The paper's literal ε_rm/3 with ε_rm = ε/2 − P: publications after a skip still reach ε/2."""

    name: str = attrs.field(default="BDPanPrivate-as-sketched", init=False)

    def candidate(self, half: FloatArray, spent: FloatArray, exposed: FloatArray) -> FloatArray:
        remaining = FLOAT.sub_down(half, FLOAT.sum_up(tuple(spent)))
        return np.asarray(FLOAT.fraction_down(remaining, 1, 3), dtype=np.float64)


@attrs.frozen
class BAPanPrivateFullShare(BAPanPrivate):
    """Pan-private BA keeping BA's share ε/(2w) under a single intrusion: an exposure of up to ε/2 more."""

    name: str = attrs.field(default="BAPanPrivate-full-share", init=False)

    def share(self, epsilon: FloatArray, w: int) -> FloatArray:
        return np.asarray(FLOAT.share(epsilon, 2 * w), dtype=np.float64)


@attrs.frozen
class BDPanPrivateAnnouncedForgetsForced(BDPanPrivate):
    """Pan-private BD under announced intrusions whose budget history keeps only the publications it
    asked for: a publication the ledger forced at an announced intrusion is missing from P, so the
    next ε_rm/2 is too large and a window of forced and chosen publications passes ε. Without an
    announcement it is BDPanPrivateAnnounced exactly: only an explorer that announces finds it. It
    exposes no rule (as a third party's mechanism may not), so the ledger's refusal is what exploration
    finds; with BD's rule, conformance names the step first."""

    intrusions: str = "announced"
    name: str = attrs.field(default="BDPanPrivateAnnounced-forgets-forced", init=False)

    def allocation_rule(self) -> None:  # type: ignore[override]
        return None

    def releases(self, stream: Any, ledger: Any) -> Any:
        runs, w = ledger.runs, ledger.w
        epsilon = np.broadcast_to(np.asarray(ledger.epsilon, dtype=np.float64), (runs,))
        unit, half = FLOAT.share(epsilon, 2 * w), FLOAT.share(epsilon, 2)
        spent = np.zeros((max(w - 1, 0), runs))
        last = np.zeros((runs, stream.dimensions))
        for secret in stream:
            candidate = np.asarray(bd_candidate(FLOAT, half, tuple(spent)), dtype=np.float64)
            candidate = np.broadcast_to(candidate, (runs,))
            dis = ledger.dissimilarity(secret, last, unit)
            with np.errstate(divide="ignore"):
                wanted = (candidate > 0.0) & (dis > 1.0 / candidate)
            values = ledger.held_laplace(secret, candidate, wanted, intrusions="announced")
            published = ~np.isnan(values).reshape(runs, -1).all(axis=1)
            last = np.where(published[:, None], values.reshape(runs, -1), last)
            if w > 1:
                spent = np.vstack([spent[1:], np.where(wanted, candidate, 0.0)])  # forced ones forgotten
            yield last


@attrs.frozen
class BDPanPrivateAnnouncedForgetsForcedOnThirds(BDPanPrivate):
    """Pan-private BD under announced intrusions whose budget history drops a publication the ledger
    forced at an intrusion announced at t ≡ 0 (mod 3), and keeps every other one: the next ε_rm/2 is
    then too large and a later publication in the window is refused. Exploration announces at
    t ≡ 2 (mod 3) only, so it never sees the bug, and without announcements the mutant is
    BDPanPrivateAnnounced: only replay with drawn intrusion schedules catches it. No rule (a third
    party's mechanism may expose none)."""

    intrusions: str = "announced"
    name: str = attrs.field(default="BDPanPrivateAnnounced-forgets-forced-on-thirds", init=False)

    def allocation_rule(self) -> None:  # type: ignore[override]
        return None

    def releases(self, stream: Any, ledger: Any) -> Any:
        runs, w = ledger.runs, ledger.w
        epsilon = np.broadcast_to(np.asarray(ledger.epsilon, dtype=np.float64), (runs,))
        unit, half = FLOAT.share(epsilon, 2 * w), FLOAT.share(epsilon, 2)
        spent = np.zeros((max(w - 1, 0), runs))
        last = np.zeros((runs, stream.dimensions))
        for t, secret in enumerate(stream, start=1):
            candidate = np.asarray(bd_candidate(FLOAT, half, tuple(spent)), dtype=np.float64)
            candidate = np.broadcast_to(candidate, (runs,))
            dis = ledger.dissimilarity(secret, last, unit)
            with np.errstate(divide="ignore"):
                wanted = (candidate > 0.0) & (dis > 1.0 / candidate)
            values = ledger.held_laplace(secret, candidate, wanted, intrusions="announced")
            published = ~np.isnan(values).reshape(runs, -1).all(axis=1)
            last = np.where(published[:, None], values.reshape(runs, -1), last)
            kept = published if t % 3 else wanted  # a forced publication at t ≡ 0 (mod 3) is forgotten
            if w > 1:
                spent = np.vstack([spent[1:], np.where(kept, candidate, 0.0)])
            yield last


@attrs.frozen
class UniformHoldsAPreciseCopy:
    """Uniform (ε/w at every t) that also holds a precise copy of c_t (held at 4ε, never published,
    discarded) and declares the single unannounced intrusion model, but passes
    ``intrusions="announced"`` to the ledger: under that model a discarded held value is never read,
    so the ledger records no exposure and refuses nothing. Replay, exploration and the output pairs
    of the audit see Uniform; an intrusion at one timestamp reads c_t with noise of scale 1/(4ε), and
    only the audit's intruder pairs, whose observation includes that read, catch it."""

    intrusions: str = "single"
    name: str = "Uniform-holds-a-precise-copy"

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> FloatArray:
        epsilon = np.broadcast_to(np.asarray(ledger.epsilon, dtype=np.float64), (ledger.runs,))
        share = FLOAT.share(epsilon, ledger.w)
        out = []
        for secret in stream:
            out.append(ledger.laplace(secret, share))
            ledger.held_laplace(secret, 4.0 * epsilon, False, intrusions="announced")  # the wrong model
        return np.stack(out, axis=1)


CORPUS: list[tuple[Callable[[], object], str]] = [
    (UniformHoldsAPreciseCopy, "statistical audit"),
    (BDPanPrivateAnnouncedForgetsForcedOnThirds, "ledger replay"),
    (BDPanPrivateAnnouncedForgetsForced, "exploration"),
    (BDPanPrivateAsBD, "exploration"),
    (BDPanPrivateAsSketched, "exploration"),
    (BAPanPrivateFullShare, "exploration"),
    (VaultThroughGlobalsAndGc, "secret access"),
    (PrefixCountsDeclaresOne, "statistical audit"),
    (LeaksAboveAMillion, "secret access"),
    (LeaksOnThreeEqualCounts, "secret access"),
    (MeasureKeepsPayload, "secret access"),
    (PBANullificationMinimum, "ledger replay"),
    (PBANullificationAverage, "ledger replay"),
    (PBAClassMinimumToEveryone, "ledger replay"),
    (RescueDPKalmanFromTrueSeries, "secret access"),
    (BDDissimilarityOverPopulation, "statistical audit"),
    (SampleDecidesOnTrueValue, "secret access"),
    (SwellfishThresholdUnits, "ledger replay"),  # a sensitivity below the stream's relation is refused at run time
    (SwellfishMeasureThresholdUnits, "statistical audit"),  # the same through measure: vouched, only the audit sees it
    (DSATUnchargedTest, "ledger replay"),
    (RescueDPIgnoresRemaining, "ledger replay"),
    (AdaPubRereadsClusters, "ledger replay"),
    (UnicornPSOverDeltaMinusOne, "ledger replay"),
    (SwellfishTrueValuesEverywhere, "ledger replay"),
    (PBDMostGenerous, "ledger replay"),
    (BAAsPublished, "ledger replay"),
    (UniformFullEpsilon, "ledger replay"),
    (DeclaresEpsilonPerRunReadsParams, "ledger replay"),
    (DeclaresEpsilonPerRunSpendsTheLargest, "ledger replay"),
    (SwallowsRefusals, "ledger replay"),
    (ReadsSecret, "secret access"),
    (SecondLedger, "secret access"),
    (FloatUniform, "ledger replay"),
    (BAWithoutNullification, "proof"),
    (BAAbsorbsOneMore, "proof"),
    (BDRecyclesEarly, "proof"),
    (BANullifiesOneTooFew, "proof"),
    (SampleEveryWMinusOne, "ledger replay"),
    (UniformOverWMinusOne, "ledger replay"),
    (FirstTimestampTwice, "ledger replay"),
    (RestartedEveryFive, "ledger replay"),
    (PerDimensionSample, "ledger replay"),
    (SpendsAllThatRemains, "ledger replay"),
    (HomeMadeWindowOffByOne, "ledger replay"),
    (GreedyTwice, "ledger replay"),
    (UniformHalfSensitivity, "ledger replay"),  # refused at run time: the identity's sensitivity is derived
    (MeasureTinySensitivity, "statistical audit"),
    (RescueDPGroupMeanNoise, "statistical audit"),  # issue 28 item 5: only the pair at t = 1 sees it
    (SeriesOverWMinusOne, "ledger replay"),
    (SeriesHalfSensitivity, "ledger replay"),  # refused at run time, as above
    (BDLargeWindowDissimilarity, "exploration"),
    (BDCatchesUpAfterQuiet, "exploration"),
    (UniformRecalibratesLate, "exploration"),
]
# issue 28 class 1: caught only by stage e
CLASS_ONE = (BDLargeWindowDissimilarity, BDCatchesUpAfterQuiet, UniformRecalibratesLate)
