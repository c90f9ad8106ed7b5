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
import json
import sqlite3
from fractions import Fraction
from pathlib import Path

import attrs
import numpy as np

from budgetcheck import rounding
from budgetcheck._audit import WindowFinding
from budgetcheck._audit_notions import audit_personalized, audit_swellfish
from budgetcheck._errors import InvalidArgument, LedgerCorrupt
from budgetcheck._journal import FILE_VERSION, FORMAT, RECORD_VERSION, connect, decode_row, genesis, row_hash
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
    history: collections.deque[list[int]] = attrs.field(factory=collections.deque)
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
            self._finalize(t - self.w)

    def finish(self) -> None:
        self._finalize(self.latest)

    def _finalize(self, until: int) -> None:
        zero = [0] * self.runs
        if not self.window:
            self.window = list(zero)
        for end in range(self.done + 1, until + 1):
            entering = self.totals.pop(end, zero)
            leaving = self.history.popleft() if len(self.history) == self.w else zero
            self.window = [s + a - b for s, a, b in zip(self.window, entering, leaving, strict=True)]
            if len(self.history) < self.w:
                self.history.append(entering)
            self.checked += self.runs
            for run, total in enumerate(self.window):
                if total > self.worst_units:
                    self.worst_units = total
                    self.worst = WindowFinding(run=run, start=max(1, end - self.w + 1), end=end, total=rounding.units_to_fraction(total))
                if total > self.eps_units and len(self.violations) < self.max_violations:
                    self.violations.append(WindowFinding(run=run, start=max(1, end - self.w + 1), end=end, total=rounding.units_to_fraction(total)))
        self.done = max(self.done, until)


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
        return header, int(meta["count"]), str(meta["head"])
    except (KeyError, TypeError, ValueError) as exc:
        raise LedgerCorrupt(f"{path}: malformed meta table: {exc}") from exc


def _audit(db: sqlite3.Connection, path: str, header: LedgerHeader, count: int, head: str,
           expect_head: str | None, max_violations: int) -> FileAudit:
    streaming = header.notion == "w-event"
    windows = StreamingWindows(header.w, rounding.to_units(header.epsilon), header.runs, max_violations)
    kept: list[SpendRecord] = []
    previous = genesis(header)
    seen = 0
    problem: str | None = None
    cursor = db.execute("SELECT seq, version, op, t, amounts, detail, output, hash FROM records ORDER BY seq")
    for row in cursor:
        seq, version, op, t, amounts, detail, output, digest = row
        if seq != seen + 1:
            problem = f"record {seen + 1} is missing (the next stored record is {seq})"
            break
        if version != RECORD_VERSION:
            problem = f"record {seq}: record version {version!r} is not supported (expected {RECORD_VERSION})"
            break
        if row_hash(previous, version, seq, op, t, amounts, detail.encode(), output) != digest:
            problem = f"record {seq}: its hash does not match its contents (the record was edited)"
            break
        previous, seen = digest, seq
        try:
            if streaming:
                values = np.frombuffer(amounts, dtype="<f8")
                if values.shape != (header.runs,) or not np.isfinite(values).all() or (values < 0).any():
                    raise LedgerCorrupt(f"amounts {values.tolist()} do not fit runs={header.runs}")
                windows.add(int(t), [rounding.to_units(v) for v in values.tolist()])
            else:
                kept.append(decode_row(row, header).record)
        except (LedgerCorrupt, InvalidArgument, ValueError) as exc:
            problem = f"record {seq}: {exc}"
            break
    if problem is None and (seen != count or previous.hex() != head):
        problem = f"the file ends at record {seen}, but its head names record {count}: records were removed or the head was edited"
    if problem is None and expect_head is not None and previous.hex() != expect_head.lower():
        problem = f"the head {previous.hex()} is not the expected {expect_head} (the file was rolled back or replaced)"
    if streaming:
        windows.finish()
        worst = Fraction(0) if windows.worst is None else windows.worst.total / Fraction(header.epsilon)
        found = tuple(v.describe(header.epsilon) for v in windows.violations)
        return FileAudit(path=path, notion=header.notion, records=seen, head=previous.hex(), problem=problem,
                         checked=windows.checked, worst_ratio=worst, violations=found)
    if header.notion == "personalized":
        result = audit_personalized(kept, [(w, eps) for w, eps, _ in header.classes], runs=header.runs)
    else:
        policies = PolicyCollection([StreamPolicy(a, b, theta) for a, b, theta in header.policies])
        result = audit_swellfish(kept, policies, epsilon=header.epsilon, runs=header.runs)
    return FileAudit(path=path, notion=header.notion, records=seen, head=previous.hex(), problem=problem,
                     checked=result.checked, worst_ratio=result.worst_ratio, violations=result.violations)
