"""The durable record of a ledger: an SQLite file in WAL mode, hash-chained, versioned.

Every charged operation is one ``BEGIN IMMEDIATE`` transaction (accounting rules §8: reserve →
commit → release): the writer catches up with the rows other processes committed, checks its
own spend, appends its records (and the operation's output) and commits; only then is the value
handed back. Everything a decision depends on is read inside that transaction, and a transaction
that ends without a commit leaves this process exactly where the lock found it (the state after
the catch-up, never a head read after the lock was let go).

One chain covers everything the file vouches for: spend records (kind 0) and published releases
(kind 1, the value a publisher wrote out for t). Row k carries H_k = SHA-256(H_{k−1} ‖ row k) with
H_0 = SHA-256(header), and the one-row ``head`` table keeps the count and head hash, set by a
trigger on every insert (so in the same transaction, at no extra statement): an edited, deleted or
truncated row breaks the chain or the head. Opening a file verifies the whole chain, in one read
snapshot. Triggers also refuse UPDATE and DELETE on records (append-only); a forger can drop them,
which is what the chain and an externally kept head (any earlier head: see the file audit) are for.
A new file appears whole (built aside, then linked into place), so an empty or damaged file is
always :class:`LedgerCorrupt`, never a fresh ledger.
"""

from __future__ import annotations

import codecs
import contextlib
import functools
import hashlib
import json
import os
import sqlite3
import struct
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, final

import attrs
import numpy as np
from numpy.typing import NDArray

from budgetcheck.ledger.errors import InvalidArgument, LedgerBusy, LedgerCorrupt
from budgetcheck.ledger.records import LedgerHeader, SpendRecord, finite_or_none, none_to_inf
from budgetcheck.ledger.validation import MAX_T

if TYPE_CHECKING:
    from budgetcheck.durable.checkpoint import Checkpoints
    from budgetcheck.durable.store import Store

FloatArray = NDArray[np.float64]
FORMAT: Final = "budgetcheck.journal"
FILE_VERSION: Final = 3  # 2: count and head in the trigger-kept `head` table; 3: releases in the chain (kind 1)
RECORD_VERSION: Final = 1
SPEND: Final = 0  # row kinds: a spend record ...
RELEASE: Final = 1  # ... or a published release (t and the value written out; no amounts)
LOCK_TIMEOUT: Final = 60.0  # seconds a writer waits for another's transaction before LedgerBusy
ROW_COLUMNS = "seq, version, kind, op, t, amounts, detail, output, hash"
DURABILITY: Final = {"full": "FULL", "process": "NORMAL"}
_SQLITE_MAGIC: Final = b"SQLite format 3\x00"
_HEAD = struct.Struct("<qqqqqq")

_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE records (
    seq INTEGER PRIMARY KEY,
    version INTEGER NOT NULL,
    kind INTEGER NOT NULL,
    op INTEGER NOT NULL,
    t INTEGER NOT NULL,
    amounts BLOB NOT NULL,
    detail TEXT NOT NULL,
    output BLOB,
    hash BLOB NOT NULL
);
CREATE UNIQUE INDEX published_once ON records (t) WHERE kind = 1;
CREATE UNIQUE INDEX operation_once ON records (json_extract(detail, '$.operation')) WHERE kind = 0;
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


def genesis(header: LedgerHeader, sampler: str | None = None) -> bytes:
    """H_0: the hash of the stored header's canonical JSON (:func:`chained_header`)."""
    return hashlib.sha256(canonical(chained_header(header, sampler))).digest()


def chained_header(header: LedgerHeader, sampler: str | None) -> dict[str, Any]:
    """The header a file stores and H_0 covers: the ledger's header and, in files made since the sampler
    was chained, the noise sampler the file keeps (so an edited sampler breaks the chain). Files made
    before keep the sampler only in the unchained ``sampler`` meta entry (``sampler`` None here)."""
    stored = header.to_json()
    if sampler is not None:
        stored["sampler"] = sampler
    return stored


def canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def row_hash(
    previous: bytes,
    version: int,
    kind: int,
    seq: int,
    op: int,
    t: int,
    amounts: bytes,
    detail: bytes,
    output: bytes | None,
) -> bytes:
    """H_k = SHA-256(H_{k−1} ‖ version, kind, seq, op, t ‖ len-prefixed amounts, detail, output ‖ has-output)."""
    tail = b"\x00" if output is None else struct.pack("<q", len(output)) + output + b"\x01"
    return hashlib.sha256(
        b"".join(
            (
                previous,
                _HEAD.pack(version, kind, seq, op, t, len(amounts)),
                amounts,
                struct.pack("<q", len(detail)),
                detail,
                tail,
            )
        )
    ).digest()


def encode_detail(record: SpendRecord, operation: dict[str, str] | None = None) -> bytes:
    """The detail JSON of a spend row; an idempotent operation's first row also carries its id and call."""
    if (
        record.noise_scale is None and operation is None and not record.vouched
    ):  # a plain spend: the same few details over and over
        return _plain_detail(record.purpose, record.sensitivity, record.sampler)
    fields: dict[str, object] = {
        "purpose": record.purpose,
        "sensitivity": record.sensitivity,
        "noise_scale": None if record.noise_scale is None else finite_or_none(record.noise_scale),
        "sampler": record.sampler,
        **(operation or {}),
    }
    if record.vouched:  # only when true: every other record's detail (and hash) is what it always was
        fields["vouched"] = True
    return canonical(fields)


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
        body = blob[8 + 8 * ndim :]
        values = np.frombuffer(body, dtype="<f8").reshape(shape).astype(np.float64)
    except (struct.error, ValueError, TypeError) as exc:
        raise LedgerCorrupt(f"{where}: malformed array: {exc}") from exc
    return values


