"""Durable ledgers: persistence, atomic refusals, tamper evidence, concurrency, crash recovery."""

from __future__ import annotations

import multiprocessing
import sqlite3
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import budgetcheck as bc
from budgetcheck.durable.audit_file import _composition
from budgetcheck.durable.journal import Journal
from budgetcheck.ledger.exact import ExactVector
from budgetcheck.ledger.records import LedgerHeader

PARAMS = bc.WEventParams(epsilon=1.0, w=4)


def fresh(path: Path, **kwargs: object) -> bc.WindowLedger:
    return bc.open_ledger(
        path,
        bc.WindowLedger(
            PARAMS,
            runs=2,
            seed=3,
            **kwargs,
            sampler="numpy-laplace",
            keep_records=True,
            trusted_code=True,
            allow_vouched=True,
        ),
        durability="process",
    )  # type: ignore[arg-type]


def test_spends_survive_a_reopen_and_match_an_in_memory_twin(tmp_path: Path) -> None:
    path = tmp_path / "l.db"
    twin = bc.WindowLedger(
        PARAMS, runs=2, sampler="numpy-laplace", keep_records=True, trusted_code=True, allow_vouched=True
    )
    ledger = fresh(path)
    data = bc.GuardedStream(np.arange(16.0).reshape(8, 2))
    ledger.bind(data)
    secrets = list(data)
    for k, secret in enumerate(secrets[:6]):
        amount = [0.15, 0.1 * (k % 3)]
        ledger.laplace(secret, amount)
        twin.spend(secret.t, amount, purpose="twin")
    ledger.measure_footprint(lambda v: v.sum(axis=0), secrets[4:6], sensitivity=1.0, epsilon=0.05, shape=2)
    for s in (5, 6):
        twin.spend(6, 0.0, purpose="twin")
        twin._windows.commit_footprint(6, {s: ExactVector.from_floats(np.full(2, 0.05))})
    ledger.close()
    again = fresh(path)
    assert again.t == 6
    assert len(again.records) == 8
    np.testing.assert_array_equal(again.remaining(7), twin.remaining(7))
    assert again.window_sum(7) == twin.window_sum(7)
    report = bc.audit_file(path)
    assert report.ok and report.records == 8


def test_a_refused_spend_changes_neither_memory_nor_file(tmp_path: Path) -> None:
    ledger = fresh(tmp_path / "l.db")
    ledger.spend(1, 0.9, purpose="a")
    journal = ledger.journal
    assert journal is not None
    head = journal.head()
    before = ledger.window_sum(2)
    with pytest.raises(bc.BudgetExceeded):
        ledger.spend(2, [0.05, 0.2], purpose="b")
    assert journal.head() == head and ledger.window_sum(2) == before and ledger.t == 1


def test_a_ledger_file_refuses_other_parameters_and_used_ledgers(tmp_path: Path) -> None:
    path = tmp_path / "l.db"
    fresh(path).close()
    with pytest.raises(bc.InvalidArgument, match="epsilon=1.0, not epsilon=0.5"):
        bc.open_ledger(
            path, bc.WindowLedger(bc.WEventParams(0.5, 4), runs=2, sampler="numpy-laplace", keep_records=True)
        )
    used = bc.WindowLedger(PARAMS, runs=2, sampler="numpy-laplace", keep_records=True)
    used.spend(1, 0.1, purpose="x")
    with pytest.raises(bc.InvalidArgument, match="already been used"):
        bc.open_ledger(tmp_path / "other.db", used)
    with pytest.raises(bc.InvalidArgument, match="durability"):
        bc.open_ledger(
            tmp_path / "x.db",
            bc.WindowLedger(PARAMS, sampler="numpy-laplace", keep_records=True),
            durability="sometimes",
        )


