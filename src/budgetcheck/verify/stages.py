"""`budgetcheck verify`: the stage list, profiles and verdicts; stage (a), ledger replay on
generated streams with a brute-force recheck, lives here. Stage (e), output-driven exploration
with rule conformance, is :mod:`budgetcheck.verify.explore`; the verdict a user acts on is
:mod:`budgetcheck.verify.verdict`.

Each Hypothesis example runs the mechanism through a fresh ledger, then re-checks every window of
every run from the ledger's records with the independent auditor (:mod:`budgetcheck.ledger.audit`).
A mechanism under multiple announced intrusions (``intrusions == "announced"``, Kellaris et al. 2014,
§4.5) is replayed with a Hypothesis-drawn schedule of announced intrusions too
(:func:`budgetcheck.strategies.intrusion_schedules`), drawn, shrunk and reported with the rest of
the case: the ledger forces the held value's publication at each, the auditor rechecks the windows
with those publications in them, and a single unannounced intrusion needs no schedule (every
discarded held value is an exposure record the auditor adds to its window). A
mechanism fails when the auditor finds a window over ε, when it asked the ledger for more than a
window allows (a refused spend, even if it caught the error), when it touched a secret, or when it
crashed. Failures are shrunk by Hypothesis to a minimal case and reported as a reproducible call.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from fractions import Fraction
from typing import Any, cast

import attrs
import numpy as np
from hypothesis import Phase
from hypothesis.strategies import SearchStrategy

from budgetcheck.ledger.audit import audit_windows_per_epsilon
from budgetcheck.ledger.audit_notions import audit_records
from budgetcheck.ledger.errors import BudgetExceeded, InvalidArgument, LedgerCorrupt, NotAllowed, SecretAccess
from budgetcheck.ledger.grid import no_grid_sessions
from budgetcheck.ledger.intrusions import ANNOUNCED
from budgetcheck.ledger.notion import Notion
from budgetcheck.ledger.validation import check_positive_int
from budgetcheck.mechanism.execute import (
    PersonalizedMechanism,
    StreamMechanism,
    SwellfishMechanism,
    execute,
    execute_personalized,
    execute_swellfish,
    max_stacked_runs,
    notion_of,
)
from budgetcheck.mechanism.loading import load_mechanism as load_mechanism
from budgetcheck.strategies import (
    PersonalizedCase,
    SwellfishCase,
    VerificationCase,
    cases,
    personalized_cases,
    swellfish_cases,
)
from budgetcheck.stream.guarded import GuardedStream
from budgetcheck.verify.configurations import (
    BENCH,
    IN_MEMORY,
    LEDGER_FILE,
    Configuration,
    fixed_cases,
    ledger_files,
    refused_there,
)
from budgetcheck.verify.contract import check_contract
from budgetcheck.verify.live import LivePath, Store, has_live_path, live_departure, run_case
from budgetcheck.verify.owner import allowing, ledger_flags
from budgetcheck.verify.profiles import PROFILES as PROFILES
from budgetcheck.verify.profiles import STAGES as STAGES
from budgetcheck.verify.profiles import Profile as Profile
from budgetcheck.verify.seeded import run_seeded
from budgetcheck.verify.subset import skipped_letters, skipped_note
from budgetcheck.verify.verdict import FAIL, INCONCLUSIVE, NOT_PROVED, PASS, Outcome, Verdict, meets, outcome

AnyCase = VerificationCase | PersonalizedCase | SwellfishCase
AnyMechanism = StreamMechanism | PersonalizedMechanism | SwellfishMechanism


# the reason of a case refused because the mechanism asked for what verify's ledgers do not allow (in-process
# code, a vouched sensitivity: verify.owner): inconclusive, not a violation (nothing was charged or released)
NOT_ALLOWED = "not allowed by the ledger's owner"


@attrs.frozen
class Counterexample:
    """A minimal failing input and what went wrong, replayable with :meth:`call`."""

    reason: str
    detail: str
    case: AnyCase
    several_epsilons: bool = False  # found on a ledger of several ε (the case's ε and a third of it)
    configuration: str = IN_MEMORY.name  # where production runs it (budgetcheck.verify.configurations)

    def call(self, reference: str) -> str:
        """Python that reproduces the failure (in memory; a comment names another configuration)."""
        found = self._call(reference)
        if self.configuration != IN_MEMORY.name:
            found += f"  # found in the {self.configuration} configuration (budgetcheck.verify.configurations)"
        return found

    def _call(self, reference: str) -> str:
        case, mech = self.case, f"budgetcheck.load_mechanism({reference!r})"
        if isinstance(case, PersonalizedCase):
            classes = [
                ((r.w, r.epsilon), n) for r, n in zip(case.requirements.classes, case.requirements.counts, strict=True)
            ]
            return (
                f"budgetcheck.execute_personalized({mech}, budgetcheck.RequirementSet.from_counts({classes!r}), "
                f"{case.bins.tolist()!r}, dimensions={case.dimensions}, runs={case.runs}, seed={case.seed})"
            )
        data = np.round(case.data, 6).tolist()
        if isinstance(case, SwellfishCase):
            policies = ", ".join(
                f"budgetcheck.StreamPolicy({p.start}, {p.end}, {list(p.thresholds)!r})" for p in case.policies.policies
            )
            return (
                f"budgetcheck.execute_swellfish({mech}, budgetcheck.PolicyCollection([{policies}]), {data!r}, "
                f"epsilon={case.epsilon!r}, runs={case.runs}, seed={case.seed})"
            )
        intruded = f", intrusions={list(case.intrusions)!r}" if case.intrusions else ""
        if self.several_epsilons:
            return (
                f"budgetcheck.execute({mech}, {data!r}, epsilon=[{case.epsilon!r}] * {case.runs} + "
                f"[{case.epsilon / 3!r}] * "
                f"{case.runs}, w={case.w}, runs={2 * case.runs}, seed={case.seed}{intruded})"
            )
        return (
            f"budgetcheck.execute({mech}, {data!r}, epsilon={case.epsilon!r}, w={case.w}, runs={case.runs}, "
            f"seed={case.seed}{intruded})"
        )


@attrs.frozen
class StageResult:
    """One stage of ``verify``: its name, verdict (pass / fail / not proved / inconclusive), detail, time."""

    stage: str
    verdict: Verdict = attrs.field(converter=Verdict)
    detail: str = ""
    seconds: float = attrs.field(default=0.0, eq=False)

    def to_json(self, *, timings: bool = False) -> dict[str, object]:
        """The stage as JSON; with its seconds only if ``timings`` (a report stays reproducible without)."""
        found: dict[str, object] = {"stage": self.stage, "verdict": self.verdict, "detail": self.detail}
        if timings:
            found["seconds"] = round(self.seconds, 3)
        return found


@attrs.frozen
class Bound:
    """How far the stages looked: the largest w and horizon T exercised, and the runs explored."""

    w_max: int
    horizon: int
    runs_explored: int

    def describe(self) -> str:
        return f"w <= {self.w_max}, T <= {self.horizon}, {self.runs_explored} runs explored"

    def to_json(self) -> dict[str, int]:
        return {"w_max": self.w_max, "horizon": self.horizon, "runs_explored": self.runs_explored}


@attrs.frozen
class VerifyResult:
    """The verdict for one mechanism: stage (a) figures plus every stage's result."""

    mechanism: str
    reference: str
    examples: int
    runs: int
    worst_ratio: float
    counterexample: Counterexample | None
    stages: tuple[StageResult, ...] = ()
    worst_case: AnyCase | None = attrs.field(default=None, eq=False, repr=False)
    worst_refused: bool = False  # worst_ratio is the sum of a refused attempt
    notion: str = Notion.W_EVENT
    bound: Bound | None = None  # what exploration and replay covered
    vouched: bool = False  # some release's sensitivity was the mechanism's word (measure): audit only
    ran: str = "abcde"  # the letters of the stages run (--stages)

    @property
    def skipped(self) -> str:
        """The letters of the stages not run (``""`` for a full run): :mod:`budgetcheck.verify.subset`."""
        return skipped_letters(self.ran)

    @property
    def note(self) -> str | None:
        """For a ``--stages`` subset, the stages skipped and what verdict that leaves; None for a full run."""
        return skipped_note(
            self.ran, self.outcome, {stage.stage: stage.verdict for stage in self.stages}, vouched=self.vouched
        )

    @property
    def outcome(self) -> Outcome:
        """The verdict a user acts on: proved, verified to a bound, violated or inconclusive."""
        return outcome(
            ((stage.stage, stage.verdict) for stage in self.stages),
            violated=self.counterexample is not None and self.counterexample.reason != NOT_ALLOWED,
            vouched=self.vouched,
        )

    def meets(self, require: str = "bounded") -> bool:
        """Whether the verdict satisfies ``--require`` (bounded, the default, or proof)."""
        return meets(self.outcome, require)

    @property
    def passed(self) -> bool:
        """Proved or verified to a bound (what ``verify`` exits 0 on by default)."""
        return self.meets("bounded")

    @property
    def verdict(self) -> str:
        """The stage-style verdict: fail (violated), inconclusive, or pass (proved or verified to a bound)."""
        return self.outcome.legacy

    @property
    def failed_stage(self) -> str | None:
        return next((stage.stage for stage in self.stages if stage.verdict == FAIL), None)

    def to_json(self, *, timings: bool = False) -> dict[str, object]:
        report: dict[str, object] = {
            "mechanism": self.mechanism,
            "reference": self.reference,
            "examples": self.examples,
            "runs": self.runs,
            "worst_window_over_epsilon": self.worst_ratio if self.examples else None,  # None: no replay ran
            "worst_was_refused": self.worst_refused,
            "verdict": self.outcome.value,
            "bound": self.bound.to_json() if self.bound is not None else None,
            "stages": [stage.to_json(timings=timings) for stage in self.stages],
            "vouched_sensitivity": self.vouched,
            "skipped_stages": list(self.skipped),
            "verdict_note": self.note,
        }
        report["notion"] = self.notion
        if self.counterexample is not None:
            ce = self.counterexample
            found: dict[str, object] = {
                "reason": ce.reason,
                "detail": ce.detail,
                "runs": ce.case.runs,
                "seed": ce.case.seed,
                "call": ce.call(self.reference),
            }
            if isinstance(ce.case, VerificationCase):
                found.update(epsilon=ce.case.epsilon, w=ce.case.w, stream=ce.case.data.tolist())
                if ce.case.intrusions:
                    found["intrusions"] = list(ce.case.intrusions)
            report["counterexample"] = found
        return report


