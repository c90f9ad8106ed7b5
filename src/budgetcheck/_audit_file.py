"""The offline auditor of a ledger file: the hash chain, the head, and every composition constraint.

Reads the rows in order without trusting the writer's code: recomputes H_k = SHA-256(H_{k−1} ‖ row k)
from H_0 = SHA-256(header), stops at the first row that is missing, of an unknown version or does not
continue the chain, and compares the end with the stored (and optionally an externally kept) head,
so that a deleted tail is not read as a shorter history. w-event files are checked streaming, in
memory bounded by the window (Kellaris et al. 2014, Theorem 3, exactly, in units of 2**-1127);
personalized and Swellfish files by the brute-force checkers of :mod:`budgetcheck._audit_notions`.
"""

from __future__ import annotations

import collections
import concurrent.futures
import functools
import json
import math
import multiprocessing
import sqlite3
import struct
from fractions import Fraction
from pathlib import Path
from typing import Any

import attrs

from budgetcheck import rounding
from budgetcheck._audit import WindowFinding
from budgetcheck._audit_notions import audit_personalized, audit_swellfish
from budgetcheck._errors import LedgerCorrupt
from budgetcheck._journal import FILE_VERSION, FORMAT, RECORD_VERSION, canonical, connect, decode_row, genesis, row_hash, stored_head
from budgetcheck._policies import PolicyCollection, StreamPolicy
from budgetcheck._records import LedgerHeader, SpendRecord


@attrs.frozen
class FileAudit:
    """What the auditor found: the chain's first problem (if any) and the composition check."""

    path: str
    notion: str
    records: int
    head: str
    problem: str | None
    checked: int
    worst_ratio: Fraction
    violations: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return self.problem is None and not self.violations


@attrs.define
class StreamingWindows:
    """Σ of every window of w timestamps per run, exactly, fed records in file order.

    A record may charge a timestamp up to w − 1 before the latest (footprint charges), so a window
    ending at e is final once the latest timestamp passes e + w − 1; only the timestamps that can
    still matter are kept.
    """

    w: int
    eps_units: int
    runs: int
    max_violations: int = 10
    totals: dict[int, list[int]] = attrs.field(factory=dict)
    latest: int = 0
    done: int = 0  # windows ending at 1..done are final and checked
    window: list[int] = attrs.field(factory=list)
    history: collections.deque[Any] = attrs.field(factory=collections.deque)
    checked: int = 0
    worst: WindowFinding | None = None
    worst_units: int = -1
    violations: list[WindowFinding] = attrs.field(factory=list)

    def add(self, t: int, units: list[int]) -> None:
        if t <= self.done:
            raise LedgerCorrupt(f"a record charges t={t}, more than w - 1 = {self.w - 1} before a later record")
        slot = self.totals.get(t)
        self.totals[t] = units if slot is None else [a + b for a, b in zip(slot, units, strict=True)]
        if t > self.latest:
            self.latest = t
            if t - self.w > self.done + 4096:  # finalize in chunks (a record may still charge t − w + 1.. t)
                self._finalize(t - self.w)

    def finish(self) -> None:
        self._finalize(self.latest)

    def _finalize(self, until: int) -> None:
        zero = [0] * self.runs
        if not self.window:
            self.window = list(zero)
        history, totals, w = self.history, self.totals, self.w
        if self.runs == 1:
            self._finalize_one(until)
            return
        for end in range(self.done + 1, until + 1):
            entering = totals.pop(end, zero)
            leaving = history.popleft() if len(history) == w else zero
            history.append(entering)
            self.window = [s + a - b for s, a, b in zip(self.window, entering, leaving, strict=True)]
            self.checked += self.runs
            for run, total in enumerate(self.window):
                if total > self.worst_units:
                    self.worst_units = total
                    self.worst = WindowFinding(run=run, start=max(1, end - self.w + 1), end=end, total=rounding.units_to_fraction(total))
                if total > self.eps_units and len(self.violations) < self.max_violations:
                    self.violations.append(WindowFinding(run=run, start=max(1, end - self.w + 1), end=end, total=rounding.units_to_fraction(total)))
        self.done = max(self.done, until)

    def _finalize_one(self, until: int) -> None:
        """:meth:`_finalize` for one run, on plain ints."""
        history, totals, w, eps = self.history, self.totals, self.w, self.eps_units
        window = self.window[0]
        worst = self.worst_units
        for end in range(self.done + 1, until + 1):
            entering = totals.pop(end, None)
            value = 0 if entering is None else entering[0]
            leaving = history.popleft() if len(history) == w else 0
            history.append(value)
            window += value - leaving
            if window > worst:
                worst = window
                self.worst = WindowFinding(run=0, start=max(1, end - w + 1), end=end, total=rounding.units_to_fraction(window))
            if window > eps and len(self.violations) < self.max_violations:
                self.violations.append(WindowFinding(run=0, start=max(1, end - w + 1), end=end, total=rounding.units_to_fraction(window)))
        self.checked += max(0, until - self.done)
        self.window, self.worst_units, self.done = [window], worst, max(self.done, until)


