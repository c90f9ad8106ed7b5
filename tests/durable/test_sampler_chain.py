"""The sampler a ledger file keeps is covered by its hash chain (files made before keep working)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import budgetcheck as bc
from budgetcheck.durable.journal import create


def _edit_sampler(path: Path, value: str) -> None:
    connection = sqlite3.connect(path)
    connection.execute("UPDATE meta SET value = ? WHERE key = 'sampler'", (value,))
    connection.commit()
    connection.close()


def test_an_edited_sampler_entry_is_damage_to_the_opener_and_the_audit(tmp_path: Path) -> None:
    """Changing the stored sampler breaks what the chain covers: LedgerCorrupt, and an audit problem."""
    path = tmp_path / "l.db"
    ledger = bc.open_ledger(path, bc.WindowLedger(epsilon=1.0, w=3))
    ledger.spend(1, 0.5, purpose="x")
    ledger.close()
    _edit_sampler(path, "numpy-laplace")
    for sampler in ("discrete-laplace", "numpy-laplace"):
        with pytest.raises(bc.LedgerCorrupt, match="the sampler entry 'numpy-laplace' is not the sampler"):
            bc.open_ledger(path, bc.WindowLedger(epsilon=1.0, w=3, sampler=sampler))
    audit = bc.audit_file(path)
    assert audit.problem is not None and "sampler" in audit.problem


def test_another_sampler_on_an_untouched_file_is_named_not_called_damage(tmp_path: Path) -> None:
    path = tmp_path / "l.db"
    bc.open_ledger(path, bc.WindowLedger(epsilon=1.0, w=3)).close()
    with pytest.raises(bc.InvalidArgument, match="sampler='discrete-laplace', not sampler='numpy-laplace'"):
        bc.open_ledger(path, bc.WindowLedger(epsilon=1.0, w=3, sampler="numpy-laplace"))
    assert bc.audit_file(path).ok


def test_a_file_made_before_the_sampler_was_chained_still_opens_and_audits(tmp_path: Path) -> None:
    """A file whose H_0 hashes the bare header (no sampler) loads, charges, audits and keeps its sampler."""
    path = tmp_path / "old.db"
    create(path, bc.WindowLedger(epsilon=1.0, w=3).header())  # the earlier layout: no sampler in the header
    ledger = bc.open_ledger(path, bc.WindowLedger(epsilon=1.0, w=3))
    ledger.spend(1, 0.5, purpose="x")
    ledger.close()
    reopened = bc.open_ledger(path, bc.WindowLedger(epsilon=1.0, w=3))
    assert reopened.remaining(1)[0] == 0.5
    reopened.close()
    assert bc.audit_file(path).ok
    with pytest.raises(bc.InvalidArgument, match="written with sampler discrete-laplace, not numpy-laplace"):
        bc.open_ledger(path, bc.WindowLedger(epsilon=1.0, w=3, sampler="numpy-laplace"))


def test_another_sqlite_database_is_not_a_ledger_file(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    connection = sqlite3.connect(path)
    connection.execute("CREATE TABLE things (a)")
    connection.commit()
    connection.close()
    with pytest.raises(bc.LedgerCorrupt, match="not a budgetcheck ledger file"):
        bc.open_ledger(path, bc.WindowLedger(epsilon=1.0, w=3))
    with pytest.raises(bc.LedgerCorrupt, match="not a budgetcheck ledger file"):
        bc.audit_file(path)