class _Violation(Exception):
    def __init__(
        self, reason: str, detail: str, *, several_epsilons: bool = False, configuration: str = IN_MEMORY.name
    ) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail
        self.several_epsilons = several_epsilons
        self.configuration = configuration


def verify_mechanism(
    reference: str,
    *,
    examples: int | None = None,
    seed: int = 0,
    max_length: int = 60,
    profile: str = "quick",
    stages: str = STAGES,
    trusted_code: bool | None = None,
    allow_vouched: bool | None = None,
) -> VerifyResult:
    """Run the stages on one mechanism (``stages`` selects a subset, e.g. "ab").

    ``trusted_code``, ``allow_vouched``: the owner flags of every ledger the stages build
    (:mod:`budgetcheck.verify.owner`; None: those of the enclosing ``allowing`` block, else False); by
    default a mechanism that asks for in-process code or a vouched
    sensitivity is refused there, as on ``publish``'s and ``bench``'s ledgers, and reported inconclusive.

    - (a) ledger replay on generated cases with a brute-force recheck, shrinking any failure;
    - (b) secret access: any read of the true stream outside a charged ledger operation;
    - (e) output-driven exploration of w up to the profile's (64 quick, 128 thorough) with, for a
      mechanism that exposes a rule, conformance of every explored run's charges to it;
    - (c) proof of the mechanism's allocation rule for w in 1..profile.w_max ("not proved" if it
      exposes none);
    - (d) statistical lower bound on the loss for neighbouring streams.

    ``reference`` is a built-in name or ``module:attr``, as on the command line.

    Example:
        >>> from budgetcheck import verify_mechanism
        >>> result = verify_mechanism("Uniform", stages="a", examples=5)  # the ledger replay only
        >>> result.outcome.value, result.meets("bounded")
        ('verified to a bound', True)
    """
    given = ledger_flags()
    trusted_code = given["trusted_code"] if trusted_code is None else trusted_code
    allow_vouched = given["allow_vouched"] if allow_vouched is None else allow_vouched
    # the stages' ledgers keep the ledger's own path: no grid session, even for a mechanism opening grid_sessions()
    with allowing(trusted_code=trusted_code, allow_vouched=allow_vouched), no_grid_sessions():
        return _verify(reference, examples=examples, seed=seed, max_length=max_length, profile=profile, stages=stages)