def decode_release(row: tuple[Any, ...]) -> tuple[int, FloatArray]:
    """(t, value) of a stored release row (seq, version, kind, op, t, amounts, detail, output, ...);
    LedgerCorrupt when it has no value or one that is not a stored array (a release always has one)."""
    seq, t, output = row[0], row[4], row[7]
    where = f"release at record {seq}"
    if isinstance(t, bool) or not isinstance(t, int) or not 1 <= t <= MAX_T:
        raise LedgerCorrupt(f"{where}: t={t!r} must be an integer in [1, 2**62] (the record was edited)")
    if not isinstance(output, bytes):
        raise LedgerCorrupt(f"{where}: the published value is missing ({type(output).__name__}; the record was edited)")
    return int(t), decode_array(output, where)


def _amounts(blob: bytes, shape: tuple[int, ...], where: str) -> FloatArray:
    """A spend row's amounts: finite and >= 0, as the ledger charged them (a forged negative amount
    would be a refund, a NaN or inf one breaks the exact accounting)."""
    amounts = np.frombuffer(blob, dtype="<f8").reshape(shape)
    if not ((amounts >= 0.0) & (amounts < np.inf)).all():
        raise LedgerCorrupt(f"{where}: amounts {amounts.ravel().tolist()} must be finite and >= 0")
    return amounts


def _number(value: Any, name: str, where: str) -> float | None:
    """An optional stored number (the sensitivity): None, or finite and >= 0."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= float(value) < np.inf:
        raise LedgerCorrupt(f"{where}: {name}={value!r} must be a finite number >= 0 or null")
    return float(value)


def decode_row(row: tuple[Any, ...], header: LedgerHeader) -> JournalRow:
    """A stored spend row (seq, version, kind, op, t, amounts, detail, output, ...) as a record;
    unknown record versions are refused, never guessed."""
    seq, version, kind, op, t, amounts, detail, output = row[:8]
    where = f"record {seq}"
    if version != RECORD_VERSION:
        raise LedgerCorrupt(f"{where}: record version {version!r} is not supported (expected {RECORD_VERSION})")
    if kind != SPEND:
        raise LedgerCorrupt(f"{where}: record kind {kind!r} is not a spend record")
    if isinstance(t, bool) or not isinstance(t, int) or not 1 <= t <= MAX_T:
        raise LedgerCorrupt(f"{where}: t={t!r} must be an integer in [1, 2**62]")
    shape = (header.runs, len(header.classes)) if header.classes else (header.runs,)
    try:
        fields = json.loads(detail)
        scale = fields["noise_scale"]
        noise_scale = None if scale is None else np.asarray(none_to_inf(scale), dtype=np.float64)
        if noise_scale is not None and not (noise_scale >= 0.0).all():
            raise LedgerCorrupt(f"{where}: noise_scale={scale!r} must hold numbers >= 0 (null for none released)")
        record = SpendRecord(
            t=t,
            purpose=str(fields["purpose"]),
            amounts=_amounts(amounts, shape, where),
            sensitivity=_number(fields["sensitivity"], "sensitivity", where),
            noise_scale=noise_scale,
            sampler=fields["sampler"],
            vouched=fields.get("vouched", False) is True,
        )
    except (KeyError, TypeError, ValueError, json.JSONDecodeError) as exc:
        raise LedgerCorrupt(f"{where}: malformed record: {exc}") from exc
    return JournalRow(
        seq=int(seq), op=int(op), record=record, output=None if output is None else decode_array(output, where)
    )


def is_journal(path: str | Path) -> bool:
    """Whether ``path`` is to be read as a ledger file rather than a JSON-lines export: it starts like an
    SQLite file, or it is empty or its first block is not UTF-8 text. An export is never empty and always
    text, so such a file is a ledger file whose start was destroyed, or no ledger at all: opening it says
    so (LedgerCorrupt, exit 4), as :func:`connect` says of an empty or headless file."""
    with open(path, "rb") as handle:
        start = handle.read(4096)
    if not start or start.startswith(_SQLITE_MAGIC):
        return True
    try:
        codecs.getincrementaldecoder("utf-8")().decode(start)  # a character cut at the block's end is fine
    except UnicodeDecodeError:
        return True
    return False


def connect(path: str | Path, *, durability: str = "full", lock_timeout: float = LOCK_TIMEOUT) -> sqlite3.Connection:
    """An autocommit connection in WAL mode to an existing ledger file; an empty, damaged or foreign
    file raises LedgerCorrupt (a ledger file is never empty: see :func:`create`)."""
    if durability not in DURABILITY:
        raise InvalidArgument(f"durability={durability!r} must be one of {sorted(DURABILITY)}")
    path = Path(path)
    if not path.exists():
        raise InvalidArgument(f"ledger file {str(path)!r} does not exist")
    if path.is_dir():  # nothing is damaged: the path names the wrong thing
        raise InvalidArgument(f"ledger file {str(path)!r} is a directory: name a ledger file in it")
    if not path.stat().st_size:  # (no open() of our own: see _not_a_ledger)
        raise _not_a_ledger(path, "empty")
    _wait_for_one_name(path)
    db = None
    try:
        db = sqlite3.connect(path, isolation_level=None, timeout=lock_timeout, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")  # from here this connection holds SQLite's shared lock on the file
        db.execute(f"PRAGMA synchronous={DURABILITY[durability]}")
        db.execute(f"PRAGMA busy_timeout={int(lock_timeout * 1000)}")
    except UnicodeDecodeError as exc:  # SQLite read schema text that is not UTF-8: a damaged file
        if db is not None:
            db.close()
        raise LedgerCorrupt(f"{str(path)!r} cannot be opened as a ledger file (damaged: {exc})") from exc
    except sqlite3.DatabaseError as exc:
        if db is not None:
            db.close()
        if path.stat().st_nlink > 1:  # e.g. this process has the file open under its other name
            raise _several_names(path, "") from exc
        if getattr(exc, "sqlite_errorname", None) == "SQLITE_NOTADB":
            raise _not_a_ledger(path, "no SQLite header") from exc
        if _busy(exc):  # another program holds the file's lock: the file is intact, a later try opens it
            raise LedgerBusy(
                f"{str(path)!r}: cannot open the ledger file: another process held its lock for more than "
                f"lock_timeout={lock_timeout} s; nothing was charged, try again"
            ) from exc
        raise LedgerCorrupt(f"{str(path)!r} cannot be opened as a ledger file (damaged?): {exc}") from exc
    try:
        _check_names(path)
    except BaseException:
        db.close()
        raise
    return db


def _not_a_ledger(path: Path, what: str) -> LedgerCorrupt:
    """The error for a file that holds no ledger. Its header is read by SQLite itself, never by an open() and
    close() of ours: closing any descriptor of a file drops every POSIX lock this process holds on it, SQLite's
    shared lock of a ledger already open here included (another process could then checkpoint and delete the
    write-ahead log under that connection)."""
    return LedgerCorrupt(
        f"{str(path)!r} is not a budgetcheck ledger file ({what}): it holds no ledger, and none is made over it"
    )


def _wait_for_one_name(path: Path) -> None:
    """:func:`create_file` links a file made aside into place, then removes the aside name: a second
    name for that instant is waited out (up to a second), so that concurrent openers of a new file
    are not refused by :func:`_check_names`."""
    deadline = time.monotonic() + 1.0
    while path.stat().st_nlink > 1 and time.monotonic() < deadline:
        time.sleep(0.01)


def _check_names(path: Path) -> None:
    """InvalidArgument when the ledger file has several names (hard links) and another process has it
    open: SQLite keys its WAL and its write lock on the name, so writers through two names would not
    be serialised. While a file has several names one process at a time keeps it (on Linux the
    holders are read from /proc/locks; elsewhere such a file is not opened at all). Called with the
    caller's connection open, so two processes opening at once both see the other."""
    info = path.stat()
    if info.st_nlink <= 1:
        return
    others = _other_holders(info.st_ino)
    if others is not None and not others:
        return
    held = "" if others is None else f" and another process (pid {', '.join(map(str, sorted(others)))}) has it open"
    raise _several_names(path, held)


