"""An outside attack on the shared PostgreSQL ledger and on idempotent operations.

Written from the README's promises and the public docstrings only (durable ledgers, the shared
PostgreSQL ledger, ``idempotent``, ``budgetcheck audit``): several forked writers on one ledger
(Kellaris et al. 2014, Theorem 3: every window of w timestamps sums to at most ε, exactly),
SIGKILLed writers, a server restart, retried operations, tampering by someone holding the
database's own credentials, and hostile ledger names.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
import warnings
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import budgetcheck as bc

psycopg = pytest.importorskip("psycopg")

FORK = multiprocessing.get_context("fork")
EPSILON = 1.0
W = 4
TINY = 2.0**-1000  # tiny (the discrete sampler refuses budgets below ~2^-1023: their scale is past the doubles)


@pytest.fixture(scope="session")
def pg_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A PostgreSQL server for the session (the dev extra's pgserver), as a URL."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns that XDG_RUNTIME_DIR is unset
        import pgserver

        server = pgserver.get_server(tmp_path_factory.mktemp("pg-adversary"), cleanup_mode="stop")
        url = str(server.get_uri())
    yield url


def ledger_url(base: str, name: str) -> str:
    return base + ("&" if "?" in base else "?") + "ledger=" + name


def fresh_name() -> str:
    return "adv_" + uuid.uuid4().hex[:12]


@pytest.fixture
def url(pg_server: str) -> str:
    """A new, unused ledger on the shared server."""
    return ledger_url(pg_server, fresh_name())


def open_writer(target: str, **kwargs: Any) -> bc.WindowLedger:
    kwargs.setdefault("durability", "process")
    return bc.open_ledger(target, bc.WindowLedger(epsilon=EPSILON, w=W), **kwargs)


def stream(value: float = 5.0, length: int = 64, d: int = 2) -> bc.GuardedStream:
    return bc.GuardedStream(np.full((length, d), value))


def sql(base: str, *statements: str) -> list[Any]:
    """Run statements as the ledger's own database user, in autocommit; the last one's rows."""
    rows: list[Any] = []
    with psycopg.connect(base, autocommit=True) as db:
        for statement in statements:
            cursor = db.execute(statement)
            rows = cursor.fetchall() if cursor.description else []
    return rows


def schemas(base: str) -> set[str]:
    return {row[0] for row in sql(base, "SELECT nspname FROM pg_namespace")}


def tables_in(base: str, schema: str) -> set[str]:
    rows = sql(base, f"SELECT tablename FROM pg_tables WHERE schemaname = '{schema}'")
    return {row[0] for row in rows}


def cli_audit(target: str, *extra: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.run(
        [sys.executable, "-m", "budgetcheck", "audit", target, *extra],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        timeout=120,
    )


def exact_window_check(records: tuple[bc.SpendRecord, ...]) -> Fraction:
    """Brute force, independent of the ledger: the largest window sum / ε over every window."""
    per_t: dict[int, Fraction] = {}
    for record in records:
        per_t[record.t] = per_t.get(record.t, Fraction(0)) + Fraction(float(np.max(record.amounts)))
    worst = Fraction(0)
    for start in range(min(per_t, default=1) - W + 1, max(per_t, default=0) + 1):
        total = sum((per_t.get(t, Fraction(0)) for t in range(start, start + W)), Fraction(0))
        worst = max(worst, total / Fraction(EPSILON))
    return worst


def head_hash(target: str) -> str:
    audit = bc.audit_file(target)
    assert audit.ok, audit.problem
    return audit.head


# --- several processes on one ledger ---------------------------------------------------------


def racer(target: str, index: int, writers: int, barrier: Any, results: Any) -> None:
    """One writer: in each round all writers spend at the same timestamp at once."""
    try:
        ledger = open_writer(target, lock_timeout=60.0)
        s = stream()
        ledger.bind(s)
        outcome: list[tuple[str, int, bool]] = []

        def attempt(kind: str, t: int, amount: float) -> None:
            try:
                ledger.laplace(s.secret(t), amount)
                outcome.append((kind, t, True))
            except bc.BudgetExceeded:
                outcome.append((kind, t, False))

        share = EPSILON / writers  # a power of two: the shares land exactly at ε
        for t in (1, 1 + W):  # windows that do not overlap
            barrier.wait(120)
            attempt("exact", t, share)
            barrier.wait(120)
            attempt("tiny", t, TINY)
        for t in (1 + 2 * W, 1 + 3 * W):
            barrier.wait(120)  # one writer asks for one ulp more than its share: exactly one is refused
            attempt("ulp", t, float(np.nextafter(share, 1.0)) if index == 0 else share)
        t = 1 + 4 * W
        barrier.wait(120)  # timestamps are shared: nobody moves on before every writer is done
        if index == 0:
            ledger.laplace(s.secret(t), 0.3)
        barrier.wait(120)
        remaining = float(ledger.remaining(t)[0])  # every writer reads the same remainder
        barrier.wait(120)
        attempt("remaining", t, remaining)
        ledger.close()
        results.put((index, outcome, remaining))
    except BaseException as error:  # noqa: BLE001 - reported to the parent
        results.put((index, repr(error), None))


@pytest.mark.parametrize("writers", [2, 4])
def test_writers_colliding_at_epsilon_lose_nothing_and_never_exceed_it(url: str, writers: int) -> None:
    open_writer(url).close()
    barrier = FORK.Barrier(writers)
    results = FORK.Queue()
    processes = [FORK.Process(target=racer, args=(url, i, writers, barrier, results)) for i in range(writers)]
    for process in processes:
        process.start()
    reports = [results.get(timeout=180) for _ in processes]
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0
    outcomes = {index: outcome for index, outcome, _ in reports}
    assert all(isinstance(outcome, list) for outcome in outcomes.values()), outcomes
    flat = [entry for outcome in outcomes.values() for entry in outcome]
    # every share lands: the sum is exactly ε and nobody was refused for rounding
    assert all(ok for kind, _, ok in flat if kind == "exact")
    # a full window refuses even the smallest positive double, from every writer
    assert not any(ok for kind, _, ok in flat if kind == "tiny")
    for t in (1 + 2 * W, 1 + 3 * W):
        assert sum(not ok for kind, when, ok in flat if kind == "ulp" and when == t) == 1
    wins = [ok for kind, _, ok in flat if kind == "remaining"]
    assert sum(wins) == 1  # the first spend of remaining() is accepted, then the window is full
    # every writer read remaining() after writer 0's commit, and counted it
    assert {remaining for _, _, remaining in reports} == {0.7}

    check = open_writer(url)
    records = check.records
    accepted = sum(ok for _, _, ok in flat) + 1  # + writer 0's 0.3 before the remaining() race
    assert len(records) == accepted  # nothing lost, nothing doubled
    assert exact_window_check(records) <= 1
    for t in (1, 1 + W):  # each of these windows holds exactly ε
        assert sum((Fraction(float(r.amounts[0])) for r in records if r.t == t), Fraction(0)) == Fraction(EPSILON)
    check.close()
    audit = cli_audit(url)
    assert audit.returncode == 0, audit.stdout + audit.stderr
    assert f"{accepted} records" in audit.stdout


def steady_writer(target: str, start: int, pipe: Any) -> None:
    """Spend 0.01 at t = start, start+1, … and report each t once its value has been returned."""
    ledger = open_writer(target, lock_timeout=30.0)
    s = stream(length=100_000)
    ledger.bind(s)
    for t in range(start, 100_000):
        ledger.laplace(s.secret(t), 0.01)
        pipe.send(t)


def test_a_writer_sigkilled_mid_transaction_leaves_no_trace_and_no_lock(url: str, pg_server: str) -> None:
    open_writer(url).close()
    schema = url.rsplit("ledger=", 1)[1]
    released: list[int] = []
    start = 1
    for attempt in range(3):
        receive, send = FORK.Pipe(duplex=False)
        child = FORK.Process(target=steady_writer, args=(url, start, send))
        if attempt == 0:
            # hold the head row's lock from outside: the child blocks inside its transaction
            with psycopg.connect(pg_server) as holder:
                holder.execute(f"SELECT * FROM {schema}.head FOR UPDATE")
                child.start()
                time.sleep(3.0)
                assert child.is_alive()
                assert not receive.poll()  # nothing was returned while the lock was held
                os.kill(child.pid or 0, signal.SIGKILL)
                child.join(timeout=30)
                holder.rollback()
        else:
            child.start()
            deadline = time.monotonic() + 60
            while len(released) < 5 * attempt and time.monotonic() < deadline:
                if receive.poll(0.5):
                    released.append(receive.recv())
            os.kill(child.pid or 0, signal.SIGKILL)  # somewhere in a spend loop: mid-transaction or not
            child.join(timeout=30)
        while receive.poll():
            released.append(receive.recv())
        assert child.exitcode == -signal.SIGKILL
        survivor = open_writer(url, lock_timeout=10.0)  # the killed session's lock is gone: no LedgerBusy
        stored = [record.t for record in survivor.records]
        # every value the killed writer returned is on disk; at most one commit was not yet reported
        assert set(released) <= set(stored)
        assert len(stored) - len(released) in (0, 1)
        assert len(stored) == len(set(stored))
        released = stored
        start = (stored[-1] + 1) if stored else 1
        survivor.bind(s := stream(length=100_000))
        survivor.laplace(s.secret(start), 0.01)
        released.append(start)
        start += 1
        survivor.close()
    assert len(released) >= 10
    assert cli_audit(url).returncode == 0


def spend_in_child(target: str, t: int, amount: float) -> None:
    ledger = open_writer(target)
    ledger.bind(s := stream())
    ledger.laplace(s.secret(t), amount)
    ledger.close()


def test_remaining_counts_what_another_process_committed_before_it_was_asked(
    url: str,
) -> None:
    ledger = open_writer(url)
    ledger.bind(s := stream())
    ledger.laplace(s.secret(1), 0.25)
    child = FORK.Process(target=spend_in_child, args=(url, 2, 0.5))
    child.start()
    child.join(timeout=60)
    assert child.exitcode == 0
    left = float(ledger.remaining(2)[0])
    assert left == 0.25  # exact: 1 - 0.25 - 0.5
    ledger.laplace(s.secret(2), left)  # spending remaining() is never refused
    assert Fraction(ledger.window_sum(2)[0], 2**1127) == Fraction(EPSILON)
    ledger.close()


@pytest.fixture
def own_server(tmp_path: Path) -> Iterator[Any]:
    """A server of this test's own, so that stopping it disturbs nobody else."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver

        server = pgserver.get_server(tmp_path / "pg", cleanup_mode="stop")
    yield server