def test_personalized_and_swellfish_ledgers_persist(tmp_path: Path) -> None:
    reqs = bc.RequirementSet([(3, 1.0), (5, 2.0)])
    p = bc.open_ledger(tmp_path / "p.db", bc.PersonalizedLedger(reqs, sampler="numpy-laplace", keep_records=True))
    for t in range(1, 6):
        p.spend(t, 0.3, purpose="p")
    p.close()
    p2 = bc.open_ledger(tmp_path / "p.db", bc.PersonalizedLedger(reqs, sampler="numpy-laplace", keep_records=True))
    np.testing.assert_allclose(p2.remaining(6), [[0.4, 0.8]], rtol=1e-12)
    with pytest.raises(bc.BudgetExceeded):
        p2.spend(6, 0.5, purpose="too much for w=3")
    assert bc.audit_file(tmp_path / "p.db").ok

    policies = bc.PolicyCollection([bc.StreamPolicy(1, 4, (1.0,)), bc.StreamPolicy(3, 8, (1.0, 1.0))])
    s = bc.open_ledger(
        tmp_path / "s.db", bc.SwellfishLedger(policies, epsilon=1.0, sampler="numpy-laplace", keep_records=True)
    )
    for t in range(1, 5):
        s.spend(t, 0.2, purpose="s")
    expected = s.remaining(5)
    s.close()
    s2 = bc.open_ledger(
        tmp_path / "s.db", bc.SwellfishLedger(policies, epsilon=1.0, sampler="numpy-laplace", keep_records=True)
    )
    np.testing.assert_array_equal(s2.remaining(5), expected)
    assert bc.audit_file(tmp_path / "s.db").ok


def _edit(path: Path, sql: str, *args: object) -> None:
    """Tamper as a forger would: drop the append-only guards, then edit."""
    db = sqlite3.connect(path)
    db.execute("DROP TRIGGER IF EXISTS records_no_update")
    db.execute("DROP TRIGGER IF EXISTS records_no_delete")
    db.execute(sql, args)
    db.commit()
    db.close()


def _filled(path: Path, n: int = 6) -> None:
    ledger = fresh(path)
    for t in range(1, n + 1):
        ledger.spend(t, 0.25, purpose=f"spend {t}")
    ledger.close()


def test_the_auditor_names_the_first_edited_record(tmp_path: Path) -> None:
    path = tmp_path / "l.db"
    _filled(path)
    _edit(path, "UPDATE records SET amounts=? WHERE seq=3", np.array([0.1, 0.1]).tobytes())
    report = bc.audit_file(path)
    assert not report.ok and report.problem is not None and report.problem.startswith("record 3:")
    with pytest.raises(bc.LedgerCorrupt, match="record 3"):
        fresh(path).spend(7, 0.1, purpose="after the edit")


def test_a_removed_tail_is_not_read_as_a_shorter_history(tmp_path: Path) -> None:
    path = tmp_path / "l.db"
    _filled(path)
    _edit(path, "DELETE FROM records WHERE seq=6")
    assert "head names record 6" in str(bc.audit_file(path).problem)
    # A careful forger also rewrites the head; only an externally kept head catches that.
    kept = bc.audit_file(path).head
    good = tmp_path / "good.db"
    _filled(good)
    anchor = bc.audit_file(good).head
    _edit(good, "DELETE FROM records WHERE seq=6")
    _edit(good, "UPDATE head SET count = 5, hash = ?", bytes.fromhex(kept))
    assert bc.audit_file(good).ok
    assert "rolled back" in str(bc.audit_file(good, expect_head=anchor).problem)


def test_records_are_append_only_unless_the_guards_are_dropped(tmp_path: Path) -> None:
    path = tmp_path / "l.db"
    _filled(path)
    db = sqlite3.connect(path)
    for sql in ("UPDATE records SET amounts = x'00' WHERE seq = 2", "DELETE FROM records WHERE seq = 6"):
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            db.execute(sql)
    db.close()
    assert bc.audit_file(path).ok and bc.audit_file(path).records == 6


def test_a_missing_record_in_the_middle_and_unknown_versions_are_found(tmp_path: Path) -> None:
    path = tmp_path / "l.db"
    _filled(path)
    _edit(path, "DELETE FROM records WHERE seq=2")
    assert "record 2 is missing" in str(bc.audit_file(path).problem)
    other = tmp_path / "v.db"
    _filled(other)
    _edit(other, "UPDATE records SET version=2 WHERE seq=4")
    assert "record version 2 is not supported" in str(bc.audit_file(other).problem)
    with pytest.raises(bc.LedgerCorrupt, match="record version 2"):
        fresh(other)


