"""Issue 43, item 5: the audit of a vouched sensitivity runs where the sensitivity can be wrong.

Each mechanism of ``tests/broken/vouched.py`` vouches (``ledger.measure``) for the right sensitivity
at ε = 1, d = 2, w in {1, 3} under one person in one bin (the only regimes the audit ran before)
and for a hundredth of it elsewhere: only at ε != 1, only from d = 3, only at w = 8, or under any
relation but the default. Each passed the audit as it was (shown here by running it as it was) and
is now rejected, with the regime printed; the control, which vouches right everywhere, passes with
every regime covered printed.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from budgetcheck import load_mechanism
from budgetcheck.cli import main
from budgetcheck.verify.owner import allowing
from budgetcheck.verify.regimes import DERIVED, VOUCHED, covered
from budgetcheck.verify.stages import verify_mechanism
from budgetcheck.verify.statistical import statistical_audit
from budgetcheck.verify.verdict import EXIT_VIOLATION, Outcome

WRONG_ONLY_AT = [
    ("VouchedRightAtEpsilonOne", ("epsilon=0.1", "epsilon=4")),
    ("VouchedWrongFromThreeBins", ("d=3", "d=8")),
    ("VouchedWrongAtWindowEight", ("w=8",)),
    ("VouchedIgnoresTheRelation", ("one-bin(3)", "across-bins(3)")),
]
SLOW = {"VouchedWrongFromThreeBins", "VouchedIgnoresTheRelation"}


# two of the four on every push (each audit forks fn per step: minutes on 2 cores); the d and relation
# regimes are also caught on every push by tests/adversary/test_attack_four.py's regime attacks
EACH = [
    pytest.param(name, regimes, id=name, marks=[pytest.mark.slow] if name in SLOW else [])
    for name, regimes in WRONG_ONLY_AT
]


@pytest.mark.parametrize(("name", "regimes"), EACH)
def test_a_sensitivity_wrong_in_one_regime_passed_the_old_audit_and_fails_the_new(
    name: str, regimes: tuple[str, ...]
) -> None:
    mechanism = load_mechanism(f"broken.vouched:{name}")
    # the audit as it ran before: epsilon = 1, d = 2, w in {1, 3}, the default relation
    with allowing(trusted_code=False, allow_vouched=True):  # the owner allows the vouched sensitivity
        before = [statistical_audit(mechanism, epsilon=r.epsilon, w=r.w, runs=4000, seed=0) for r in DERIVED]  # type: ignore[arg-type]
    assert not any(finding.violates for finding in before), before
    result = verify_mechanism(f"broken.vouched:{name}", stages="d", allow_vouched=True)
    stage = result.stages[0]
    assert result.outcome is Outcome.VIOLATED and stage.verdict == "fail", stage.detail
    assert any(regime in stage.detail for regime in regimes), stage.detail  # where it is wrong
    assert f"regimes covered: {covered(VOUCHED)}" in stage.detail


def test_a_vouched_sensitivity_right_everywhere_passes_with_the_regimes_printed() -> None:
    result = verify_mechanism("broken.vouched:VouchedRight", stages="d", allow_vouched=True)
    stage = result.stages[0]
    assert stage.verdict == "pass", stage.detail
    assert "epsilon in {0.1, 1, 4}, d in {1, 2, 3, 8}, w in {1, 3, 8}" in stage.detail, stage.detail
    assert "one-bin(1), one-bin(3), across-bins(3), replace-one" in stage.detail, stage.detail


def test_a_builtin_is_audited_in_the_regimes_the_library_derives_its_noise_in() -> None:
    """No vouched sensitivity: the two regimes of before, and the verdict says so."""
    stage = verify_mechanism("Uniform", stages="d").stages[0]
    assert stage.verdict == "pass" and f"regimes covered: {covered(DERIVED)}" in stage.detail, stage.detail
    assert "vouches" not in stage.detail


def test_cli_exits_1_on_a_sensitivity_wrong_only_at_window_eight() -> None:
    result = CliRunner().invoke(
        main, ["verify", "broken.vouched:VouchedWrongAtWindowEight", "--stages", "d", "--allow-vouched"]
    )
    assert result.exit_code == EXIT_VIOLATION, result.output
    assert "w=8" in result.output and "regimes covered" in result.output
