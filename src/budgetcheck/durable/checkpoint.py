"""Signed checkpoints: tamper evidence for a ledger store that needs no trust in the store.

The hash chain (:mod:`budgetcheck.durable.journal`) has no key: whoever can write the file or the
database can rewrite a row and recompute every later hash and the head. A *checkpoint* is an
Ed25519 signature (RFC 8032, from the ``cryptography`` package) over the chain's head, made with a
private key kept outside the store. It is stored in the store's ``checkpoints`` table, so a verifier
needs only the store and the public key:

* body (canonical JSON, the bytes signed after :data:`DOMAIN`): the key's fingerprint, the
  checkpoint's number for that key (1, 2, …), the SHA-256 of the key's previous checkpoint (body and
  signature; none for number 1), the record count n and head hash H_n, H_0 and the stored header
  (ε, w, notion, sampler, …), whether a publisher stopped there, and the UTC time;
* a signer writes one in the transaction of the record that makes n − (last signed n) reach
  ``every``, in the transaction of every release it stores, at a new (empty) store and at each
  publisher stop, and verifies the previous checkpoint's signature before linking to it;
* a verifier (:func:`verify_checkpoints`, ``open_ledger(..., verify_key=...)``) requires at least one
  checkpoint of the key, numbers 1..m with every link, the signed header equal to the stored one,
  every signed n at most the stored count and the stored hash of record n equal to the signed H_n
  (the chain passes through every signed head, in order), and no release after the last checkpoint.

Reopening with a key verifies the last checkpoint's signature, walks the links of the others (one
SHA-256 each: each was verified by the key's holder before it was linked) and re-hashes only the
rows it needs: those after the last checkpoint, and from the first spend row the ledger's window
still counts (chained into the signed head, so they are the signed rows). What a store alone can
never show is stated in docs/explanation/tamper-evidence.md: a rollback to an earlier *signed*
state (the checkpoints after it deleted too), and unsigned records after the last checkpoint.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, final

import attrs
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from budgetcheck.durable.journal import canonical, is_url, open_store, stored_head
from budgetcheck.ledger.errors import BudgetcheckError, InvalidArgument, LedgerBusy, LedgerCorrupt, LedgerUnavailable

if TYPE_CHECKING:
    from budgetcheck.durable.journal import Journal
    from budgetcheck.durable.store import Store

FORMAT: Final = "budgetcheck.checkpoint"
VERSION: Final = 1
DOMAIN: Final = b"budgetcheck checkpoint v1\n"  # signed before the body: a signature means nothing elsewhere
DEFAULT_EVERY: Final = 100  # records between checkpoints (releases are signed in their own transaction)
PublicKeyLike = str | os.PathLike[str] | Ed25519PublicKey | Ed25519PrivateKey
PrivateKeyLike = str | os.PathLike[str] | Ed25519PrivateKey

_TABLE: Final = {
    "sqlite": "CREATE TABLE IF NOT EXISTS checkpoints (key TEXT NOT NULL, number INTEGER NOT NULL, "
    "count INTEGER NOT NULL, body TEXT NOT NULL, signature BLOB NOT NULL, PRIMARY KEY (key, number))",
    "postgres": "CREATE TABLE IF NOT EXISTS checkpoints (key TEXT NOT NULL, number BIGINT NOT NULL, "
    "count BIGINT NOT NULL, body TEXT NOT NULL, signature BYTEA NOT NULL, PRIMARY KEY (key, number))",
}
_EXISTS: Final = {
    "sqlite": "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'checkpoints'",
    "postgres": "SELECT 1 FROM pg_catalog.pg_tables WHERE schemaname = current_schema() AND tablename = 'checkpoints'",
}


# -- keys ------------------------------------------------------------------------------------------
def fingerprint(key: Ed25519PublicKey) -> str:
    """The name a key's checkpoints are stored under: SHA-256 of its 32 raw bytes, first 32 hex digits."""
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:32]


