"""verify's stage e (output-driven exploration, rule conformance) and the verdicts a user acts on."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import find, given, settings

import budgetcheck
from broken.mutants import CLASS_ONE, UniformRecalibratesLate
from budgetcheck import SpendRecord, verify_mechanism
from budgetcheck.cli import main
from budgetcheck.ops import FLOAT
from budgetcheck.proving import RuleEnv
from budgetcheck.strategies import VerificationCase, cases, intrusion_schedules
from budgetcheck.verify.conformance import departure, first_departure
from budgetcheck.verify.explore import Setting, bits_plan, explore, replay_outputs, run_plan
from budgetcheck.verify.owner import allowing
from budgetcheck.verify.verdict import Outcome, exit_code
from mechanisms.rules import BDRule


@pytest.fixture(autouse=True)
def _owner_allows() -> Iterator[None]:
    """These mechanisms use measure (some with isolation='trusted'): verified as an owner who allows
    in-process code and vouched sensitivities would (verify --trusted-code --allow-vouched)."""
    with allowing(trusted_code=True, allow_vouched=True):
        yield


pytest_plugins = ["pytester"]


@pytest.mark.parametrize("mutant", CLASS_ONE, ids=[m.__name__ for m in CLASS_ONE])
def test_class_one_mutants_are_caught_by_exploration_and_not_by_replay(mutant: type) -> None:
    """A proved rule and code that departs from it only for w > 40, after 3w steps or after one
    decision sequence: replay (w <= 40, T <= 60) passes it; stage e rejects it in the quick profile."""
    reference = f"broken.mutants:{mutant.__name__}"
    replay = verify_mechanism(reference, stages="a")
    assert replay.outcome is not Outcome.VIOLATED, [s.to_json() for s in replay.stages]
    explored = verify_mechanism(reference, stages="e", profile="quick")
    verdicts = {s.stage: s.verdict for s in explored.stages}
    assert explored.outcome is Outcome.VIOLATED and verdicts["exploration"] == "fail", verdicts
    assert "w=64" in next(s.detail for s in explored.stages if s.stage == "exploration")


@pytest.mark.parametrize("name", ["BDLargeWindowDissimilarity", "BDCatchesUpAfterQuiet"])
def test_conformance_names_the_first_step_the_code_leaves_the_rule(name: str) -> None:
    result = verify_mechanism(f"broken.mutants:{name}", stages="e")
    stage = next(s for s in result.stages if s.stage == "rule conformance")
    # a departure is a gap in the proof (not proved); the overspend is exploration's finding (issue 43, item 6)
    assert stage.verdict == "not proved" and "more than the rule allows for any decision" in stage.detail
    assert next(s.verdict for s in result.stages if s.stage == "exploration") == "fail"
    # the large-window mutant departs at its first dissimilarity; the other when its quiet spell ends
    assert ("t=1:" in stage.detail) == (name == "BDLargeWindowDissimilarity")


def test_the_correct_hand_written_control_is_proved_when_its_rule_is() -> None:
    """The mutants' common base follows BDRule exactly: conformance holds, so with the proof it is proved."""
    result = verify_mechanism("broken.mutants:_HandBD", stages="ec")
    assert result.outcome is Outcome.PROVED, [s.to_json() for s in result.stages]
    assert result.bound is not None and result.bound.w_max == 64 and result.bound.horizon == 256


def _bd_records(publications: list[float], dissimilarity: list[float]) -> list[SpendRecord]:
    records = []
    for t, (d, p) in enumerate(zip(dissimilarity, publications, strict=True), start=1):
        records.append(SpendRecord(t=t, purpose="dissimilarity", amounts=np.array([d])))
        if p:
            records.append(SpendRecord(t=t, purpose="publication", amounts=np.array([p])))
    return records


def test_conformance_finds_the_first_differing_step_and_accepts_the_rule_and_less() -> None:
    rule, env = BDRule(), RuleEnv(1.0, 3)
    unit = float(FLOAT.share(1.0, 6))
    first = float(rule.charges(FLOAT, env, rule.initial(FLOAT, env), True)[1])  # the candidate at t = 1: ε/4
    setting = Setting("w-event", 4, 1, w=3)
    exact = _bd_records([first, 0.0, 0.0, 0.0], [unit] * 4)
    assert first_departure(rule, setting, exact) is None
    less = _bd_records([first / 2, 0.0, 0.0, 0.0], [unit] * 4)  # the proof covers spends below the rule's
    assert first_departure(rule, setting, less) is None
    # t = 2 publishes as much as t = 1: the rule allows (ε/2 − ε/4)/2 = ε/8 there
    twice = _bd_records([first, first, 0.0, 0.0], [unit] * 4)
    assert departure(rule, env, {}, 4) is None  # no charges at all: every step explained by "skip"
    found = first_departure(rule, setting, twice)
    assert found is not None and found.startswith("t=2:"), found
    unknown = exact + [SpendRecord(t=3, purpose="side channel", amounts=np.array([1e-9]))]
    found = first_departure(rule, setting, sorted(unknown, key=lambda r: r.t))
    assert found is not None and found.startswith("t=3:") and "side channel" in found


