"""Issue 43, item 4: verify runs a mechanism where production runs it, and checks the live path of all.

Attacks written from the public API (``tests/broken/configuration.py``), each passing ``verify``
before: ``ExactOnceFiled`` is Uniform in memory and publishes the true counts once ``publish``
keeps its ledger in a file; ``PBDPublishesPBA`` verifies as PBD (proved) and publishes PBA.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import budgetcheck as bc
from broken.configuration import ExactOnceFiled
from budgetcheck.cli import main
from budgetcheck.verify.stages import verify_mechanism
from budgetcheck.verify.verdict import EXIT_VIOLATION, Outcome


def test_a_mechanism_that_leaks_only_on_a_ledger_file_publishes_the_true_counts(tmp_path: Path) -> None:
    """The harm, end to end: ``publish`` (a ledger file) prints the true counts to about 10^-5."""
    counts = np.random.default_rng(0).integers(0, 50, size=(10, 2))
    out = io.StringIO()
    lines = [f"{t + 1},{a},{b}" for t, (a, b) in enumerate(counts)]
    bc.publish(
        ExactOnceFiled(), lines, tmp_path / "ledger.sqlite", dimensions=2, epsilon=1.0, w=3, out=out, allow_vouched=True
    )
    released = np.array([[float(x) for x in line.split(",")[1:]] for line in out.getvalue().splitlines()])
    assert np.abs(released - counts).max() < 1e-3


def test_verify_rejects_the_mechanism_that_behaves_otherwise_on_a_ledger_file() -> None:
    result = verify_mechanism("broken.configuration:ExactOnceFiled", stages="b", examples=10, allow_vouched=True)
    stage = next(s for s in result.stages if s.stage == "secret access")
    assert result.outcome is Outcome.VIOLATED and stage.verdict == "fail", stage.detail
    assert "ledger file" in stage.detail and "'measurement'" in stage.detail, stage.detail


def test_cli_exits_1_on_the_mechanism_that_behaves_otherwise_on_a_ledger_file() -> None:
    result = CliRunner().invoke(
        main, ["verify", "broken.configuration:ExactOnceFiled", "--stages", "b", "--allow-vouched"]
    )
    assert result.exit_code == EXIT_VIOLATION, result.output
    assert "behaves otherwise in a configuration production runs it in" in result.output


def test_a_personalized_live_path_that_is_not_run_is_rejected() -> None:
    """``releases`` of personalized mechanisms is now stepped against ``run`` on every replayed case."""
    result = verify_mechanism("broken.configuration:PBDPublishesPBA", stages="a", examples=20)
    assert result.outcome is Outcome.VIOLATED and result.counterexample is not None
    assert result.counterexample.reason == "live path departs from run()", result.counterexample
    assert "execute_personalized(" in result.counterexample.call("broken.configuration:PBDPublishesPBA")


@pytest.mark.parametrize("name", ["PBD", "LBD", "BD", "TSBD"])
def test_builtins_pass_in_every_configuration(name: str) -> None:
    result = verify_mechanism(name, stages="ab", examples=8)
    assert result.outcome is not Outcome.VIOLATED, [s.to_json() for s in result.stages]
    replay = next(s for s in result.stages if s.stage == "ledger replay")
    expected = "ledger file and bench" if name in ("BD",) else "ledger file"
    assert f"a fixed case also in the {expected} configurations" in replay.detail, replay.detail


def test_a_configuration_the_ledger_refuses_is_named_and_not_a_finding() -> None:
    """Pan-private accounting is kept in memory only: publish cannot run it on a file, nor can verify."""
    result = verify_mechanism("BDPanPrivate", stages="ab", examples=8)
    assert result.outcome is not Outcome.VIOLATED, [s.to_json() for s in result.stages]
    replay = next(s for s in result.stages if s.stage == "ledger replay")
    assert "ledger file (which the ledger refuses" in replay.detail and "bench" in replay.detail, replay.detail


def test_a_local_randomiser_that_no_ledger_file_or_live_stream_can_run_is_not_violated() -> None:
    """LPD needs per-user data: publish's live stream has none, and a ledger file cannot keep its per-user
    records (the library refuses both). verify names the refused configuration and judges the rest."""
    result = verify_mechanism("LPD", stages="ab", examples=8)
    assert result.outcome is not Outcome.VIOLATED, [s.to_json() for s in result.stages]
    replay = next(s for s in result.stages if s.stage == "ledger replay")
    assert "ledger file (which the ledger refuses" in replay.detail, replay.detail
