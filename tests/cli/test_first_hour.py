"""What a newcomer types first works: keyword parameters, context managers, `python -m`, and
amounts that are not numbers refused as such (never converted)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

import budgetcheck as bc


def test_a_window_ledger_takes_epsilon_and_w_as_keywords() -> None:
    ledger = bc.WindowLedger(epsilon=1.0, w=3, sampler="numpy-laplace")
    assert ledger.params == bc.WEventParams(1.0, 3)
    ledger.spend(1, 1.0, purpose="all of it")
    with pytest.raises(bc.BudgetExceeded):
        ledger.spend(3, 1e-12, purpose="one more")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"epsilon": 1.0}, "give epsilon and w"),
        ({}, "give epsilon and w"),
        ({"params": bc.WEventParams(1.0, 2), "w": 3}, "not both"),
        ({"epsilon": 0.0, "w": 3}, "epsilon=0.0"),
        ({"epsilon": 1.0, "w": 0}, "w=0"),
    ],
)
def test_keyword_parameters_are_checked(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(bc.InvalidArgument, match=message):
        bc.WindowLedger(**kwargs, sampler="numpy-laplace")  # type: ignore[arg-type]


def test_a_ledger_file_closes_at_the_end_of_a_with_block(tmp_path: Path) -> None:
    path = tmp_path / "l.db"
    with bc.open_ledger(path, bc.WindowLedger(epsilon=1.0, w=3, sampler="numpy-laplace")) as ledger:
        ledger.spend(1, 0.5, purpose="a")
    assert _closed(ledger)
    with bc.open_ledger(path, bc.WindowLedger(epsilon=1.0, w=3, sampler="numpy-laplace")) as again:
        assert float(again.remaining(1)[0]) == 0.5


def _closed(ledger: bc.WindowLedger) -> bool:
    journal = ledger.journal
    assert journal is not None
    connections: list[sqlite3.Connection] = []
    journal.interpose(lambda db: connections.append(db) or db)  # the driver's own connection, as it is
    try:
        connections[0].execute("SELECT 1")
    except sqlite3.ProgrammingError:  # "Cannot operate on a closed database."
        return True
    return False


def test_python_dash_m_runs_the_command() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "budgetcheck", "mechanisms"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "BD" in result.stdout


@pytest.mark.parametrize(
    "amount",
    ["0.1", b"0.1", None, True, np.array(["0.1"]), [0.1, "0.2"], [None], [True, 0.1], {"epsilon": 0.1}, 1 + 0j],
)
def test_amounts_that_are_not_numbers_are_refused_and_change_nothing(amount: object) -> None:
    ledger = bc.WindowLedger(epsilon=1.0, w=3, sampler="numpy-laplace")
    with pytest.raises(bc.InvalidArgument, match="epsilon"):
        ledger.spend(1, amount, purpose="x")  # type: ignore[arg-type]
    assert ledger.t == 0 and float(ledger.remaining(1)[0]) == 1.0


@pytest.mark.parametrize("amount", [0.1, Fraction(1, 4), np.float32(0.25), np.int64(0), [0.1], np.array([0.5])])
def test_numbers_of_every_kind_are_accepted(amount: object) -> None:
    ledger = bc.WindowLedger(epsilon=1.0, w=3, sampler="numpy-laplace")
    ledger.spend(1, amount, purpose="x")  # type: ignore[arg-type]
    assert ledger.t == 1


def test_a_fraction_no_double_equals_is_refused_naming_its_nearest_double() -> None:
    """Fraction(1, 10) lies between two doubles: charging either would not be the amount asked for."""
    ledger = bc.WindowLedger(epsilon=1.0, w=3, sampler="numpy-laplace")
    with pytest.raises(bc.InvalidArgument, match=r"Fraction\(1, 10\), which no double equals \(the nearest is 0.1\)"):
        ledger.spend(1, Fraction(1, 10), purpose="x")
    assert ledger.t == 0


def _budgetcheck(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "budgetcheck", *args], cwd=cwd, capture_output=True, text=True, timeout=300
    )


PLAIN = """
import numpy as np

