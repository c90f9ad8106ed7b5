"""The broken-mechanism corpus: verify rejects every mutant at the stage named, and no built-in."""

from __future__ import annotations

import pytest

from broken.mutants import CLASS_ONE, CORPUS
from budgetcheck import verify_mechanism
from budgetcheck.verify.verdict import Outcome


def test_corpus_is_large_enough() -> None:
    assert len(CORPUS) >= 20


# Every verify_mechanism call here runs as an owner who allows in-process code and vouched sensitivities would
# (verify --trusted-code --allow-vouched): the mutants that use them are judged as before, not refused.
# the stages a mutant's own stage needs: secret access reads the replay's finding
LETTERS = {"ledger replay": "a", "secret access": "ab", "exploration": "e", "proof": "c", "statistical audit": "d"}


# the two slowest mutants (about a minute each on CI's cores) are in tests/slow/; their stages are
# exercised on every run by the other mutants of the same stage
SLOWEST = {"BDDissimilarityOverPopulation", "AdaPubRereadsClusters"}
EACH = [pytest.param(m, stage, id=m.__name__) for m, stage in CORPUS if m.__name__ not in SLOWEST]


@pytest.mark.parametrize(("mutant", "stage"), EACH)
def test_every_mutant_is_rejected_at_its_stage(mutant: type, stage: str) -> None:
    """The stage named catches the mutant on its own (the other stages need not run for that)."""
    result = verify_mechanism(
        f"broken.mutants:{mutant.__name__}", examples=60, stages=LETTERS[stage], trusted_code=True, allow_vouched=True
    )
    assert result.verdict == "fail", [s.to_json() for s in result.stages]
    failed = {s.stage for s in result.stages if s.verdict == "fail"}
    assert stage in failed, [s.to_json() for s in result.stages]


@pytest.mark.parametrize("mutant", CLASS_ONE, ids=[m.__name__ for m in CLASS_ONE])
def test_class_one_mutants_need_the_exploration_stage(mutant: type) -> None:
    """Issue 28 class 1: every stage but exploration (e) passes them, so stage e is what catches them."""
    without = verify_mechanism(
        f"broken.mutants:{mutant.__name__}", examples=60, stages="abcd", trusted_code=True, allow_vouched=True
    )
    assert without.outcome is not Outcome.VIOLATED, [s.to_json() for s in without.stages]


def test_home_made_pba_control_passes_every_stage_it_can() -> None:
    """The PBA mutants differ from this control only in their bug: with the paper's maximum
    nullification bound the same home-made code passes replay, secret access and the audit."""
    result = verify_mechanism("broken.mutants:HomeMadePBAControl", examples=60, trusted_code=True, allow_vouched=True)
    verdicts = {s.stage: s.verdict for s in result.stages}
    assert verdicts == {
        "ledger replay": "pass",
        "secret access": "pass",
        "exploration": "pass",
        "proof": "not proved",
        "statistical audit": "pass",
    }, [s.to_json() for s in result.stages]
    assert result.outcome is Outcome.BOUNDED


def test_a_forced_publication_forgotten_on_thirds_needs_replay_with_intrusion_schedules(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Kellaris et al. 2014, §4.5, announced intrusions: the mutant drops the forced publications of
    intrusions at t ≡ 0 (mod 3) from its budget state. Replay draws intrusion schedules, shrinks the
    failure with its schedule and prints a call that reproduces it; replay without schedules and
    exploration (which announces at t ≡ 2 (mod 3)) both pass it."""
    import numpy as np

    import budgetcheck
    from budgetcheck import BudgetExceeded
    from budgetcheck.verify import stages

    reference = "broken.mutants:BDPanPrivateAnnouncedForgetsForcedOnThirds"
    found = verify_mechanism(reference, examples=60, stages="a", trusted_code=True, allow_vouched=True)
    assert found.outcome is Outcome.VIOLATED and found.counterexample is not None
    case = found.counterexample.case
    assert case.intrusions and any(t % 3 == 0 for t in case.intrusions), case  # type: ignore[union-attr]
    call = found.counterexample.call(reference)
    assert f"intrusions={list(case.intrusions)!r}" in call  # type: ignore[union-attr]
    with pytest.raises(BudgetExceeded):
        eval(call, {"budgetcheck": budgetcheck, "np": np})  # the printed call reproduces the refusal
    assert (
        verify_mechanism(reference, stages="e", trusted_code=True, allow_vouched=True).outcome is not Outcome.VIOLATED
    )
    monkeypatch.setattr(stages, "announces_intrusions", lambda mechanism: False)
    blind = verify_mechanism(reference, examples=60, stages="a", trusted_code=True, allow_vouched=True)
    assert blind.outcome is not Outcome.VIOLATED, [s.to_json() for s in blind.stages]