def stop(server: Any) -> None:
    from pgserver._commands import pg_ctl

    pg_ctl(["-w", "-m", "fast", "stop"], pgdata=server.pgdata, user=server.system_user)


def test_a_server_restart_gives_ledger_unavailable_and_loses_or_doubles_nothing(
    own_server: Any,
) -> None:
    target = ledger_url(str(own_server.get_uri()), "restart")
    ledger = open_writer(target, lock_timeout=5.0)
    s = stream()
    ledger.bind(s)
    for t in (1, 2):
        ledger.laplace(s.secret(t), 0.25)
    with ledger.idempotent("before-restart"):
        kept = ledger.laplace(s.secret(3), 0.25)
    stop(own_server)
    began = time.monotonic()
    with pytest.raises(bc.LedgerUnavailable) as refused:
        ledger.laplace(s.secret(4), 0.25)
    assert time.monotonic() - began < 30
    assert "restart" in str(refused.value)
    with pytest.raises(bc.LedgerUnavailable), ledger.idempotent("during-outage"):
        ledger.laplace(s.secret(4), 0.25)
    with pytest.raises(bc.LedgerUnavailable):
        open_writer(target)
    own_server.ensure_postgres_running()
    assert str(own_server.get_uri()) in target
    # the object whose connection was lost keeps saying so (never LedgerCorrupt) and charges nothing
    with pytest.raises(bc.LedgerUnavailable):
        ledger.laplace(s.secret(4), 0.25)
    ledger.close()
    # a reopened ledger carries on; the spends refused during the outage were not charged
    ledger = open_writer(target)
    ledger.bind(s := stream())
    with ledger.idempotent("before-restart"):
        again = ledger.laplace(s.secret(3), 0.25)
    assert np.array_equal(again, kept)
    with ledger.idempotent("during-outage"):
        ledger.laplace(s.secret(4), 0.25)
    with ledger.idempotent("during-outage"):
        ledger.laplace(s.secret(4), 0.25)
    ledger.close()
    reopened = open_writer(target)
    assert [(r.t, float(r.amounts[0])) for r in reopened.records] == [(t, 0.25) for t in (1, 2, 3, 4)]
    assert float(reopened.remaining(4)[0]) == 0.0
    reopened.close()
    assert cli_audit(target).returncode == 0


