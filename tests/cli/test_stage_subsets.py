"""``verify --stages`` subsets speak the full run's vocabulary and say what they skipped (issue 44).

A subset used to print a bare INCONCLUSIVE where the stages it ran had passed (``--stages c`` on BD,
whose full run says proved), with nothing naming the stages left out or what to add.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner

from budgetcheck.cli import main
from budgetcheck.verify.verdict import Outcome

VOCABULARY = {outcome.value for outcome in Outcome}


def _verify(*args: str) -> tuple[int, dict[str, Any], str]:
    """The exit code, the one JSON result and the table output of ``budgetcheck verify ARGS``."""
    as_json = CliRunner().invoke(main, ["verify", *args, "--json"])
    table = CliRunner().invoke(main, ["verify", *args])
    assert as_json.exit_code == table.exit_code, (as_json.output, table.output)
    (result,) = json.loads(as_json.output)["results"]
    return table.exit_code, result, table.output


def _verdict_column(output: str, mechanism: str) -> str:
    row = next(line for line in output.splitlines() if line.startswith(mechanism + " "))
    return row.split("  ")[-1].strip()


def test_a_proof_alone_names_the_skipped_stages_and_what_to_add() -> None:
    """--stages c on BD: the proof passes but covers the code only with e; the verdict says so."""
    code, result, output = _verify("BD", "--stages", "c")
    assert code == 3, output  # exit-codes.md: inconclusive
    assert result["verdict"] == "inconclusive" and result["skipped_stages"] == ["a", "b", "d", "e"]
    note = result["verdict_note"]
    for named in ("a (ledger replay)", "b (secret access)", "d (statistical audit)", "e (exploration"):
        assert named in note, note
    assert "add a or e for verified to a bound, e to the proof for proved" in note
    assert _verdict_column(output, "BD") == "INCONCLUSIVE (a, b, d, e skipped)", output
    assert f"BD: --stages c: {note}" in output


def test_proof_and_conformance_give_the_full_runs_proved() -> None:
    """--stages ce decides proved, as a full run of BD does, and names what it did not run."""
    code, result, output = _verify("BD", "--stages", "ce")
    assert code == 0, output
    assert result["verdict"] == "proved" and result["skipped_stages"] == ["a", "b", "d"]
    assert "can still find a violation" in result["verdict_note"]
    assert _verdict_column(output, "BD") == "proved (a, b, d skipped)", output


def test_a_replay_alone_says_a_full_run_may_prove_it() -> None:
    code, result, output = _verify("BD", "--stages", "a", "--examples", "10")
    assert code == 0, output
    assert result["verdict"] == "verified to a bound" and result["skipped_stages"] == ["b", "c", "d", "e"]
    assert "with c and e a full run says proved" in result["verdict_note"]
    assert _verdict_column(output, "BD") == "verified to a bound (b, c, d, e skipped)", output


def test_a_violation_found_by_a_subset_is_the_full_runs_violated() -> None:
    code, result, output = _verify("broken.mutants:UniformOverWMinusOne", "--stages", "a")
    assert code == 1, output
    assert result["verdict"] == "violated"
    assert result["verdict_note"].endswith("violated whatever they find, as a full run says")
    assert "VIOLATED" in output and "skipped)" not in output  # a violation needs no caveat


@pytest.mark.parametrize("stages", ["b", "d", "bd"])
def test_every_subset_verdict_is_in_the_full_runs_vocabulary(stages: str) -> None:
    code, result, output = _verify("Uniform", "--stages", stages, "--examples", "5")
    assert result["verdict"] in VOCABULARY
    assert code == (3 if result["verdict"] == "inconclusive" else 0), output
    assert result["skipped_stages"] == [letter for letter in "abcde" if letter not in stages]
    assert "c and e for proved" in result["verdict_note"] and "add a or e" in result["verdict_note"]
    assert not _verdict_column(output, "Uniform").endswith("INCONCLUSIVE"), output  # never bare


def test_a_full_run_carries_no_note() -> None:
    """The JSON of a full run: no stage skipped, no note (run in the library: a full run is minutes)."""
    from budgetcheck.verify.stages import VerifyResult

    full = VerifyResult("M", "M", 0, 0, 0.0, None)
    assert full.skipped == "" and full.note is None
    assert full.to_json()["skipped_stages"] == [] and full.to_json()["verdict_note"] is None


def test_a_subset_that_a_stage_could_not_decide_says_which() -> None:
    from budgetcheck.verify.subset import skipped_note

    note = skipped_note("e", Outcome.INCONCLUSIVE, {"exploration": "inconclusive"})
    assert note is not None and note.startswith("skipped a (ledger replay), b (secret access), c (proof), d ")
    assert "inconclusive, since exploration could not decide; the skipped stages can still find a violation" in note


def test_a_vouched_mechanism_without_the_audit_is_told_to_add_d() -> None:
    from budgetcheck.verify.subset import skipped_note

    note = skipped_note("a", Outcome.INCONCLUSIVE, {"ledger replay": "pass"}, vouched=True)
    assert note is not None and note.endswith("only d (statistical audit) checks; add d for verified to a bound")
