"""A newcomer's first publish (issue 44): a header row as the README writes it, and a first command that
failed before any charge, then corrected."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from budgetcheck.cli import main


def publish(tmp_path: Path, text: str, *options: str) -> tuple[int, str]:
    source = tmp_path / "rows.csv"
    source.write_text(text, encoding="utf-8")
    ledger = str(tmp_path / "ledger.db")
    arguments = ["publish", "Uniform", "--ledger", ledger, "--input", str(source), *options]
    result = CliRunner().invoke(main, arguments)
    return result.exit_code, result.output


def test_a_header_row_naming_t_and_the_counts_is_skipped(tmp_path: Path) -> None:
    code, output = publish(tmp_path, "t,c1,c2\n1,5,7\n2,6,8\n", "--epsilon", "1", "--w", "3", "-d", "2")
    assert code == 0, output
    assert [line.split(",")[0] for line in output.splitlines()[:2]] == ["1", "2"]
    assert "published 2 timestamps" in output


def test_a_header_of_another_width_says_which_d_the_file_has(tmp_path: Path) -> None:
    code, output = publish(tmp_path, "t,c1,c2\n1,5,7\n", "--epsilon", "1", "--w", "3", "-d", "3")
    assert code == 2
    assert "names 2 counts" in output and "run with -d 2" in output and "Traceback" not in output


def test_a_ledger_with_no_charge_yet_says_how_to_start_again(tmp_path: Path) -> None:
    """The first command fails on its first row (a wrong -d); the corrected one names the way out."""
    assert publish(tmp_path, "1,5,7\n2,6,8\n", "--epsilon", "1", "--w", "3", "-d", "3")[0] == 2
    code, output = publish(tmp_path, "1,5,7\n2,6,8\n", "--epsilon", "1", "--w", "3", "-d", "2")
    assert code == 2
    assert "holds no charge yet" in output and "rm " in output and "ledger.db" in output
    code, output = publish(tmp_path, "1,5,7\n2,6,8\n", "--epsilon", "2", "--w", "3", "-d", "3")
    assert code == 2 and "epsilon=1.0, not epsilon=2.0" in output and "holds no charge yet" in output
    (tmp_path / "ledger.db").unlink()  # what the message says to do
    code, output = publish(tmp_path, "1,5,7\n2,6,8\n", "--epsilon", "1", "--w", "3", "-d", "2")
    assert code == 0, output


def test_a_ledger_with_charges_is_never_advised_to_be_deleted(tmp_path: Path) -> None:
    assert publish(tmp_path, "1,5,7\n", "--epsilon", "1", "--w", "3", "-d", "2")[0] == 0
    code, output = publish(tmp_path, "2,5,7,1\n", "--epsilon", "1", "--w", "3", "-d", "3")
    assert code == 2 and "was written with publisher" in output
    assert "no charge" not in output and "rm " not in output
    code, output = publish(tmp_path, "2,5,7\n", "--epsilon", "2", "--w", "3", "-d", "2")
    assert code == 2 and "no charge" not in output and "rm " not in output


def test_audit_of_a_ledger_file_says_how_many_more_windows_are_over(tmp_path: Path) -> None:
    """Checked against a smaller epsilon than its own, every window of a 30-row file is over: the audit lists
    the first 10 and says how many more there are (issue 44: 10 violations and no "N more")."""
    rows = "".join(f"{t},5,7\n" for t in range(1, 31))
    assert publish(tmp_path, rows, "--epsilon", "1", "--w", "3", "-d", "2")[0] == 0
    result = CliRunner().invoke(main, ["audit", str(tmp_path / "ledger.db"), "--epsilon", "0.01"])
    assert result.exit_code == 1, result.output
    assert result.output.count("VIOLATION ") == 10
    assert "... and 20 more windows over epsilon (the first 10 are listed)" in result.output
    as_json = CliRunner().invoke(main, ["audit", str(tmp_path / "ledger.db"), "--epsilon", "0.01", "--json"])
    assert '"violating_windows": 30' in as_json.output