# --- idempotent operations -------------------------------------------------------------------


def retry_in_child(target: str, operation_id: str, t: int, amount: float, value: float, results: Any) -> None:
    try:
        ledger = open_writer(target)
        s = stream(value)
        ledger.bind(s)
        with ledger.idempotent(operation_id):
            out = ledger.laplace(s.secret(t), amount)
        results.put(("ok", out.tobytes(), len(ledger.records)))
        ledger.close()
    except BaseException as error:  # noqa: BLE001 - reported to the parent
        results.put(("error", repr(error), -1))


def test_a_retry_from_another_process_returns_the_stored_output_and_charges_once(
    url: str,
) -> None:
    ledger = open_writer(url)
    s = stream()
    ledger.bind(s)
    with ledger.idempotent("request-42"):
        first = ledger.laplace(s.secret(1), 0.5)
    results = FORK.Queue()
    child = FORK.Process(target=retry_in_child, args=(url, "request-42", 1, 0.5, 5.0, results))
    child.start()
    status, output, count = results.get(timeout=60)
    child.join(timeout=30)
    assert status == "ok", output
    assert output == first.tobytes()
    assert count == 1
    assert float(ledger.remaining(1)[0]) == 0.5
    ledger.close()


def test_a_retry_with_other_secret_data_gets_the_stored_output_not_a_new_release(
    url: str,
) -> None:
    ledger = open_writer(url)
    s = stream(5.0)
    ledger.bind(s)
    with ledger.idempotent("same-t"):
        first = ledger.laplace(s.secret(1), 0.5)
    results = FORK.Queue()
    child = FORK.Process(target=retry_in_child, args=(url, "same-t", 1, 0.5, 1e9, results))
    child.start()
    status, output, count = results.get(timeout=60)
    child.join(timeout=30)
    assert status == "ok", output
    # no second release: a value near 1e9 would reveal the other data at no charge
    assert output == first.tobytes()
    assert count == 1
    ledger.close()