def test_truncated_and_foreign_files_raise_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "l.db"
    _filled(path, 200)
    db = sqlite3.connect(path)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    for p in path.parent.glob("l.db-*"):
        p.unlink()
    with pytest.raises(bc.LedgerCorrupt, match="damaged|cannot|malformed|not a budgetcheck"):
        bc.audit_file(path)
    foreign = tmp_path / "notes.db"
    foreign.write_text("hello")
    with pytest.raises(bc.LedgerCorrupt, match="no SQLite header"):
        bc.audit_file(foreign)


def test_a_failed_commit_releases_nothing_and_rebuilds_from_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = fresh(tmp_path / "l.db")
    stream = bc.GuardedStream(np.ones((3, 1)))
    ledger.bind(stream)
    first, second, _ = list(stream)
    ledger.laplace(first, 0.5)

    def broken(self: Journal) -> None:
        raise bc.LedgerCorrupt("disk full")

    monkeypatch.setattr(Journal, "commit", broken)
    with pytest.raises(bc.LedgerCorrupt, match="disk full"):
        ledger.laplace(second, 0.25)
    monkeypatch.undo()
    assert ledger.t == 1 and len(ledger.records) == 1
    np.testing.assert_array_equal(ledger.remaining(2), [0.5, 0.5])


def test_a_reopened_file_never_reuses_noise(tmp_path: Path) -> None:
    path = tmp_path / "l.db"
    draws = []
    for t in (1, 2):
        ledger = bc.open_ledger(
            path, bc.WindowLedger(PARAMS, seed=11, sampler="numpy-laplace", keep_records=True), durability="process"
        )
        stream = bc.GuardedStream(np.zeros((t, 1)))
        ledger.bind(stream)
        draws.append(ledger.laplace(list(stream)[-1], 0.1)[0, 0])
        ledger.close()
    assert draws[0] != draws[1]


def _hammer(path: str, worker: int, queue: "multiprocessing.Queue[tuple[int, int]]") -> None:
    rng = np.random.default_rng(worker)
    ledger = bc.open_ledger(
        path, bc.WindowLedger(bc.WEventParams(1.0, 5), sampler="numpy-laplace", keep_records=True), durability="process"
    )
    accepted = refused = 0
    for _ in range(60):
        t = max(ledger.t, 1) + int(rng.integers(0, 2))
        try:
            ledger.spend(t, float(rng.uniform(0.05, 0.5)), purpose=f"worker {worker}")
            accepted += 1
        except (bc.BudgetExceeded, bc.TimestampOrder):
            refused += 1
    ledger.close()
    queue.put((accepted, refused))


