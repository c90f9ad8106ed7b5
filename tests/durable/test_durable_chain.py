"""One consistent chain: releases are in it, opening verifies all of it, the audit reads one
snapshot, any earlier head anchors the file, and an empty or damaged file is never a fresh ledger."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import budgetcheck as bc
from budgetcheck.cli import main
from budgetcheck.durable.transaction import store_release

PARAMS = bc.WEventParams(epsilon=1.0, w=3)


def fresh(path: Path) -> bc.WindowLedger:
    return bc.open_ledger(
        path, bc.WindowLedger(PARAMS, sampler="numpy-laplace", keep_records=True), durability="process"
    )


def forge(path: Path, sql: str, *args: object) -> None:
    """Tamper as someone who knows the format would: drop the append-only guards, then edit."""
    db = sqlite3.connect(path)
    db.execute("DROP TRIGGER IF EXISTS records_no_update")
    db.execute("DROP TRIGGER IF EXISTS records_no_delete")
    db.execute(sql, args)
    db.commit()
    db.close()


def spent(path: Path, n: int, amount: float = 0.25) -> list[str]:
    """n spends of ``amount``; the head after each."""
    ledger = fresh(path)
    heads = []
    for t in range(1, n + 1):
        ledger.spend(t, amount, purpose=f"spend {t}")
        assert ledger.journal is not None
        heads.append(ledger.journal.head()[1])
    ledger.close()
    return heads


def published(tmp_path: Path, rows: int = 6) -> tuple[Path, Path]:
    ledger, out = tmp_path / "l.db", tmp_path / "out.csv"
    source = tmp_path / "in.csv"
    source.write_text("".join(f"{t},{t % 4},{2 * t}\n" for t in range(1, rows + 1)))
    result = CliRunner().invoke(
        main,
        [
            "publish",
            "Uniform",
            "--ledger",
            str(ledger),
            "--epsilon",
            "1",
            "--w",
            "3",
            "-d",
            "2",
            "--input",
            str(source),
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    return ledger, out


def test_an_edited_release_breaks_the_chain_and_a_restart_writes_nothing(tmp_path: Path) -> None:
    """The stored releases are in the hash chain: an edit fails the audit (also with the anchor)
    and a restarted publisher refuses before it writes the edited value out."""
    ledger, out = published(tmp_path)
    anchor = bc.audit_file(ledger).head
    db = sqlite3.connect(ledger)
    seq, blob = db.execute("SELECT seq, output FROM records WHERE kind = 1 AND t = 4").fetchone()
    db.close()
    values = np.frombuffer(blob[24:], dtype="<f8").copy()
    values[0] += 100.0  # someone "corrects" a published value
    forge(ledger, "UPDATE records SET output = ? WHERE seq = ?", blob[:24] + values.astype("<f8").tobytes(), seq)
    for report in (bc.audit_file(ledger), bc.audit_file(ledger, expect_head=anchor)):
        assert not report.ok and report.problem is not None and f"record {seq}" in report.problem
    out.write_text("".join(out.read_text().splitlines(keepends=True)[:2]))  # the consumer lost the tail
    before = out.read_text()
    result = CliRunner().invoke(
        main,
        [
            "publish",
            "Uniform",
            "--ledger",
            str(ledger),
            "--epsilon",
            "1",
            "--w",
            "3",
            "-d",
            "2",
            "--input",
            str(tmp_path / "in.csv"),
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 4, result.output
    assert f"record {seq}" in result.output and "Traceback" not in result.output
    assert out.read_text() == before  # nothing, in particular not the edited value, was written


def test_a_release_is_stored_once_per_timestamp(tmp_path: Path) -> None:
    ledger = fresh(tmp_path / "l.db")
    store_release(ledger, 1, np.array([1.0, 2.0]))
    with pytest.raises(bc.LedgerCorrupt, match="timestamp 1 was already published"):
        store_release(ledger, 1, np.array([3.0, 4.0]))
    ledger.spend(1, 0.5, purpose="after a refused release")  # the ledger is still usable
    assert ledger.journal is not None and [t for t, _ in ledger.journal.releases()] == [1]
    ledger.close()
    assert bc.audit_file(tmp_path / "l.db").ok


def test_opening_verifies_the_whole_chain_not_only_the_last_windows(tmp_path: Path) -> None:
    """A record edited far before the last 2w timestamps is found when the file is opened, not
    only when someone audits it."""
    path = tmp_path / "l.db"
    spent(path, 40)
    forge(path, "UPDATE records SET amounts = ? WHERE seq = 2", np.array([0.0]).tobytes())
    with pytest.raises(bc.LedgerCorrupt, match="record 2: its hash does not match"):
        fresh(path)


def test_any_earlier_head_anchors_a_file_that_only_grew(tmp_path: Path) -> None:
    path = tmp_path / "l.db"
    heads = spent(path, 8)
    assert bc.audit_file(path).head == heads[-1]
    more = fresh(path)
    more.spend(9, 0.25, purpose="later")
    more.close()
    for anchor in (heads[0], heads[3], heads[-1], heads[-1].upper()):
        assert bc.audit_file(path, expect_head=anchor).ok, anchor
    # a head that is not on this file's chain (another file's, or one rewritten) does not vouch for it
    other = tmp_path / "other.db"
    other_heads = spent(other, 8, amount=0.2)
    report = bc.audit_file(path, expect_head=other_heads[2])
    assert not report.ok and "does not extend the expected head" in str(report.problem)
    # a forger who rewrites an early record and re-chains every later one: the old anchor catches it
    rewritten = tmp_path / "rewritten.db"
    rewrite_from(path, rewritten, seq=2)
    assert bc.audit_file(rewritten).ok  # consistent in itself ...
    assert not bc.audit_file(rewritten, expect_head=heads[3]).ok  # ... but not an extension of what was anchored
    assert bc.audit_file(rewritten, expect_head=heads[0]).ok  # the prefix before the edit is unchanged
    with pytest.raises(bc.InvalidArgument, match="expect_head"):
        bc.audit_file(path, expect_head="not-hex")


def rewrite_from(source: Path, target: Path, *, seq: int) -> None:
    """Copy the file, change record ``seq``'s amount, and recompute the chain and head from there."""
    from budgetcheck.durable.journal import RECORD_VERSION, row_hash

    target.write_bytes(source.read_bytes())
    db = sqlite3.connect(target)
    db.execute("DROP TRIGGER records_no_update")
    rows = db.execute("SELECT seq, version, kind, op, t, amounts, detail, output FROM records ORDER BY seq").fetchall()
    (previous,) = db.execute("SELECT hash FROM records WHERE seq = ?", (seq - 1,)).fetchone()
    for number, version, kind, op, t, amounts, detail, output in rows[seq - 1 :]:
        if number == seq:
            amounts = np.array([0.0]).tobytes()
        assert version == RECORD_VERSION
        previous = row_hash(previous, version, kind, number, op, t, amounts, detail.encode(), output)
        db.execute("UPDATE records SET amounts = ?, hash = ? WHERE seq = ?", (amounts, previous, number))
    db.execute("UPDATE head SET hash = ? WHERE id = 1", (previous,))
    db.commit()
    db.close()


