"""Several writers on one ledger file: no interleaving lets them together exceed a window."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import budgetcheck as bc

PARAMS = bc.WEventParams(epsilon=1.0, w=10)


def writer(path: Path) -> bc.WindowLedger:
    return bc.open_ledger(path, bc.WindowLedger(PARAMS, sampler="numpy-laplace"), durability="process")


class _Interleaved:
    """A connection that runs ``hook`` right after a given statement (another writer commits in that gap)."""

    def __init__(self, db: sqlite3.Connection, statement: str, hook: Callable[[], None]) -> None:
        self._db, self._statement, self._hook = db, statement, hook

    @property
    def in_transaction(self) -> bool:
        return self._db.in_transaction

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        cursor = self._db.execute(sql, *args)
        if sql.strip().upper().startswith(self._statement):
            hook, self._hook = self._hook, lambda: None  # once
            hook()
        return cursor

    def close(self) -> None:
        self._db.close()


@pytest.mark.parametrize("gap", ["ROLLBACK", "COMMIT"])
def test_a_commit_in_the_gap_after_a_refusal_or_commit_is_applied_before_the_next_check(
    tmp_path: Path, gap: str
) -> None:
    """Writer B commits exactly when A's refused (or committed) transaction ends; A's next check must count it."""
    path = tmp_path / "l.db"
    a, b = writer(path), writer(path)
    a.spend(1, 0.5, purpose="a")
    journal = a.journal
    assert journal is not None
    journal.interpose(lambda db: _Interleaved(db, gap, lambda: b.spend(1, 0.4, purpose="b")))
    if gap == "ROLLBACK":
        with pytest.raises(bc.BudgetExceeded):
            a.spend(1, 0.6, purpose="refused")  # 0.5 + 0.6 > 1: refused; B commits 0.4 in the gap
    else:
        a.spend(1, 0.0, purpose="nothing")  # committed; B commits 0.4 in the gap after COMMIT
    with pytest.raises(bc.BudgetExceeded):
        a.spend(2, 0.5, purpose="a")  # 0.5 + 0.4 + 0.5 > 1
    left = a.remaining(2)
    assert 0.0999 < float(left[0]) <= 0.1
    a.spend(2, left, purpose="a")  # exactly what is left: never refused
    for ledger in (a, b):
        ledger.close()
    report = bc.audit_file(path)
    assert report.ok, report
    assert float(report.worst_ratio) <= 1.0