def generate_keys(private_path: str | os.PathLike[str], public_path: str | os.PathLike[str]) -> str:
    """Write a new Ed25519 key pair as PEM files (the private one PKCS #8, mode 0600, never over an
    existing file; the public one SubjectPublicKeyInfo) and return its fingerprint.

    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> len(generate_keys(folder / "ledger.key", folder / "ledger.pub"))
    32
    """
    private_path, public_path = Path(private_path), Path(public_path)
    if private_path == public_path:
        raise InvalidArgument(f"the private and the public key need two files, got {str(private_path)!r} twice")
    for path in (private_path, public_path):
        if path.exists():
            raise InvalidArgument(
                f"{str(path)!r} exists: a key file is never overwritten (rotate by generating a new pair under new "
                "names, see docs/explanation/tamper-evidence.md)"
            )
        if not path.parent.is_dir():
            raise InvalidArgument(f"cannot write {str(path)!r}: {str(path.parent)!r} is not an existing directory")
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    descriptor = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(private)
    with open(public_path, "xb") as handle:
        handle.write(public)
    return fingerprint(key.public_key())


def load_signing_key(key: PrivateKeyLike, name: str = "signing_key") -> Ed25519PrivateKey:
    """An Ed25519 private key, or the PEM file holding one (readable by its owner only)."""
    if isinstance(key, Ed25519PrivateKey):
        return key
    path = _key_path(key, name)
    mode = path.stat().st_mode
    if os.name == "posix" and mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise InvalidArgument(
            f"{name}={str(path)!r} can be read by other users (mode {stat.S_IMODE(mode):04o}): a private key must be "
            f"readable by its owner only: chmod 600 {str(path)!r}"
        )
    try:
        loaded = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except (ValueError, TypeError) as exc:
        raise InvalidArgument(f"{name}={str(path)!r} is not an unencrypted PEM private key: {exc}") from None
    if not isinstance(loaded, Ed25519PrivateKey):
        raise InvalidArgument(f"{name}={str(path)!r} holds a {type(loaded).__name__}, not an Ed25519 private key")
    return loaded


def load_verify_key(key: PublicKeyLike, name: str = "verify_key") -> Ed25519PublicKey:
    """An Ed25519 public key (or a private key's public half), or the PEM file holding a public key."""
    if isinstance(key, Ed25519PrivateKey):
        return key.public_key()
    if isinstance(key, Ed25519PublicKey):
        return key
    path = _key_path(key, name)
    data = path.read_bytes()
    if b"PRIVATE KEY" in data:
        raise InvalidArgument(
            f"{name}={str(path)!r} holds a private key: verifying needs only the public one (keep the private key "
            "with the publisher alone)"
        )
    try:
        loaded = serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as exc:
        raise InvalidArgument(f"{name}={str(path)!r} is not a PEM public key: {exc}") from None
    if not isinstance(loaded, Ed25519PublicKey):
        raise InvalidArgument(f"{name}={str(path)!r} holds a {type(loaded).__name__}, not an Ed25519 public key")
    return loaded


def _key_path(key: object, name: str) -> Path:
    if not isinstance(key, (str, os.PathLike)):
        raise InvalidArgument(f"{name}={key!r} must be a PEM file path or an Ed25519 key, not {type(key).__name__}")
    path = Path(key)
    if not path.is_file():
        raise InvalidArgument(f"{name}={str(path)!r} is not an existing key file (make one with budgetcheck keygen)")
    return path


# -- checkpoints -------------------------------------------------------------------------------------
@attrs.frozen
class Checkpoint:
    """One stored checkpoint: its row and its decoded body (not yet verified)."""

    number: int
    count: int
    body: bytes
    signature: bytes
    fields: dict[str, Any]
    stored_hash: bytes | None  # the stored hash of record ``count`` (None if there is no such record)

    @property
    def digest(self) -> str:
        """What the key's next checkpoint names as ``previous``."""
        return hashlib.sha256(self.body + b"\x00" + self.signature).hexdigest()

    @property
    def head(self) -> bytes:
        return bytes.fromhex(self.fields["head"])


