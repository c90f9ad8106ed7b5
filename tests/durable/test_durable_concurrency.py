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


def _posix_locks_held_here(path: Path) -> int:
    """How many POSIX locks this process holds on ``path`` (Linux's /proc/locks)."""
    import os

    inode, pid = path.stat().st_ino, str(os.getpid())
    with open("/proc/locks", encoding="ascii") as table:
        rows = [line.split() for line in table]
    return sum(1 for row in rows if pid in row and any(f.endswith(f":{inode}") and f.count(":") == 2 for f in row))


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="reads Linux's table of POSIX locks")
def test_opening_a_ledger_file_again_keeps_the_locks_of_the_one_already_open(tmp_path: Path) -> None:
    """Closing any descriptor of a file drops every POSIX lock the process holds on it. Opening a ledger file
    that this process already has open (a publisher and a library writer, two threads) must not read its header
    through a descriptor of its own: the first connection's shared lock would be gone, and another process
    closing its last connection could then checkpoint and delete the write-ahead log under it."""
    path = tmp_path / "l.db"
    first = bc.open_ledger(path, bc.WindowLedger(epsilon=1.0, w=3))
    first.spend(1, 0.25, purpose="p")
    held = _posix_locks_held_here(path)
    assert held >= 1
    second = bc.open_ledger(path, bc.WindowLedger(epsilon=1.0, w=3))
    second.close()  # SQLite itself keeps the descriptors of a file with locks held until the last one goes
    assert _posix_locks_held_here(path) == held
    first.spend(2, 0.25, purpose="p")
    assert first.remaining(3).tolist() == [0.5]
    first.close()
    foreign = tmp_path / "notes.db"
    foreign.write_text("hello, not a database: " * 8)
    with pytest.raises(bc.LedgerCorrupt, match="no SQLite header"):
        bc.open_ledger(foreign, bc.WindowLedger(epsilon=1.0, w=3))


@pytest.mark.parametrize("given", ["dir", "empty-path"])
def test_a_directory_named_as_a_ledger_file_is_a_usage_error(tmp_path: Path, given: str, monkeypatch: Any) -> None:
    """A directory (also Path(''), which is '.') is the wrong path, not a damaged ledger: InvalidArgument (exit 2)."""
    monkeypatch.chdir(tmp_path)
    target = tmp_path if given == "dir" else Path("")
    with pytest.raises(bc.InvalidArgument, match="is a directory"):
        bc.open_ledger(target, bc.WindowLedger(epsilon=1.0, w=3))
