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


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"epsilon": 1.0}, "give epsilon and w"),
    ({}, "give epsilon and w"),
    ({"params": bc.WEventParams(1.0, 2), "w": 3}, "not both"),
    ({"epsilon": 0.0, "w": 3}, "epsilon=0.0"),
    ({"epsilon": 1.0, "w": 0}, "w=0"),
])
def test_keyword_parameters_are_checked(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(bc.InvalidArgument, match=message):
        bc.WindowLedger(**kwargs)  # type: ignore[arg-type]


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
    try:
        journal._db.execute("SELECT 1")
    except sqlite3.ProgrammingError:  # "Cannot operate on a closed database."
        return True
    return False


def test_python_dash_m_runs_the_command() -> None:
    result = subprocess.run([sys.executable, "-m", "budgetcheck", "mechanisms"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "BD" in result.stdout


@pytest.mark.parametrize("amount", ["0.1", b"0.1", None, True, np.array(["0.1"]), [0.1, "0.2"], [None], [True, 0.1],
                                    {"epsilon": 0.1}, 1 + 0j])
def test_amounts_that_are_not_numbers_are_refused_and_change_nothing(amount: object) -> None:
    ledger = bc.WindowLedger(epsilon=1.0, w=3, sampler="numpy-laplace")
    with pytest.raises(bc.InvalidArgument, match="epsilon"):
        ledger.spend(1, amount, purpose="x")  # type: ignore[arg-type]
    assert ledger.t == 0 and float(ledger.remaining(1)[0]) == 1.0


@pytest.mark.parametrize("amount", [0.1, Fraction(1, 10), np.float32(0.25), np.int64(0), [0.1], np.array([0.5])])
def test_numbers_of_every_kind_are_accepted(amount: object) -> None:
    ledger = bc.WindowLedger(epsilon=1.0, w=3, sampler="numpy-laplace")
    ledger.spend(1, amount, purpose="x")  # type: ignore[arg-type]
    assert ledger.t == 1