_PARALLEL_FROM = 200_000  # records; below this a second process costs more than it saves


def verify_chain(path: str, header_json: str, after: int, upto: int, previous_hex: str) -> tuple[str | None, int, str]:
    """Check rows after..upto continue the chain from ``previous_hex``: (first problem, last good seq, its hash)."""
    db = connect(path)
    previous, seen = bytes.fromhex(previous_hex), after
    try:
        cursor = db.execute("SELECT seq, version, op, t, amounts, detail, output, hash FROM records WHERE seq > ? AND seq <= ? ORDER BY seq",
                            (after, upto))
        for seq, version, op, t, amounts, detail, output, digest in cursor:
            if seq != seen + 1:
                return f"record {seen + 1} is missing (the next stored record is {seq})", seen, previous.hex()
            if version != RECORD_VERSION:
                return f"record {seq}: record version {version!r} is not supported (expected {RECORD_VERSION})", seen, previous.hex()
            if row_hash(previous, version, seq, op, t, amounts, detail.encode(), output) != digest:
                return f"record {seq}: its hash does not match its contents (the record was edited)", seen, previous.hex()
            previous, seen = digest, seq
    except sqlite3.DatabaseError as exc:
        return f"record {seen + 1}: unreadable ({exc})", seen, previous.hex()
    finally:
        db.close()
    return None, seen, previous.hex()


def audit_file(path: str | Path, *, expect_head: str | None = None, max_violations: int = 10) -> FileAudit:
    """Verify the chain of a ledger file and re-check its composition theorem; never raises for a
    broken chain (that is a finding), only for a file that is not a ledger file at all."""
    db = connect(path)
    try:
        header, count, head = _read_meta(db, str(path))
        return _audit(db, str(path), header, count, head, expect_head, max_violations)
    except sqlite3.DatabaseError as exc:
        raise LedgerCorrupt(f"{path}: the file is damaged (truncated or overwritten): {exc}") from exc
    finally:
        db.close()


def _read_meta(db: sqlite3.Connection, path: str) -> tuple[LedgerHeader, int, str]:
    try:
        meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
    except sqlite3.DatabaseError as exc:
        raise LedgerCorrupt(f"{path}: not a budgetcheck ledger file ({exc})") from exc
    if meta.get("format") != FORMAT:
        raise LedgerCorrupt(f"{path}: format {meta.get('format')!r} is not {FORMAT!r}")
    if meta.get("version") != str(FILE_VERSION):
        raise LedgerCorrupt(f"{path}: file version {meta.get('version')!r} is not supported (expected {FILE_VERSION})")
    try:
        raw = json.loads(meta["header"])
        header = LedgerHeader(notion=str(raw["notion"]), epsilon=float(raw["epsilon"]), w=int(raw["w"]), runs=int(raw["runs"]),
                              classes=raw.get("classes", ()), policies=raw.get("policies", ()))
    except (KeyError, TypeError, ValueError) as exc:
        raise LedgerCorrupt(f"{path}: malformed meta table: {exc}") from exc
    count, head = stored_head(db, path)
    return header, count, head.hex()