def test_the_audit_reads_one_snapshot_while_a_publisher_writes(tmp_path: Path) -> None:
    """Audits racing a writer never report removed records: head and rows come from one snapshot."""
    path = tmp_path / "l.db"
    writer = fresh(path)
    stop, started = threading.Event(), threading.Event()

    def write() -> None:
        t = 1
        while not stop.is_set():
            writer.spend(t, 0.1, purpose="live")
            store_release(writer, t, np.array([float(t)]))
            started.set()
            t += 1

    thread = threading.Thread(target=write)
    thread.start()
    try:
        assert started.wait(30)
        reports = [bc.audit_file(path) for _ in range(40)]
        while len({report.records for report in reports}) < 2 and len(reports) < 2000:  # a loaded machine
            reports.append(bc.audit_file(path))
    finally:
        stop.set()
        thread.join()
    writer.close()
    assert all(report.ok for report in reports), [r.problem for r in reports if not r.ok]
    assert len({report.records for report in reports}) > 1  # the writer did move on between audits


@pytest.mark.parametrize("damage", ["empty", "header", "page-size", "truncated"])
def test_an_empty_or_damaged_file_is_corrupt_never_a_fresh_ledger(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "l.db"
    spent(path, 30)
    data = bytearray(path.read_bytes())
    if damage == "empty":
        data = bytearray()
    elif damage == "header":
        data[16:24] = b"\xff" * 8  # page size, format versions: the SQLite header is damaged
    elif damage == "page-size":
        data[16:18] = b"\x00\x03"
    else:
        data = data[:1500]
    path.write_bytes(bytes(data))
    for leftover in path.parent.glob("l.db-*"):
        leftover.unlink()
    with pytest.raises(bc.LedgerCorrupt):
        fresh(path)
    assert path.read_bytes() == bytes(data)  # nothing was made over it
    for command in (
        ["audit", str(path)],
        ["publish", "Uniform", "--ledger", str(path), "--epsilon", "1", "--w", "3", "--input", "-"],
    ):
        result = subprocess.run(
            [sys.executable, "-c", "from budgetcheck.cli import main; main()", *command],
            input="1,3\n",
            capture_output=True,
            text=True,
            timeout=120,
        )
        # an empty file is no JSON-lines export either (an export always has its header line): audit reads it
        # as the ledger file it may have been, damaged (exit 4), as open_ledger does
        assert result.returncode == 4, (command, result.returncode, result.stderr)
        assert "Traceback" not in result.stderr and str(path) in result.stderr
        assert result.stdout == ""  # stdout mode published nothing
    assert path.read_bytes() == bytes(data)


def _create(path: str) -> None:
    bc.open_ledger(path, bc.WindowLedger(PARAMS, sampler="numpy-laplace", keep_records=True)).close()


def test_processes_creating_one_new_file_at_once_all_open_it(tmp_path: Path) -> None:
    """A new file appears whole: no creator sees a half-made (empty) file and calls it corrupt."""
    import multiprocessing

    path = str(tmp_path / "new.db")
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=_create, args=(path,)) for _ in range(6)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    assert [worker.exitcode for worker in workers] == [0] * 6
    assert bc.audit_file(path).ok
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("new.db")) == []
