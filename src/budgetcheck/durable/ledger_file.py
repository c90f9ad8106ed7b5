"""Durable ledgers: keep any budgetcheck ledger in an SQLite file (accounting rules §8).

``open_ledger(path, ledger)`` attaches a fresh ledger to a ledger file, creating it or loading
what it holds. From then on every charged operation is one transaction: catch up with what other
processes committed, check, append the records (hash-chained) and the output, commit, and only then
return the value. A process killed at any point loses nothing committed and can never have released
a value whose spend is not on disk; several processes on one file are serialised by SQLite's write
lock, so together they can never exceed a window.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TypeVar

from budgetcheck.durable.checkpoint import DEFAULT_EVERY, Checkpoints, PrivateKeyLike, PublicKeyLike
from budgetcheck.durable.journal import DURABILITY, LOCK_TIMEOUT, Journal
from budgetcheck.durable.transaction import attach
from budgetcheck.ledger.core import LedgerCore
from budgetcheck.ledger.errors import InvalidArgument

L = TypeVar("L", bound=LedgerCore)


def open_ledger(
    path: str | Path,
    ledger: L,
    *,
    durability: str = "full",
    lock_timeout: float = LOCK_TIMEOUT,
    verify_key: PublicKeyLike | None = None,
    signing_key: PrivateKeyLike | None = None,
    checkpoint_every: int = DEFAULT_EVERY,
) -> L:
    """Keep ``ledger`` (fresh, unused) in the file at ``path``; returns the same ledger.

    A new file is created with the ledger's header; an existing file must have been kept under the
    same notion and parameters (else InvalidArgument names what differs), and its spends are loaded.
    ``durability``: 'full' (fsync at every commit: survives power loss) or 'process' (survives a
    killed process; several times faster). ``lock_timeout``: how many seconds a charged operation
    waits for another process's transaction before it raises LedgerBusy (nothing charged). Opening
    verifies the file's whole hash chain; an empty, damaged or edited file raises LedgerCorrupt. A
    numpy-sampler ledger draws from SeedSequence([seed, session, head count, head hash]) so that a
    reopened file never reuses noise, even if its session counter was reset.

    Signed checkpoints (:mod:`budgetcheck.durable.checkpoint`, docs/explanation/tamper-evidence.md):
    ``verify_key`` (an Ed25519 public key or its PEM file) verifies the store's checkpoints of that key
    (none at all is LedgerCorrupt), then re-hashes only the rows after the last one and those the windows
    still count; ``signing_key`` (the private key, kept outside the store) also signs the head every
    ``checkpoint_every`` records and at every stored release (a new store is signed at its genesis).

    Example:
        A spend is on disk before the call returns; another process, or a later one, sees it:

        >>> from budgetcheck import WindowLedger, audit_file, open_ledger
        >>> with open_ledger("ledger.db", WindowLedger(epsilon=1.0, w=3)) as ledger:
        ...     ledger.spend(1, 0.5, purpose="publication")
        >>> with open_ledger("ledger.db", WindowLedger(epsilon=1.0, w=3)) as again:
        ...     print(again.remaining(2))
        [0.5]
        >>> audit_file("ledger.db").ok  # the hash chain and every window
        True
    """
    checkpoints = _checkpoints(verify_key, signing_key, checkpoint_every)  # bad keys: before the store is made
    journal = _journal(path, ledger, durability, lock_timeout)
    try:
        if checkpoints is not None:
            checkpoints.prepare(journal)
            journal.checkpoints = checkpoints
        attach(ledger, journal)
    except BaseException:
        journal.close()
        raise
    return ledger


def replay_ledger(
    path: str | Path,
    ledger: L,
    *,
    durability: str = "full",
    lock_timeout: float = LOCK_TIMEOUT,
    verify_key: PublicKeyLike | None = None,
    signing_key: PrivateKeyLike | None = None,
    checkpoint_every: int = DEFAULT_EVERY,
) -> L:
    """Like :func:`open_ledger`, but the stored operations must be replayed by the same mechanism
    (a restarted publisher): each replayed call is matched against the file and gets its stored output."""
    checkpoints = _checkpoints(verify_key, signing_key, checkpoint_every)  # bad keys: before the store is made
    journal = _journal(path, ledger, durability, lock_timeout)
    try:
        if checkpoints is not None:
            checkpoints.prepare(journal)
            journal.checkpoints = checkpoints
        rows = journal.load(None)
    except BaseException:
        journal.close()
        raise
    try:
        attach(ledger, journal, replay=rows)
    except BaseException:
        journal.close()
        raise
    return ledger


def _checkpoints(
    verify_key: PublicKeyLike | None, signing_key: PrivateKeyLike | None, every: int
) -> Checkpoints | None:
    """The journal's checkpoints (verified at load, signed at commits) if a key is given."""
    if verify_key is None and signing_key is None:
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise InvalidArgument(f"checkpoint_every={every!r} must be an integer >= 1 (records between checkpoints)")
        return None
    return Checkpoints(verify_key=verify_key, signing_key=signing_key, every=every)


def _journal(path: str | Path, ledger: LedgerCore, durability: str, lock_timeout: float) -> Journal:
    if not isinstance(ledger, LedgerCore):
        raise InvalidArgument(
            f"ledger must be a WindowLedger, PersonalizedLedger or SwellfishLedger, got {type(ledger).__name__}"
        )
    if durability not in DURABILITY:
        raise InvalidArgument(f"durability={durability!r} must be one of {sorted(DURABILITY)}")
    if ledger.t or ledger.journal is not None or ledger.refusals:
        raise InvalidArgument(f"{ledger!r} has already been used: open a ledger file with a fresh ledger")
    if isinstance(lock_timeout, bool) or not isinstance(lock_timeout, (int, float)) or not 0 < lock_timeout < math.inf:
        raise InvalidArgument(f"lock_timeout={lock_timeout!r} must be a finite number of seconds > 0")
    return Journal(
        path, ledger.header(), sampler=ledger.sampler, durability=durability, lock_timeout=float(lock_timeout)
    )
