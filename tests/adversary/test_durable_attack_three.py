"""A third outside attack on the durable ledger (SQLite file, PostgreSQL, the publisher, the audit, the noise).

Written from the README's promises only. Each test reproduces one defect and asserts the promised
behaviour, so it fails on the code it was written against and passes once the defect is fixed:

- a ledger file edited by someone who knows the (unkeyed) format: a row whose amount is negative, NaN or
  infinite, with its hash recomputed, is found by ``budgetcheck audit`` but accepted (negative) or crashes
  (NaN) when the file or database is opened or caught up with, so a spend the honest history refuses is
  accepted (on an SQLite file and on PostgreSQL alike); a release row without a value passes the audit
  and crashes the opener;
- one file reached by two names (a hard link): two writers are not serialised and spend past ε;
- a ledger file locked by another program is called damaged (exit 4), not busy (exit 5);
- a malformed PostgreSQL URL, an empty ``--ledger`` or a path where no file can be made is not a usage
  error naming the argument, and a password with a raw '%' is printed in clear;
- after ``fork`` a PersonalizedLedger's local-DP randomisation repeats in parent and child.

Every interleaving is forced (a forged row, a held lock, a commit before the other writer starts), so
nothing depends on timing.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import budgetcheck as bc
from budgetcheck.durable.journal import RECORD_VERSION, RELEASE, SPEND, row_hash

EPSILON = 1.0
W = 3


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "budgetcheck", *args],
        capture_output=True,
        text=True,
        check=False,
        env=_env(),
        cwd=cwd,
        timeout=120,
    )


def _filled(path: Path, amount: float = 0.3, stamps: tuple[int, ...] = (1, 2, 3)) -> None:
    """A w-event ledger file (ε = 1, w = 3) holding ``amount`` at each of ``stamps``."""
    ledger = bc.open_ledger(path, bc.WindowLedger(epsilon=EPSILON, w=W))
    for t in stamps:
        ledger.spend(t, amount, purpose="publication")
    ledger.close()


def _forge(path: Path, t: int, amount: float) -> None:
    """Append a spend row as a forger who knows the format would: the next seq, the last row's detail,
    the hash recomputed from the previous one (H_k = SHA-256(H_{k-1} ‖ fields)); the insert trigger,
    which no one needs to drop, moves the head along. Nothing else in the file is touched."""
    db = sqlite3.connect(path)
    seq, previous, detail = db.execute("SELECT seq, hash, detail FROM records ORDER BY seq DESC LIMIT 1").fetchone()
    amounts = np.array([amount], dtype="<f8").tobytes()
    digest = row_hash(previous, RECORD_VERSION, SPEND, seq + 1, seq + 1, t, amounts, detail.encode(), None)
    db.execute(
        "INSERT INTO records VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (seq + 1, RECORD_VERSION, SPEND, seq + 1, t, amounts, detail, None, digest),
    )
    db.commit()
    db.close()


# -- (3) an edited file never makes a spend accepted that should be refused ------------------------------


@pytest.mark.parametrize("route", ["reopen", "live-writer"])
def test_a_forged_negative_amount_is_damage_not_budget(tmp_path: Path, route: str) -> None:
    """0.3 at t = 1, 2, 3 (w = 3, ε = 1) leaves 0.1 at t = 3. A forged row of −0.6 at t = 3 (hash
    recomputed) is found by the audit ("amounts [-0.6] must be finite and >= 0", exit 4), but the
    opener and a live writer's catch-up apply it as a refund: remaining(3) becomes 0.7 and a spend
    of 0.6 is accepted, so the window [1, 3] of real charges sums to 1.5 ε. Expected: LedgerCorrupt
    (as for any other damage), nothing charged."""
    path = tmp_path / "ledger.db"
    _filled(path)
    live = bc.open_ledger(path, bc.WindowLedger(epsilon=EPSILON, w=W)) if route == "live-writer" else None
    _forge(path, 3, -0.6)
    audit = bc.audit_file(path)
    assert not audit.ok and "-0.6" in str(audit.problem)  # the auditor sees it ...
    with pytest.raises(bc.LedgerCorrupt):  # ... the opener or the catch-up must too
        ledger = live if live is not None else bc.open_ledger(path, bc.WindowLedger(epsilon=EPSILON, w=W))
        ledger.spend(3, 0.6, purpose="publication")  # honest window [1, 3]: 0.9 + 0.6 = 1.5 > ε
    if live is not None:
        live.close()
    rows = sqlite3.connect(path).execute("SELECT COUNT(*) FROM records").fetchone()[0]
    assert rows == 4  # the three honest rows and the forged one: nothing was charged on top


@pytest.fixture(scope="module")
def pg_base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A PostgreSQL server for this module (the dev extra's pgserver), as a URL."""
    pytest.importorskip("psycopg")
    pgserver = pytest.importorskip("pgserver")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns that XDG_RUNTIME_DIR is unset
        server = pgserver.get_server(tmp_path_factory.mktemp("pg-attack-three"), cleanup_mode="stop")
        yield str(server.get_uri())