@attrs.frozen
class CheckpointReport:
    """What :func:`verify_checkpoints` found (it raises LedgerCorrupt on any problem instead)."""

    key: str  # the key's fingerprint
    checkpoints: int
    signed_count: int  # records the last checkpoint covers
    signed_head: str
    records: int  # records the store holds
    stopped: bool  # whether the last checkpoint is a publisher's stop

    @property
    def unsigned(self) -> int:
        """Records after the last checkpoint (a truncation or rewrite of these alone is not detectable)."""
        return self.records - self.signed_count


def _kind(store: Store) -> str:
    return "postgres" if is_url(store.name) else "sqlite"


def _stored_header(store: Store, where: str) -> tuple[dict[str, Any], bytes]:
    row = store.execute("SELECT value FROM meta WHERE key = 'header'").fetchone()
    try:
        header = json.loads(row[0])
        if not isinstance(header, dict):
            raise ValueError("not a JSON object")
        return header, hashlib.sha256(canonical(header)).digest()
    except (TypeError, ValueError) as exc:
        raise LedgerCorrupt(f"{where}: the stored header is missing or malformed: {exc}") from None


def _read(store: Store, key: str, *, last_only: bool = False) -> list[Checkpoint]:
    """The key's checkpoints in number order (or its last alone), each with the stored hash of the record
    it signs."""
    if store.execute(_EXISTS[_kind(store)]).fetchone() is None:
        return []
    rows = store.execute(
        "SELECT c.number, c.count, c.body, c.signature, r.hash FROM checkpoints c "
        "LEFT JOIN records r ON r.seq = c.count WHERE c.key = ? "
        + ("ORDER BY c.number DESC LIMIT 1" if last_only else "ORDER BY c.number"),
        (key,),
    ).fetchall()
    found = []
    for number, count, body, signature, stored in rows:
        try:
            fields = json.loads(body)
            if not isinstance(fields, dict):
                raise ValueError("not a JSON object")
            found.append(
                Checkpoint(
                    number=int(number),
                    count=int(count),
                    body=str(body).encode(),
                    signature=bytes(signature),
                    fields=fields,
                    stored_hash=None if stored is None else bytes(stored),
                )
            )
        except (TypeError, ValueError) as exc:
            raise LedgerCorrupt(f"checkpoint {number!r} of key {key}: malformed row: {exc}") from None
    return found


def _check(
    found: list[Checkpoint],
    public: Ed25519PublicKey,
    header: dict[str, Any],
    start: bytes,
    count: int,
    *,
    every_signature: bool,
) -> None:
    """LedgerCorrupt naming the first checkpoint that fails (see the module docstring); ``every_signature``
    False checks the last one's signature and the links of the others."""
    key = fingerprint(public)
    if not found:
        raise LedgerCorrupt(
            f"the store holds no checkpoint signed by key {key}: its checkpoints were deleted, or it was never "
            "signed with this key (sign a history you vouch for with budgetcheck sign)"
        )
    previous: Checkpoint | None = None
    for index, checkpoint in enumerate(found):
        where = f"checkpoint {checkpoint.number} of key {key}"
        if checkpoint.number != index + 1:
            raise LedgerCorrupt(f"checkpoint {index + 1} of key {key} is missing (deleted): the next is {where}")
        fields = checkpoint.fields
        if every_signature or index == len(found) - 1:
            try:
                public.verify(checkpoint.signature, DOMAIN + checkpoint.body)
            except InvalidSignature:
                raise LedgerCorrupt(f"{where}: the signature is not this key's (forged or replaced)") from None
        expected = {
            "format": FORMAT,
            "version": VERSION,
            "key": key,
            "number": checkpoint.number,
            "count": checkpoint.count,
            "previous": None if previous is None else previous.digest,
        }
        wrong = sorted(name for name, value in expected.items() if fields.get(name) != value)
        if wrong:
            raise LedgerCorrupt(
                f"{where}: {', '.join(f'{n}={fields.get(n)!r}' for n in wrong)} in the signed body, expected "
                f"{', '.join(f'{n}={expected[n]!r}' for n in wrong)} (a checkpoint was deleted, moved or replaced)"
            )
        if fields.get("header") != header or fields.get("genesis") != start.hex():
            raise LedgerCorrupt(
                f"{where}: the signed header {fields.get('header')!r} is not the stored header {header!r} "
                "(the header was rewritten)"
            )
        if previous is not None and checkpoint.count < previous.count:
            raise LedgerCorrupt(f"{where}: signs {checkpoint.count} records, fewer than the checkpoint before it")
        if checkpoint.count > count:
            raise LedgerCorrupt(
                f"{where} signs {checkpoint.count} records, but the store holds {count}: records were removed "
                "(truncated or rolled back)"
            )
        held = start if checkpoint.count == 0 else checkpoint.stored_hash
        if held is None or fields.get("head") != held.hex():
            raise LedgerCorrupt(
                f"{where}: record {checkpoint.count} is not the signed one (hash {None if held is None else held.hex()}"
                f", signed {fields.get('head')}): the history was rewritten or rolled back"
            )
        previous = checkpoint