OTHER_CALLS = {
    "method": lambda ledger, s: ledger.laplace_bins(s.secret(2), [0.25, 0.25]),
    "timestamp": lambda ledger, s: ledger.laplace(s.secret(3), 0.25),
    "amount": lambda ledger, s: ledger.laplace(s.secret(2), float(np.nextafter(0.25, 0.0))),
    "purpose": lambda ledger, s: ledger.laplace(s.secret(2), 0.25, purpose="other"),
    "sensitivity": lambda ledger, s: ledger.laplace(s.secret(2), 0.25, sensitivity=2.0),
    "spend": lambda ledger, s: ledger.spend(2, 0.25, purpose="publication"),
}


@pytest.mark.parametrize("other", sorted(OTHER_CALLS))
def test_the_same_id_for_another_call_is_refused_and_charges_nothing(url: str, other: str) -> None:
    ledger = open_writer(url)
    s = stream()
    ledger.bind(s)
    with ledger.idempotent("one-call"):
        ledger.laplace(s.secret(2), 0.25)
    before = (len(ledger.records), ledger.window_sum(2), ledger.window_sum(3))
    retry = open_writer(url)
    retry.bind(s2 := stream())
    with (
        pytest.raises(bc.InvalidArgument, match="one-call"),
        retry.idempotent("one-call"),
    ):
        OTHER_CALLS[other](retry, s2)
    assert (len(retry.records), retry.window_sum(2), retry.window_sum(3)) == before
    retry.close()
    ledger.close()


@pytest.mark.parametrize("writers", [2, 4])
def test_concurrent_retries_of_one_id_charge_once_and_agree(url: str, writers: int) -> None:
    open_writer(url).close()
    results = FORK.Queue()
    barrier = FORK.Barrier(writers)

    def racing_retry(index: int) -> None:
        barrier.wait(120)
        retry_in_child(url, "raced", 1, 0.5, 5.0, results)

    children = [FORK.Process(target=racing_retry, args=(i,)) for i in range(writers)]
    for child in children:
        child.start()
    reports = [results.get(timeout=120) for _ in children]
    for child in children:
        child.join(timeout=30)
    assert all(status == "ok" for status, _, _ in reports), reports
    assert len({output for _, output, _ in reports}) == 1  # all got the same output
    check = open_writer(url)
    assert len(check.records) == 1  # exactly one charge won the unique index
    assert float(check.remaining(1)[0]) == 0.5
    check.close()


