"""The durable record of a ledger: an SQLite file in WAL mode, hash-chained, versioned.

Every charged operation is one ``BEGIN IMMEDIATE`` transaction (accounting rules §8: reserve →
commit → release): the writer catches up with the spends other processes committed, checks its
own spend, appends its records (and the operation's output) and commits; only then is the value
handed back. Row k carries H_k = SHA-256(H_{k−1} ‖ row k) with H_0 = SHA-256(header), and the
one-row ``head`` table keeps the count and head hash, set by a trigger on every insert (so in the
same transaction, at no extra statement), so an edited, deleted or truncated record breaks the
chain or the head. Triggers also refuse UPDATE and DELETE on records (append-only); a forger can
drop them, which is what the chain and an externally kept head are for.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import sqlite3
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final, final

import attrs
import numpy as np
from numpy.typing import NDArray

from budgetcheck._errors import InvalidArgument, LedgerCorrupt
from budgetcheck._records import LedgerHeader, SpendRecord, finite_or_none, none_to_inf

FloatArray = NDArray[np.float64]
FORMAT: Final = "budgetcheck.journal"
FILE_VERSION: Final = 2  # 2: count and head in the trigger-kept `head` table
RECORD_VERSION: Final = 1
DURABILITY: Final = {"full": "FULL", "process": "NORMAL"}
_SQLITE_MAGIC: Final = b"SQLite format 3\x00"
_HEAD = struct.Struct("<qqqqq")

_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE records (
    seq INTEGER PRIMARY KEY,
    version INTEGER NOT NULL,
    op INTEGER NOT NULL,
    t INTEGER NOT NULL,
    amounts BLOB NOT NULL,
    detail TEXT NOT NULL,
    output BLOB,
    hash BLOB NOT NULL
);
CREATE TABLE releases (t INTEGER PRIMARY KEY, value BLOB NOT NULL);
CREATE TABLE head (id INTEGER PRIMARY KEY CHECK (id = 1), count INTEGER NOT NULL, hash BLOB NOT NULL);
CREATE TRIGGER records_head AFTER INSERT ON records BEGIN UPDATE head SET count = NEW.seq, hash = NEW.hash WHERE id = 1; END;
CREATE TRIGGER records_no_update BEFORE UPDATE ON records BEGIN SELECT RAISE(ABORT, 'ledger records are append-only'); END;
CREATE TRIGGER records_no_delete BEFORE DELETE ON records BEGIN SELECT RAISE(ABORT, 'ledger records are append-only'); END;
"""


@attrs.frozen
class JournalRow:
    """One stored record: its position, the operation it belongs to, and that operation's output."""

    seq: int
    op: int
    record: SpendRecord
    output: FloatArray | None


def genesis(header: LedgerHeader) -> bytes:
    """H_0: the hash of the header's canonical JSON."""
    return hashlib.sha256(canonical(header.to_json())).digest()


def canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def row_hash(previous: bytes, version: int, seq: int, op: int, t: int, amounts: bytes, detail: bytes, output: bytes | None) -> bytes:
    """H_k = SHA-256(H_{k−1} ‖ version, seq, op, t ‖ len-prefixed amounts, detail, output ‖ has-output)."""
    tail = b"\x00" if output is None else struct.pack("<q", len(output)) + output + b"\x01"
    return hashlib.sha256(b"".join((previous, _HEAD.pack(version, seq, op, t, len(amounts)), amounts,
                                    struct.pack("<q", len(detail)), detail, tail))).digest()


def encode_detail(record: SpendRecord) -> bytes:
    if record.noise_scale is None:  # a plain spend: the same few details over and over
        return _plain_detail(record.purpose, record.sensitivity, record.sampler)
    return canonical({"purpose": record.purpose, "sensitivity": record.sensitivity,
                      "noise_scale": finite_or_none(record.noise_scale), "sampler": record.sampler})


@functools.lru_cache(maxsize=1024)
def _plain_detail(purpose: str, sensitivity: float | None, sampler: str | None) -> bytes:
    return canonical({"purpose": purpose, "sensitivity": sensitivity, "noise_scale": None, "sampler": sampler})


def encode_array(values: FloatArray) -> bytes:
    """ndim, shape, then float64 little-endian values."""
    arr = np.ascontiguousarray(values, dtype="<f8")
    return struct.pack(f"<q{arr.ndim}q", arr.ndim, *arr.shape) + arr.tobytes()