class Nothing:
    name = "Nothing"

    def run(self, stream, ledger):
        return np.zeros((ledger.runs, stream.length, stream.dimensions))
"""


def test_verify_finds_a_module_in_the_working_directory(tmp_path: Path) -> None:
    (tmp_path / "mymech.py").write_text(PLAIN)
    result = _budgetcheck(tmp_path, "verify", "mymech:Nothing", "--stages", "a", "--examples", "5")
    assert result.returncode == 0, result.stderr
    assert "Nothing" in result.stdout


@pytest.mark.parametrize(
    ("source", "where"),
    [
        ("def f(:\n    pass\n", "broken.py, line 1: invalid syntax"),
        ("x = 1\nraise RuntimeError('boom')\n", "broken.py, line 2: RuntimeError: boom"),
        ("import a_module_that_is_not_there\n", "No module named 'a_module_that_is_not_there'"),
    ],
)
def test_an_error_in_the_users_module_is_a_usage_error_naming_file_and_line(
    tmp_path: Path, source: str, where: str
) -> None:
    (tmp_path / "broken.py").write_text(source)
    result = _budgetcheck(tmp_path, "verify", "broken:Mech")
    assert result.returncode == 2
    assert where in result.stderr and "Traceback" not in result.stderr


def test_publish_with_a_missing_input_file_is_a_usage_error(tmp_path: Path) -> None:
    result = _budgetcheck(
        tmp_path, "publish", "BD", "--ledger", "l.db", "--epsilon", "1", "--w", "3", "--input", "nope.csv"
    )
    assert result.returncode == 2 and "nope.csv" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "l.db").exists()


def test_an_internal_error_exits_70_never_1(monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from budgetcheck import cli
    from budgetcheck.cli import commands

    def broken(*args: object, **kwargs: object) -> None:
        raise ZeroDivisionError("a bug of ours")

    monkeypatch.setattr(commands, "load_lines", broken)
    result = CliRunner().invoke(cli.main, ["audit", __file__])
    assert result.exit_code == 70
    assert "internal error" in result.output and "ZeroDivisionError" in result.output


def test_mechanisms_lists_a_notion_and_a_plain_description_for_every_one() -> None:
    import json

    from click.testing import CliRunner

    from budgetcheck.cli import main
    from mechanisms import BUILTIN

    result = CliRunner().invoke(main, ["mechanisms", "--json"])
    assert result.exit_code == 0
    rows = json.loads(result.output)["mechanisms"]
    assert [row["name"] for row in rows] == list(BUILTIN)
    for row in rows:
        assert row["notion"] in ("w-event", "personalized", "swellfish"), row
        assert len(row["description"]) > 20 and "`" not in row["description"], row
    table = CliRunner().invoke(main, ["mechanisms"]).output.splitlines()
    assert table[0].split() == ["mechanism", "notion", "description"] and len(table) == len(rows) + 1


def test_verify_leaves_nothing_in_the_working_directory(tmp_path: Path) -> None:
    import os

    work, cache = tmp_path / "work", tmp_path / "cache"
    work.mkdir()
    (work / "mymech.py").write_text(PLAIN)
    env = {k: v for k, v in os.environ.items() if k != "HYPOTHESIS_STORAGE_DIRECTORY"} | {"XDG_CACHE_HOME": str(cache)}
    result = subprocess.run(
        [sys.executable, "-m", "budgetcheck", "verify", "mymech:Nothing", "--stages", "ab", "--examples", "5"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode in (0, 3), result.stderr
    assert sorted(p.name for p in work.iterdir() if p.name != "__pycache__") == ["mymech.py"]
    assert (cache / "budgetcheck" / "hypothesis").is_dir()


class Greedy:
    """Spends 0.75 ε at every timestamp: the second spend of any window of w >= 2 is refused."""

    name = "Greedy"

    def run(self, stream: bc.GuardedStream, ledger: bc.WindowLedger) -> np.ndarray:
        out = []
        for secret in stream:
            out.append(ledger.laplace(secret, 0.75 * ledger.params.epsilon))
        return np.stack(out, axis=1)


def test_the_worst_figure_of_a_refused_mechanism_is_its_attempt() -> None:
    """It read 1.000 for a mechanism failing by overspending (the refused spend was not counted)."""
    import json

    from click.testing import CliRunner

    from budgetcheck.cli import main

    result = bc.verify_mechanism("test_first_hour:Greedy", stages="a", examples=30)
    assert result.verdict == "fail"
    assert result.worst_refused and result.worst_ratio == pytest.approx(1.5)  # 0.75 + 0.75 attempted
    table = CliRunner().invoke(main, ["verify", "test_first_hour:Greedy", "--stages", "a", "--examples", "30"])
    assert table.exit_code == 1 and "1.500000 refused" in table.output
    report = json.loads(
        CliRunner()
        .invoke(main, ["verify", "test_first_hour:Greedy", "--stages", "a", "--examples", "30", "--json"])
        .output
    )
    row = report["results"][0] if "results" in report else report
    assert row["worst_was_refused"] is True and row["worst_window_over_epsilon"] == pytest.approx(1.5)
    honest = bc.verify_mechanism("BD", stages="a", examples=20)
    assert not honest.worst_refused and honest.worst_ratio <= 1


def test_publish_reads_one_format_writes_another_with_the_same_key_and_a_json_summary(tmp_path: Path) -> None:
    import json

    from click.testing import CliRunner

    from budgetcheck.cli import main

    args = [
        "publish",
        "Uniform",
        "--ledger",
        str(tmp_path / "l.db"),
        "--epsilon",
        "1",
        "--w",
        "3",
        "-d",
        "2",
        "--format",
        "csv",
        "--output-format",
        "jsonl",
        "--json",
        "--out",
        str(tmp_path / "o.jsonl"),
    ]
    result = CliRunner().invoke(main, args, input="1,3,4\n2,5,6\n")
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (tmp_path / "o.jsonl").read_text().splitlines()]
    assert [sorted(row) for row in rows] == [["counts", "t"]] * 2 and [row["t"] for row in rows] == [1, 2]
    summary = json.loads(result.stderr.strip().splitlines()[-1])
    assert summary["published"] == 2 and summary["replayed"] == 0 and len(summary["head"]) == 64
    again = CliRunner().invoke(
        main,
        [
            "publish",
            "Uniform",
            "--ledger",
            str(tmp_path / "l.db"),
            "--epsilon",
            "1",
            "--w",
            "3",
            "-d",
            "2",
            "--out",
            str(tmp_path / "o.jsonl"),
        ],
        input="3,1,1\n",
    )  # csv output now
    assert again.exit_code == 2 and "format" in again.output  # the file keeps the output format it was started with
    echoed = CliRunner().invoke(
        main,
        [
            "publish",
            "Uniform",
            "--ledger",
            str(tmp_path / "m.db"),
            "--epsilon",
            "1",
            "--w",
            "3",
            "-d",
            "2",
            "--format",
            "jsonl",
            "--out",
            str(tmp_path / "m.jsonl"),
        ],
        input="".join(json.dumps(row) + "\n" for row in [{"t": 1, "counts": [2, 2]}]),
    )
    assert (
        echoed.exit_code == 0 and json.loads((tmp_path / "m.jsonl").read_text())["counts"]
    )  # output readable as input
    assert "--output-format" in CliRunner().invoke(main, ["publish", "--help"]).output


def test_errors_name_the_public_class_and_swallowed_refusals_are_remembered() -> None:
    ledger = bc.WindowLedger(epsilon=1.0, w=3)
    with pytest.raises(
        TypeError, match=r"^WindowLedger\.spend\(\) missing 1 required keyword-only argument: 'purpose'"
    ):
        ledger.spend(1, 0.5)  # type: ignore[call-arg]
    ledger.spend(1, 0.75, purpose="a")
    with pytest.raises(bc.BudgetExceeded):
        ledger.spend(2, 0.5, purpose="b")
    assert ledger.refusals == 1 and ledger.worst_refused_ratio == pytest.approx(1.25)