def test_a_refused_spend_is_reported_with_the_sum_it_attempted() -> None:
    mechanism = UniformRecalibratesLate()
    found = explore(mechanism, profile="quick")
    run = found.violation
    assert run is not None and run.refused is not None and "recalibration" in run.refused
    w, t = run.setting.w, 256
    window = sum((Fraction(float(r.amounts[0])) for r in run.records if t - w < r.t <= t), Fraction(0))
    attempted = Fraction(budgetcheck.rounding.share(1.0, w))
    assert run.ratio == (window + attempted) / Fraction(run.setting.epsilon) > 1


def test_the_violating_outputs_replay_through_the_real_ledger_to_the_same_sum() -> None:
    found = explore(budgetcheck.load_mechanism("mechanisms:FASTwAsPublished"), profile="quick")
    run = found.violation
    assert run is not None and run.ratio > 1 and run.setting.dimensions >= 2
    outputs = [None if o is None else o.tolist() for o in run.outputs]
    again = replay_outputs("mechanisms:FASTwAsPublished", run.setting.to_json(), outputs)
    assert again.ratio == run.ratio and again.refused == run.refused

    def charges(records: tuple[SpendRecord, ...]) -> list[tuple[int, str, list[float]]]:
        return [(r.t, r.purpose, r.amounts.tolist()) for r in records]

    assert charges(again.records) == charges(run.records)
    scope: dict[str, object] = {}
    pasted_call = run.call("mechanisms:FASTwAsPublished").replace("; replay_outputs(", "; result = replay_outputs(", 1)
    exec(pasted_call, scope)  # noqa: S102 - the call verify prints
    pasted = scope["result"]
    assert isinstance(pasted, type(run)) and pasted.ratio == run.ratio


@pytest.mark.parametrize("profile", ["quick", "thorough"])
def test_fast_as_published_is_rejected_with_an_overspending_run_in_every_profile(profile: str) -> None:
    result = verify_mechanism("mechanisms:FASTwAsPublished", stages="e", profile=profile)
    stage = next(s for s in result.stages if s.stage == "exploration")
    assert result.outcome is Outcome.VIOLATED and stage.verdict == "fail", stage.detail
    assert "overspend refused by the ledger" in stage.detail and "replay_outputs(" in stage.detail


@pytest.mark.parametrize("name", ["PBDMostGenerous", "UnicornPSOverDeltaMinusOne"])
def test_exploration_drives_personalized_and_swellfish_ledgers(name: str) -> None:
    """The stage is not w-event only: mutants of the other notions overspend under chosen outputs too."""
    result = verify_mechanism(f"broken.mutants:{name}", stages="e")
    assert {s.stage: s.verdict for s in result.stages}["exploration"] == "fail", [s.to_json() for s in result.stages]


class CoinFlipper:
    """Publishes when an unseeded coin says so: not a function of its outputs and seed."""

    name = "coin-flipper"

    def run(self, stream: budgetcheck.GuardedStream, ledger: budgetcheck.WindowLedger) -> np.ndarray:
        coin = np.random.default_rng()
        budget = budgetcheck.rounding.share(ledger.params.epsilon, ledger.params.w)
        out = np.zeros((ledger.runs, stream.length, stream.dimensions))
        for secret in stream:
            if coin.random() < 0.5:
                out[:, secret.t - 1] = ledger.laplace(secret, budget)
        return out


def test_a_nondeterministic_mechanism_is_inconclusive_not_verified() -> None:
    result = verify_mechanism("test_explore:CoinFlipper", stages="e")
    assert result.outcome is Outcome.INCONCLUSIVE, [s.to_json() for s in result.stages]
    assert exit_code([result.outcome]) == 3