def decode_array(blob: bytes, where: str) -> FloatArray:
    try:
        (ndim,) = struct.unpack_from("<q", blob)
        shape = struct.unpack_from(f"<{ndim}q", blob, 8)
        body = blob[8 + 8 * ndim:]
        values = np.frombuffer(body, dtype="<f8").reshape(shape).astype(np.float64)
    except (struct.error, ValueError) as exc:
        raise LedgerCorrupt(f"{where}: malformed array: {exc}") from exc
    return values


def decode_row(row: tuple[Any, ...], header: LedgerHeader) -> JournalRow:
    """A stored row as a record; unknown record versions are refused, never guessed."""
    seq, version, op, t, amounts, detail, output = row[:7]
    where = f"record {seq}"
    if version != RECORD_VERSION:
        raise LedgerCorrupt(f"{where}: record version {version!r} is not supported (expected {RECORD_VERSION})")
    shape = (header.runs, len(header.classes)) if header.classes else (header.runs,)
    try:
        fields = json.loads(detail)
        scale = fields["noise_scale"]
        record = SpendRecord(
            t=int(t), purpose=str(fields["purpose"]),
            amounts=np.frombuffer(amounts, dtype="<f8").reshape(shape),
            sensitivity=None if fields["sensitivity"] is None else float(fields["sensitivity"]),
            noise_scale=None if scale is None else none_to_inf(scale),
            sampler=fields["sampler"],
        )
    except (KeyError, TypeError, ValueError, json.JSONDecodeError) as exc:
        raise LedgerCorrupt(f"{where}: malformed record: {exc}") from exc
    return JournalRow(seq=int(seq), op=int(op), record=record, output=None if output is None else decode_array(output, where))


def is_journal(path: str | Path) -> bool:
    """Whether ``path`` starts like an SQLite file (else it may be a JSON-lines export)."""
    with open(path, "rb") as handle:
        return handle.read(len(_SQLITE_MAGIC)) == _SQLITE_MAGIC