def _linked(path: str) -> bool:
    """Whether ``path`` names a file with several names (an SQLite error on it is then most likely the
    other name's connection in this process, not damage)."""
    try:
        return os.stat(path).st_nlink > 1
    except (OSError, ValueError):
        return False


def _several_names(path: Path, held: str) -> InvalidArgument:
    return InvalidArgument(
        f"ledger file {str(path)!r} has {path.stat().st_nlink} names (hard links){held}: writers through different "
        "names would not be serialised (SQLite locks a file by its name), so it is not opened (nothing is "
        f"damaged): keep one name and remove the others (a '.{path.name}.*.new' file beside it is left over "
        "from an interrupted creation)"
    )


def _other_holders(inode: int) -> set[int] | None:
    """The ids of the other processes holding a lock on the file with this inode number (every open
    SQLite connection in WAL mode holds one), from Linux's /proc/locks; None where that cannot be read.
    Matched on the inode number alone (a device number may differ under an overlay file system): a
    file of another file system with the same number only refuses a file that has several names."""
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as table:
            lines = table.readlines()
    except OSError:
        return None
    own, holders = os.getpid(), set()
    for line in lines:
        fields = line.split()
        for index, field in enumerate(fields[1:], start=1):
            if field.count(":") == 2 and field.rsplit(":", 1)[1] == str(inode):
                with contextlib.suppress(ValueError):
                    pid = int(fields[index - 1])
                    if pid != own:
                        holders.add(pid)
                break
    return holders


def _busy(exc: BaseException | None) -> bool:
    """Whether an SQLite error is a lock held by another connection past the busy timeout."""
    return isinstance(exc, sqlite3.OperationalError) and ("locked" in str(exc) or "busy" in str(exc))


def initial_meta(header: LedgerHeader, sampler: str | None = None) -> list[tuple[str, str]]:
    """The meta table of a new ledger (either store): the header (with the sampler, in the chain) and
    the sampler entry that :meth:`Journal.claim` compares (it must agree with the chained one)."""
    meta = [
        ("format", FORMAT),
        ("version", str(FILE_VERSION)),
        ("header", canonical(chained_header(header, sampler)).decode()),
        ("sessions", "0"),
    ]
    if sampler is not None:
        meta.append(("sampler", sampler))
    return meta


