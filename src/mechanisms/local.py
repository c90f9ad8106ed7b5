"""LDP stream mechanisms: LBU, PLBU, LSP, LBD and LBA (Ren et al., "LDP-IDS: Local Differential
Privacy for Infinite Data Streams", SIGMOD'22; Du et al. 2025, §5.2 for PLBU).

Every user perturbs its own value with an ε-LDP frequency oracle (``ledger.local_report``: GRR or
OUE, whichever has the smaller variance, as LDP-IDS does) and is charged in its own window; the
mechanism only ever sees the aggregated, unbiased count estimate. Each mechanism runs a proved
allocation rule per requirement class (ε_c, w_c), or the strictest requirement (max w_i, min ε_i)
for every class: that is the non-personalized method of Ren et al. (LBU, LSP, LBD, LBA), the
personalized form of which (own ε_i, w_i) is Du et al.'s PLBU baseline.

- LBU/PLBU (LDP budget uniform): every user reports at every t with ε_i/w_i (rule: Uniform's).
- LSP (LDP sampling): every user reports once every w_i timestamps with the whole ε_i (Sample's
  rule); in between, each class's last estimate is repeated.
- LBD/LBA (LDP budget distribution/absorption): BD's and BA's rules per class. M_{t,1}: every user
  reports at ε_i/(2 w_i); dis = (1/d) Σ_j (ĉ_{t,j} − r_{l,j})² − V(ε_{t,1}) (the squared distance,
  less the estimate's variance: unbiased for the true squared distance); M_{t,2}: publish iff
  dis > V(ε_{t,2}) (LDP-IDS's test, with V the per-bin variance of the oracle,
  ``ledger.local_variance``), with a fresh report at ε_{t,2}; otherwise repeat r_l.

What was read. Du et al. 2025 (``../shared/papers``) names PLBU only: "extends LBU (Ren et al., 2022)
by replacing the inner CDP mechanism with an LDP mechanism" (§5.2). The project holds no copy of Ren
et al.'s LDP-IDS paper; LBU, LSP, LBD, LBA, LPD and LPA follow its published description as cited
below (not re-checked against a copy here), and GRR/OUE with their variances follow Wang et
al. 2017 (:mod:`budgetcheck.ledger.local`). Where our reading of LDP-IDS could differ from its text
(the variance test's exact form, the group schedule of LPD/LPA) the privacy does not depend on it:
every report is charged in its user's window by the ledger, and verify checks the charges.

Choices where the sources are silent: the last release before t = 1 is the all-zero vector (as PBD);
a report in which some classes have budget 0 (BA's nullification, or a class off its LSP schedule)
estimates the reporting classes only, scaled by N / Σ_{reporting} n_c (LDP-IDS scales a
sub-population's estimate the same way); the publish decision is shared by all classes (as PBD).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import attrs
import numpy as np
from numpy.typing import NDArray

from budgetcheck import LiveStream, PersonalizedLedger, PersonalizedStream, Requirement
from budgetcheck.ops import FLOAT, per_run
from budgetcheck.proving import AllocationRule, RuleEnv
from mechanisms._common import StepByStep
from mechanisms.personalized import step_budgets
from mechanisms.rules import BARule, BDRule, PeriodicRule

FloatArray = NDArray[np.float64]
Stream = PersonalizedStream | LiveStream


def _envs(ledger: PersonalizedLedger, strictest: bool) -> list[RuleEnv]:
    requirements = ledger.requirements
    chosen: list[Requirement] = (
        [requirements.strictest()] * requirements.n_classes if strictest else list(requirements.classes)
    )
    return [RuleEnv(r.epsilon, r.w) for r in chosen]


def _scaled(ledger: PersonalizedLedger, estimate: FloatArray, budgets: FloatArray) -> FloatArray:
    """The estimate of the reporting classes scaled to the whole population: × N / Σ_{ε_c > 0} n_c."""
    counts = np.asarray(ledger.requirements.counts, dtype=np.float64)
    reporting = (budgets > 0.0) @ counts
    with np.errstate(divide="ignore", invalid="ignore"):
        factor = np.where(reporting > 0, counts.sum() / reporting, 0.0)
    return np.asarray(np.nan_to_num(estimate) * factor[:, None], dtype=np.float64)


def periodic_releases(
    rule: PeriodicRule, stream: Stream, ledger: PersonalizedLedger, strictest: bool
) -> Iterator[FloatArray]:
    """LBU/PLBU (``every=1``) and LSP: each class reports when its rule schedules it; the release is
    Σ_c (the class's latest estimate), all classes reporting together in one call when they can."""
    envs = _envs(ledger, strictest)
    runs, classes = ledger.runs, ledger.requirements.n_classes
    states = [rule.initial(FLOAT, env) for env in envs]
    latest = np.zeros((runs, classes, stream.dimensions))
    for secret in stream:
        budgets = np.array(
            [float(rule.charges(FLOAT, env, state, True)[0]) for env, state in zip(envs, states, strict=True)]
        )
        due = budgets > 0.0
        if due.all():
            latest[:] = 0.0
            latest[:, 0] = ledger.local_report(secret, budgets)
        else:
            for c in np.flatnonzero(due):
                only = np.where(np.arange(classes) == c, budgets, 0.0)
                latest[:, c] = ledger.local_report(secret, only)
        states = [
            rule.advance(FLOAT, env, state, True, (budgets[c],))
            for c, (env, state) in enumerate(zip(envs, states, strict=True))
        ]
        yield np.asarray(latest.sum(axis=1), dtype=np.float64)


def adaptive_releases(
    rule: AllocationRule, stream: Stream, ledger: PersonalizedLedger, strictest: bool
) -> Iterator[FloatArray]:
    """LBD/LBA: the module docstring's M_{t,1} and M_{t,2} with ``rule`` per class."""
    envs = _envs(ledger, strictest)
    runs, d = ledger.runs, stream.dimensions
    states: list[Any] = [per_run(rule.initial(FLOAT, env), runs) for env in envs]
    last = np.zeros((runs, d))
    for secret in stream:
        dissimilarity, candidate = step_budgets(rule, envs, states, runs)
        first = _scaled(ledger, ledger.local_report(secret, dissimilarity, purpose="dissimilarity"), dissimilarity)
        dis = ((first - last) ** 2).mean(axis=1) - ledger.local_variance(dissimilarity, d)
        publish = (candidate.max(axis=1) > 0.0) & (dis > ledger.local_variance(candidate, d))
        spent = np.where(publish[:, None], candidate, 0.0)
        if publish.any():
            fresh = _scaled(ledger, ledger.local_report(secret, spent), spent)
            last = np.where(publish[:, None], fresh, last)
        states = [
            rule.advance(FLOAT, env, state, publish, (dissimilarity[:, c], spent[:, c]))
            for c, (env, state) in enumerate(zip(envs, states, strict=True))
        ]
        yield last


@attrs.frozen
class _Local(StepByStep):
    strictest: bool = False
    notion: str = attrs.field(default="personalized", init=False)

    def allocation_rule(self) -> Any:
        raise NotImplementedError

    def releases(self, stream: Stream, ledger: PersonalizedLedger) -> Iterator[FloatArray]:
        rule = self.allocation_rule()
        if isinstance(rule, PeriodicRule):
            return periodic_releases(rule, stream, ledger, self.strictest)
        return adaptive_releases(rule, stream, ledger, self.strictest)


@attrs.frozen
class PLBU(_Local):
    """Personalized LDP Budget Uniform (Du et al. 2025, §5.2): every user reports at every t with
    ε_i/w_i; ``strictest`` = LBU (Ren et al. 2022), ε/w with the strictest (max w_i, min ε_i)."""

    @property
    def name(self) -> str:
        return "LBU" if self.strictest else "PLBU"

    def allocation_rule(self) -> PeriodicRule:
        return PeriodicRule(every=1)


def LBU() -> PLBU:
    """LDP Budget Uniform (Ren et al. 2022): every user reports at every t with ε/w (strictest requirement)."""
    return PLBU(strictest=True)


@attrs.frozen
class LSP(_Local):
    """LDP Sampling (Ren et al. 2022): every user reports once per window with the whole ε, at
    t ≡ 1 (mod w); ``strictest=False`` lets each class follow its own (w_i, ε_i)."""

    strictest: bool = True

    @property
    def name(self) -> str:
        return "LSP" if self.strictest else "PLSP"

    def allocation_rule(self) -> PeriodicRule:
        return PeriodicRule()


@attrs.frozen
class LBD(_Local):
    """LDP Budget Distribution (Ren et al. 2022): BD's rule with LDP reports and the variance test."""

    strictest: bool = True

    @property
    def name(self) -> str:
        return "LBD" if self.strictest else "PLBD"

    def allocation_rule(self) -> BDRule:
        return BDRule()


@attrs.frozen
class LBA(_Local):
    """LDP Budget Absorption (Ren et al. 2022): BA's rule (dissimilarity paid at nullified t too)."""

    strictest: bool = True

    @property
    def name(self) -> str:
        return "LBA" if self.strictest else "PLBA"

    def allocation_rule(self) -> BARule:
        return BARule(dissimilarity_when_nullified=True)


def population_releases(absorb: bool, stream: Stream, ledger: PersonalizedLedger) -> Iterator[FloatArray]:
    """LPD (``absorb=False``) and LPA (Ren et al. SIGMOD'22, LDP-IDS §5): split the users, not the budget.

    With the strictest requirement (W, ε) every user reports at most once per W timestamps, with the
    whole ε (so every window of w_c <= W holds at most ε <= ε_c). Each class is split into k = 2W public
    groups (``ledger.local_report_groups``): groups 0..W−1 report the dissimilarity in turn (group
    (t − 1) mod W at t: N/(2W) users, as LDP-IDS's M_{t,1}); groups W..2W−1 are the publication pool, a
    group being free again W timestamps after it reported. LPD publishes with half the free pool
    (rounded up: BD's halving in users); LPA with the pool of the timestamps skipped since the last
    publication, at most W, and skips as many after it (BA's absorption and nullification). Publish
    iff dis > V(publication users), both estimates scaled to the N users.
    """
    strict = ledger.requirements.strictest()
    W, eps = strict.w, strict.epsilon
    k, runs, d = 2 * W, ledger.runs, stream.dimensions
    classes = ledger.requirements.n_classes
    sizes = ledger.group_sizes(k).sum(axis=0).astype(np.float64)  # users per group, over the classes
    total = sizes.sum()
    free_since = np.full((runs, W), -W, dtype=np.int64)  # last report of each publication group
    last = np.zeros((runs, d))
    published, absorbed = np.zeros(runs, dtype=np.int64), np.ones(runs, dtype=np.int64)  # LPA's l and its count

    def report(secret: Any, chosen: NDArray[np.bool_], purpose: str) -> tuple[FloatArray, FloatArray]:
        amounts = np.where(chosen[:, None, :], eps, 0.0) * np.ones((1, classes, 1))
        users = chosen @ sizes
        with np.errstate(divide="ignore", invalid="ignore"):
            factor = np.where(users > 0, total / users, 0.0)
        variance = ledger.local_group_variance(amounts, k, d) * factor**2
        if purpose == "variance":
            return np.zeros((runs, d)), variance
        estimate = ledger.local_report_groups(secret, amounts, groups=k, purpose=purpose)
        return np.nan_to_num(estimate) * factor[:, None], variance

    for t, secret in enumerate(stream, start=1):
        nullified = (t < published + absorbed) if absorb else np.zeros(runs, dtype=bool)
        dis_groups = np.zeros((runs, k), dtype=bool)
        dis_groups[:, (t - 1) % W] = ~nullified
        free = free_since <= t - W
        if absorb:
            count = np.minimum(np.minimum(t - published - absorbed + 1, W), free.sum(axis=1))
        else:
            count = (free.sum(axis=1) + 1) // 2
        count = np.where(nullified, 0, count)
        chosen_pool = free & (np.cumsum(free, axis=1) <= count[:, None])
        candidate = np.zeros((runs, k), dtype=bool)
        candidate[:, W:] = chosen_pool
        publish = np.zeros(runs, dtype=bool)
        if dis_groups.any():
            first, first_variance = report(secret, dis_groups, "dissimilarity")
            dis = ((first - last) ** 2).mean(axis=1) - first_variance
            _, publish_variance = report(secret, candidate, "variance")
            publish = ~nullified & (count > 0) & (dis > publish_variance)
        if publish.any():
            fresh, _ = report(secret, candidate & publish[:, None], "publication")
            last = np.where(publish[:, None], fresh, last)
            free_since = np.where(chosen_pool & publish[:, None], t, free_since)
            published = np.where(publish, t, published)
            absorbed = np.where(publish, count, absorbed)
        yield last.copy()


@attrs.frozen
class _Population(StepByStep):
    absorb: bool = False
    notion: str = attrs.field(default="personalized", init=False)

    @property
    def name(self) -> str:
        return "LPA" if self.absorb else "LPD"

    def releases(self, stream: Stream, ledger: PersonalizedLedger) -> Iterator[FloatArray]:
        return population_releases(self.absorb, stream, ledger)


def LPD() -> _Population:
    """LDP Population Division (Ren et al. 2022, §5): BD's rule over users, each reporting with the whole ε."""
    return _Population(absorb=False)


def LPA() -> _Population:
    """LDP Population Absorption (Ren et al. 2022, §5): BA's absorption and nullification over users."""
    return _Population(absorb=True)