def test_a_forged_negative_amount_on_postgres_is_damage_not_budget(pg_base: str) -> None:
    """The same forgery on a shared PostgreSQL ledger, one writer per "host" (connection): a row of
    −0.6 at t = 3 inserted with its hash recomputed (no trigger refuses an INSERT). The audit names it;
    the live writer catches up with it as a refund and its 0.6 at t = 3 is accepted (real window
    [1, 3]: 1.5 ε). Expected: LedgerCorrupt, nothing charged."""
    import psycopg

    name = "attack3_" + uuid.uuid4().hex[:10]
    url = pg_base + ("&" if "?" in pg_base else "?") + "ledger=" + name
    writer = bc.open_ledger(url, bc.WindowLedger(epsilon=EPSILON, w=W))
    for t in (1, 2, 3):
        writer.spend(t, 0.3, purpose="publication")
    with psycopg.connect(pg_base, autocommit=True) as db:
        seq, previous, detail = db.execute(
            f"SELECT seq, hash, detail FROM {name}.records ORDER BY seq DESC LIMIT 1"
        ).fetchone()
        amounts = np.array([-0.6], dtype="<f8").tobytes()
        digest = row_hash(bytes(previous), RECORD_VERSION, SPEND, seq + 1, seq + 1, 3, amounts, detail.encode(), None)
        db.execute(
            f"INSERT INTO {name}.records VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (seq + 1, RECORD_VERSION, SPEND, seq + 1, 3, amounts, detail, None, digest),
        )
        assert "-0.6" in str(bc.audit_file(url).problem)
        try:
            with pytest.raises(bc.LedgerCorrupt):
                writer.spend(3, 0.6, purpose="publication")
        finally:
            writer.close()
        (rows,) = db.execute(f"SELECT COUNT(*) FROM {name}.records").fetchone()
    assert rows == 4


def test_a_forged_nan_amount_is_ledger_corrupt_and_exit_4_not_an_internal_error(tmp_path: Path) -> None:
    """A forged row whose amount is NaN (hash recomputed): the audit names it (exit 4), but
    ``open_ledger`` raises a bare ValueError ("cannot convert NaN to integer ratio"; inf gives
    OverflowError) and ``budgetcheck publish`` on the file prints a traceback and exits 70 ("an
    internal error of budgetcheck"). Expected: LedgerCorrupt, exit 4, no traceback, nothing released."""
    path = tmp_path / "ledger.db"
    _filled(path)
    _forge(path, 3, float("nan"))
    assert _cli("audit", str(path)).returncode == 4
    with pytest.raises(bc.LedgerCorrupt):
        bc.open_ledger(path, bc.WindowLedger(epsilon=EPSILON, w=W))
    rows = tmp_path / "rows.csv"
    rows.write_text("4,1\n")
    out = tmp_path / "out.csv"
    result = _cli(
        "publish", "Uniform", "--ledger", str(path), "--epsilon", "1", "--w", "3", "-d", "1",
        "--input", str(rows), "--out", str(out),
    )  # fmt: skip
    assert result.returncode == 4, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert not out.exists() or out.read_text().strip() == ""


def test_a_forged_release_row_without_a_value_is_found_by_audit_and_opener(tmp_path: Path) -> None:
    """A release row (kind 1) appended with no value (output NULL) and its hash recomputed:
    ``budgetcheck audit`` reports the file ok (exit 0), while ``open_ledger`` fails with a bare
    TypeError ("a bytes-like object is required, not 'NoneType'") and ``publish`` exits 70. Expected:
    the audit finds the malformed release (exit 4) and the opener raises LedgerCorrupt, exit 4."""
    path = tmp_path / "ledger.db"
    _filled(path, stamps=(1,))
    db = sqlite3.connect(path)
    seq, previous = db.execute("SELECT seq, hash FROM records ORDER BY seq DESC LIMIT 1").fetchone()
    digest = row_hash(previous, RECORD_VERSION, RELEASE, seq + 1, seq + 1, 1, b"", b"", None)
    db.execute(
        "INSERT INTO records VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (seq + 1, RECORD_VERSION, RELEASE, seq + 1, 1, b"", "", None, digest),
    )
    db.commit()
    db.close()
    audit = _cli("audit", str(path))
    assert audit.returncode == 4, audit.stdout
    with pytest.raises(bc.LedgerCorrupt):
        bc.open_ledger(path, bc.WindowLedger(epsilon=EPSILON, w=W))