def create(path: str | Path, header: LedgerHeader, sampler: str | None = None) -> None:
    """Make a ledger file at ``path`` unless one is there: built whole beside it, then linked into
    place (atomic: a reader or a second creator sees no file or the whole one, never an empty one)."""
    create_file(path, initial_meta(header, sampler), genesis(header, sampler))


def create_file(path: str | Path, meta: list[tuple[str, str]], start: bytes) -> None:
    """:func:`create` from the meta rows and H_0."""
    path = Path(path)
    if path.exists():
        return
    if not path.parent.is_dir():
        raise InvalidArgument(
            f"cannot create the ledger file {str(path)!r}: {str(path.parent)!r} is not an existing directory "
            "(nothing is damaged: create the directory or choose another path)"
        )
    aside = path.with_name(f".{path.name}.{uuid.uuid4().hex}.new")
    try:
        db = sqlite3.connect(aside, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("BEGIN IMMEDIATE")
            for statement in _SCHEMA.split(";\n"):
                if statement.strip():
                    db.execute(statement)
            for key, value in meta:
                db.execute("INSERT INTO meta VALUES (?, ?)", (key, value))
            db.execute("INSERT INTO head VALUES (1, 0, ?)", (start,))
            db.execute("COMMIT")
        finally:
            db.close()  # checkpoints the WAL into the file
        with contextlib.suppress(FileExistsError):  # another process made it first: theirs is the ledger
            os.link(aside, path)
    except (OSError, sqlite3.Error) as exc:  # the new file is ours alone: no ledger is damaged, the place is unusable
        raise InvalidArgument(
            f"cannot create the ledger file {str(path)!r}: {exc} (nothing is damaged: is the directory "
            f"{str(path.parent)!r} writable? choose another path)"
        ) from exc
    finally:
        for leftover in (aside, aside.with_name(aside.name + "-wal"), aside.with_name(aside.name + "-shm")):
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()


def link_problem(row: tuple[Any, ...], expected_seq: int, previous: bytes) -> str | None:
    """Why stored row (seq, version, kind, op, t, amounts, detail, output, hash) does not continue the
    chain as row ``expected_seq`` after hash ``previous`` (None if it does). Shared by the writer's
    catch-up, the opener's full check and the offline auditor."""
    seq, version, kind, op, t, amounts, detail, output, digest = row
    if seq != expected_seq:
        return f"record {expected_seq} is missing (the next stored record is {seq})"
    if version != RECORD_VERSION:
        return f"record {seq}: record version {version!r} is not supported (expected {RECORD_VERSION})"
    if kind not in (SPEND, RELEASE):
        return f"record {seq}: record kind {kind!r} is not supported (0: a spend, 1: a release)"
    if not (
        isinstance(detail, str)
        and isinstance(amounts, bytes)
        and isinstance(op, int)
        and isinstance(t, int)
        and (output is None or isinstance(output, bytes))
    ):
        return f"record {seq}: a field has the wrong type (the record was edited)"
    if row_hash(previous, version, kind, seq, op, t, amounts, detail.encode(), output) != digest:
        return f"record {seq}: its hash does not match its contents (the record was edited)"
    return None


def stored_head(db: Store | sqlite3.Connection, path: str) -> tuple[int, bytes]:
    """(records committed, hash of the last one) as the ``head`` table keeps them."""
    row = db.execute("SELECT count, hash FROM head WHERE id = 1").fetchone()
    if row is None or not isinstance(row[0], int) or not isinstance(row[1], bytes):
        raise LedgerCorrupt(f"{path}: the head (record count and last hash) is missing or malformed: {row!r}")
    return row[0], row[1]


def is_url(target: str | Path) -> bool:
    """Whether ``target`` names a PostgreSQL ledger (``postgresql://…``) rather than an SQLite file."""
    return isinstance(target, str) and target.startswith(("postgresql://", "postgres://"))


def open_store(
    target: str | Path,
    *,
    durability: str = "full",
    lock_timeout: float = LOCK_TIMEOUT,
    header: LedgerHeader | None = None,
    sampler: str | None = None,
) -> Store:
    """A connection to the ledger store ``target`` (a file path or a ``postgresql://`` URL), made first
    (atomically, whole) from ``header`` (and the ``sampler`` it keeps) if one is given and the store
    holds no ledger yet."""
    if durability not in DURABILITY:
        raise InvalidArgument(f"durability={durability!r} must be one of {sorted(DURABILITY)}")
    if not isinstance(target, (str, os.PathLike)):
        raise InvalidArgument(
            f"path={target!r} must be a file path (str or pathlib.Path) or a postgresql:// URL, "
            f"not {type(target).__name__}"
        )
    if isinstance(target, str) and not target:  # Path('') would be '.', the working directory
        raise InvalidArgument("path='' is empty: name a ledger file or a postgresql:// URL")
    create_with = None if header is None else (initial_meta(header, sampler), genesis(header, sampler))
    if is_url(target):
        from budgetcheck.durable.postgres import PostgresStore

        return PostgresStore(str(target), durability=durability, lock_timeout=lock_timeout, create=create_with)
    return SqliteStore(target, durability=durability, lock_timeout=lock_timeout, create=create_with)


@final
class SqliteStore:
    """An SQLite ledger file in WAL mode: ``BEGIN IMMEDIATE`` is the write lock, ``BEGIN`` a read snapshot."""

    __slots__ = ("_closed", "_db", "_path", "_synced", "_timeout")
    operation_key: Final = "json_extract(detail, '$.operation')"

    def __init__(
        self,
        path: str | Path,
        *,
        durability: str = "full",
        lock_timeout: float = LOCK_TIMEOUT,
        create: tuple[list[tuple[str, str]], bytes] | None = None,
    ) -> None:
        if create is not None:
            create_file(path, *create)
        self._path, self._timeout = str(path), lock_timeout
        self._synced = durability == "full"  # every commit waits for the disk (synchronous=FULL)
        self._db = connect(path, durability=durability, lock_timeout=lock_timeout)
        self._closed = False
        try:
            self._check_tables()
        except BaseException:
            self._db.close()
            raise
        if create is not None:  # files made before operation ids: add their index (a no-op when there)
            try:
                with self.guard("add the operation-id index"):
                    self._db.execute(
                        f"CREATE UNIQUE INDEX IF NOT EXISTS operation_once ON records ({self.operation_key}) "
                        "WHERE kind = 0"
                    )
            except BaseException:
                self._db.close()
                raise

    def _check_tables(self) -> None:
        """LedgerCorrupt naming the file when it is an SQLite database but not a budgetcheck ledger file."""
        with self.guard("read the schema"):
            tables = {row[0] for row in self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        missing = sorted({"meta", "records", "head"} - tables)
        if missing:
            raise LedgerCorrupt(
                f"{self._path!r} is an SQLite database but not a budgetcheck ledger file (it has no "
                f"{', '.join(missing)} table{'s' if len(missing) > 1 else ''}): it holds no ledger, and none is "
                "made over it"
            )

    @property
    def name(self) -> str:
        return self._path

    def execute(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        return self._db.execute(sql, params)

    def begin_write(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def begin_read(self) -> None:
        self._db.execute("BEGIN")

    def commit(self, *, durable: bool = False) -> None:
        self._db.execute("COMMIT")
        if durable and not self._synced:
            self._sync_log()

    def _sync_log(self) -> None:
        """fsync the write-ahead log after a commit made under synchronous=NORMAL (which cannot be raised
        inside a transaction): what synchronous=FULL does at a commit. Every earlier commit is in the log
        too, or was checkpointed into the file (a checkpoint syncs both). SQLite keeps no lock on the log
        file itself (its locks are on the file and the -shm), so closing this descriptor drops none."""
        try:
            handle = os.open(f"{self._path}-wal", os.O_RDONLY)
        except FileNotFoundError:  # checkpointed and removed: the commit is in the (synced) file
            return
        except OSError as exc:
            raise LedgerCorrupt(f"{self._path}: cannot sync the write-ahead log: {exc}") from exc
        try:
            os.fsync(handle)
        except OSError as exc:
            raise LedgerCorrupt(f"{self._path}: cannot sync the write-ahead log: {exc}") from exc
        finally:
            os.close(handle)

    def rollback(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")

    def in_transaction(self) -> bool:
        return bool(self._db.in_transaction)

    def guard(self, what: str) -> _Guard:
        return _Guard(self._path, what, self._timeout)

    def duplicate(self, exc: BaseException | None) -> bool:
        return isinstance(exc, sqlite3.IntegrityError) and "UNIQUE" in str(exc)

    def close(self) -> None:
        self._db.close()
        self._closed = True

    @property
    def closed(self) -> bool:
        return self._closed

    def interpose(self, wrap: Callable[[Any], Any]) -> None:
        self._db = wrap(self._db)


@final
class Journal:
    """The store behind a durable ledger (one connection; see :func:`budgetcheck.open_ledger`).

    It remembers how far it has read the chain (``_last``, ``_head``) and the releases it has seen;
    the ledger applies every spend row the journal hands it, so the two never disagree. What differs
    between an SQLite file and a PostgreSQL database is in its :class:`~budgetcheck.durable.store.Store`.
    """

    __slots__ = (
        "_begun",
        "_genesis",
        "_head",
        "_header",
        "_last",
        "_published",
        "_sampler",
        "_store",
        "checkpoints",
        "session",
        "session_entropy",
    )

    def __init__(
        self,
        path: str | Path,
        header: LedgerHeader,
        *,
        sampler: str | None = None,
        durability: str = "full",
        lock_timeout: float = LOCK_TIMEOUT,
    ) -> None:
        self._header, self._sampler = header, sampler
        self._genesis = genesis(header, sampler)  # a file made before the sampler was chained: see _check_meta
        self._store = open_store(path, durability=durability, lock_timeout=lock_timeout, header=header, sampler=sampler)
        try:
            with self._guard("open"):
                self._store.begin_write()
                try:
                    self._check_meta()
                    sessions = int(self._meta("sessions")) + 1
                    self._store.execute("UPDATE meta SET value=? WHERE key='sessions'", (str(sessions),))
                    count, head = stored_head(self._store, self._store.name)
                    self._store.commit()
                finally:
                    self._store.rollback()
        except BaseException:
            self._store.close()
            raise
        self.session = sessions
        # A numpy-laplace ledger's noise is seeded by (seed, *session_entropy): the session counter lives
        # in the unguarded meta table, but the chain's head at open (hash-chained, checked on load) does
        # not repeat once a session has drawn noise (every draw appends a record), so an editor who
        # resets the counter cannot make a later session draw the same noise again.
        self.session_entropy = (sessions, int(count), int.from_bytes(head, "big"))
        self._last, self._head = 0, self._genesis
        self._published: list[tuple[int, FloatArray]] = []
        self._begun = (self._last, self._head, 0)
        self.checkpoints: Checkpoints | None = None  # signed checkpoints (budgetcheck.durable.checkpoint)

    @property
    def store(self) -> Store:
        """The store's connection (the signed checkpoints read and write their table through it)."""
        return self._store

    @property
    def path(self) -> str:
        """The file path or URL (without its password) of the store."""
        return self._store.name

    @property
    def _path(self) -> str:
        return self._store.name

    @property
    def closed(self) -> bool:
        """Whether the store's connection is closed."""
        return self._store.closed

    def interpose(self, wrap: Callable[[Any], Any]) -> None:
        """See :meth:`budgetcheck.durable.store.Store.interpose`."""
        self._store.interpose(wrap)

    def head(self) -> tuple[int, str]:
        """(records committed, head hash in hex): publish it to anchor the file against rollback."""
        count, head = self._stored_head()
        return count, head.hex()

    def close(self) -> None:
        if self.checkpoints is not None:  # a signer signs the head it leaves (best effort)
            self.checkpoints.at_close(self)
        self._store.close()

    def load(self, lookback: int | None) -> list[JournalRow]:
        """Verify the whole chain in one read snapshot; the spend rows that can still matter (t at
        least the latest t − ``lookback``; every one if None), and the releases are remembered."""
        with self._guard("read records"):
            self._store.begin_read()
            try:
                (latest,) = self._store.execute("SELECT COALESCE(MAX(t), 0) FROM records WHERE kind = 0").fetchone()
                since = 0 if lookback is None else int(latest) - lookback
                self._last, self._head, self._published = 0, self._genesis, []
                if self.checkpoints is not None:  # verified; the rows it vouches for and that do not matter are skipped
                    self._last, self._head = self.checkpoints.start(self, None if lookback is None else since)
                return self._verified(since)
            finally:
                self._store.rollback()  # read only: ends the snapshot

    def begin(self) -> list[JournalRow]:
        """Take the write lock; the spend rows other writers committed since we last looked."""
        self._begun = (self._last, self._head, len(self._published))
        try:
            with self._guard("begin a transaction"):
                self._store.begin_write()
        except BaseException:
            self._store.rollback()  # a lock wait that timed out may leave a failed transaction open
            raise
        try:
            rows = self._catch_up()
        except BaseException:
            self.rollback()
            raise
        self._begun = (self._last, self._head, len(self._published))
        return rows

    def peek(self) -> list[JournalRow]:
        """The spend rows other writers committed since we last looked, read in one snapshot without
        taking the write lock (for reads such as ``remaining``: a later charge re-checks under the lock).
        An unchanged head (one statement, outside a transaction) is the common case and reads nothing more."""
        if self._stored_head() == (self._last, self._head):
            return []
        with self._guard("begin a read"):
            self._store.begin_read()
        try:
            rows = self._catch_up()
        finally:
            self._store.rollback()  # read only: ends the snapshot
        self._begun = (self._last, self._head, len(self._published))
        return rows

    def commit(self, *, durable: bool = False) -> None:
        """COMMIT; the trigger has moved the head along. ``durable``: return only once the commit (and with
        it every earlier one) is on the store's disk, whatever the durability ("process" too): a publisher
        commits each release so before writing it out (see :func:`budgetcheck.durable.publish.publish`)."""
        if self.checkpoints is not None:  # a signer signs here, in the same transaction
            self.checkpoints.before_commit(self, self._last, self._head, released=len(self._published) > self._begun[2])
        with self._guard("commit"):
            self._store.commit(durable=durable)

    def rollback(self) -> None:
        """Undo the open transaction (if any): back to exactly what the lock showed after the catch-up
        (never a head read after the lock is let go: another writer may have committed by then)."""
        self._store.rollback()
        self._last, self._head, known = self._begun
        del self._published[known:]

    def append(
        self, records: list[SpendRecord], output: FloatArray | None, *, operation: dict[str, str] | None = None
    ) -> None:
        """Append one operation's records (inside :meth:`begin`/:meth:`commit`); the output goes on the
        last, ``operation`` (its id and call, see :meth:`find_operation`) in the first's detail."""
        if not records:
            return
        op = self._last + 1  # an operation is named by the position of its first record
        for index, record in enumerate(records):
            amounts = np.ascontiguousarray(record.amounts, dtype="<f8").tobytes()
            blob = encode_array(output) if output is not None and index == len(records) - 1 else None
            detail = encode_detail(record) if operation is None or index else encode_detail(record, operation)
            try:
                self._insert(SPEND, op, record.t, amounts, detail, blob)
            except LedgerCorrupt as exc:
                if operation is not None and self._store.duplicate(exc.__cause__):
                    raise InvalidArgument(
                        f"operation_id={operation['operation']!r} is already stored in {self.path}"
                    ) from exc
                raise

    def find_operation(self, operation_id: str) -> tuple[str, FloatArray | None] | None:
        """(call, stored output) of the operation stored under ``operation_id`` (inside :meth:`begin`), or None."""
        with self._guard("look up an operation id"):
            row = self._store.execute(
                f"SELECT seq, detail FROM records WHERE kind = 0 AND {self._store.operation_key} = ?", (operation_id,)
            ).fetchone()
            if row is None:
                return None
            seq, detail = row
            last = self._store.execute(
                "SELECT output FROM records WHERE op = ? AND kind = 0 ORDER BY seq DESC", (seq,)
            ).fetchone()
        try:
            call = str(json.loads(detail)["call"])
        except (KeyError, TypeError, ValueError) as exc:
            raise LedgerCorrupt(f"{self.path}: record {seq}: malformed operation id: {exc}") from exc
        output = None if last is None or last[0] is None else decode_array(bytes(last[0]), f"record {seq}")
        return call, output

    def append_release(self, t: int, values: FloatArray) -> None:
        """Append that the value of timestamp t was published (inside a transaction; once per t)."""
        try:
            self._insert(RELEASE, self._last + 1, t, b"", b"", encode_array(values))
        except LedgerCorrupt as exc:
            if self._store.duplicate(exc.__cause__):
                raise LedgerCorrupt(f"{self.path}: timestamp {t} was already published") from exc
            raise
        self._published.append((t, np.array(values, dtype=np.float64)))

    def releases(self) -> list[tuple[int, FloatArray]]:
        """Every published (t, value) this journal has verified or written, in order of t."""
        return sorted(self._published, key=lambda item: item[0])

    def claim(self, key: str, value: str) -> None:
        """Store meta[key] = value the first time; later opens must ask for the same value."""
        with self._guard(f"record {key}"):
            self._store.begin_write()
            try:
                row = self._store.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
                if row is None:
                    self._store.execute("INSERT INTO meta VALUES (?, ?)", (key, value))
                self._store.commit()
            finally:
                self._store.rollback()
        if row is not None and row[0] != value:
            raise InvalidArgument(
                f"ledger file {self.path!r} was written with {key} {row[0]}, not {value}{self._unused_advice()}"
            )

    def rows(self, *, since_t: int = 0) -> Iterator[JournalRow]:
        """Every stored spend row with t >= since_t, in order (chain not re-verified: see the auditor)."""
        with self._guard("read records"):
            cursor = self._store.execute(
                f"SELECT {ROW_COLUMNS} FROM records WHERE kind = 0 AND t >= ? ORDER BY seq", (since_t,)
            )
            for row in cursor:
                yield decode_row(row, self._header)

    # -- internals -----------------------------------------------------------------------------
    def _insert(self, kind: int, op: int, t: int, amounts: bytes, detail: bytes, output: bytes | None) -> None:
        seq = self._last + 1
        digest = row_hash(self._head, RECORD_VERSION, kind, seq, op, t, amounts, detail, output)
        with self._guard("append a record"):
            self._store.execute(
                f"INSERT INTO records ({ROW_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (seq, RECORD_VERSION, kind, op, t, amounts, detail.decode(), output, digest),
            )
        self._last, self._head = seq, digest

    def _catch_up(self) -> list[JournalRow]:
        count, head = self._stored_head()
        if count == self._last:
            if head != self._head:
                raise LedgerCorrupt(f"{self.path}: head hash changed under an unchanged count {count}")
            return []
        if count < self._last:
            raise LedgerCorrupt(
                f"{self.path}: the file has {count} records, fewer than the {self._last} already seen (rolled back?)"
            )
        return self._verified(0)

    def _verified(self, since_t: int) -> list[JournalRow]:
        """Rows after the last one seen, each continuing the chain, ending at the stored head (read in
        the caller's transaction): the spend rows with t >= since_t; releases are remembered."""
        count, head = self._stored_head()
        after, previous = self._last, self._head
        rows: list[JournalRow] = []
        old = _OldRows(self._header)
        seen = after
        with self._guard("read records"):
            cursor = self._store.execute(
                f"SELECT {ROW_COLUMNS} FROM records WHERE seq > ? AND seq <= ? ORDER BY seq", (after, count)
            )
            for row in cursor:
                problem = link_problem(row, seen + 1, previous)
                if problem is not None:
                    raise LedgerCorrupt(f"{self.path}: {problem}")
                previous, seen = row[8], seen + 1
                if row[2] == RELEASE:
                    self._published.append(decode_release(row))
                elif row[4] >= since_t:
                    rows.append(decode_row(row, self._header))
                else:  # too old to matter to the windows, but still a row the writer must have written
                    old.add(row)
        old.check()
        if previous != head or seen != count:
            raise LedgerCorrupt(f"{self.path}: the file ends at record {seen}, but its head names record {count}")
        self._last, self._head = count, previous
        return rows

    def _stored_head(self) -> tuple[int, bytes]:
        with self._guard("read the head"):
            return stored_head(self._store, self.path)

    def _meta(self, key: str) -> str:
        row = self._store.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        if row is None:
            raise LedgerCorrupt(f"{self.path}: meta entry {key!r} is missing")
        return str(row[0])

    def _check_meta(self) -> None:
        if self._meta("format") != FORMAT:
            raise LedgerCorrupt(f"{self.path}: format {self._meta('format')!r} is not {FORMAT!r}")
        if self._meta("version") != str(FILE_VERSION):
            raise LedgerCorrupt(
                f"{self.path}: file version {self._meta('version')!r} is not supported (expected {FILE_VERSION})"
            )
        try:
            stored = json.loads(self._meta("header"))
        except json.JSONDecodeError as exc:
            raise LedgerCorrupt(f"{self.path}: the stored header is not JSON: {exc}") from exc
        if not isinstance(stored, dict):
            raise LedgerCorrupt(f"{self.path}: the stored header is not a JSON object: {stored!r}")
        chained = stored.get("sampler") if "sampler" in stored else None
        if "sampler" in stored:  # the sampler is in the chain: the meta entry the claims compare must agree
            entry = self._store.execute("SELECT value FROM meta WHERE key='sampler'").fetchone()
            if entry is None or entry[0] != chained:
                raise LedgerCorrupt(
                    f"{self.path}: the sampler entry {None if entry is None else entry[0]!r} is not the sampler "
                    f"{chained!r} the hash chain covers (the meta table was edited)"
                )
        else:  # made before the sampler was chained: it is kept by the meta entry alone
            self._genesis = genesis(self._header)
        wanted = json.loads(canonical(chained_header(self._header, self._sampler if "sampler" in stored else None)))
        if stored != wanted:
            if not self._chain_starts_at(stored):
                raise LedgerCorrupt(
                    f"{self.path}: the stored header {stored!r} does not begin the hash chain (the header was edited)"
                )
            differ = sorted(k for k in set(stored) | set(wanted) if stored.get(k) != wanted.get(k))
            raise InvalidArgument(
                f"ledger file {self.path!r} was kept under {', '.join(f'{k}={stored.get(k)!r}' for k in differ)}, "
                f"not {', '.join(f'{k}={wanted.get(k)!r}' for k in differ)}{self._unused_advice()}"
            )

    def _unused_advice(self) -> str:
        """For a settings mismatch: what to do when the file holds no charge yet (a first command that failed
        before its first spend fixed the settings; nothing was spent, so the file can go)."""
        count, _ = self._stored_head()
        if count:
            return ""
        remove = "give another ?ledger= name" if "://" in self.path else f"delete it (rm {self.path!r})"
        return (
            f". It holds no charge yet (an earlier command stopped before its first spend): {remove} and run the "
            "corrected command again, or repeat the settings it was made with"
        )

    def _chain_starts_at(self, header: dict[str, Any]) -> bool:
        """Whether H_0 of the stored ``header`` begins the chain (record 1's link, or the head of an
        empty ledger): a header that differs from the opener's is then a real one, else an edit."""
        try:
            start = hashlib.sha256(canonical(header)).digest()
        except (TypeError, ValueError):
            return False
        count, head = self._stored_head()
        if count == 0:
            return head == start
        with self._guard("read records"):
            first = self._store.execute(f"SELECT {ROW_COLUMNS} FROM records WHERE seq = 1").fetchone()
        return first is not None and link_problem(first, 1, start) is None

    def _guard(self, what: str) -> contextlib.AbstractContextManager[None]:
        return self._store.guard(what)


@final
class _OldRows:
    """The check of the spend rows a load reads but does not hand back (older than the windows that can
    still matter): each must be a row the writer could have written, as :func:`decode_row` checks, so that
    a forged old row (a negative or NaN amount under a recomputed chain) is LedgerCorrupt at open, as the
    audit finds it. Cheaper than decoding each: a detail text is checked once (plain spends repeat the same
    few), and the amounts are checked in batches of :attr:`BATCH` rows."""

    __slots__ = ("_blobs", "_details", "_header", "_rows", "_size")
    BATCH: Final = 4096

    def __init__(self, header: LedgerHeader) -> None:
        self._header = header
        shape = (header.runs, len(header.classes)) if header.classes else (header.runs,)
        self._size = 8 * int(np.prod(shape))
        self._details: set[str] = set()
        self._rows: list[tuple[Any, ...]] = []
        self._blobs: list[bytes] = []

    def add(self, row: tuple[Any, ...]) -> None:
        t, amounts, detail = row[4], row[5], row[6]
        if detail not in self._details or len(amounts) != self._size or not 1 <= t <= MAX_T:
            decode_row(row, self._header)  # the full check (it raises for a bad row)
            self._details.add(detail)
        self._rows.append(row)
        self._blobs.append(amounts)
        if len(self._blobs) >= self.BATCH:
            self.check()

    def check(self) -> None:
        """Check the amounts of the rows added since the last check (all at once)."""
        if not self._blobs:
            return
        amounts = np.frombuffer(b"".join(self._blobs), dtype="<f8")
        if not ((amounts >= 0.0) & (amounts < np.inf)).all():
            for row in self._rows:
                decode_row(row, self._header)  # names the first bad row
        self._rows.clear()
        self._blobs.clear()


@final
class _Guard:
    """``with`` block that turns an SQLite error into LedgerCorrupt naming the file and the step, or
    LedgerBusy when another writer held the lock past the timeout (a class, not a generator context
    manager: it sits on the path of every commit)."""

    __slots__ = ("_path", "_timeout", "_what")

    def __init__(self, path: str, what: str, timeout: float = LOCK_TIMEOUT) -> None:
        self._path, self._what, self._timeout = path, what, timeout

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if _busy(exc):
            raise LedgerBusy(
                f"{self._path}: cannot {self._what}: another process held the ledger's write lock for more "
                f"than lock_timeout={self._timeout} s; nothing was charged, try again"
            ) from exc
        if isinstance(exc, sqlite3.DatabaseError) and _linked(self._path):  # open here under its other name
            raise _several_names(Path(self._path), "") from exc
        if isinstance(exc, (sqlite3.DatabaseError, UnicodeDecodeError)):  # text that is not UTF-8: damaged
            raise LedgerCorrupt(f"{self._path}: cannot {self._what}: {exc}") from exc
