"""A concurrency campaign against one ledger store (SQLite files in a directory, or PostgreSQL ledgers): several
processes spend on the newest
timestamp at once (most spends collide with another writer's, many are refused), then every
window is audited and every accepted spend is looked up in the file.

What it checks is the promise of :func:`budgetcheck.open_ledger`: writers on one store are
serialised, so together they never exceed a window (Kellaris et al. 2014, Theorem 3), and no
spend a writer was told it made is missing from the file (nor one it was refused is there).
"""

from __future__ import annotations

import multiprocessing
import random
import time
import uuid
from collections import Counter
from fractions import Fraction
from pathlib import Path
from typing import Any

import attrs

from budgetcheck.durable.audit_file import audit_file, read_meta
from budgetcheck.durable.journal import ROW_COLUMNS, decode_row, is_url, open_store
from budgetcheck.durable.ledger_file import open_ledger
from budgetcheck.ledger.errors import BudgetExceeded, TimestampOrder
from budgetcheck.ledger.params import WEventParams
from budgetcheck.ledger.wevent import WindowLedger

_AMOUNTS = (0.05, 0.1, 0.15, 0.3, 1 / 3, 0.5)  # large enough that most windows fill and many spends are refused
Spend = tuple[int, float, str]
Report = tuple[list[Spend], int, int, str]  # accepted, refused, stale, error


@attrs.frozen
class CampaignResult:
    """Totals over every run: spends accepted, refused for the budget and refused as stale (another
    writer had moved to a later timestamp), the worst window / ε seen by the audit,
    runs whose audit failed, accepted spends missing from the file, stored spends nobody was told of,
    and the errors of writers that failed."""

    runs: int
    writers: int
    durability: str
    accepted: int
    refused: int
    stale: int
    worst_ratio: Fraction
    failed_audits: int
    lost: int
    phantom: int
    errors: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.worst_ratio <= 1 and not (self.failed_audits or self.lost or self.phantom or self.errors)


class _Jittered:
    """A store connection that pauses at random (2 ms, 10 ms after COMMIT or ROLLBACK) after each statement: other
    writers get to commit in every gap a writer leaves, including the ones right after it lets the
    lock go (where a read outside the lock would miss their commits)."""

    def __init__(self, db: Any, rng: random.Random) -> None:
        self._db, self._rng = db, rng

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)

    def execute(self, sql: str, *args: Any) -> Any:
        cursor = self._db.execute(sql, *args)
        if self._rng.random() < 0.5:  # longer after the lock is let go: SQLite's busy handler wakes in 1–100 ms steps
            time.sleep(self._rng.random() * (0.01 if sql.lstrip()[:6].upper() in ("COMMIT", "ROLLBA") else 0.002))
        return cursor


def _writer(
    path: str,
    durability: str,
    params: WEventParams,
    worker: int,
    spends: int,
    seed: int,
    start: multiprocessing.synchronize.Event,
    results: multiprocessing.queues.Queue[Report],
) -> None:
    try:
        _spend(path, durability, params, worker, spends, seed, start, results)
    except BaseException as exc:  # a writer that fails is a finding, not a hang
        results.put(([], 0, 0, f"writer {worker}: {type(exc).__name__}: {exc}"))


def _spend(
    path: str,
    durability: str,
    params: WEventParams,
    worker: int,
    spends: int,
    seed: int,
    start: multiprocessing.synchronize.Event,
    results: multiprocessing.queues.Queue[Report],
) -> None:
    ledger = open_ledger(path, WindowLedger(params, sampler="numpy-laplace"), durability=durability)
    rng = random.Random(seed)
    journal = ledger.journal
    assert journal is not None
    journal.interpose(lambda db: _Jittered(db, rng))
    accepted: list[Spend] = []
    refused = stale = 0
    start.wait()
    for k in range(spends):
        t = max(ledger.t, 1 + k // 3)  # the newest timestamp this writer knows of, moving on every third spend
        amount, purpose = rng.choice(_AMOUNTS), f"writer {worker} spend {k}"
        try:
            ledger.spend(t, amount, purpose=purpose)
            accepted.append((t, amount, purpose))
        except BudgetExceeded:
            refused += 1
        except TimestampOrder:
            stale += 1
    ledger.close()
    results.put((accepted, refused, stale, ""))


def run_campaign(
    directory: str | Path,
    *,
    writers: int,
    durability: str = "process",
    runs: int = 1,
    spends: int = 40,
    params: WEventParams = WEventParams(epsilon=1.0, w=4),
    seed: int = 0,
) -> CampaignResult:
    """``runs`` rounds of ``writers`` processes (forked) spending ``spends`` times each on a fresh
    ledger file in ``directory`` (or, given a ``postgresql://`` URL, a fresh ledger in that database);
    every ledger is audited and compared with what the writers were told."""
    context = multiprocessing.get_context("fork")
    totals = Counter[str]()
    worst = Fraction(0)
    errors: list[str] = []
    for run in range(runs):
        path = _fresh(directory, f"campaign-{writers}-{durability}-{run}")
        open_ledger(path, WindowLedger(params, sampler="numpy-laplace"), durability=durability).close()
        start, results = context.Event(), context.Queue()
        workers = [
            context.Process(
                target=_writer,
                args=(path, durability, params, k, spends, seed * 1_000_003 + run * 101 + k, start, results),
            )
            for k in range(writers)
        ]
        for process in workers:
            process.start()
        start.set()
        told: Counter[Spend] = Counter()
        for _ in workers:
            accepted, refused, stale, error = results.get(timeout=600)
            if error:
                errors.append(error)
            told.update(accepted)
            totals["accepted"] += len(accepted)
            totals["refused"] += refused
            totals["stale"] += stale
        for process in workers:
            process.join(timeout=60)
        report = audit_file(path)
        worst = max(worst, report.worst_ratio)
        totals["failed"] += not report.ok
        stored = Counter((r.t, float(r.amounts[0]), r.purpose) for r in _stored(path))
        totals["lost"] += sum((told - stored).values())
        totals["phantom"] += sum((stored - told).values())
    return CampaignResult(
        runs=runs,
        writers=writers,
        durability=durability,
        accepted=totals["accepted"],
        refused=totals["refused"],
        stale=totals["stale"],
        worst_ratio=worst,
        failed_audits=totals["failed"],
        lost=totals["lost"],
        phantom=totals["phantom"],
        errors=tuple(errors),
    )


def _fresh(store: str | Path, name: str) -> str:
    """A new ledger: a file ``name``.db in the directory ``store``, or a new ledger name in the database at that URL."""
    if is_url(store):
        from budgetcheck.durable.postgres import with_ledger

        return with_ledger(str(store), f"{name.replace('-', '_')}_{uuid.uuid4().hex[:12]}")
    return str(Path(store) / f"{name}.db")


def _stored(path: str) -> list[Any]:
    """Every spend record in the file, read without the ledger's checks (which an over-spent file fails)."""
    db = open_store(path)
    try:
        header = read_meta(db, path)[0]
        return [
            decode_row(row, header).record for row in db.execute(f"SELECT {ROW_COLUMNS} FROM records WHERE kind = 0")
        ]
    finally:
        db.close()