def connect(path: str | Path, *, durability: str = "full", create: bool = False) -> sqlite3.Connection:
    """An autocommit connection in WAL mode; corrupt or foreign files raise LedgerCorrupt."""
    if durability not in DURABILITY:
        raise InvalidArgument(f"durability={durability!r} must be one of {sorted(DURABILITY)}")
    path = Path(path)
    if not create and not path.exists():
        raise InvalidArgument(f"ledger file {str(path)!r} does not exist")
    if path.exists() and path.stat().st_size and not is_journal(path):
        raise LedgerCorrupt(f"{str(path)!r} is not a budgetcheck ledger file (no SQLite header)")
    try:
        db = sqlite3.connect(path, isolation_level=None, timeout=60.0, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute(f"PRAGMA synchronous={DURABILITY[durability]}")
        db.execute("PRAGMA busy_timeout=60000")
    except sqlite3.DatabaseError as exc:
        raise LedgerCorrupt(f"{str(path)!r} cannot be opened as a ledger file: {exc}") from exc
    return db


def link_problem(row: tuple[Any, ...], expected_seq: int, previous: bytes) -> str | None:
    """Why stored row (seq, version, op, t, amounts, detail, output, hash) does not continue the chain
    as record ``expected_seq`` after hash ``previous`` (None if it does). Shared by the writer's
    catch-up and the offline auditor."""
    seq, version, op, t, amounts, detail, output, digest = row
    if seq != expected_seq:
        return f"record {expected_seq} is missing (the next stored record is {seq})"
    if version != RECORD_VERSION:
        return f"record {seq}: record version {version!r} is not supported (expected {RECORD_VERSION})"
    if not isinstance(detail, str) or row_hash(previous, version, seq, op, t, amounts, detail.encode(), output) != digest:
        return f"record {seq}: its hash does not match its contents (the record was edited)"
    return None


def stored_head(db: sqlite3.Connection, path: str) -> tuple[int, bytes]:
    """(records committed, hash of the last one) as the ``head`` table keeps them."""
    row = db.execute("SELECT count, hash FROM head WHERE id = 1").fetchone()
    if row is None or not isinstance(row[0], int) or not isinstance(row[1], bytes):
        raise LedgerCorrupt(f"{path}: the head (record count and last hash) is missing or malformed: {row!r}")
    return row[0], row[1]


@final
class Journal:
    """The SQLite file behind a durable ledger (one connection; see :func:`budgetcheck.open_ledger`)."""

    __slots__ = ("_db", "_head", "_header", "_last", "_path", "session")

    def __init__(self, path: str | Path, header: LedgerHeader, *, durability: str = "full") -> None:
        self._path = str(path)
        self._header = header
        self._db = connect(path, durability=durability, create=True)
        with self._guard("open"):
            self._db.execute("BEGIN IMMEDIATE")
            try:
                if not self._db.execute("SELECT name FROM sqlite_master WHERE name='meta'").fetchone():
                    for statement in _SCHEMA.split(";\n"):
                        if statement.strip():
                            self._db.execute(statement)
                    for key, value in (("format", FORMAT), ("version", str(FILE_VERSION)),
                                       ("header", canonical(header.to_json()).decode()), ("sessions", "0")):
                        self._db.execute("INSERT INTO meta VALUES (?, ?)", (key, value))
                    self._db.execute("INSERT INTO head VALUES (1, 0, ?)", (genesis(header),))
                self._check_meta()
                sessions = int(self._meta("sessions")) + 1
                self._db.execute("UPDATE meta SET value=? WHERE key='sessions'", (str(sessions),))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        self.session = sessions
        self._last, self._head = 0, genesis(header)

    @property
    def path(self) -> str:
        return self._path

    def head(self) -> tuple[int, str]:
        """(records committed, head hash in hex): publish it to anchor the file against rollback."""
        count, head = self._stored_head()
        return count, head.hex()

    def close(self) -> None:
        self._db.close()

    def begin(self) -> list[JournalRow]:
        """BEGIN IMMEDIATE (the write lock); the rows other writers committed since we last looked."""
        with self._guard("begin a transaction"):
            self._db.execute("BEGIN IMMEDIATE")
        try:
            return self._catch_up()
        except BaseException:
            self.rollback()
            raise

    def commit(self) -> None:
        """COMMIT (durable before anything is released); the trigger has moved the head along."""
        with self._guard("commit"):
            self._db.execute("COMMIT")

    def rollback(self) -> None:
        """Undo the open transaction (if any) and forget what it appended."""
        with contextlib.suppress(sqlite3.Error):
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
        self._last, self._head = self._stored_head()

    def append(self, records: list[SpendRecord], output: FloatArray | None) -> None:
        """Append one operation's records (inside :meth:`transaction`); the output goes on the last."""
        if not records:
            return
        op = self._last + 1  # an operation is named by the position of its first record
        for index, record in enumerate(records):
            seq = self._last + 1
            amounts = np.ascontiguousarray(record.amounts, dtype="<f8").tobytes()
            detail = encode_detail(record)
            blob = encode_array(output) if output is not None and index == len(records) - 1 else None
            digest = row_hash(self._head, RECORD_VERSION, seq, op, record.t, amounts, detail, blob)
            with self._guard("append a record"):
                self._db.execute("INSERT INTO records VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                                 (seq, RECORD_VERSION, op, record.t, amounts, detail.decode(), blob, digest))
            self._last, self._head = seq, digest

    def store_release(self, t: int, values: FloatArray) -> None:
        """Record that the value of timestamp t was published (once: t is the primary key)."""
        with self._guard("record a release"):
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute("INSERT INTO releases VALUES (?, ?)", (t, encode_array(values)))
            except sqlite3.IntegrityError as exc:
                self._db.execute("ROLLBACK")
                raise LedgerCorrupt(f"{self._path}: timestamp {t} was already published") from exc
            self._db.execute("COMMIT")

    def releases(self) -> list[tuple[int, FloatArray]]:
        """Every published (t, value), in order of t."""
        with self._guard("read releases"):
            rows = self._db.execute("SELECT t, value FROM releases ORDER BY t").fetchall()
        return [(int(t), decode_array(blob, f"release t={t}")) for t, blob in rows]

    def claim(self, key: str, value: str) -> None:
        """Store meta[key] = value the first time; later opens must ask for the same value."""
        with self._guard(f"record {key}"):
            self._db.execute("BEGIN IMMEDIATE")
            try:
                row = self._db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
                if row is None:
                    self._db.execute("INSERT INTO meta VALUES (?, ?)", (key, value))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        if row is not None and row[0] != value:
            raise InvalidArgument(f"ledger file {self._path!r} was written with {key} {row[0]}, not {value}")

    def rows(self, *, since_t: int = 0) -> Iterator[JournalRow]:
        """Every stored row with t >= since_t, in order (chain not re-verified: see the auditor)."""
        with self._guard("read records"):
            cursor = self._db.execute(
                "SELECT seq, version, op, t, amounts, detail, output FROM records WHERE t >= ? ORDER BY seq", (since_t,))
            for row in cursor:
                yield decode_row(row, self._header)

    def latest_t(self) -> int:
        with self._guard("read the latest timestamp"):
            (value,) = self._db.execute("SELECT COALESCE(MAX(t), 0) FROM records").fetchone()
        return int(value)

    # -- internals -----------------------------------------------------------------------------
    def _catch_up(self) -> list[JournalRow]:
        count, head = self._stored_head()
        if count == self._last:
            if head != self._head:
                raise LedgerCorrupt(f"{self._path}: head hash changed under an unchanged count {count}")
            return []
        if count < self._last:
            raise LedgerCorrupt(f"{self._path}: the file has {count} records, fewer than the {self._last} already seen (rolled back?)")
        return self._verified(self._last, self._head)

    def tail(self, since_t: int) -> list[JournalRow]:
        """The rows from the first one with t >= since_t to the end, chain and head verified."""
        with self._guard("read records"):
            (first,) = self._db.execute("SELECT MIN(seq) FROM records WHERE t >= ?", (since_t,)).fetchone()
            if first is None or first <= 1:
                after, previous = 0, genesis(self._header)
            else:
                row = self._db.execute("SELECT hash FROM records WHERE seq = ?", (first - 1,)).fetchone()
                if row is None:
                    raise LedgerCorrupt(f"{self._path}: record {first - 1} is missing")
                after, previous = first - 1, bytes(row[0])
        return self._verified(after, previous)

    def _verified(self, after: int, previous: bytes) -> list[JournalRow]:
        """Rows after ``after``, each continuing the chain from ``previous``, ending at the stored head."""
        count, head = self._stored_head()
        with self._guard("read records"):
            raw = self._db.execute(
                "SELECT seq, version, op, t, amounts, detail, output, hash FROM records WHERE seq > ? ORDER BY seq", (after,)
            ).fetchall()
        rows: list[JournalRow] = []
        for row in raw:
            problem = link_problem(row, after + len(rows) + 1, previous)
            if problem is not None:
                raise LedgerCorrupt(f"{self._path}: {problem}")
            previous = row[7]
            rows.append(decode_row(row, self._header))
        if previous != head or after + len(rows) != count:
            raise LedgerCorrupt(f"{self._path}: the file ends at record {after + len(rows)}, but its head names record {count}")
        self._last, self._head = count, previous
        return rows

    def _stored_head(self) -> tuple[int, bytes]:
        with self._guard("read the head"):
            return stored_head(self._db, self._path)

    def _meta(self, key: str) -> str:
        row = self._db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        if row is None:
            raise LedgerCorrupt(f"{self._path}: meta entry {key!r} is missing")
        return str(row[0])

    def _check_meta(self) -> None:
        if self._meta("format") != FORMAT:
            raise LedgerCorrupt(f"{self._path}: format {self._meta('format')!r} is not {FORMAT!r}")
        if self._meta("version") != str(FILE_VERSION):
            raise LedgerCorrupt(f"{self._path}: file version {self._meta('version')!r} is not supported (expected {FILE_VERSION})")
        stored = json.loads(self._meta("header"))
        wanted = json.loads(canonical(self._header.to_json()))
        if stored != wanted:
            differ = sorted(k for k in set(stored) | set(wanted) if stored.get(k) != wanted.get(k))
            raise InvalidArgument(
                f"ledger file {self._path!r} was kept under {', '.join(f'{k}={stored.get(k)!r}' for k in differ)}, "
                f"not {', '.join(f'{k}={wanted.get(k)!r}' for k in differ)}"
            )

    def _guard(self, what: str) -> _Guard:
        return _Guard(self._path, what)


@final
class _Guard:
    """``with`` block that turns an SQLite error into LedgerCorrupt naming the file and the step
    (a class, not a generator context manager: it sits on the path of every commit)."""

    __slots__ = ("_path", "_what")

    def __init__(self, path: str, what: str) -> None:
        self._path, self._what = path, what

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if isinstance(exc, sqlite3.DatabaseError):
            raise LedgerCorrupt(f"{self._path}: cannot {self._what}: {exc}") from exc