def _verify(
    reference: str, *, examples: int | None, seed: int, max_length: int, profile: str, stages: str
) -> VerifyResult:
    """:func:`verify_mechanism` under the owner flags it set."""
    if profile not in PROFILES:
        raise InvalidArgument(f"profile={profile!r} must be one of {sorted(PROFILES)}")
    if not isinstance(stages, str) or not stages or set(stages) - set(STAGES):
        raise InvalidArgument(f"stages={stages!r} must be letters from {STAGES!r}")
    if examples is not None:
        examples = check_positive_int(examples, "examples")
    max_length = check_positive_int(max_length, "max_length")
    seed = check_positive_int(seed, "seed", minimum=0)
    chosen = PROFILES[profile]
    examples = chosen.examples if examples is None else examples
    check_contract(load_mechanism(reference))  # a broken contract is the author's error (exit 2), not a verdict
    started = time.perf_counter()
    replay = (
        _replay(reference, examples=examples, seed=seed, max_length=max_length)
        if "a" in stages or "b" in stages
        else None
    )
    replay_seconds = time.perf_counter() - started
    mechanism = load_mechanism(reference)
    results: list[StageResult] = []
    counterexample = replay.counterexample if replay is not None else None
    bound = Bound(
        w_max=max_length if replay is not None else 0, horizon=max_length if replay is not None else 0, runs_explored=0
    )
    if replay is not None:
        secret = counterexample is not None and counterexample.reason == "secret access"
        other = counterexample is not None and not secret
        if "a" in stages:
            results.append(
                StageResult(
                    "ledger replay",
                    (INCONCLUSIVE if counterexample and counterexample.reason == NOT_ALLOWED else FAIL)
                    if other
                    else PASS,
                    f"{counterexample.reason}: {counterexample.detail}"
                    if other and counterexample
                    else f"{replay.examples} streams, {replay.runs} runs, worst window {replay.worst_ratio:.6f} of "
                    "epsilon"
                    + (" (an attempted spend, refused)" if replay.worst_refused else "")
                    + (
                        f"; a fixed case also in the {' and '.join(replay.configurations)} configurations"
                        if replay.configurations
                        else ""
                    ),
                    replay_seconds,
                )
            )
        if "b" in stages:
            results.append(
                _timed(
                    lambda: _secret_stage(
                        mechanism, counterexample.detail if secret and counterexample else None, replay.in_process
                    )
                )
            )
        bound = Bound(w_max=_replay_w_max(notion_of(mechanism), max_length), horizon=max_length, runs_explored=0)
    notion = notion_of(mechanism)
    explored_vouched = False  # exploration's runs charged a vouched sensitivity (a stream longer than replay's)
    if "e" in stages:
        explored, found = _exploration_stages(reference, mechanism, chosen.explore, seed)
        explored_vouched = found.vouched
        results += explored
        bound = Bound(
            w_max=max(bound.w_max, found.w_max), horizon=max(bound.horizon, found.horizon), runs_explored=found.runs
        )
    if "c" in stages:
        results.append(_timed(lambda: _proof_stage(mechanism, chosen.w_max)))
    if "d" in stages:
        known = bool(replay and replay.vouched) or explored_vouched
        results.append(_timed(lambda: _statistical_stage(mechanism, notion, chosen.audit_runs, seed, vouched=known)))
    return VerifyResult(
        mechanism=mechanism.name,
        reference=reference,
        examples=replay.examples if replay else 0,
        runs=replay.runs if replay else 0,
        worst_ratio=replay.worst_ratio if replay else 0.0,
        counterexample=counterexample,
        stages=tuple(results),
        worst_case=replay.worst_case if replay else None,
        notion=notion,
        worst_refused=replay.worst_refused if replay else False,
        bound=bound if replay is not None or "e" in stages else None,  # None: no stage ran a stream
        vouched=bool(replay and replay.vouched) or explored_vouched,
        ran="".join(letter for letter in STAGES if letter in stages),
    )