def _no_unsigned_release(store: Store, after: int, key: str) -> None:
    row = store.execute("SELECT MIN(seq) FROM records WHERE kind = 1 AND seq > ?", (after,)).fetchone()
    if row is not None and row[0] is not None:
        raise LedgerCorrupt(
            f"the release at record {row[0]} is after the last checkpoint of key {key} (record {after}): a "
            "publisher holding the key signs every release it stores, so this one was appended without it"
        )


def verify_checkpoints(target: str | Path, verify_key: PublicKeyLike) -> CheckpointReport:
    """Check every checkpoint of ``verify_key`` in the ledger store ``target`` (a file or a URL), all in
    one read snapshot; LedgerCorrupt names the first problem. Pair it with :func:`budgetcheck.audit_file`
    (the whole chain) as ``budgetcheck audit --key`` does.

    >>> import tempfile, pathlib, budgetcheck as bc
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = generate_keys(folder / "k.pem", folder / "k.pub")
    >>> ledger = bc.open_ledger(folder / "l.db", bc.WindowLedger(epsilon=1.0, w=4), signing_key=folder / "k.pem")
    >>> ledger.spend(1, 0.5, purpose="x"); ledger.close()
    >>> verify_checkpoints(folder / "l.db", folder / "k.pub").checkpoints  # at the genesis and at the close
    2
    """
    public = load_verify_key(verify_key)
    store = open_store(target)
    try:
        with store.guard("read the checkpoints"):
            store.begin_read()
            try:
                header, start = _stored_header(store, store.name)
                count, head = stored_head(store, store.name)
                found = _read(store, fingerprint(public))
                try:
                    _check(found, public, header, start, count, every_signature=True)
                    _no_unsigned_release(store, found[-1].count, fingerprint(public))
                except LedgerCorrupt as exc:
                    raise LedgerCorrupt(f"{store.name}: {exc}") from None
            finally:
                store.rollback()
    finally:
        store.close()
    last = found[-1]
    return CheckpointReport(
        key=fingerprint(public),
        checkpoints=len(found),
        signed_count=last.count,
        signed_head=last.fields["head"],
        records=count,
        stopped=last.fields.get("stop") is True,
    )