# -- (1) several processes on one file never exceed a window --------------------------------------------


def test_writers_reaching_one_ledger_file_through_a_hard_link_are_serialised(tmp_path: Path) -> None:
    """``a.db`` and ``b.db`` are two names of one file (a hard link). Writer A (this process) commits
    0.6 at t = 1 through a.db; writer B (another process) opens b.db, sees remaining(1) = 1.0 and its
    0.6 at t = 1 is accepted: SQLite keys the WAL and its lock on the name (a.db-wal vs b.db-wal), so
    the two writers are not serialised, the window [1, 1] holds 1.2 ε of released charges, and A's
    committed spends later vanish from the file (B's checkpoint overwrites them; the audit says ok).
    Expected: B sees A's commit and is refused, or opening a ledger file with several links is refused."""
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    _filled(a, stamps=())
    os.link(a, b)
    writer_a = bc.open_ledger(a, bc.WindowLedger(epsilon=EPSILON, w=W))
    writer_a.spend(1, 0.6, purpose="publication")  # committed; A keeps the file open
    code = (
        "import budgetcheck as bc\n"
        "try:\n"
        f"    ledger = bc.open_ledger({str(b)!r}, bc.WindowLedger(epsilon={EPSILON}, w={W}))\n"
        "    ledger.spend(1, 0.6, purpose='publication')\n"
        "    print('ACCEPTED', ledger.remaining(1)[0])\n"
        "    ledger.close()\n"
        "except bc.BudgetcheckError as exc:\n"
        "    print('REFUSED', type(exc).__name__, exc)\n"
    )
    try:
        other = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=60, check=False
        )
    finally:
        writer_a.close()
    assert other.returncode == 0, other.stderr[-2000:]
    assert "ACCEPTED" not in other.stdout, f"a second writer spent 0.6 past A's committed 0.6: {other.stdout}"
    assert "REFUSED" in other.stdout


# -- (5) bad input: a clear error naming the argument, the documented exit code ----------------------------