def _timed(stage: Callable[[], StageResult]) -> StageResult:
    started = time.perf_counter()
    result = stage()
    return attrs.evolve(result, seconds=time.perf_counter() - started)


def _replay_w_max(notion: Notion, max_length: int) -> int:
    """The largest window the replay strategies draw (w-event: w <= 40; personalized: w_c <= 12;
    Swellfish: |J| <= 24)."""
    return min({Notion.W_EVENT: 40, Notion.PERSONALIZED: 12}.get(notion, 24), max_length)


def _exploration_stages(
    reference: str, mechanism: AnyMechanism, budget: str, seed: int
) -> tuple[list[StageResult], Any]:
    """Stage (e): output-driven exploration and, for a mechanism with a rule, conformance to it."""
    from budgetcheck.proving import rule_of
    from budgetcheck.verify.explore import explore

    rule = rule_of(mechanism)
    found = explore(mechanism, profile=budget, seed=seed, rule=rule)
    scope = f"{found.runs} runs, w <= {found.w_max}, T <= {found.horizon}"
    worst = found.worst
    if found.violation is not None:
        run = found.violation
        what = run.refused if run.refused is not None else run.violations[0]
        kind = "overspend refused by the ledger" if run.refused is not None else "window over epsilon"
        detail = (
            f"{kind} at {run.setting.describe()}: {what} (window sum {float(run.ratio):.6f} of epsilon); "
            f"replay: {run.call(reference)}"
        )
        exploration = StageResult("exploration", FAIL, detail, found.seconds)
    elif found.nondeterministic is not None:
        exploration = StageResult(
            "exploration",
            INCONCLUSIVE,
            f"the mechanism is not a function of its charged outputs and seed: {found.nondeterministic}",
            found.seconds,
        )
    elif worst is None or worst.error is not None and found.runs == found.failed:
        exploration = StageResult(
            "exploration",
            INCONCLUSIVE,
            f"no run completed: {found.failed} runs failed ({len(found.errors)} distinct messages), the first at "
            f"{found.errors[0]}"
            if found.errors
            else "no run completed",
            found.seconds,
        )
    elif found.in_process:
        exploration = StageResult(
            "exploration",
            INCONCLUSIVE,
            f"{scope}: the mechanism's own code read true values in its process (isolation='trusted') in "
            f"{found.in_process} runs, which the stand-in stream does not hold: what it keeps there cannot be "
            "ruled out",
            found.seconds,
        )
    else:
        failed = (
            f"; the mechanism failed on {found.failed} output sequences (e.g. {found.errors[0]})"
            if found.errors
            else ""
        )
        exploration = StageResult(
            "exploration",
            PASS,
            f"{scope}, worst window {float(worst.ratio):.6f} of epsilon ({worst.setting.describe()}){failed}",
            found.seconds,
        )
    stages = [exploration]
    if rule is not None:
        if found.conformance is not None and found.conformance_run is not None:
            run = found.conformance_run
            stages.append(
                StageResult(
                    "rule conformance",
                    NOT_PROVED,
                    f"{DEPARTED}: {run.setting.describe()}: {found.conformance} (this run's worst window "
                    f"{float(run.ratio):.6f} of epsilon); replay: {run.call(reference)}",
                )
            )
        elif found.violation is not None:
            stages.append(
                StageResult("rule conformance", NOT_PROVED, "not judged: exploration found a violation first")
            )
        elif found.undecided:
            stages.append(
                StageResult(
                    "rule conformance",
                    NOT_PROVED,
                    f"the charges of {found.undecided} of {found.runs} explored "
                    f"runs have too many explanations to follow",
                )
            )
        else:
            stages.append(
                StageResult(
                    "rule conformance",
                    PASS,
                    f"the charges of all {found.runs} explored runs ({scope}) are "
                    "ones the allocation rule allows for some decision sequence",
                )
            )
    return stages, found


# a departure from the rule is a gap in the proof's coverage, not a finding about privacy (issue 43, item 6):
# a mechanism that charges a few ulps more than the rule's float computation, or more under one purpose and
# less in total, may be safe; whether a window goes over epsilon is the other stages' to say
DEPARTED = (
    "departs from its allocation rule, so the proof does not cover this code (not a privacy violation: "
    "whether a window exceeds epsilon is for replay and exploration to find)"
)