def test_every_kth_is_verified_to_a_bound_and_exits_0_but_not_under_require_proof() -> None:
    runner = CliRunner()
    plain = runner.invoke(main, ["verify", "plain_mechanisms:EveryKth", "--stages", "abe"])
    assert plain.exit_code == 0, plain.output
    assert "verified to a bound: w <= 64, T <= 256" in plain.output
    strict = runner.invoke(main, ["verify", "plain_mechanisms:EveryKth", "--stages", "abe", "--require", "proof"])
    assert strict.exit_code == 3, strict.output
    assert "does not meet --require proof" in strict.output
    report = json.loads(runner.invoke(main, ["verify", "plain_mechanisms:EveryKth", "--stages", "e", "--json"]).output)
    entry = report["results"][0]
    assert entry["verdict"] == "verified to a bound"
    assert entry["bound"]["w_max"] == 64 and entry["bound"]["runs_explored"] > 0


def test_a_proved_builtin_meets_require_proof_and_junit_carries_the_verdict(tmp_path: Path) -> None:
    out = tmp_path / "v.xml"
    arguments = ["verify", "Sample", "--stages", "ce", "--require", "proof", "--junit-xml", str(out)]
    result = CliRunner().invoke(main, arguments)
    assert result.exit_code == 0, result.output
    assert "proved" in result.output.splitlines()[2]
    assert 'name="Sample: verdict"><system-out>proved (w &lt;= 64' in out.read_text()


def test_the_tutorials_example_is_the_one_tested() -> None:
    """tests/plain_mechanisms.EveryKth is the first tutorial's code: every statement of its run() is there."""
    tutorial = (Path(__file__).parents[2] / "docs" / "tutorials" / "first-mechanism.md").read_text(encoding="utf-8")
    block = tutorial.split("class EveryKth:", 1)[1].split("```", 1)[0]
    ours = (
        (Path(__file__).parents[1] / "plain_mechanisms.py").read_text(encoding="utf-8").split("class EveryKth:", 1)[1]
    )
    body = ours.split("def run(", 1)[1]
    statements = [line.split("#", 1)[0].strip() for line in body.splitlines()[1:] if line.strip()]
    assert len(statements) >= 8
    for statement in statements:
        assert statement in block, statement


def test_the_pytest_plugin_passes_every_kth_with_its_bound(pytester: pytest.Pytester) -> None:
    source = (Path(__file__).parents[1] / "plain_mechanisms.py").read_text(encoding="utf-8")
    pytester.makepyfile(every_kth=source, test_nothing="def test_placeholder():\n    pass\n")
    outcome = pytester.runpytest_subprocess("--budgetcheck", "every_kth:EveryKth", "-p", "no:cacheprovider")
    outcome.assert_outcomes(passed=2)
    strict = pytester.runpytest_subprocess(
        "--budgetcheck", "every_kth:EveryKth", "--budgetcheck-require", "proof", "-p", "no:cacheprovider"
    )
    strict.assert_outcomes(passed=1, failed=1)
    strict.stdout.fnmatch_lines(["*EveryKth: verified to a bound (w <= 64, T <= 256*"])


def test_the_pre_commit_example_exits_0_on_every_kth() -> None:
    config = (Path(__file__).parents[2] / "examples" / "ci" / "pre-commit-config.yaml").read_text(encoding="utf-8")
    entry = next(line.split("entry:", 1)[1].split() for line in config.splitlines() if "entry:" in line)
    assert entry[:2] == ["budgetcheck", "verify"]
    arguments = [("plain_mechanisms:EveryKth" if a == "my_package.mechanisms:MyMechanism" else a) for a in entry[2:]]
    result = CliRunner().invoke(main, ["verify", *arguments])
    assert result.exit_code == 0, result.output
    assert "verified to a bound" in result.output


def test_exit_codes_follow_the_verdicts() -> None:
    assert exit_code([Outcome.PROVED, Outcome.BOUNDED]) == 0
    assert exit_code([Outcome.PROVED, Outcome.BOUNDED], "proof") == 3
    assert exit_code([Outcome.BOUNDED, Outcome.VIOLATED], "proof") == 1
    assert exit_code([Outcome.INCONCLUSIVE]) == 3
    with pytest.raises(budgetcheck.InvalidArgument, match="require='all'"):
        exit_code([Outcome.PROVED], "all")


def test_the_table_streams_one_row_per_mechanism_as_it_is_decided(monkeypatch: pytest.MonkeyPatch) -> None:
    """When the second mechanism starts, the first one's row is already printed."""
    import budgetcheck.verify.pool as pool

    printed: list[str] = []
    real = pool.verify_mechanism

    def spy(reference: str, **options: object) -> budgetcheck.VerifyResult:
        sys.stdout.flush()
        printed.append(sys.stdout.buffer.getvalue().decode())  # type: ignore[attr-defined]
        return real(reference, **options)  # type: ignore[arg-type]

    monkeypatch.setattr(pool, "verify_mechanism", spy)
    text = CliRunner().invoke(main, ["verify", "Sample", "Uniform", "--stages", "e"]).output
    rows = [line for line in text.splitlines() if line.startswith(("Sample ", "Uniform "))]
    assert len(rows) == 2 and all("64, 256," in row for row in rows)
    assert "Sample" not in printed[0] and rows[0] in printed[1]


