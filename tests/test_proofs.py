"""The proof files run and prove their rule; refutations are replayed through the ledger."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from budgetcheck.proving import Verdict, prove_range, prove_rule, replay_refutation
from broken.mutants import BAWithoutNullification, BDRecyclesEarly
from mechanisms.rules import BARule, BDRule, PeriodicRule

PROOFS = sorted((Path(__file__).resolve().parents[1] / "proofs").glob("[!_]*.py"))


@pytest.mark.parametrize("path", PROOFS, ids=lambda p: p.name)
def test_proof_file_proves_small_windows(path: Path) -> None:
    completed = subprocess.run([sys.executable, str(path), "--w-max", "6"], capture_output=True, text=True, check=False)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "proved for w in 1..6" in completed.stdout


@pytest.mark.parametrize("rule", [PeriodicRule(every=1), PeriodicRule(), PeriodicRule(every=3), BDRule(), BARule(), BARule(dissimilarity_when_nullified=False)])
def test_builtin_rules_are_proved(rule: object) -> None:
    verdict = prove_range(rule, range(1, 10))  # type: ignore[arg-type]
    assert verdict.verdict is Verdict.PROVED, verdict.first_failure


def test_refutation_is_a_concrete_replayable_decision_sequence() -> None:
    rule = BAWithoutNullification().allocation_rule()
    result = prove_rule(rule, 3)
    assert result.verdict is Verdict.REFUTED and result.decisions is not None
    refusal = replay_refutation(rule, result.decisions, epsilon=1.0, w=3)
    assert refusal is not None and "window" in str(refusal)


def test_a_rule_sound_at_small_w_is_refuted_at_a_larger_one() -> None:
    """BD summing only w − 2 past publications is fine at w <= 2 and overspends from w = 3."""
    verdict = prove_range(BDRecyclesEarly().allocation_rule(), range(1, 6))
    assert verdict.verdict is Verdict.REFUTED
    failure = verdict.first_failure
    assert failure is not None and failure.w >= 3


def test_correct_rules_replay_without_refusal() -> None:
    assert replay_refutation(BARule(), [True] * 20, epsilon=1.0, w=4) is None
    assert replay_refutation(BDRule(), [True, False] * 10, epsilon=0.3, w=5) is None


@pytest.mark.slow
@pytest.mark.parametrize("rule", [PeriodicRule(every=1), PeriodicRule(), BDRule()])
def test_full_range_proofs(rule: object) -> None:
    assert prove_range(rule, range(1, 129)).verdict is Verdict.PROVED  # type: ignore[arg-type]


@pytest.mark.slow
def test_ba_proof_up_to_64() -> None:
    assert prove_range(BARule(), range(1, 65)).verdict is Verdict.PROVED