def _secret_stage(mechanism: AnyMechanism, read: str | None, in_process: int = 0) -> StageResult:
    """Stage (b): a read caught during replay, else a difference found by the non-interference check
    (the fixed pairs and _PAIRS generated ones); inconclusive at best where the mechanism's own code read
    true values in its process (``in_process`` replayed cases, ``isolation='trusted'``): what it kept there
    can come out in settings no check runs (another sampler, one run, a longer stream)."""
    from budgetcheck.verify.interference import interference

    if read is not None:
        return StageResult("secret access", FAIL, read)
    flow = interference(mechanism, notion_of(mechanism), examples=_PAIRS, seed=0)
    if flow is not None and flow.kind == "leak":
        return StageResult(
            "secret access", FAIL, f"the true values reached the mechanism outside the charged outputs: {flow.detail}"
        )
    if flow is not None and flow.kind == "configuration":
        return StageResult(
            "secret access",
            FAIL,
            f"the mechanism behaves otherwise in a configuration production runs it in: {flow.detail}",
        )
    if flow is not None and flow.kind == "nondeterministic":
        return StageResult(
            "secret access",
            INCONCLUSIVE,
            f"no read outside a charged operation, but the flow check cannot "
            f"judge a mechanism that is not deterministic given its seed: {flow.detail}",
        )
    if flow is not None:
        return StageResult(
            "secret access",
            INCONCLUSIVE,
            f"no read outside a charged operation; the flow check did not run: {flow.detail}",
        )
    if in_process:
        return StageResult(
            "secret access",
            INCONCLUSIVE,
            f"the mechanism's own code read true values in its process (isolation='trusted') in {in_process} replayed "
            "cases: what it keeps there cannot be ruled out; with the default isolation='fork' verify can judge it",
        )
    return StageResult(
        "secret access",
        PASS,
        "no read outside a charged ledger operation; releases and spends "
        f"unchanged on a second stream with the charged outputs held equal "
        f"(3 fixed and {_PAIRS} generated pairs)",
    )


# generated non-interference pairs per mechanism: three runs of it each (runs = 2, T <= 40, d <= 64)
_PAIRS = 25


def _proof_stage(mechanism: AnyMechanism, w_max: int) -> StageResult:
    from budgetcheck.proving import prove_mechanism

    found = prove_mechanism(mechanism, range(1, w_max + 1))
    if found.verdict is NOT_PROVED:
        return StageResult("proof", NOT_PROVED, "the mechanism exposes no allocation_rule(); nothing was proved")
    if found.bounded:
        if found.verdict is Verdict.PROVED:
            return StageResult(
                "proof",
                PASS,
                "exhaustive exact check of every decision sequence "
                f"({found.method} policy collections, a bounded family)",
            )
        return StageResult("proof", FAIL, f"bounded check refuted: {found.detail}")
    scope = {
        Notion.PERSONALIZED: "every requirement class with w_c",
        Notion.SWELLFISH: "w = max |J| (Theorem 4.3)",
    }.get(notion_of(mechanism), "w")
    if found.verdict is Verdict.PROVED:
        return StageResult("proof", PASS, f"proved for {scope} in 1..{w_max} ({found.method})")
    return StageResult("proof", found.verdict.as_stage(), found.detail)


def _statistical_stage(
    mechanism: AnyMechanism, notion: str, runs: int, seed: int, *, vouched: bool = False
) -> StageResult:
    """Stage (d). A mechanism that vouches for a sensitivity (``vouched``, or found vouching in one
    run of some regime) is audited in every regime of :data:`budgetcheck.verify.regimes.VOUCHED`
    (w-event) or at each ε of it (Swellfish), at the level divided by their number; the others in
    the regimes the library derives their noise in (ε = 1, d = 2, w in {1, 3}). The detail names the
    regimes covered."""
    from budgetcheck.verify.regimes import DERIVED, VOUCHED, covered, vouches_in
    from budgetcheck.verify.statistical import (
        personalized_audit,
        statistical_audit,
        swellfish_audit,
    )

    covers = ""
    try:
        if notion == Notion.PERSONALIZED:
            findings = [personalized_audit(cast(PersonalizedMechanism, mechanism), runs=runs, seed=seed)]
        elif notion == Notion.SWELLFISH:
            epsilons = sorted({r.epsilon for r in VOUCHED}) if vouched else [1.0]
            level = 0.05 / len(epsilons)
            findings = [
                swellfish_audit(cast(SwellfishMechanism, mechanism), epsilon=e, runs=runs, seed=seed, alpha=level)
                for e in epsilons
            ]
            covers = f"; epsilon in {{{', '.join(f'{e:g}' for e in epsilons)}}}" if vouched else ""
        else:  # the mechanism declares its notion (``notion_of``); the protocols look alike
            stream_mechanism = cast(StreamMechanism, mechanism)
            wide = vouched or vouches_in(stream_mechanism, VOUCHED)
            regimes = VOUCHED if wide else DERIVED
            level = 0.05 / len(regimes) if wide else 0.05  # Bonferroni over the regimes a vouching one adds
            findings = [
                attrs.evolve(
                    statistical_audit(
                        stream_mechanism,
                        epsilon=r.epsilon,
                        w=r.w,
                        runs=runs,
                        seed=seed,
                        alpha=level,
                        dimensions=r.dimensions,
                        neighbours=r.neighbours,
                        whole_window=wide,
                        lean=wide and r not in DERIVED,
                    ),
                    regime=r.describe(),
                )
                for r in regimes
            ]
            covers = f"; regimes covered: {covered(regimes)}" + (
                f" ({len(regimes)} audits: the mechanism vouches for a sensitivity)" if wide else ""
            )
    except Exception as exc:  # the mechanism's own failure is stage (a)'s to report
        return StageResult("statistical audit", INCONCLUSIVE, f"could not run: {type(exc).__name__}: {exc}")
    worst = max(findings, key=lambda f: f.lower_bound / f.epsilon)
    where = worst.position if notion != Notion.W_EVENT else f"{worst.regime or f'w={worst.w}'}, {worst.position}"
    detail = (
        f"loss lower bound {worst.lower_bound:.3f} vs epsilon={worst.epsilon} "
        f"({where}, {worst.runs} runs per input, 95% confidence){covers}"
    )
    return StageResult("statistical audit", FAIL if worst.violates else PASS, detail)


