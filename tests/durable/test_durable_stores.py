"""Both ledger stores (an SQLite file, a PostgreSQL ledger) give the same guarantees, tried from outside:
persistence, atomic refusals, tamper evidence, serialised writers, lock timeouts, killed writers, the
publisher and the audit; a chain copied from one store to the other ends at the same head."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

import budgetcheck as bc
from budgetcheck.cli import main
from budgetcheck.durable.campaign import run_campaign
from budgetcheck.durable.journal import ROW_COLUMNS, is_url, open_store
from budgetcheck.durable.postgres import redact, with_ledger
from budgetcheck.durable.transaction import store_release

PARAMS = bc.WEventParams(epsilon=1.0, w=4)


def writer(target: str, **kwargs: Any) -> bc.WindowLedger:
    return bc.open_ledger(
        target, bc.WindowLedger(PARAMS, sampler="numpy-laplace", keep_records=True), durability="process", **kwargs
    )


def tamper(target: str, *statements: str) -> None:
    """Run raw statements on the store as a forger would (autocommit)."""
    db = open_store(target)
    try:
        for sql in statements:
            with db.guard("tamper"):  # the driver's error as LedgerCorrupt, on either store
                db.execute(sql)
    finally:
        db.close()


def drop_guards(target: str) -> list[str]:
    if is_url(target):
        return ["DROP TRIGGER records_no_update ON records"]
    return ["DROP TRIGGER records_no_update", "DROP TRIGGER records_no_delete"]


def test_spends_survive_a_reopen(store: str) -> None:
    ledger = writer(store)
    data = bc.GuardedStream(np.arange(6.0).reshape(6, 1))
    ledger.bind(data)
    outputs = [ledger.laplace(secret, 0.2) for secret in list(data)[:4]]
    ledger.close()
    again = writer(store)
    assert again.t == 4
    assert [r.t for r in again.records] == [1, 2, 3, 4]
    assert float(again.remaining(4)[0]) == pytest.approx(0.2)
    assert float(again.remaining(5)[0]) == pytest.approx(0.4)
    with pytest.raises(bc.BudgetExceeded):
        again.spend(4, 0.3, purpose="over")  # 0.8 + 0.3 > 1 in the window ending at 4
    again.close()
    report = bc.audit_file(store)
    assert report.ok and report.records == 4, report
    assert len(outputs) == 4
    if is_url(store):
        assert report.path == redact(store)


def test_a_refused_spend_changes_nothing(store: str) -> None:
    ledger = writer(store)
    ledger.spend(1, 0.9, purpose="a")
    journal = ledger.journal
    assert journal is not None
    head = journal.head()
    with pytest.raises(bc.BudgetExceeded):
        ledger.spend(2, 0.2, purpose="refused")
    assert journal.head() == head
    assert [r.purpose for r in ledger.records] == ["a"]
    ledger.spend(2, ledger.remaining(2), purpose="fits")  # exactly what is left: the refusal left nothing behind
    ledger.close()
    assert bc.audit_file(store).ok


@pytest.mark.parametrize("attack", ["edit", "delete-tail", "head", "edit-head-too"])
def test_the_audit_finds_tampering_even_with_the_triggers_dropped(store: str, attack: str) -> None:
    ledger = writer(store)
    for t in range(1, 5):
        ledger.spend(t, 0.2, purpose=f"s{t}")
    journal = ledger.journal
    assert journal is not None
    count, head = journal.head()
    ledger.close()
    with pytest.raises(bc.LedgerCorrupt, match="append-only"):  # the triggers refuse it first
        tamper(store, "UPDATE records SET detail = 'x' WHERE seq = 2")
    with pytest.raises(bc.LedgerCorrupt, match="append-only"):
        tamper(store, "DELETE FROM records WHERE seq = 4")
    assert bc.audit_file(store).ok
    forged = {
        "edit": ["UPDATE records SET t = 3 WHERE seq = 2"],
        "delete-tail": ["DELETE FROM records WHERE seq = 4"],
        "head": ["UPDATE head SET count = 3"],
        "edit-head-too": [
            "UPDATE records SET t = 3 WHERE seq = 4",
            "UPDATE head SET hash = (SELECT hash FROM records WHERE seq = 3)",
        ],
    }[attack]
    if attack == "delete-tail" and is_url(store):
        forged = ["ALTER TABLE records DISABLE TRIGGER USER", *forged]
    elif attack == "delete-tail":
        forged = ["DROP TRIGGER records_no_delete", *forged]
    tamper(store, *(drop_guards(store) if attack != "delete-tail" else []), *forged)
    report = bc.audit_file(store)
    assert not report.ok and report.problem is not None, report
    anchored = bc.audit_file(store, expect_head=head)
    assert not anchored.ok
    with pytest.raises(bc.LedgerCorrupt):
        writer(store)  # opening verifies the whole chain
    assert count == 4


def test_a_commit_in_the_gap_after_a_refusal_is_applied_before_the_next_check(store: str) -> None:
    """Writer B commits exactly when A's refused transaction has ended; A's next check must count it."""
    a, b = writer(store), writer(store)
    a.spend(1, 0.5, purpose="a")
    journal = a.journal
    assert journal is not None
    journal.interpose(lambda db: _Interleaved(db, "ROLLBACK", lambda: b.spend(1, 0.4, purpose="b")))
    with pytest.raises(bc.BudgetExceeded):
        a.spend(1, 0.6, purpose="refused")  # 0.5 + 0.6 > 1: refused; B commits 0.4 in the gap
    with pytest.raises(bc.BudgetExceeded):
        a.spend(2, 0.5, purpose="a")  # 0.5 + 0.4 + 0.5 > 1
    left = a.remaining(2)
    assert 0.0999 < float(left[0]) <= 0.1
    a.spend(2, left, purpose="a")
    for ledger in (a, b):
        ledger.close()
    report = bc.audit_file(store)
    assert report.ok and report.worst_ratio <= 1, report


class _Interleaved:
    """A store connection that runs ``hook`` once, right after a given statement."""

    def __init__(self, db: Any, statement: str, hook: Callable[[], None]) -> None:
        self._db, self._statement, self._hook = db, statement, hook

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)

    def execute(self, sql: Any, *args: Any) -> Any:
        cursor = self._db.execute(sql, *args)
        if str(sql).strip().upper().startswith(self._statement):
            hook, self._hook = self._hook, lambda: None
            hook()
        return cursor


@pytest.mark.parametrize("writers", [2, 4])
def test_processes_spending_on_the_newest_timestamp_never_exceed_a_window(pg_server: str, writers: int) -> None:
    result = run_campaign(
        pg_server, writers=writers, durability="process", runs=1, spends=25, params=PARAMS, seed=writers
    )
    assert result.errors == ()
    assert result.failed_audits == 0 and result.worst_ratio <= 1, result
    assert result.lost == 0 and result.phantom == 0, result
    assert result.accepted > 0 and result.refused > 0, "the writers must collide on full windows"


def test_a_held_lock_gives_ledger_busy_and_charges_nothing(store: str) -> None:
    ledger = writer(store, lock_timeout=0.3)
    ledger.spend(1, 0.25, purpose="before")
    holder = open_store(store)
    holder.begin_write()
    try:
        started = time.monotonic()
        with pytest.raises(bc.LedgerBusy, match="lock"):
            ledger.spend(2, 0.25, purpose="waits")
        assert time.monotonic() - started < 10
    finally:
        holder.rollback()
        holder.close()
    ledger.spend(2, 0.25, purpose="after")
    assert [r.purpose for r in ledger.records] == ["before", "after"]
    ledger.close()
    assert bc.audit_file(store).records == 2


_KILLED_WRITER = """
import sys, budgetcheck as bc
ledger = bc.open_ledger(sys.argv[1], bc.WindowLedger(bc.WEventParams(epsilon=1.0, w=4), sampler="numpy-laplace"),
                        durability="process")
