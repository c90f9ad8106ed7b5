"""REPRODUCING.md cannot go stale: every ``python -m budgetcheck`` command it quotes parses (options,
arguments, subcommands), and every figure ``bench report`` writes for the studies is listed."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from budgetcheck.bench.study_report import DU_FIGURES
from budgetcheck.cli import main
from mechanisms import BUILTIN

DOCUMENT = Path(__file__).resolve().parents[2] / "REPRODUCING.md"
PREFIX = ["python", "-m", "budgetcheck"]


def _commands() -> list[str]:
    text = DOCUMENT.read_text(encoding="utf-8")
    blocks = re.findall(r"```sh\n(.*?)```", text, flags=re.S)
    lines = [line.strip() for block in blocks for line in block.splitlines() if line.strip()]
    inline = re.findall(r"`(python -m budgetcheck [^`]+)`", text)
    return lines + inline


def test_the_document_quotes_commands_for_all_three_studies() -> None:
    commands = _commands()
    assert all(shlex.split(c)[:3] == PREFIX for c in commands), commands
    subcommands = {tuple(a for a in shlex.split(c)[3:5] if not a.startswith("-")) for c in commands}
    for expected in (("bench", "report"), ("bench", "personalized"), ("bench", "swellfish"), ("prove",)):
        assert any(s[: len(expected)] == expected for s in subcommands), expected


@pytest.mark.parametrize("command", _commands())
def test_every_quoted_command_parses(command: str) -> None:
    """``--help`` is eager: click parses every option and argument name first (an unknown option or a
    missing value exits 2), then prints the deepest subcommand's help and exits 0."""
    args = shlex.split(command)[3:]
    outcome = CliRunner().invoke(main, [*args, "--help"])
    assert outcome.exit_code == 0, (command, outcome.output)
    assert "Usage:" in outcome.output


def test_every_figure_and_table_of_the_study_reports_is_listed() -> None:
    text = DOCUMENT.read_text(encoding="utf-8")
    stems = [stem for stem, *_ in DU_FIGURES] + ["du_results", "du_improvement", "du_improvement_vs_paper"]
    stems += ["tex_fig4_teas", "tex_fig5_tinar", "tex_fig6_extrinsic", "tex_table2", "tex_table3", "tex_extrinsic"]
    stems += ["delta_mae", "table6", "supremacy", "error_vs_epsilon", "releases"]
    missing = [stem for stem in stems if f"`{stem}." not in text]
    assert not missing, missing


def test_the_real_streams_and_the_ldp_mechanisms_have_commands() -> None:
    """Du et al.'s Taxi and Foursquare streams, the LDP mechanisms beside PLBU and the verdicts quoted come
    with the commands that produce them (each parsed above)."""
    commands = [shlex.split(c)[3:] for c in _commands()]
    personalized = [c for c in commands if c[:2] == ["bench", "personalized"]]
    assert any("--taxi" in c and "--foursquare" in c for c in personalized)
    assert any("--real-only" in c for c in personalized)
    chosen = {c[i + 1] for c in personalized for i, a in enumerate(c[:-1]) if a == "--mechanism"}
    assert {"PLBU", "LPD", "LPA"} <= chosen
    verified = {a for c in commands if c[:1] == ["verify"] for a in c[1:] if not a.startswith("-")}
    new = {"PLBU", "LBU", "LSP", "LBD", "LBA", "LPD", "LPA", "BDPanPrivate", "BAPanPrivate", "PeGaSusHierarchical"}
    assert new <= verified, new - verified


VERDICTS = ("proved", "verified to a bound", "violated")


def test_every_built_in_is_in_a_systems_table_with_its_verdict() -> None:
    """A mechanism added to BUILTIN without a row (built, verdict, proved or bounded, benchmarked) fails here."""
    rows = [line for line in DOCUMENT.read_text(encoding="utf-8").splitlines() if line.startswith("| ")]
    systems = [r for r in rows if r.count("|") == 6 and any(v in r.split("|")[3] for v in VERDICTS)]
    missing = [name for name in BUILTIN if not any(re.search(rf"\b{name}\b", r.split("|")[1]) for r in systems)]
    assert not missing, missing