@attrs.frozen
class _Replay:
    examples: int
    runs: int
    worst_ratio: float
    counterexample: Counterexample | None
    worst_case: AnyCase | None = None
    worst_refused: bool = False  # the worst figure is a spend the ledger refused (what was attempted)
    vouched: int = 0  # cases whose ledger charged a sensitivity the mechanism vouched for (measure)
    in_process: int = 0  # cases whose ledger ran the mechanism's code on true values here (isolation='trusted')
    configurations: tuple[str, ...] = ()  # production configurations its fixed cases ran in (besides in-memory)


def _replay(reference: str, *, examples: int, seed: int, max_length: int) -> _Replay:
    """Stages (a) and (b): ``examples`` generated cases, shrinking any failure."""
    mechanism = load_mechanism(reference)
    tally = {"examples": 0, "runs": 0, "vouched": 0, "in_process": 0}
    worst = [Fraction(0), Fraction(0)]  # the largest window / ε, and 1 if it was a refused attempt
    worst_case: list[AnyCase] = []
    failures: list[Counterexample] = []
    notion = notion_of(mechanism)
    strategy: SearchStrategy[Any] = {
        Notion.W_EVENT: cases(max_length=max_length, announced=announces_intrusions(mechanism)),
        Notion.PERSONALIZED: personalized_cases(),
        Notion.SWELLFISH: swellfish_cases(),
    }[notion]

    def check(case: Any) -> None:
        tally["examples"] += 1
        tally["runs"] += case.runs
        before = worst[0]
        try:
            vouched, in_process = _check_case(mechanism, case, worst)
            tally["vouched"] += vouched
            tally["in_process"] += in_process
            if worst[0] > before or not worst_case:
                worst_case[:] = [case]
        except _Violation as violation:
            failures.append(
                Counterexample(
                    reason=violation.reason,
                    detail=violation.detail,
                    case=case,
                    several_epsilons=violation.several_epsilons,
                )
            )
            raise

    try:
        run_seeded(
            check,
            strategy,
            examples=examples,
            seed=seed,
            phases=(Phase.explicit, Phase.generate, Phase.shrink),
            mechanism=mechanism,
        )
    except _Violation:
        pass
    configurations: list[str] = []
    if not failures:
        found = _production_check(mechanism, notion, tally, configurations)
        if found is not None:
            failures.append(found)
    counterexample = failures[-1] if failures else None  # Hypothesis replays the minimal case last
    return _Replay(
        examples=tally["examples"],
        runs=tally["runs"],
        worst_ratio=float(worst[0]),
        counterexample=counterexample,
        worst_case=worst_case[0] if worst_case else None,
        worst_refused=bool(worst[1]),
        vouched=tally["vouched"],
        in_process=tally["in_process"],
        configurations=tuple(configurations),
    )


def _production_check(
    mechanism: Any, notion: Notion, tally: dict[str, int], configurations: list[str]
) -> Counterexample | None:
    """The notion's fixed cases in each configuration production runs a mechanism in beyond replay's
    in-memory one (:mod:`budgetcheck.verify.configurations`), checked as a replayed case is (windows,
    refusals, secret access, crashes, the live path); the first finding, or None. ``configurations``
    gets the name of each configuration run; ``tally`` counts a vouched or in-process charge there
    (the figures of the generated cases, worst window and runs, are theirs alone)."""
    scratch = [Fraction(0), Fraction(0)]
    with ledger_files() as store:
        for configuration in (LEDGER_FILE, BENCH):
            cases = [c for c in fixed_cases(notion) if configuration is not BENCH or isinstance(c, VerificationCase)]
            for case in cases:
                try:
                    vouched, in_process = _check_case(mechanism, case, scratch, configuration, store)
                    tally["vouched"] += vouched
                    tally["in_process"] += in_process
                except _Unavailable as refused:  # production cannot run it there either
                    configurations.append(f"{configuration.name} (which the ledger refuses: {refused})")
                    break
                except _Violation as violation:
                    return Counterexample(
                        reason=violation.reason,
                        detail=violation.detail,
                        case=case,
                        configuration=configuration.name,
                    )
            else:
                if cases:
                    configurations.append(configuration.name)
    return None