def test_ids_are_checked_and_never_blamed_on_the_ledger(url: str) -> None:
    ledger = open_writer(url)
    s = stream()
    ledger.bind(s)
    bad_ids: list[Any] = ["", "x" * 257, "nul\x00inside", 42, None]
    for bad in bad_ids:
        with (
            pytest.raises(bc.InvalidArgument, match="operation_id"),
            ledger.idempotent(bad),
        ):
            ledger.laplace(s.secret(1), 0.1)
    assert ledger.records == ()
    for good in [
        "x" * 256,
        "ünïcödé-🙂-请求",
        " spaces and 'quotes'; DROP TABLE records; --",
    ]:
        with ledger.idempotent(good):
            first = ledger.laplace(s.secret(1), 0.1)
        with ledger.idempotent(good):
            assert np.array_equal(ledger.laplace(s.secret(1), 0.1), first)
    assert len(ledger.records) == 3
    ledger.close()
    assert cli_audit(url).returncode == 0


def test_an_idempotent_block_names_one_operation_and_is_not_sticky(url: str) -> None:
    ledger = open_writer(url)
    s = stream()
    ledger.bind(s)
    with pytest.raises(bc.InvalidArgument), ledger.idempotent("twice"):
        ledger.laplace(s.secret(1), 0.1)
        ledger.laplace(s.secret(1), 0.1)
    assert len(ledger.records) == 1  # the second operation was not charged
    with (
        pytest.raises(bc.InvalidArgument),
        ledger.idempotent("outer"),
        ledger.idempotent("inner"),
    ):
        ledger.laplace(s.secret(1), 0.1)
    with ledger.idempotent("empty"):
        pass
    # outside a block nothing is idempotent: the same call charges again
    ledger.laplace(s.secret(1), 0.1)
    ledger.laplace(s.secret(1), 0.1)
    assert len(ledger.records) == 3
    # a refused operation does not consume its id
    with pytest.raises(bc.BudgetExceeded), ledger.idempotent("refused-first"):
        ledger.laplace(s.secret(1), 0.75)
    with ledger.idempotent("refused-first"):
        ledger.laplace(s.secret(1), 0.5)
    assert len(ledger.records) == 4
    assert float(ledger.remaining(1)[0]) == pytest.approx(0.2, abs=1e-12)
    ledger.close()


def test_one_id_on_two_ledgers_of_one_server_is_two_operations(pg_server: str) -> None:
    first, second = (
        ledger_url(pg_server, fresh_name()),
        ledger_url(pg_server, fresh_name()),
    )
    outputs = []
    for target in (first, second, first, second):
        ledger = open_writer(target)
        ledger.bind(s := stream())
        with ledger.idempotent("shared-id"):
            outputs.append(ledger.laplace(s.secret(1), 0.5))
        assert len(ledger.records) == 1
        assert float(ledger.remaining(1)[0]) == 0.5
        ledger.close()
    assert np.array_equal(outputs[0], outputs[2])
    assert np.array_equal(outputs[1], outputs[3])


def test_an_id_is_kept_across_a_reopen_and_in_the_chain(url: str) -> None:
    ledger = open_writer(url)
    ledger.bind(s := stream())
    with ledger.idempotent("kept"):
        first = ledger.laplace(s.secret(1), 0.5)
    ledger.close()
    anchor = head_hash(url)
    reopened = open_writer(url)
    reopened.bind(s2 := stream())
    with reopened.idempotent("kept"):
        assert np.array_equal(reopened.laplace(s2.secret(1), 0.5), first)
    with pytest.raises(bc.InvalidArgument), reopened.idempotent("kept"):
        reopened.laplace(s2.secret(1), 0.25)
    assert len(reopened.records) == 1
    reopened.close()
    assert head_hash(url) == anchor  # the retry wrote nothing


# --- tampering with the database's own credentials -------------------------------------------


def spent_ledger(target: str, spends: int = 3) -> tuple[str, list[str]]:
    """A ledger with ``spends`` charges, its schema and the head after each one."""
    ledger = open_writer(target)
    ledger.bind(s := stream())
    heads = [head_hash(target)]
    for t in range(1, spends + 1):
        with ledger.idempotent(f"op-{t}"):
            ledger.laplace(s.secret(t), 0.2)
        heads.append(head_hash(target))
    ledger.close()
    return target.rsplit("ledger=", 1)[1], heads


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE {s}.records SET amounts = amounts",
        "DELETE FROM {s}.records WHERE seq = 1",
        "TRUNCATE {s}.records",
    ],
)
def test_the_records_refuse_update_delete_and_truncate(url: str, pg_server: str, statement: str) -> None:
    schema, heads = spent_ledger(url)
    with pytest.raises(psycopg.Error, match="append-only"):
        sql(pg_server, statement.format(s=schema))
    assert head_hash(url) == heads[-1]
    reopened = open_writer(url)
    assert len(reopened.records) == 3
    reopened.close()


