"""Issue 43, item 6: a departure from the proved rule is *not proved*, never *violated* on its own.

The mechanisms (``tests/broken/departures.py``) are safe: the exact ledger never refuses them and no
window exceeds ε. Each charges more than its rule's float computation at some step: its own ε/w
instead of ``rounding.share`` (an ulp above it), all of ``ledger.remaining(t)`` (ulps above the
share), or more under one purpose and less in total. Before the fix ``verify`` reported them
*violated* (exit 1), a CI gate blocking a safe contribution; now the verdict is *verified to a
bound* with the departure printed, and exit 1 stays for what breaks privacy.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from budgetcheck.cli import main
from budgetcheck.verify.stages import verify_mechanism
from budgetcheck.verify.verdict import EXIT_INCONCLUSIVE, EXIT_OK, EXIT_VIOLATION, Outcome

DEPARTING = ["UniformOwnShareEveryOther", "UniformSpendsRemaining", "UniformUnderBDRule"]


@pytest.mark.parametrize("name", DEPARTING)
def test_a_safe_departure_from_the_rule_is_not_proved_and_not_violated(name: str) -> None:
    result = verify_mechanism(f"broken.departures:{name}", stages="ec")
    verdicts = {stage.stage: stage.verdict for stage in result.stages}
    assert verdicts == {"exploration": "pass", "rule conformance": "not proved", "proof": "pass"}, verdicts
    assert result.outcome is Outcome.BOUNDED and result.counterexample is None
    detail = next(stage.detail for stage in result.stages if stage.stage == "rule conformance")
    # the departure is printed: where, what was charged, what the rule allows, and how to replay it
    assert "proof does not cover this code" in detail and "more than the rule allows" in detail, detail
    assert "t=" in detail and "replay_outputs(" in detail, detail


def test_the_ulp_departures_are_at_the_steps_the_rule_rounds_down() -> None:
    own = verify_mechanism("broken.departures:UniformOwnShareEveryOther", stages="e")
    remaining = verify_mechanism("broken.departures:UniformSpendsRemaining", stages="e")
    under = verify_mechanism("broken.departures:UniformUnderBDRule", stages="e")
    detail = {
        r.mechanism: next(s.detail for s in r.stages if s.stage == "rule conformance") for r in (own, remaining, under)
    }
    # 0.5 / 5 rounds to nearest above the share; 1 - 2 share(1, 3) is an ulp above share(1, 3)
    assert "epsilon=0.5, w=5" in detail["UniformOwnShareEveryOther"] and "0.1}" in detail["UniformOwnShareEveryOther"]
    assert "w=3" in detail["UniformSpendsRemaining"] and "0.33333333333333337" in detail["UniformSpendsRemaining"]
    assert "'dissimilarity'" in detail["UniformUnderBDRule"]


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def test_cli_exits_0_on_a_safe_departure_with_every_stage_and_prints_it(runner: CliRunner) -> None:
    result = runner.invoke(main, ["verify", "broken.departures:UniformSpendsRemaining", "--examples", "10"])
    assert result.exit_code == EXIT_OK, result.output
    assert "verified to a bound" in result.output and "VIOLATED" not in result.output
    assert "[rule conformance] not proved: departs from its allocation rule" in result.output


@pytest.mark.parametrize("name", DEPARTING)
def test_cli_exit_codes_of_a_departure(runner: CliRunner, name: str) -> None:
    reference = f"broken.departures:{name}"
    assert runner.invoke(main, ["verify", reference, "--stages", "ec"]).exit_code == EXIT_OK
    # --require proof asks for the proof to cover the code: it does not, and that is not a violation either
    required = runner.invoke(main, ["verify", reference, "--stages", "ec", "--require", "proof"])
    assert required.exit_code == EXIT_INCONCLUSIVE, required.output


def test_a_departure_that_overspends_still_exits_1(runner: CliRunner) -> None:
    """A mutant that departs and puts a window over ε: exploration fails it, exit 1; conformance
    reports the departure as the gap in the proof it is."""
    result = runner.invoke(main, ["verify", "broken.mutants:BDLargeWindowDissimilarity", "--stages", "e"])
    assert result.exit_code == EXIT_VIOLATION, result.output
    assert "[exploration] fail" in result.output and "[rule conformance] not proved" in result.output