def announces_intrusions(mechanism: object) -> bool:
    """Whether replay draws intrusion schedules for ``mechanism``: a w-event mechanism that declares
    ``intrusions == "announced"`` (Kellaris et al. 2014, §4.5; the ledger forces the publication at
    each announced t, so a budget state that misses one asks for too much later)."""
    return notion_of(mechanism) == Notion.W_EVENT and getattr(mechanism, "intrusions", None) == ANNOUNCED


def _run_case(mechanism: Any, case: AnyCase, store: Store | None = None) -> tuple[Any, Fraction, tuple[str, ...]]:
    """Execute one case through the right ledger (kept by ``store``: e.g. in a ledger file; None: in
    memory, as ``execute`` does); return (ledger, worst ratio, violations) from the auditor."""
    if store is not None:
        kept: Any = run_case(mechanism, case, store).ledger
        if isinstance(case, PersonalizedCase):
            classes = [(r.w, r.epsilon) for r in case.requirements.classes]
            stored = audit_records(kept.records, Notion.PERSONALIZED, runs=case.runs, classes=classes)
        elif isinstance(case, SwellfishCase):
            stored = audit_records(
                kept.records, Notion.SWELLFISH, runs=case.runs, epsilon=case.epsilon, policies=case.policies
            )
        else:
            stored = audit_records(kept.records, Notion.W_EVENT, runs=case.runs, epsilon=case.epsilon, w=case.w)
        return kept, stored.worst_ratio, stored.violations
    if isinstance(case, PersonalizedCase):
        pex = execute_personalized(
            mechanism,
            case.requirements,
            case.bins,
            dimensions=case.dimensions,
            runs=case.runs,
            seed=case.seed,
            **ledger_flags(),
        )
        classes = [(r.w, r.epsilon) for r in case.requirements.classes]
        ledger: Any = pex.ledger
        audit = audit_records(ledger.records, Notion.PERSONALIZED, runs=case.runs, classes=classes)
    elif isinstance(case, SwellfishCase):
        sex = execute_swellfish(
            mechanism, case.policies, case.data, epsilon=case.epsilon, runs=case.runs, seed=case.seed, **ledger_flags()
        )
        ledger = sex.ledger
        audit = audit_records(
            ledger.records, Notion.SWELLFISH, runs=case.runs, epsilon=case.epsilon, policies=case.policies
        )
    else:
        ledger = execute(
            mechanism,
            case.data,
            epsilon=case.epsilon,
            w=case.w,
            runs=case.runs,
            seed=case.seed,
            intrusions=case.intrusions,
            **ledger_flags(),
        ).ledger
        audit = audit_records(ledger.records, Notion.W_EVENT, runs=case.runs, epsilon=case.epsilon, w=case.w)
    return ledger, audit.worst_ratio, audit.violations


def _run_several_epsilons(mechanism: Any, case: VerificationCase) -> tuple[Any, Fraction, tuple[str, ...]]:
    """A mechanism that declares ``max_stacked_runs`` (the benchmark then runs several ε in one
    pass): the case again on a ledger of twice its runs, the first half under its ε and the second
    under a third of it, each half audited under its own ε."""
    epsilons = [case.epsilon] * case.runs + [case.epsilon / 3] * case.runs
    ex = execute(
        mechanism,
        case.data,
        epsilon=epsilons,
        w=case.w,
        runs=2 * case.runs,
        seed=case.seed,
        intrusions=case.intrusions,
        **ledger_flags(),
    )
    reports = audit_windows_per_epsilon(ex.ledger.records, epsilons=epsilons, w=case.w)
    ratio = max(report.worst_ratio for report in reports.values())
    violations = [
        f"on a ledger of several ε (runs under ε = {epsilon!r}): {v.describe(epsilon)}"
        for epsilon, report in reports.items()
        for v in report.violations
    ]
    return ex.ledger, ratio, tuple(violations)


def _run_bench(mechanism: Any, case: VerificationCase) -> tuple[Any, Fraction, tuple[str, ...]]:
    """The case as the benchmark runs a mechanism (:func:`budgetcheck.bench.runner.batch_releases`): a
    ledger of one ε per run over two stacked streams (the case's and its reverse), each run audited."""
    epsilons = [case.epsilon] * (2 * case.runs)
    stream = GuardedStream.stacked([case.data, case.data[::-1]])
    ex = execute(mechanism, stream, epsilon=epsilons, w=case.w, runs=2 * case.runs, seed=case.seed, **ledger_flags())
    reports = audit_windows_per_epsilon(ex.ledger.records, epsilons=epsilons, w=case.w)
    ratio = max(report.worst_ratio for report in reports.values())
    violations = tuple(v.describe(epsilon) for epsilon, report in reports.items() for v in report.violations)
    return ex.ledger, ratio, violations