HEAD_EDITS = {
    "head-count": "UPDATE {s}.head SET count = count - 1",
    "head-deleted": "DELETE FROM {s}.head",
    "head-truncated": "TRUNCATE {s}.head",
    "header-epsilon": "UPDATE {s}.meta SET value = replace(value, '\"epsilon\":1.0', '\"epsilon\":2.0')"
    " WHERE key = 'header'",
    "header-deleted": "DELETE FROM {s}.meta WHERE key = 'header'",
}


@pytest.mark.parametrize("edit", sorted(HEAD_EDITS))
def test_edits_of_the_unguarded_tables_are_found(url: str, pg_server: str, edit: str) -> None:
    schema, _ = spent_ledger(url)
    sql(pg_server, HEAD_EDITS[edit].format(s=schema))
    audit = cli_audit(url)
    assert audit.returncode == 4, audit.stdout + audit.stderr
    with pytest.raises(bc.LedgerCorrupt):
        open_writer(url)
    if edit == "header-epsilon":  # a writer that believes the edited header is refused too
        with pytest.raises(bc.LedgerCorrupt):
            bc.open_ledger(url, bc.WindowLedger(epsilon=2.0, w=W))


def test_other_parameters_of_an_untouched_ledger_are_named_not_called_damage(
    url: str,
) -> None:
    spent_ledger(url)
    for opened in (
        bc.WindowLedger(epsilon=2.0, w=W),
        bc.WindowLedger(epsilon=EPSILON, w=W + 1),
    ):
        with pytest.raises(bc.InvalidArgument, match="epsilon=1.0|w=4"):
            bc.open_ledger(url, opened).close()
    assert cli_audit(url).returncode == 0


def test_a_live_writer_stops_when_the_head_row_is_deleted(url: str, pg_server: str) -> None:
    schema, _ = spent_ledger(url)
    ledger = open_writer(url, lock_timeout=5.0)
    ledger.bind(s := stream())
    sql(pg_server, f"DELETE FROM {schema}.head")
    with pytest.raises((bc.LedgerCorrupt, bc.LedgerBusy)):
        ledger.laplace(s.secret(4), 0.2)
    ledger.close()
    assert len(sql(pg_server, f"SELECT seq FROM {schema}.records")) == 3  # nothing appended without a lock


UNGUARDED = {
    "amount-lowered": "UPDATE {s}.records SET amounts = '\\x9a9999999999a93f'::bytea WHERE seq = 2",
    "last-row-deleted": "DELETE FROM {s}.records WHERE seq = 3",
    "first-row-deleted": "DELETE FROM {s}.records WHERE seq = 1",
    "t-moved": "UPDATE {s}.records SET t = t + 10 WHERE seq = 2",
    "output-edited": "UPDATE {s}.records SET output = output || '\\x00'::bytea WHERE seq = 2",
    "id-renamed": "UPDATE {s}.records SET detail = replace(detail, 'op-2', 'op-9') WHERE seq = 2",
}


@pytest.mark.parametrize("edit", sorted(UNGUARDED))
def test_edits_with_the_triggers_disabled_are_found(url: str, pg_server: str, edit: str) -> None:
    schema, _ = spent_ledger(url)
    sql(
        pg_server,
        f"ALTER TABLE {schema}.records DISABLE TRIGGER ALL",
        UNGUARDED[edit].format(s=schema),
        f"ALTER TABLE {schema}.records ENABLE TRIGGER ALL",
    )
    audit = cli_audit(url)
    assert audit.returncode == 4, audit.stdout + audit.stderr
    assert "record" in audit.stdout + audit.stderr
    with pytest.raises(bc.LedgerCorrupt):
        open_writer(url)


