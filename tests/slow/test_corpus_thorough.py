"""The slow verification runs of the broken-mechanism corpus: the whole verify on every mutant and
every built-in, the thorough audit profile, and the two slowest mutants (see tests/verify/test_corpus.py
for the default run)."""

from __future__ import annotations

import pytest

from broken.mutants import CORPUS
from budgetcheck import verify_mechanism
from budgetcheck.verify.verdict import Outcome
from mechanisms import BUILTIN

pytestmark = pytest.mark.slow

LETTERS = {"ledger replay": "a", "secret access": "ab", "exploration": "e", "proof": "c", "statistical audit": "d"}
SLOWEST = {"BDDissimilarityOverPopulation", "AdaPubRereadsClusters"}


SLOW_CASES = [(m, stage) for m, stage in CORPUS if m.__name__ in SLOWEST]


@pytest.mark.parametrize(("mutant", "stage"), SLOW_CASES, ids=[m.__name__ for m, _ in SLOW_CASES])
def test_the_slowest_mutants_are_rejected_at_their_stage(mutant: type, stage: str) -> None:
    """The two mutants left out of tests/verify/test_corpus.py's default run, at their own stage."""
    result = verify_mechanism(
        f"broken.mutants:{mutant.__name__}", examples=60, stages=LETTERS[stage], trusted_code=True, allow_vouched=True
    )
    assert result.verdict == "fail", [s.to_json() for s in result.stages]
    assert stage in {s.stage for s in result.stages if s.verdict == "fail"}, [s.to_json() for s in result.stages]


@pytest.mark.parametrize(("mutant", "stage"), CORPUS, ids=[m.__name__ for m, _ in CORPUS])
def test_every_mutant_is_rejected_by_the_whole_verify(mutant: type, stage: str) -> None:
    result = verify_mechanism(f"broken.mutants:{mutant.__name__}", examples=60, trusted_code=True, allow_vouched=True)
    assert result.verdict == "fail", [s.to_json() for s in result.stages]
    assert stage in {s.stage for s in result.stages if s.verdict == "fail"}, [s.to_json() for s in result.stages]


# the default run covers it through test_cli's verify --all (and CI runs verify --all)
@pytest.mark.parametrize("name", list(BUILTIN))
def test_no_false_alarm_on_builtins(name: str) -> None:
    result = verify_mechanism(name, examples=60, trusted_code=True, allow_vouched=True)
    assert result.verdict == "pass", [s.to_json() for s in result.stages]
    assert result.outcome in (Outcome.PROVED, Outcome.BOUNDED)


# 40,000 runs per input; the quick profile's power is tested on every run
@pytest.mark.parametrize(
    ("reference", "verdict"), [("broken.mutants:BDDissimilarityHalfSensitivity", "fail"), ("BD", "pass")]
)
def test_the_thorough_audit_catches_a_dissimilarity_at_half_its_sensitivity(reference: str, verdict: str) -> None:
    """A loss of 1.5ε at w = 1 (the decision pays 2·ε/2): too close for the quick profile's 4,000
    runs (bound 0.94), caught with the thorough profile's 40,000 (1.15); BD itself stays below ε."""
    result = verify_mechanism(reference, stages="d", profile="thorough", trusted_code=True, allow_vouched=True)
    (audit,) = result.stages  # alone, the audit cannot make BD "verified": nothing covered its spends
    assert audit.stage == "statistical audit" and audit.verdict == verdict, audit.to_json()