def _check_case(
    mechanism: Any,
    case: AnyCase,
    worst: list[Fraction],
    configuration: Configuration = IN_MEMORY,
    store: Store | None = None,
) -> tuple[int, int]:
    """Run and audit one case (raising :class:`_Violation`): (1 if its ledger charged a vouched sensitivity
    (``measure``: the releases then need the statistical audit), 1 if it ran the mechanism's code on true
    values in this process (``isolation='trusted'``: what that code kept cannot be ruled out)).
    ``configuration``: where production runs it (``store`` keeps a ledger file's ledgers)."""
    vouched = in_process = 0
    runs: list[Callable[[Any, Any], tuple[Any, Fraction, tuple[str, ...]]]] = [_run_case]
    if configuration is LEDGER_FILE:
        runs = [lambda m, c: _run_case(m, c, store)]
    elif configuration is BENCH:
        runs = [_run_bench]
    elif isinstance(case, VerificationCase) and max_stacked_runs(mechanism) > 0:
        runs.append(_run_several_epsilons)
    named = f" (in the {configuration.name} configuration)" if configuration is not IN_MEMORY else ""
    for run in runs:
        several = run is _run_several_epsilons
        where = (" (on a ledger of several ε)" if several else "") + named
        try:
            ledger, ratio, violations = run(mechanism, case)
        except BudgetExceeded as exc:  # the attempted sum is the figure that agrees with the verdict
            _note_refused(worst, Fraction(exc.window_sum) / Fraction(exc.epsilon))
            raise _Violation(f"overspend refused by the ledger{where}", str(exc), several_epsilons=several) from exc
        except SecretAccess as exc:
            raise _Violation("secret access", f"{exc} {_located(exc)}", several_epsilons=several) from exc
        except NotAllowed as exc:
            raise _Violation(NOT_ALLOWED, _not_allowed(exc), several_epsilons=several) from exc
        except (InvalidArgument, LedgerCorrupt) as exc:
            if configuration is not IN_MEMORY and refused_there(exc):
                raise _Unavailable(str(exc)) from exc  # e.g. pan-private accounting is kept in memory only
            raise _Violation(
                f"crash{where}", f"{type(exc).__name__}: {exc} ({_located(exc)})", several_epsilons=several
            ) from exc
        except Exception as exc:  # a crash is a finding, with its location
            raise _Violation(
                f"crash{where}", f"{type(exc).__name__}: {exc} ({_located(exc)})", several_epsilons=several
            ) from exc
        if ledger.refusals:
            _note_refused(worst, Fraction(ledger.worst_refused_ratio))
            raise _Violation(
                "overspend attempted",
                f"the mechanism asked for more than a window allows {ledger.refusals} time(s) and swallowed the "
                f"refusal{where}",
                several_epsilons=several,
            )
        if ratio > worst[0]:
            worst[0], worst[1] = ratio, Fraction(0)
        if violations:
            raise _Violation("window over epsilon", violations[0], several_epsilons=several)
        vouched = max(vouched, int(ledger.vouched > 0))
        in_process = max(in_process, int(ledger.in_process > 0))
    if has_live_path(mechanism) and configuration is not BENCH:  # the benchmark runs run() only
        live = _check_live_path(mechanism, case, store if configuration is LEDGER_FILE else None, named)
        vouched, in_process = max(vouched, int(live.vouched)), max(in_process, int(live.in_process))
    return vouched, in_process


class _Unavailable(Exception):
    """The library refused to run the mechanism in a production configuration (so production cannot either)."""


def _check_live_path(mechanism: Any, case: AnyCase, store: Store | None = None, named: str = "") -> LivePath:
    """The publisher's path, ``releases``, against ``run`` on the case (:mod:`budgetcheck.verify.live`)."""
    where = " (the live path, releases())" + named
    try:
        live = live_departure(mechanism, case, store)
    except BudgetExceeded as exc:
        raise _Violation(f"overspend refused by the ledger{where}", str(exc)) from exc
    except SecretAccess as exc:
        raise _Violation("secret access", f"{exc} {_located(exc)}") from exc
    except NotAllowed as exc:
        raise _Violation(NOT_ALLOWED, _not_allowed(exc)) from exc
    except (InvalidArgument, LedgerCorrupt) as exc:
        if refused_there(exc):  # the library cannot publish it (e.g. a local randomiser needs per-user data,
            # which a live stream does not keep): publish refuses it too, so there is no live path to compare
            if store is not None:
                raise _Unavailable(str(exc)) from exc
            return LivePath(None, vouched=False, in_process=False)
        raise _Violation(f"crash{where}", f"{type(exc).__name__}: {exc} ({_located(exc)})") from exc
    except Exception as exc:
        raise _Violation(f"crash{where}", f"{type(exc).__name__}: {exc} ({_located(exc)})") from exc
    if live.departure is not None:
        raise _Violation("live path departs from run()" + named, live.departure)
    return live


def _not_allowed(exc: NotAllowed) -> str:
    """What a mechanism asked for that verify's ledgers refused, and how to verify it anyway."""
    return (
        f"{_located(exc)}; verify's ledgers, like publish's and bench's, allow it only when told: rerun with "
        "--trusted-code / --allow-vouched to verify the mechanism as its owner would run it"
    )


def _note_refused(worst: list[Fraction], attempted: Fraction) -> None:
    """worst[0] is the largest window / ε seen; worst[1] (1 or 0) whether that was a refused attempt."""
    if attempted > worst[0]:
        worst[0], worst[1] = attempted, Fraction(1)


def _located(exc: BaseException) -> str:
    """Where ``exc`` was raised, in the caller's code where a frame of it is on the way: ``at file:line: code``."""
    frames = traceback.extract_tb(exc.__traceback__)
    outside = [f for f in frames if "/budgetcheck/" not in f.filename.replace("\\", "/")]
    frame = outside[-1] if outside else frames[-1]
    return f"at {frame.filename}:{frame.lineno}: {frame.line}"