def test_a_rewound_chain_with_a_consistent_head_is_found_by_an_anchor(url: str, pg_server: str) -> None:
    """Deleting the last row and resetting the head to the row before leaves a valid shorter chain:
    only a head kept earlier (``--expect-head``) can tell, and it must."""
    schema, heads = spent_ledger(url)
    sql(
        pg_server,
        f"ALTER TABLE {schema}.records DISABLE TRIGGER ALL",
        f"DELETE FROM {schema}.records WHERE seq = 3",
        f"UPDATE {schema}.head SET count = 2, hash = (SELECT hash FROM {schema}.records WHERE seq = 2)",
        f"ALTER TABLE {schema}.records ENABLE TRIGGER ALL",
    )
    assert cli_audit(url, "--expect-head", heads[2]).returncode == 0  # the kept head before the deleted row
    anchored = cli_audit(url, "--expect-head", heads[3])
    assert anchored.returncode == 4, anchored.stdout + anchored.stderr
    assert not bc.audit_file(url, expect_head=heads[3]).ok


@pytest.mark.parametrize("amount", [0.9, 0.1])
def test_a_forged_row_with_a_recomputed_hash_cannot_open_a_window(url: str, pg_server: str, amount: float) -> None:
    """The chain's format is public (H_k = SHA-256(H_{k-1} ‖ fields)): an INSERT, which no trigger
    refuses, of a row whose hash is recomputed passes the chain check. Over ε it must still be found
    by the composition check (audit and reopening); within ε it is a charge like any other."""
    from budgetcheck.durable.journal import RECORD_VERSION, row_hash

    schema, _ = spent_ledger(url)  # 0.2 at t = 1, 2, 3
    detail, output, previous = sql(
        pg_server,
        f"SELECT detail, output, hash FROM {schema}.records WHERE seq = 3",
    )[0]
    forged_amounts = np.array([amount], dtype="<f8").tobytes()
    forged_detail = detail.replace('"operation":"op-3"', '"operation":"forged"')
    digest = row_hash(
        bytes(previous),
        RECORD_VERSION,
        0,
        4,
        4,
        3,
        forged_amounts,
        forged_detail.encode(),
        bytes(output),
    )
    sql(
        pg_server,
        f"INSERT INTO {schema}.records VALUES (4, {RECORD_VERSION}, 0, 4, 3, "
        f"'\\x{forged_amounts.hex()}'::bytea, $${forged_detail}$$, '\\x{bytes(output).hex()}'::bytea, "
        f"'\\x{digest.hex()}'::bytea)",
    )
    audit = bc.audit_file(url)
    assert audit.problem is None  # the chain checks out: the forgery is only visible in the sums
    if amount == 0.9:  # 0.2 + 0.2 + 0.2 + 0.9 in the window ending at 3
        assert not audit.ok
        assert audit.violations
        assert cli_audit(url).returncode in (1, 4)
        with pytest.raises(bc.LedgerCorrupt):
            open_writer(url).close()
    else:
        assert audit.ok
        ledger = open_writer(url)
        assert len(ledger.records) == 4
        assert float(ledger.remaining(3)[0]) == pytest.approx(0.3, abs=1e-12)  # the forged charge counts
        ledger.close()


def test_resetting_the_session_counter_never_repeats_numpy_noise(url: str, pg_server: str) -> None:
    """Same noise at two timestamps of a zero stream would reveal x_5 - x_1 exactly on real data. The
    counter lives in the unguarded meta table; the seed also takes the chain's head at open."""

    def release(t: int) -> np.ndarray:
        ledger = bc.open_ledger(url, bc.WindowLedger(epsilon=EPSILON, w=W, sampler="numpy-laplace", seed=3))
        ledger.bind(s := stream(0.0, d=3))
        out = ledger.laplace(s.secret(t), 0.1)
        ledger.close()
        return out

    first = release(1)
    schema = url.rsplit("ledger=", 1)[1]
    sql(pg_server, f"UPDATE {schema}.meta SET value = '0' WHERE key = 'sessions'")
    second = release(5)
    assert not np.array_equal(first, second)