@final
class Checkpoints:
    """The checkpoints of one journal: verified at load (its start), written at commits when a signer."""

    __slots__ = ("_every", "_header", "_key", "_known", "_public", "_signed", "_signer", "_table", "_wrote")

    def __init__(
        self,
        *,
        verify_key: PublicKeyLike | None = None,
        signing_key: PrivateKeyLike | None = None,
        every: int = DEFAULT_EVERY,
    ) -> None:
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise InvalidArgument(f"checkpoint_every={every!r} must be an integer >= 1 (records between checkpoints)")
        self._signer = None if signing_key is None else load_signing_key(signing_key)
        public = None if verify_key is None else load_verify_key(verify_key)
        if self._signer is not None:
            own = self._signer.public_key()
            if public is not None and fingerprint(public) != fingerprint(own):
                raise InvalidArgument(
                    f"verify_key (key {fingerprint(public)}) is not the public half of signing_key (key "
                    f"{fingerprint(own)}): give one of them"
                )
            public = own
        if public is None:
            raise InvalidArgument("give verify_key or signing_key")
        self._public: Ed25519PublicKey = public
        self._key = fingerprint(public)
        self._header: tuple[dict[str, Any], bytes] | None = None  # the stored header and H_0 verified at load
        self._table = False  # whether this object has made sure the checkpoints table exists
        self._wrote = False  # whether a transaction was committed after a load that verified the store
        self._every = every
        self._signed = 0  # the record count of the last checkpoint seen (a hint: the store is read before signing)
        self._known: str | None = None  # the digest of the last checkpoint whose signature this object checked or made

    @property
    def key(self) -> str:
        """The fingerprint of the key (its checkpoints are stored under it)."""
        return self._key

    @property
    def public_key(self) -> Ed25519PublicKey:
        return self._public

    def prepare(self, journal: Journal) -> None:
        """A signer on a store with no checkpoint of its key: sign the genesis of an empty store (under the
        write lock); a store that holds records is refused at load, as an unsigned one."""
        if self._signer is None:
            return
        store = journal.store
        with store.guard("write a checkpoint"):
            store.begin_write()
            try:
                count, head = stored_head(store, store.name)
                if count == 0 and not _read(store, self.key, last_only=True):
                    self.sign(store, count, head, stop=False)
                store.commit()
            finally:
                store.rollback()

    def start(self, journal: Journal, since: int | None) -> tuple[int, bytes]:
        """At load, in its read snapshot: verify the checkpoints; (record, hash) to re-hash the chain from:
        0 and H_0 when ``since`` is None, else the last checkpoint's record, or the record before the first
        spend row with t >= ``since`` if that comes earlier (those rows must chain into a signed head)."""
        store = journal.store
        header, start = _stored_header(store, store.name)
        count, _ = stored_head(store, store.name)
        found = _read(store, self.key)
        try:
            _check(found, self._public, header, start, count, every_signature=False)
            _no_unsigned_release(store, found[-1].count, self.key)
        except LedgerCorrupt as exc:
            raise LedgerCorrupt(f"{store.name}: {exc}") from None
        last = found[-1]
        self._signed, self._known, self._header = last.count, last.digest, (header, start)
        if since is None or last.count == 0:
            return 0, start
        row = store.execute("SELECT MIN(seq) FROM records WHERE kind = 0 AND t >= ?", (since,)).fetchone()
        first = last.count + 1 if row is None or row[0] is None else int(row[0])
        if first > last.count:
            return last.count, last.head
        if first <= 1:
            return 0, start
        before = store.execute("SELECT hash FROM records WHERE seq = ?", (first - 1,)).fetchone()
        if before is None or not isinstance(before[0], bytes):
            return 0, start  # a missing row: the whole chain's check names it
        return first - 1, bytes(before[0])

    def before_commit(self, journal: Journal, count: int, head: bytes, *, released: bool) -> None:
        """In the journal's write transaction, before its COMMIT: sign (count, head) if a release is in it
        or ``every`` records were appended since the last checkpoint."""
        self._wrote = True  # a write transaction runs only after a load that verified the store
        if self._signer is None or not (released or count - self._signed >= self._every):
            return
        store = journal.store
        with store.guard("write a checkpoint"):
            found = _read(store, self.key, last_only=True)
            if released or not found or count - found[-1].count >= self._every:
                self.sign(store, count, head, stop=False, previous=found[-1] if found else None)
            else:
                self._signed = found[-1].count

    def at_close(self, journal: Journal) -> None:
        """At close, a signer that wrote in this session signs the head if its last checkpoint is behind it,
        so that a clean shutdown leaves no unsigned record; best effort (a store that fails is not signed)."""
        if self._signer is None or not self._wrote or journal.closed:
            return
        with contextlib.suppress(BudgetcheckError):
            self.stop(journal, final=False)

    def stop(self, journal: Journal, *, final: bool = True) -> None:
        """A publisher's stop: sign the head as it is now (catching up first, so what is signed was verified);
        ``final`` False (a close) signs only if the last checkpoint is behind the head."""
        if self._signer is None:
            return
        journal.begin()
        try:
            store = journal.store
            with store.guard("write a checkpoint"):
                count, head = stored_head(store, store.name)
                found = _read(store, self.key, last_only=True)
                behind = not found or found[-1].count != count
                if behind or (final and found[-1].fields.get("stop") is not True):
                    self.sign(store, count, head, stop=final, previous=found[-1] if found else None)
            journal.commit()
        finally:
            journal.rollback()

    def sign(
        self, store: Store, count: int, head: bytes, *, stop: bool, previous: Checkpoint | None = None
    ) -> Checkpoint:
        """Insert the key's next checkpoint after ``previous`` (its last; None for the first) signing
        (``count``, ``head``), inside the caller's write transaction; the caller has verified the chain up
        to there (a signature vouches for it). Returns the checkpoint."""
        assert self._signer is not None
        # the header verified at load (a header edited since is never signed), else the one read under the lock
        header, start = self._header if self._header is not None else _stored_header(store, store.name)
        if previous is not None and previous.digest != self._known:  # never link to one the key did not sign
            try:
                self._public.verify(previous.signature, DOMAIN + previous.body)
            except InvalidSignature:
                raise LedgerCorrupt(
                    f"{store.name}: checkpoint {previous.number} of key {self.key}: the signature is not this key's "
                    "(forged or replaced); nothing more is signed"
                ) from None
        if not self._table:
            store.execute(_TABLE[_kind(store)])
            self._table = True
        body = canonical(
            {
                "format": FORMAT,
                "version": VERSION,
                "key": self.key,
                "number": 1 if previous is None else previous.number + 1,
                "previous": None if previous is None else previous.digest,
                "count": count,
                "head": head.hex(),
                "genesis": start.hex(),
                "header": header,
                "stop": stop,
                "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            }
        )
        signature = self._signer.sign(DOMAIN + body)
        number = 1 if previous is None else previous.number + 1
        store.execute(
            "INSERT INTO checkpoints (key, number, count, body, signature) VALUES (?, ?, ?, ?, ?)",
            (self.key, number, count, body.decode(), signature),
        )
        made = Checkpoint(
            number=number, count=count, body=body, signature=signature, fields=json.loads(body), stored_hash=head
        )
        self._signed, self._known = count, made.digest
        return made


def sign_ledger(
    target: str | Path, signing_key: PrivateKeyLike, *, previous_key: PublicKeyLike | None = None
) -> CheckpointReport:
    """Sign the current head of the store ``target`` after auditing its whole chain and composition
    (``budgetcheck sign``): how a store written before signing, or under a key being retired
    (``previous_key``, whose checkpoints must verify), comes under ``signing_key``. Signing vouches for
    the history as it is: audit it, with the old key if it had one, before you sign."""
    from budgetcheck.durable.audit_file import audit_file

    signer = Checkpoints(signing_key=signing_key)
    if previous_key is not None:
        verify_checkpoints(target, previous_key)
    report = audit_file(target)
    if not report.ok:
        raise LedgerCorrupt(
            f"{report.path}: not signed: {report.problem or 'composition violated: ' + '; '.join(report.violations)}"
        )
    store = open_store(target)
    try:
        with store.guard("write a checkpoint"):
            store.begin_write()
            try:
                header, start = _stored_header(store, store.name)
                count, head = stored_head(store, store.name)
                if count != report.records or head.hex() != report.head:
                    raise LedgerCorrupt(f"{store.name}: the ledger changed during its audit: not signed; try again")
                found = _read(store, signer.key)
                if found:
                    _check(found, signer.public_key, header, start, count, every_signature=True)
                signer.sign(store, count, head, stop=False, previous=found[-1] if found else None)
                store.commit()
            finally:
                store.rollback()
    finally:
        store.close()
    return verify_checkpoints(target, signer.public_key)


def sign_stop(journal: Journal | None, error: BaseException | None) -> None:
    """A publisher's stop: sign the head (:meth:`Checkpoints.stop`) unless the store failed or was found
    altered (``error``); a failure to sign while another error is on its way never hides that error."""
    if journal is None or journal.checkpoints is None or journal.closed:
        return
    if isinstance(error, (LedgerCorrupt, LedgerBusy, LedgerUnavailable)):
        return
    if error is None:
        journal.checkpoints.stop(journal)
        return
    with contextlib.suppress(BudgetcheckError):
        journal.checkpoints.stop(journal)