def test_processes_spending_against_one_file_never_exceed_a_window(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.db")
    bc.open_ledger(path, bc.WindowLedger(bc.WEventParams(1.0, 5), sampler="numpy-laplace", keep_records=True)).close()
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    workers = [context.Process(target=_hammer, args=(path, k, queue)) for k in range(4)]
    for p in workers:
        p.start()
    results = [queue.get(timeout=120) for _ in workers]
    for p in workers:
        p.join(timeout=60)
    accepted = sum(a for a, _ in results)
    assert accepted > 0 and sum(r for _, r in results) > 0
    report = bc.audit_file(path)
    assert report.ok and report.records == accepted
    assert report.worst_ratio > 0.8  # the workers did fill the windows
    # Without the file's lock each worker alone would have believed it had the whole budget:
    totals: dict[int, float] = {}
    for record in bc.open_ledger(
        path, bc.WindowLedger(bc.WEventParams(1.0, 5), sampler="numpy-laplace", keep_records=True)
    ).records:
        totals[record.t] = totals.get(record.t, 0.0) + float(record.amounts[0])
    assert max(sum(totals.get(s, 0.0) for s in range(e - 4, e + 1)) for e in totals) <= 1.0


# -- the auditor's streaming window check and its parallel chain check, against plain oracles ----


@st.composite
def _charges(draw: st.DrawFn) -> tuple[int, int, list[tuple[int, list[float]]]]:
    """(w, runs, [(t, amounts per run)]) with each t at most w - 1 before the latest so far."""
    w = draw(st.integers(1, 6))
    runs = draw(st.integers(1, 2))
    latest, charges = 0, []
    amount = st.sampled_from([0.0, 0.1, 0.25, 1 / 3, 0.5, 0.7, 1.0, 5e-324, 0.30000000000000004])
    for _ in range(draw(st.integers(0, 25))):
        latest += draw(st.integers(0, 3))
        t = max(1, latest - draw(st.integers(0, w - 1)))
        latest = max(latest, t)
        charges.append((t, [draw(amount) for _ in range(runs)]))
    return w, runs, charges


@settings(max_examples=150, deadline=None)
@given(_charges(), st.sampled_from([0.5, 1.0, 0.9999999999999999]))
def test_streaming_window_check_equals_the_brute_force_sums(
    case: tuple[int, int, list[tuple[int, list[float]]]], epsilon: float
) -> None:
    w, runs, charges = case
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE records (seq INTEGER PRIMARY KEY, kind INTEGER DEFAULT 0, t INTEGER, amounts BLOB)")
    db.executemany(
        "INSERT INTO records (seq, t, amounts) VALUES (?, ?, ?)",
        [(k + 1, t, np.array(a, dtype="<f8").tobytes()) for k, (t, a) in enumerate(charges)],
    )
    header = LedgerHeader(notion="w-event", epsilon=epsilon, w=w, runs=runs)
    checked, worst, violations, broken, violating = _composition(db, header, True, max_violations=1000)
    latest = max((t for t, _ in charges), default=0)
    totals = [[Fraction(0)] * (latest + 1) for _ in range(runs)]
    for t, amounts in charges:
        for run, a in enumerate(amounts):
            totals[run][t] += Fraction(a)
    sums = [
        (run, end, sum(totals[run][max(1, end - w + 1) : end + 1], Fraction(0)))
        for end in range(1, latest + 1)
        for run in range(runs)
    ]
    assert broken is None and checked == runs * latest
    assert worst == max((s for _, _, s in sums), default=Fraction(0)) / Fraction(epsilon)
    assert len(violations) == violating == sum(1 for _, _, s in sums if s > Fraction(epsilon))


@pytest.mark.parametrize(
    "tamper",
    [
        None,
        "UPDATE records SET amounts = ? WHERE seq = 3",
        "UPDATE records SET amounts = ? WHERE seq = 10",
        "UPDATE records SET amounts = ? WHERE seq = 17",
        "DELETE FROM records WHERE seq = 10",
        "DELETE FROM records WHERE seq = 15",
        "DELETE FROM records WHERE seq >= 19",
    ],
)
def test_the_chain_checked_in_two_halves_finds_what_one_pass_finds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tamper: str | None
) -> None:
    path = tmp_path / "l.db"
    _filled(path, 20)
    if tamper is not None:
        _edit(path, tamper, *([np.array([0.05, 0.05]).tobytes()] if "?" in tamper else []))
    one_pass = bc.audit_file(path)
    monkeypatch.setattr("budgetcheck.durable.audit_file._PARALLEL_FROM", 2)
    halves = bc.audit_file(path)
    assert halves == one_pass
    assert one_pass.ok == (tamper is None)


@pytest.mark.parametrize("runs", [1, 2])
@pytest.mark.parametrize(
    ("t", "amounts", "message"),
    [
        ("x", None, "record 2: t='x' is not an integer"),
        (2, b"\x00\x01", "record 2:"),
        (2, "nan", "must be finite and >= 0"),
        (
            5000,
            None,
            None,
        ),  # then t=3: after the windows up to t=4998 were final (out-of-order rows before that are summed exactly)
    ],
)
def test_malformed_stored_rows_are_findings_not_crashes(
    runs: int, t: object, amounts: object, message: str | None
) -> None:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE records (seq INTEGER PRIMARY KEY, kind INTEGER DEFAULT 0, t, amounts BLOB)")
    good = np.full(runs, 0.1, dtype="<f8").tobytes()
    blob = good if amounts is None else np.full(runs, np.nan, dtype="<f8").tobytes() if amounts == "nan" else amounts
    db.executemany("INSERT INTO records (seq, t, amounts) VALUES (?, ?, ?)", [(1, 1, good), (2, t, blob), (3, 3, good)])
    header = LedgerHeader(notion="w-event", epsilon=1.0, w=2, runs=runs)
    broken = _composition(db, header, True, max_violations=10)[3]
    if message is None:
        assert (
            broken is not None and "record 3: a record charges t=3, more than w - 1 = 1 before a later record" in broken
        )
    else:
        assert broken is not None and message in broken