def _audit(db: sqlite3.Connection, path: str, header: LedgerHeader, count: int, head: str,
           expect_head: str | None, max_violations: int) -> FileAudit:
    streaming = header.notion == "w-event"
    job = (path, canonical(header.to_json()).decode(), 0, 2**62, genesis(header).hex())
    composition = None
    if count < _PARALLEL_FROM:
        problem, seen, last = verify_chain(*job)
        composition = _composition(db, header, streaming, max_violations)
    else:
        try:
            with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
                # The hash chain is checked in a second process while this one re-checks the windows.
                chain = pool.submit(verify_chain, *job)
                composition = _composition(db, header, streaming, max_violations)
                problem, seen, last = chain.result()
        except concurrent.futures.process.BrokenProcessPool:  # e.g. a __main__ that cannot be re-imported
            problem, seen, last = verify_chain(*job)
    if composition is None:
        composition = _composition(db, header, streaming, max_violations)
    if problem is None and (seen != count or last != head):
        problem = f"the file ends at record {seen}, but its head names record {count}: records were removed or the head was edited"
    if problem is None and expect_head is not None and last != expect_head.lower():
        problem = f"the head {last} is not the expected {expect_head} (the file was rolled back or replaced)"
    checked, worst, violations, broken = composition
    if problem is None and broken is not None:
        problem = broken
    return FileAudit(path=path, notion=header.notion, records=seen, head=last, problem=problem,
                     checked=checked, worst_ratio=worst, violations=violations)


def _composition(db: sqlite3.Connection, header: LedgerHeader, streaming: bool,
                 max_violations: int) -> tuple[int, Fraction, tuple[str, ...], str | None]:
    """(constraints checked, worst sum / budget, violations, a malformed record) over every stored record."""
    if not streaming:
        kept: list[SpendRecord] = []
        for row in db.execute("SELECT seq, version, op, t, amounts, detail, output FROM records ORDER BY seq"):
            try:
                kept.append(decode_row(row, header).record)
            except LedgerCorrupt as exc:
                return 0, Fraction(0), (), str(exc)
        if header.notion == "personalized":
            result = audit_personalized(kept, [(w, eps) for w, eps, _ in header.classes], runs=header.runs)
        else:
            policies = PolicyCollection([StreamPolicy(a, b, theta) for a, b, theta in header.policies])
            result = audit_swellfish(kept, policies, epsilon=header.epsilon, runs=header.runs)
        return result.checked, result.worst_ratio, result.violations, None
    windows = StreamingWindows(header.w, rounding.to_units(header.epsilon), header.runs, max_violations)
    unpack = struct.Struct(f"<{header.runs}d").unpack
    to_units = functools.lru_cache(maxsize=4096)(rounding.to_units)
    broken = None
    for seq, t, amounts in db.execute("SELECT seq, t, amounts FROM records ORDER BY seq"):
        try:
            values = unpack(amounts)
            if not all(0.0 <= v < math.inf for v in values):
                raise LedgerCorrupt(f"amounts {list(values)} must be finite and >= 0")
            windows.add(t, [to_units(v) for v in values])
        except (LedgerCorrupt, struct.error) as exc:
            broken = f"record {seq}: {exc}"
            break
    windows.finish()
    worst = Fraction(0) if windows.worst is None else windows.worst.total / Fraction(header.epsilon)
    return windows.checked, worst, tuple(v.describe(header.epsilon) for v in windows.violations), broken
