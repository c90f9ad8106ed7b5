"""The command line: exit codes, tables and JSON are stable for CI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from budgetcheck import execute, load_mechanism
from budgetcheck.cli import main
from mechanisms import BA


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.mark.slow  # CI's main job runs `budgetcheck verify --all` on every push
def test_verify_all_passes_the_builtins(runner: CliRunner) -> None:
    result = runner.invoke(main, ["verify", "--all", "--examples", "25"])
    assert result.exit_code == 0, result.output
    _check_table(result.output)


def test_verify_prints_the_table_of_several_mechanisms(runner: CliRunner) -> None:
    result = runner.invoke(main, ["verify", "Uniform", "Sample", "BD", "BA", "Hybrid", "--examples", "25"])
    assert result.exit_code == 0, result.output
    _check_table(result.output)


def _check_table(output: str) -> None:
    lines = output.splitlines()
    assert lines[0].split() == [
        "mechanism",
        "examples",
        "runs",
        "worst",
        "window",
        "/",
        "ε",
        "replay",
        "secret",
        "explore",
        "conform",
        "proof",
        "audit",
        "bound",
        "(w,",
        "T,",
        "runs",
        "explored)",
        "verdict",
    ]
    assert [line.split()[0] for line in lines[2:7]] == ["Uniform", "Sample", "BD", "BA", "Hybrid"]
    assert all(line.split()[-1] == "proved" and "64, 256," in line for line in lines[2:7])


def test_verify_rejects_a_broken_mechanism_with_a_reproducible_call(runner: CliRunner) -> None:
    result = runner.invoke(main, ["verify", "broken.mutants:UniformOverWMinusOne", "--stages", "ab"])
    assert result.exit_code == 1, result.output
    assert "VIOLATED" in result.output and "[ledger replay] fail" in result.output
    assert (
        "reproduce: budgetcheck.execute(budgetcheck.load_mechanism('broken.mutants:UniformOverWMinusOne')"
        in result.output
    )


@pytest.mark.parametrize(
    ("mutant", "error"),
    [
        ("DeclaresEpsilonPerRunSpendsTheLargest", "BudgetExceeded"),
        ("DeclaresEpsilonPerRunReadsParams", "InvalidArgument"),
    ],
)
def test_a_mechanism_that_declares_max_stacked_runs_is_replayed_on_a_ledger_of_several_epsilon(
    runner: CliRunner, mutant: str, error: str
) -> None:
    """Its replay also runs each case under two ε in one ledger; the printed call reproduces the failure."""
    import budgetcheck

    result = runner.invoke(main, ["verify", f"broken.mutants:{mutant}", "--stages", "a"])
    assert result.exit_code == 1, result.output
    assert "(on a ledger of several ε)" in result.output
    call = result.output.split("reproduce: ", 1)[1].strip()
    assert "epsilon=[" in call
    with pytest.raises(getattr(budgetcheck, error)):
        eval(call, {"budgetcheck": budgetcheck})  # noqa: S307 - the call verify printed


def test_verify_writes_junit_xml(runner: CliRunner, tmp_path: Path) -> None:
    report = tmp_path / "verify.xml"
    result = runner.invoke(main, ["verify", "broken.mutants:ReadsSecret", "--stages", "ab", "--junit-xml", str(report)])
    assert result.exit_code == 1
    text = report.read_text()
    assert '<testsuite name="budgetcheck verify" tests="3" failures="2">' in text  # the verdict and the stage
    assert 'name="reads-secret: verdict"><failure message="violated"' in text
    assert 'name="reads-secret: secret access"><failure' in text


def test_mechanism_without_rule_is_not_proved_and_exits_3(runner: CliRunner) -> None:
    result = runner.invoke(main, ["verify", "plain_mechanisms:UniformWithoutRule", "--stages", "c"])
    assert result.exit_code == 3, result.output
    assert "[proof] not proved" in result.output


def test_prove_table_and_refutation(runner: CliRunner) -> None:
    result = runner.invoke(main, ["prove", "--w-max", "6"])
    assert result.exit_code == 0, result.output
    from mechanisms import BUILTIN

    table = result.output.splitlines()[1 : 1 + len(BUILTIN)]
    assert [line.split()[0] for line in table] == list(BUILTIN)
    unruled = {line.split()[0] for line in table if line.endswith("not proved")}
    assert unruled == {"BDPanPrivate", "BAPanPrivate", "LPD", "LPA"}  # verified to a bound, never "proved"
    # one vocabulary with verify: an exhaustive check of a bounded family (TINAR, Unicorn) is verified to a bound
    bounded = {line.split()[0] for line in table if "exhaustive(" in line}
    assert {"TINARUniform", "TINARSample", "Unicorn", "UnicornIS", "UnicornPS"} <= bounded
    assert all(line.endswith("verified to a bound") for line in table if line.split()[0] in bounded)
    assert all(line.split()[-1] == "proved" for line in table if line.split()[0] not in unruled | bounded)
    assert "expose no allocation rule and are not proved: BDPanPrivate, BAPanPrivate, LPD, LPA" in result.output
    named = runner.invoke(main, ["prove", "LPD", "--w-max", "2"])
    assert named.exit_code == 3 and "not proved" in named.output  # named: its verdict is the exit code
    assert "as BD" in result.output and "exhaustive(325)" in result.output
    refuted = runner.invoke(main, ["prove", "broken.mutants:BAWithoutNullification", "--w-max", "4"])
    assert refuted.exit_code == 1, refuted.output
    assert "refuted" in refuted.output and "replay refused by the ledger" in refuted.output


def test_ba_as_published_shrinks_to_the_known_smallest_case(runner: CliRunner) -> None:
    """The published BA overspends already at w = 2 (Du et al. artifact, mechanisms notes)."""
    result = runner.invoke(main, ["verify", "broken.mutants:BAAsPublished", "--json", "--stages", "ab"])
    assert result.exit_code == 1
    report = json.loads(result.output)["results"][0]
    assert report["verdict"] == "violated"
    assert report["counterexample"]["w"] == 2
    assert report["counterexample"]["reason"] == "overspend refused by the ledger"


def test_verify_json_report_is_stable(runner: CliRunner) -> None:
    result = runner.invoke(main, ["verify", "BD", "--examples", "10", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["version"] == 2 and report["profile"] == "quick" and report["require"] == "bounded"
    (entry,) = report["results"]
    assert set(entry) == {
        "mechanism",
        "reference",
        "examples",
        "runs",
        "worst_window_over_epsilon",
        "worst_was_refused",
        "verdict",
        "stages",
        "notion",
        "bound",
        "vouched_sensitivity",
        "skipped_stages",
        "verdict_note",
    }
    assert entry["skipped_stages"] == [] and entry["verdict_note"] is None  # a full run
    assert (
        entry["verdict"] == "proved"
        and 0 < entry["worst_window_over_epsilon"] <= 1
        and entry["worst_was_refused"] is False
    )
    assert entry["vouched_sensitivity"] is False
    assert (
        entry["bound"] == {"w_max": 64, "horizon": 256, "runs_explored": entry["bound"]["runs_explored"]}
        and entry["bound"]["runs_explored"] > 0
    )
    assert [stage["stage"] for stage in entry["stages"]] == [
        "ledger replay",
        "secret access",
        "exploration",
        "rule conformance",
        "proof",
        "statistical audit",
    ]


@pytest.mark.bitwise
def test_verify_is_reproducible(runner: CliRunner) -> None:
    args = ["verify", "BA", "--examples", "15", "--seed", "3", "--json", "--stages", "abde"]
    assert runner.invoke(main, args).output == runner.invoke(main, args).output
    timed = json.loads(runner.invoke(main, [*args, "--timings"]).output)  # stage seconds only when asked for
    assert all(stage["seconds"] >= 0 for stage in timed["results"][0]["stages"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["verify"], "name a MECHANISM"),
        (["verify", "Nope"], "mechanism='Nope' is not built in"),
        (["verify", "no_such_module:X"], "cannot be loaded"),
        (["verify", "json:dumps"], "is not a StreamMechanism"),
        (["verify", "json:JSONDecoder"], "is not a StreamMechanism"),
        (["verify", "BD", "--examples", "0"], "0 is not in the range x>=1"),
        (["verify", "BD", "--stages", "xz"], "must be letters from 'abcde'"),
        (["verify", "BD", "--profile", "slow"], "'slow' is not one of"),
        (["prove", "BD", "--w-min", "5", "--w-max", "2"], "is larger than --w-max"),
    ],
)
def test_usage_errors_exit_2(runner: CliRunner, args: list[str], message: str) -> None:
    result = runner.invoke(main, args)
    assert result.exit_code == 2
    assert message in result.output


def _export(tmp_path: Path) -> Path:
    data = np.abs(np.sin(np.arange(40) / 4))[:, None] * 100
    execution = execute(BA(), data, epsilon=0.5, w=4, runs=3, seed=1)
    log = tmp_path / "ledger.jsonl"
    execution.ledger.export(log)
    return log


def test_audit_accepts_an_honest_log(runner: CliRunner, tmp_path: Path) -> None:
    log = _export(tmp_path)
    result = runner.invoke(main, ["audit", str(log), "--epsilon", "0.5", "--w", "4"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-1] == "ok"
    assert runner.invoke(main, ["audit", str(log)]).exit_code == 0  # parameters from the header


def test_audit_rejects_a_stricter_claim_and_a_tampered_log(runner: CliRunner, tmp_path: Path) -> None:
    log = _export(tmp_path)
    result = runner.invoke(main, ["audit", str(log), "--epsilon", "0.5", "--w", "6"])
    assert result.exit_code == 1 and "VIOLATION run 0: window" in result.output
    lines = log.read_text().splitlines()
    record = json.loads(lines[2])
    record["amounts"] = [a * 3 for a in record["amounts"]]
    lines[2] = json.dumps(record)
    log.write_text("\n".join(lines) + "\n")
    tampered = runner.invoke(main, ["audit", str(log), "--json"])
    assert tampered.exit_code == 1
    assert json.loads(tampered.output)["ok"] is False


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"format": "other"}\n', "format='other' is not 'budgetcheck.ledger'"),
        ('{"format": "budgetcheck.ledger", "version": 99}\n', "version=99 is not supported"),
        (
            '{"format": "budgetcheck.ledger", "version": 1, "notion": "w-event", "epsilon": 1, "w": 2, "runs": 1}'
            "\nnot json\n",
            "line 2: not JSON",
        ),
    ],
)
def test_audit_refuses_malformed_logs(runner: CliRunner, tmp_path: Path, content: str, message: str) -> None:
    log = tmp_path / "bad.jsonl"
    log.write_text(content)
    result = runner.invoke(main, ["audit", str(log)])
    assert result.exit_code == 2
    assert message in result.output


def test_audit_of_an_empty_file_is_a_damaged_ledger(runner: CliRunner, tmp_path: Path) -> None:
    """A 0-byte file is what a ledger file cut to nothing looks like: exit 4, as open_ledger says (issue 42)."""
    log = tmp_path / "bad.jsonl"
    log.write_text("")
    result = runner.invoke(main, ["audit", str(log)])
    assert result.exit_code == 4 and "(empty)" in result.output


def test_mechanisms_lists_the_builtins(runner: CliRunner) -> None:
    result = runner.invoke(main, ["mechanisms"])
    assert result.exit_code == 0
    from mechanisms import BUILTIN

    assert [line.split()[0] for line in result.output.splitlines()[1:]] == list(BUILTIN)  # under the header


def test_verify_report_png_and_html(runner: CliRunner, tmp_path: Path) -> None:
    """The picture of the worst run is written (PNG signature) and an HTML page embeds it."""
    png = tmp_path / "report.png"
    failing = runner.invoke(main, ["verify", "broken.mutants:BAAsPublished", "--stages", "ab", "--report", str(png)])
    assert failing.exit_code == 1
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    page = tmp_path / "report.html"
    passing = runner.invoke(main, ["verify", "BA", "--stages", "ab", "--examples", "20", "--report", str(page)])
    assert passing.exit_code == 0, passing.output
    assert "data:image/png;base64," in page.read_text()
    both = runner.invoke(main, ["verify", "BA", "BD", "--stages", "a", "--report", str(png)])
    assert both.exit_code == 2 and "one mechanism" in both.output


@pytest.mark.parametrize(
    "name",
    [
        "PBD",
        "TSBA",
        "TINARUniform",  # CI's main job verifies every built-in
        *(pytest.param(n, marks=pytest.mark.slow) for n in ["PBA", "StrictestBA", "Unicorn", "UnicornIS"]),
    ],
)
def test_verify_passes_personalized_and_swellfish_builtins(runner: CliRunner, name: str) -> None:
    result = runner.invoke(main, ["verify", name, "--examples", "15", "--json"])
    assert result.exit_code == 0, result.output
    (entry,) = json.loads(result.output)["results"]
    verdicts = {stage["stage"]: stage["verdict"] for stage in entry["stages"]}
    expected = {
        "ledger replay": "pass",
        "secret access": "pass",
        "exploration": "pass",
        "proof": "pass",
        "statistical audit": "pass",
    }
    from budgetcheck.proving import rule_of

    has_rule = (
        rule_of(load_mechanism(name)) is not None
    )  # the Unicorn family (and TINAR) has a bounded exhaustive proof, no rule
    if has_rule:
        expected["rule conformance"] = "pass"
    assert verdicts == expected
    assert entry["verdict"] == ("proved" if has_rule else "verified to a bound")
    assert entry["notion"] in ("personalized", "swellfish")


def test_audit_reads_personalized_and_swellfish_logs(runner: CliRunner, tmp_path: Path) -> None:
    from budgetcheck import PersonalizedLedger, PolicyCollection, RequirementSet, StreamPolicy, SwellfishLedger

    personal = PersonalizedLedger(
        RequirementSet([(2, 1.0), (3, 0.5)]), runs=2, sampler="numpy-laplace", keep_records=True
    )
    personal.spend(1, [0.5, 0.25], purpose="p")
    swell = SwellfishLedger(
        PolicyCollection([StreamPolicy(1, 4, [1.0, 1.0])]), epsilon=1.0, sampler="numpy-laplace", keep_records=True
    )
    swell.spend(2, 0.5, purpose="p")
    for ledger, name in ((personal, "p.jsonl"), (swell, "s.jsonl")):
        ledger.export(tmp_path / name)
        result = runner.invoke(main, ["audit", str(tmp_path / name), "--json"])
        assert result.exit_code == 0, result.output
        assert json.loads(result.output)["worst_over_budget"] == 0.5
    lines = (tmp_path / "p.jsonl").read_text().splitlines()
    lines.append(json.dumps({"t": 2, "purpose": "forged", "amounts": [[0.6, 0.0], [0.0, 0.0]]}))
    (tmp_path / "p.jsonl").write_text("\n".join(lines) + "\n")
    forged = runner.invoke(main, ["audit", str(tmp_path / "p.jsonl")])
    assert forged.exit_code == 1 and "VIOLATION class (w=2" in forged.output


@pytest.mark.parametrize(
    "name, verdict",
    [
        ("PBA", 0),
        ("broken.mutants:PBDMostGenerous", 1),
        ("UnicornPS", 0),
        ("broken.mutants:UnicornPSOverDeltaMinusOne", 1),
    ],
)
def test_verify_report_for_personalized_and_swellfish(
    runner: CliRunner, tmp_path: Path, name: str, verdict: int
) -> None:
    """One curve per requirement class (window sum / ε_i) or per relevance interval (TOP_δ sum / ε)."""
    from budgetcheck import verify_mechanism
    from budgetcheck.verify.report import _curves, _replay

    png = tmp_path / "report.png"
    result = runner.invoke(main, ["verify", name, "--stages", "a", "--examples", "25", "--report", str(png)])
    assert result.exit_code == verdict, result.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    checked = verify_mechanism(name, stages="a", examples=25)
    case = checked.counterexample.case if checked.counterexample else checked.worst_case
    assert case is not None
    ledger, refusal, _ = _replay(checked, case)
    curves = _curves(ledger, case, refusal.run if refusal else 0)
    groups = case.requirements.n_classes if hasattr(case, "requirements") else len(case.policies.policies)  # type: ignore[union-attr]
    assert len(curves) == groups
    assert all(ratio <= 1.0 for curve in curves for ratio in curve.ratios)  # what was spent; the refusal was not
    assert (refusal is not None) == bool(verdict) and (refusal is None or refusal.window_sum > refusal.epsilon)