for t in range(1, 100000):
    ledger.spend(t, 0.25, purpose="k")
    print(t, flush=True)
"""


def test_a_writer_killed_mid_stream_loses_no_commit_and_a_restart_continues(store: str) -> None:
    writer(store).close()  # create it here (not in the killed process)
    process = subprocess.Popen([sys.executable, "-c", _KILLED_WRITER, store], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    told = [int(process.stdout.readline()) for _ in range(20)]  # each line is printed after its commit
    process.send_signal(signal.SIGKILL)
    process.wait()
    process.stdout.close()
    again = writer(store)
    assert [r.t for r in again.records][:20] == told
    t = again.t + 1
    again.spend(t, 0.25, purpose="restart")
    again.close()
    report = bc.audit_file(store)
    assert report.ok and report.records == t, report


def test_publish_and_audit_on_the_command_line_with_a_restart(store: str, tmp_path: Path) -> None:
    args = [
        "publish",
        "BD",
        "--ledger",
        store,
        "--epsilon",
        "1",
        "--w",
        "4",
        "-d",
        "2",
        "--durability",
        "process",
        "--out",
        str(tmp_path / "out.csv"),
    ]
    first = CliRunner().invoke(main, args, input="1,3,4\n2,5,6\n")
    assert first.exit_code == 0, first.output
    again = CliRunner().invoke(main, args, input="1,3,4\n2,5,6\n3,1,1\n4,2,2\n")
    assert again.exit_code == 0, again.output
    lines = (tmp_path / "out.csv").read_text().splitlines()
    assert [line.split(",")[0] for line in lines] == ["1", "2", "3", "4"]  # each once across the restart
    audit = CliRunner().invoke(main, ["audit", store, "--json"])
    assert audit.exit_code == 0, audit.output
    assert '"ok": true' in audit.output
    tamper(store, *drop_guards(store), "UPDATE records SET output = NULL WHERE kind = 1 AND t = 2")
    broken = CliRunner().invoke(main, ["audit", store])
    assert broken.exit_code == 4, broken.output
    assert "BROKEN" in broken.output


def test_a_chain_copied_to_postgres_row_by_row_ends_at_the_same_head(tmp_path: Path, pg_server: str) -> None:
    source = str(tmp_path / "l.db")
    ledger = writer(source)
    data = bc.GuardedStream(np.arange(5.0).reshape(5, 1))
    ledger.bind(data)
    for secret in data:
        ledger.laplace(secret, 0.2)
    store_release(ledger, 5, np.array([1.5]))
    ledger.close()
    target = with_ledger(pg_server, f"copy_{uuid.uuid4().hex[:12]}")
    writer(target).close()  # the same header and genesis
    src, dst = open_store(source), open_store(target)
    try:
        rows = src.execute(f"SELECT {ROW_COLUMNS} FROM records ORDER BY seq").fetchall()
        dst.begin_write()
        for row in rows:
            dst.execute(f"INSERT INTO records ({ROW_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", row)
        dst.commit()
    finally:
        src.close()
        dst.close()
    a, b = bc.audit_file(source), bc.audit_file(target)
    assert a.ok and b.ok, (a, b)
    assert (a.records, a.head) == (b.records, b.head) and a.records == 6


def test_hosts_creating_one_postgres_ledger_at_once_all_open_it(pg_server: str) -> None:
    target = with_ledger(pg_server, f"race_{uuid.uuid4().hex[:12]}")
    errors: list[BaseException] = []
    barrier = threading.Barrier(6)

    def create() -> None:
        try:
            barrier.wait()
            writer(target).close()
        except BaseException as exc:  # noqa: BLE001 — reported below
            errors.append(exc)

    threads = [threading.Thread(target=create) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    ledger = writer(target)
    journal = ledger.journal
    assert journal is not None and journal.session == 7  # one ledger, opened seven times
    ledger.close()


def test_an_unreachable_server_names_the_url_without_its_password(tmp_path: Path) -> None:
    url = f"postgresql://alice:s3cret@/db?host={tmp_path}&port=1&ledger=x"
    with pytest.raises(bc.LedgerUnavailable) as caught:
        writer(url)
    assert "s3cret" not in str(caught.value) and "alice" in str(caught.value)
    result = CliRunner().invoke(main, ["audit", url])
    assert result.exit_code == 5 and "s3cret" not in result.output, result.output


@pytest.mark.parametrize("name", ["Upper", "1x", "a-b", "x" * 64, ""])
def test_a_bad_ledger_name_is_refused_by_name(pg_server: str, name: str) -> None:
    with pytest.raises(bc.InvalidArgument, match="ledger="):
        writer(with_ledger(pg_server, name))


def test_auditing_a_missing_postgres_ledger_creates_nothing(pg_server: str) -> None:
    target = with_ledger(pg_server, f"missing_{uuid.uuid4().hex[:12]}")
    with pytest.raises(bc.LedgerCorrupt, match="holds no budgetcheck ledger"):
        bc.audit_file(target)
    with pytest.raises(bc.LedgerCorrupt, match="holds no budgetcheck ledger"):
        bc.audit_file(target)


def test_a_retried_operation_is_charged_once_and_returns_the_first_output(store: str) -> None:
    """A client times out, does not know whether its call committed, and sends it again with the same id
    (here from another process's connection, as a retry on another host would)."""
    first = writer(store)
    data = bc.GuardedStream(np.array([[3.0], [4.0], [5.0]]))
    first.bind(data)
    secrets = list(data)
    with first.idempotent("req-1"):
        out = first.laplace(secrets[0], 0.4, purpose="count")
    retry_host = writer(store)
    retry_data = bc.GuardedStream(np.array([[3.0], [4.0], [5.0]]))
    retry_host.bind(retry_data)
    retried_secret = list(retry_data)[0]
    for ledger, secret in ((first, secrets[0]), (retry_host, retried_secret), (retry_host, retried_secret)):
        with ledger.idempotent("req-1"):
            again = ledger.laplace(secret, 0.4, purpose="count")
        np.testing.assert_array_equal(again, out)
    with retry_host.idempotent("req-2"):
        assert retry_host.spend(1, 0.1, purpose="reserve") is None
    with first.idempotent("req-2"):
        assert first.spend(1, 0.1, purpose="reserve") is None  # stored: not charged twice
    assert [(r.t, r.purpose) for r in retry_host.records] == [(1, "count"), (1, "reserve")]
    assert float(first.remaining(1)[0]) == pytest.approx(0.5) and float(retry_host.remaining(1)[0]) == pytest.approx(
        0.5
    )
    for ledger in (first, retry_host):
        ledger.close()
    report = bc.audit_file(store)
    assert report.ok and report.records == 2, report


@pytest.mark.parametrize("other", ["method", "amount", "purpose", "timestamp"])
def test_an_id_reused_for_another_operation_is_refused_and_charges_nothing(store: str, other: str) -> None:
    ledger = writer(store)
    data = bc.GuardedStream(np.array([[3.0], [4.0]]))
    ledger.bind(data)
    secrets = list(data)
    with ledger.idempotent("req-1"):
        ledger.laplace(secrets[0], 0.4, purpose="count")
    journal = ledger.journal
    assert journal is not None
    head = journal.head()
    call: Callable[[], object] = {
        "method": lambda: ledger.spend(1, 0.4, purpose="count"),
        "amount": lambda: ledger.laplace(secrets[0], 0.3, purpose="count"),
        "purpose": lambda: ledger.laplace(secrets[0], 0.4, purpose="other"),
        "timestamp": lambda: ledger.laplace(secrets[1], 0.4, purpose="count"),
    }[other]
    with pytest.raises(bc.InvalidArgument, match="operation_id='req-1' is stored for another call"):
        with ledger.idempotent("req-1"):
            call()
    assert journal.head() == head
    assert float(ledger.remaining(2)[0]) == pytest.approx(0.6)
    ledger.close()


def test_idempotent_blocks_are_checked(store: str, tmp_path: Path) -> None:
    with pytest.raises(bc.InvalidArgument, match="needs a ledger kept in a store"):
        with bc.WindowLedger(PARAMS).idempotent("x"):
            pass
    ledger = writer(store)
    for bad in ("", "x" * 257, 7):
        with pytest.raises(bc.InvalidArgument, match="operation_id="):
            with ledger.idempotent(bad):  # type: ignore[arg-type]
                pass
    with ledger.idempotent("one"):
        ledger.spend(1, 0.1, purpose="a")
        with pytest.raises(bc.InvalidArgument, match="one id, one operation"):
            ledger.spend(1, 0.1, purpose="b")
        with pytest.raises(bc.InvalidArgument, match="one id names one operation"):
            with ledger.idempotent("two"):
                pass
    assert [r.purpose for r in ledger.records] == ["a"]
    ledger.close()


def test_the_unique_index_refuses_a_forged_second_use_of_an_id(store: str) -> None:
    """The store itself, not only the ledger's look-up, keeps an id to one operation."""
    ledger = writer(store)
    with ledger.idempotent("req-1"):
        ledger.spend(1, 0.1, purpose="a")
    journal = ledger.journal
    assert journal is not None
    from budgetcheck.ledger.records import SpendRecord

    record = SpendRecord(t=1, purpose="forged", amounts=np.array([0.1]))
    journal.begin()
    with pytest.raises(bc.InvalidArgument, match="already stored"):
        journal.append([record], None, operation={"operation": "req-1", "call": "0" * 64})
    journal.rollback()
    ledger.close()
    assert bc.audit_file(store).records == 1