def test_a_history_spliced_from_a_twin_ledger_is_found_by_an_anchor(
    pg_server: str,
) -> None:
    """Two ledgers with the same header and seed: the victim's second row (0.75 at t = 1) replaced by
    the twin's (0.25 at t = 2), hash and head included, needs no knowledge of the hash format; the
    victim's head kept before the attack must expose it."""
    victim, twin = (
        ledger_url(pg_server, fresh_name()),
        ledger_url(pg_server, fresh_name()),
    )
    for target, t, amount in ((victim, 1, 0.75), (twin, 2, 0.25)):
        ledger = bc.open_ledger(
            target,
            bc.WindowLedger(epsilon=EPSILON, w=W, sampler="numpy-laplace", seed=7),
        )
        ledger.bind(s := stream())
        ledger.laplace(s.secret(1), 0.25)
        ledger.laplace(s.secret(t), amount)
        ledger.close()
    anchor = head_hash(victim)
    victim_schema, twin_schema = victim.rsplit("=", 1)[1], twin.rsplit("=", 1)[1]
    sql(
        pg_server,
        f"ALTER TABLE {victim_schema}.records DISABLE TRIGGER ALL",
        f"DELETE FROM {victim_schema}.records WHERE seq = 2",
        f"INSERT INTO {victim_schema}.records SELECT * FROM {twin_schema}.records WHERE seq = 2",
        f"UPDATE {victim_schema}.head SET hash = (SELECT hash FROM {twin_schema}.head)",
        f"ALTER TABLE {victim_schema}.records ENABLE TRIGGER ALL",
    )
    anchored = cli_audit(victim, "--expect-head", anchor)
    assert anchored.returncode == 4, anchored.stdout + anchored.stderr
    assert not bc.audit_file(victim, expect_head=anchor).ok


# --- hostile URLs and ledger names -----------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "x'; DROP SCHEMA public CASCADE; --",
        "a;b",
        'a"b',
        "a.b",
        "a%27%3Bb",
        "Upper",
        "ünï",
        "",
        "1starts_with_digit",
        "n" * 64,
        "n" * 10_000,
        "pg_catalog",
        "pg_toast",
        "pg_anything",
        "information_schema",
    ],
)
def test_a_hostile_ledger_name_is_refused_by_name_and_creates_nothing(pg_server: str, name: str) -> None:
    before = schemas(pg_server)
    system_tables = tables_in(pg_server, "information_schema") | tables_in(pg_server, "pg_catalog")
    target = ledger_url(pg_server, name)
    with pytest.raises(bc.InvalidArgument, match="ledger"):
        open_writer(target).close()
    assert schemas(pg_server) == before
    assert tables_in(pg_server, "information_schema") | tables_in(pg_server, "pg_catalog") == system_tables
    audit = cli_audit(target)
    assert audit.returncode == 2, audit.stdout + audit.stderr
    assert "Traceback" not in audit.stderr
    assert schemas(pg_server) == before


def test_the_longest_allowed_name_works(pg_server: str) -> None:
    target = ledger_url(pg_server, "n" * 63)
    ledger = open_writer(target)
    ledger.bind(s := stream())
    ledger.laplace(s.secret(1), 0.5)
    ledger.close()
    assert cli_audit(target).returncode == 0


def test_a_schema_of_another_application_is_not_taken_over(pg_server: str) -> None:
    name = fresh_name()
    sql(
        pg_server,
        f"CREATE SCHEMA {name}",
        f"CREATE TABLE {name}.records (id int)",
        f"INSERT INTO {name}.records VALUES (7)",
    )
    with pytest.raises((bc.LedgerCorrupt, bc.InvalidArgument)):
        open_writer(ledger_url(pg_server, name))
    assert sql(pg_server, f"SELECT * FROM {name}.records") == [(7,)]
    assert tables_in(pg_server, name) == {"records"}


@pytest.mark.parametrize(
    "target",
    [
        "postgresql://nobody:s3cret@/postgres?host=/nonexistent-socket-dir&ledger=x",
        "postgresql://nobody:s3cret@127.0.0.1:1/postgres?ledger=x",
    ],
)
def test_an_unreachable_server_is_ledger_unavailable_without_the_password(
    target: str,
) -> None:
    with pytest.raises(bc.LedgerUnavailable) as error:
        open_writer(target)
    assert "s3cret" not in str(error.value)
    audit = cli_audit(target)
    assert audit.returncode != 0
    assert "s3cret" not in audit.stdout + audit.stderr
    assert "Traceback" not in audit.stderr


def test_resetting_the_session_counter_of_a_ledger_file_never_repeats_numpy_noise(tmp_path: Path) -> None:
    """The same attack on an SQLite ledger file: its meta table is not in the hash chain either."""
    path = tmp_path / "ledger.db"

    def release(t: int) -> np.ndarray:
        ledger = bc.open_ledger(path, bc.WindowLedger(epsilon=EPSILON, w=W, sampler="numpy-laplace", seed=3))
        ledger.bind(s := stream(0.0, d=3))
        out = ledger.laplace(s.secret(t), 0.1)
        ledger.close()
        return out

    first = release(1)
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute("UPDATE meta SET value = '0' WHERE key = 'sessions'")
    second = release(5)
    assert not np.array_equal(first, second)