_HOLD = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute('PRAGMA locking_mode=EXCLUSIVE')
db.execute('BEGIN EXCLUSIVE')
db.execute('SELECT COUNT(*) FROM records').fetchone()
print('holding', flush=True)
sys.stdin.read()
"""


def test_a_ledger_file_locked_by_another_program_is_busy_not_damaged(tmp_path: Path) -> None:
    """Another program (here sqlite3 with locking_mode=EXCLUSIVE) holds the file's lock. After
    lock_timeout, ``open_ledger`` raises LedgerCorrupt "cannot be opened as a ledger file (damaged?):
    database is locked" and ``budgetcheck publish --lock-timeout 0.5`` exits 4 (a damaged or altered
    ledger file). Expected, as the README documents for a ledger locked past the timeout: LedgerBusy,
    exit 5 — the file is intact and a rerun resumes."""
    path = tmp_path / "ledger.db"
    _filled(path, stamps=(1,))
    rows = tmp_path / "rows.csv"
    rows.write_text("2,1\n")
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        with pytest.raises(bc.LedgerBusy):
            bc.open_ledger(path, bc.WindowLedger(epsilon=EPSILON, w=W), lock_timeout=0.5)
        result = _cli(
            "publish", "Uniform", "--ledger", str(path), "--epsilon", "1", "--w", "3", "-d", "1",
            "--input", str(rows), "--lock-timeout", "0.5",
        )  # fmt: skip
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)
        if holder.stdout is not None:
            holder.stdout.close()
    assert result.returncode == 5, result.stderr[-2000:]
    assert bc.audit_file(path).ok


@pytest.mark.parametrize("url", ["postgresql://user@[::1/db?ledger=x", "postgresql://user@[bad/db"])
def test_a_malformed_postgres_url_is_a_usage_error_naming_it(url: str) -> None:
    """A URL with an unclosed IPv6 bracket: ``open_ledger`` raises urllib's bare ValueError ("Invalid
    IPv6 URL") and ``budgetcheck audit`` / ``publish --ledger`` print a traceback and exit 70 (an
    internal error). Expected: InvalidArgument naming the URL; exit 2 without a traceback."""
    pytest.importorskip("psycopg")
    with pytest.raises(bc.InvalidArgument, match="IPv6|URL|url"):
        bc.open_ledger(url, bc.WindowLedger(epsilon=EPSILON, w=W))
    result = _cli("audit", url)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr


def test_a_password_with_a_raw_percent_sign_never_appears_in_the_error() -> None:
    """A password holding a '%' not followed by two hex digits (``s3cr%zzet``, as people type them):
    libpq refuses the URL with 'invalid percent-encoded token: "s3cr%zzet"', and budgetcheck passes
    that line on, so ``open_ledger``'s LedgerUnavailable and ``budgetcheck audit`` print the password in
    clear next to the redacted URL ("postgresql://alice:***@localhost/db: invalid percent-encoded
    token: \"s3cr%zzet\""). Expected, as for every other message naming a ledger URL: no password."""
    pytest.importorskip("psycopg")
    url = "postgresql://alice:s3cr%zzet@localhost/db?ledger=x"
    with pytest.raises(bc.BudgetcheckError) as caught:
        bc.open_ledger(url, bc.WindowLedger(epsilon=EPSILON, w=W), lock_timeout=1)
    assert "s3cr" not in str(caught.value), str(caught.value)
    result = _cli("audit", url)
    assert result.returncode != 0
    assert "s3cr" not in result.stdout + result.stderr, result.stderr


def test_an_empty_ledger_path_is_a_usage_error_naming_the_option(tmp_path: Path) -> None:
    """``publish --ledger ''`` is read as the directory '.', and reported as "'.' is not a budgetcheck
    ledger file (a directory)" with exit 4 (a damaged ledger file), while ``--ledger DIR`` is exit 2
    naming '--ledger'. Expected: exit 2 naming --ledger, as for any other bad path."""
    rows = tmp_path / "rows.csv"
    rows.write_text("1,1\n")
    result = _cli(
        "publish", "Uniform", "--ledger", "", "--epsilon", "1", "--w", "3", "-d", "1", "--input", str(rows),
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-2000:]
    assert "--ledger" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc (not writable, even by root)")
def test_a_ledger_path_where_no_file_can_be_made_is_a_usage_error(tmp_path: Path) -> None:
    """``--ledger /proc/x.db`` (an existing directory in which no file can be created; likewise a
    read-only directory or file system): ``open_ledger`` raises LedgerCorrupt "cannot create the ledger
    file ...: unable to open database file" and ``publish`` exits 4, a damaged or altered ledger file,
    although no ledger exists and nothing is damaged (a missing directory gets exit 2, "nothing is
    damaged"). Expected: InvalidArgument naming the path, exit 2."""
    target = "/proc/budgetcheck-attack.db"
    with pytest.raises(bc.InvalidArgument, match="budgetcheck-attack.db"):
        bc.open_ledger(target, bc.WindowLedger(epsilon=EPSILON, w=W))
    rows = tmp_path / "rows.csv"
    rows.write_text("1,1\n")
    result = _cli(
        "publish", "Uniform", "--ledger", target, "--epsilon", "1", "--w", "3", "-d", "1", "--input", str(rows)
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr


# -- (4) noise cannot be predicted: not after fork either --------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_local_reports_after_fork_draw_independent_randomisation(tmp_path: Path) -> None:
    """A PersonalizedLedger under the default (secure) sampler draws local-DP reports (GRR/OUE) from a
    PCG64 seeded once from the OS at construction. After ``fork`` parent and child hold the same state:
    reports of 200 users, at two different timestamps, come out bit for bit equal in the two
    processes, so each process's randomisation predicts the other's. Expected: independent draws (the
    discrete Laplace sampler, which reads the OS CSPRNG at each draw, has them)."""
    requirements = bc.RequirementSet.from_counts([((5, 1.0), 200)])
    bins = np.zeros((4, 200), dtype=np.int64)
    ledger = bc.PersonalizedLedger(requirements)  # sampler: the default, discrete-laplace
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: one report at t = 2
        try:
            stream = bc.PersonalizedStream(requirements, bins, dimensions=3)
            ledger.bind(stream)
            out = ledger.local_report(stream.secret(2), [0.5])
            os.write(write_end, np.ascontiguousarray(out, dtype="<f8").tobytes())
        finally:
            os._exit(0)
    os.close(write_end)
    stream = bc.PersonalizedStream(requirements, bins, dimensions=3)
    ledger.bind(stream)
    ours = ledger.local_report(stream.secret(1), [0.5])
    os.waitpid(pid, 0)
    with os.fdopen(read_end, "rb") as pipe:
        theirs = np.frombuffer(pipe.read(), dtype="<f8").reshape(ours.shape)
    assert not np.array_equal(ours, theirs), f"parent and child drew the same local reports: {ours.tolist()}"
