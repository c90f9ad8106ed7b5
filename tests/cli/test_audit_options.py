"""`budgetcheck audit FILE --epsilon E --w W` checks what it says it checks, for ledger files as for exports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import budgetcheck as bc
from budgetcheck.cli import main


def spent_file(path: Path) -> Path:
    """A ledger file spent to exactly ε = 1 in one window of w = 4 (t = 1, 2)."""
    ledger = bc.open_ledger(
        path,
        bc.WindowLedger(bc.WEventParams(1.0, w=4), sampler="numpy-laplace", keep_records=True),
        durability="process",
    )
    ledger.spend(1, 0.5, purpose="a")
    ledger.spend(2, 0.5, purpose="b")
    ledger.close()
    return path


def exported(tmp_path: Path) -> Path:
    ledger = bc.WindowLedger(bc.WEventParams(1.0, w=4), sampler="numpy-laplace", keep_records=True)
    ledger.spend(1, 0.5, purpose="a")
    ledger.spend(2, 0.5, purpose="b")
    path = tmp_path / "log.jsonl"
    path.write_text("\n".join(ledger.jsonl()) + "\n")
    return path


@pytest.mark.parametrize("kind", ["file", "export"])
@pytest.mark.parametrize(
    ("options", "code"),
    [
        ([], 0),
        (["--epsilon", "1"], 0),
        (["--epsilon", "0.5"], 1),  # the issue: a file spent to ε = 1 printed "ok" against 0.5
        (["--epsilon", "0.9999999999999999"], 1),  # one ulp below 1
        (["--w", "1"], 0),  # windows of one timestamp hold 0.5 each
        (["--epsilon", "0.5", "--w", "1"], 0),
        (["--epsilon", "0.6", "--w", "2"], 1),
    ],
)
def test_the_given_budget_is_the_one_checked(tmp_path: Path, kind: str, options: list[str], code: int) -> None:
    log = spent_file(tmp_path / "l.db") if kind == "file" else exported(tmp_path)
    result = CliRunner().invoke(main, ["audit", str(log), *options])
    assert result.exit_code == code, result.output
    assert ("FAIL" in result.output) == (code == 1)


def test_the_json_report_names_the_budget_checked(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["audit", str(spent_file(tmp_path / "l.db")), "--epsilon", "0.5", "--json"])
    report = json.loads(result.output)
    assert (
        result.exit_code == 1 and report["epsilon"] == 0.5 and report["w"] == 4 and report["worst_over_budget"] == 2.0
    )


@pytest.mark.parametrize("kind", ["file", "export"])
@pytest.mark.parametrize(
    "options",
    [["--epsilon", "0"], ["--epsilon", "nan"], ["--epsilon", "-1"], ["--epsilon", "inf"], ["--w", "0"], ["--w", "-3"]],
)
def test_invalid_budgets_are_usage_errors(tmp_path: Path, kind: str, options: list[str]) -> None:
    log = spent_file(tmp_path / "l.db") if kind == "file" else exported(tmp_path)
    result = CliRunner().invoke(main, ["audit", str(log), *options])
    assert result.exit_code == 2, result.output
    assert options[0].lstrip("-") in result.output and "Traceback" not in result.output


def test_personalized_files_refuse_a_w_event_budget(tmp_path: Path) -> None:
    path = tmp_path / "p.db"
    ledger = bc.open_ledger(
        path,
        bc.PersonalizedLedger(bc.RequirementSet([(3, 1.0), (5, 2.0)]), sampler="numpy-laplace", keep_records=True),
        durability="process",
    )
    ledger.close()
    result = CliRunner().invoke(main, ["audit", str(path), "--epsilon", "0.5"])
    assert result.exit_code == 2 and "personalized" in result.output and "epsilon=0.5" in result.output
    assert CliRunner().invoke(main, ["audit", str(path)]).exit_code == 0