def test_a_mechanism_that_vouches_is_never_proved_and_needs_the_audit() -> None:
    """Issue 34 item 3: a sensitivity given to ``measure`` is the mechanism's word, so the verdict
    is at best 'verified to a bound', and only with a passing statistical audit."""
    from budgetcheck.verify.verdict import Outcome, outcome

    proved = [("ledger replay", "pass"), ("exploration", "pass"), ("rule conformance", "pass"), ("proof", "pass")]
    assert outcome(proved) is Outcome.PROVED
    assert outcome(proved, vouched=True) is Outcome.INCONCLUSIVE
    assert outcome([*proved, ("statistical audit", "pass")], vouched=True) is Outcome.BOUNDED
    assert outcome([*proved, ("statistical audit", "fail")], vouched=True) is Outcome.VIOLATED


def test_verify_marks_a_measuring_mechanism_as_vouched() -> None:
    result = verify_mechanism("mechanisms:Uniform", examples=8, stages="a")
    measured = verify_mechanism("broken.mutants:MeasureTinySensitivity", examples=3, stages="a")
    assert not result.vouched
    assert measured.vouched and measured.outcome is Outcome.INCONCLUSIVE
    assert measured.to_json()["vouched_sensitivity"] is True


def test_announced_intrusions_are_explored_and_a_forgotten_forced_publication_is_refused() -> None:
    """Kellaris et al. 2014, §4.5: under announced intrusions the ledger forces the publication at each
    announced t. Exploration announces intrusions for such a mechanism; a mechanism whose budget state
    leaves out the forced publications asks for too much later and is refused, which exploration
    without announcements (the same stand-in streams and choices) never sees."""
    from broken.mutants import BDPanPrivateAnnouncedForgetsForced
    from budgetcheck.verify.explore import _tree, small_settings

    mutant = BDPanPrivateAnnouncedForgetsForced()
    found = explore(mutant, profile="quick")
    assert found.violation is not None and found.violation.setting.intrusions, found.violation
    assert "would make window" in str(found.violation.refused)
    again = replay_outputs(mutant, found.violation.setting.to_json(), found.violation.outputs)
    assert again.refused is not None and again.ratio == found.violation.ratio  # replays from its JSON
    unannounced = [run for s in small_settings("w-event") for run in _tree(mutant, s, 5)]
    assert unannounced and not any(run.violated for run in unannounced)


@pytest.mark.parametrize("name", ["BDPanPrivateAnnounced", "BAPanPrivateAnnounced"])
def test_the_announced_pan_private_builtins_conform_to_their_rule_with_forced_publications(name: str) -> None:
    from mechanisms import BUILTIN

    mechanism = BUILTIN[name]()
    found = explore(mechanism, profile="quick", rule=mechanism.allocation_rule())
    assert found.violation is None and found.conformance is None and found.undecided == 0, found.conformance
    assert found.worst is not None and found.worst.ratio <= 1
    setting = Setting("w-event", 9, 1, w=3).announcing()
    assert setting.intrusions == (2, 5, 8)
    run = run_plan(mechanism, setting, bits_plan(()))  # every dissimilarity far below: nothing chosen
    published = {r.t for r in run.records if r.purpose == "publication" and float(r.amounts[0]) > 0.0}
    if name.startswith("BD"):
        assert published == {2, 5, 8}  # exactly the forced ones
    else:
        assert published and published <= {2, 5, 8}  # forced unless nullified by an earlier absorption


@settings(max_examples=50, deadline=None)
@given(cases(max_length=30, announced=True))
def test_replay_draws_intrusion_schedules_inside_the_stream(case: VerificationCase) -> None:
    """Stage (a) for announced pan-privacy: each case carries announced timestamps, in order, inside 1..T."""
    length = case.data.shape[0]
    assert list(case.intrusions) == sorted(set(case.intrusions)) and all(1 <= t <= length for t in case.intrusions)


def test_an_intrusion_schedule_shrinks_to_the_intrusions_a_failure_needs() -> None:
    """Shrinking removes intrusions: a property that needs one at t ≡ 0 (mod 3) ends on that one alone."""
    (alone,) = find(intrusion_schedules(12), lambda s: any(t % 3 == 0 for t in s))
    assert alone % 3 == 0
    assert find(cases(announced=False), lambda c: True).intrusions == ()
