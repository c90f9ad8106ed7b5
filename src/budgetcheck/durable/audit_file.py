"""The offline auditor of a ledger file: the hash chain, the head, and every composition constraint.

Reads the rows in order without trusting the writer's code: recomputes H_k = SHA-256(H_{k−1} ‖ row k)
from H_0 = SHA-256(header), stops at the first row that is missing, of an unknown version or does not
continue the chain, and compares the end with the stored (and optionally an externally kept) head,
so that a deleted tail is not read as a shorter history. w-event files are checked streaming, in
memory bounded by the window (Kellaris et al. 2014, Theorem 3, exactly, in units of 2**-1127);
personalized and Swellfish files by the brute-force checkers of :mod:`budgetcheck.ledger.audit_notions`.
"""

from __future__ import annotations

import concurrent.futures
import functools
import json
import math
import multiprocessing
import struct
from collections.abc import Callable, Iterable
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from budgetcheck import rounding
from budgetcheck.durable.journal import (
    FILE_VERSION,
    FORMAT,
    RELEASE,
    ROW_COLUMNS,
    decode_release,
    decode_row,
    genesis,
    link_problem,
    open_store,
    stored_head,
)
from budgetcheck.ledger.audit import StreamingWindows
from budgetcheck.ledger.audit_notions import audit_by_header
from budgetcheck.ledger.errors import InvalidArgument, LedgerCorrupt
from budgetcheck.ledger.notion import Notion
from budgetcheck.ledger.records import LedgerHeader, SpendRecord, parse_header
from budgetcheck.ledger.validation import check_epsilon, check_positive_int

if TYPE_CHECKING:
    from budgetcheck.durable.store import Store


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
    epsilon: float = 0.0  # the budget the windows were checked against (w-event: the header's or the caller's)
    w: int = 0
    violating_windows: int = 0  # every (run, window) over its budget; ``violations`` lists the first ones

    @property
    def ok(self) -> bool:
        return self.problem is None and not self.violations


_PARALLEL_FROM = 200_000  # records; below this a second process costs more than it saves


def verify_chain(
    path: str, after: int, upto: int, previous_hex: str, anchor_hex: str | None = None
) -> tuple[str | None, int, str, bool]:
    """Check rows after..upto continue the chain from ``previous_hex``: (first problem, last good seq,
    its hash, whether ``anchor_hex`` — an earlier head — is the hash of a row on the way). Rows up to
    ``upto`` are never changed by a writer (append-only), so any later read snapshot sees them."""
    db = open_store(path)
    previous, seen = bytes.fromhex(previous_hex), after
    anchor = None if anchor_hex is None else bytes.fromhex(anchor_hex)
    found = anchor == previous
    try:
        with db.guard("read records"):
            cursor = db.execute(
                f"SELECT {ROW_COLUMNS} FROM records WHERE seq > ? AND seq <= ? ORDER BY seq", (after, upto)
            )
            for row in cursor:
                problem = link_problem(row, seen + 1, previous)
                if problem is None and row[2] == RELEASE:  # a release charges nothing, but must hold its value
                    try:
                        decode_release(row)
                    except LedgerCorrupt as exc:
                        problem = str(exc)
                if problem is not None:
                    return problem, seen, previous.hex(), found
                previous, seen = row[8], seen + 1
                found = found or previous == anchor
    except LedgerCorrupt as exc:
        return f"record {seen + 1}: unreadable ({exc})", seen, previous.hex(), found
    finally:
        db.close()
    return None, seen, previous.hex(), found


class _Malformed(Exception):
    def __init__(self, seq: object, message: object) -> None:
        super().__init__(f"record {seq}: {message}")


def _add_one_run(
    windows: StreamingWindows, rows: Iterable[tuple[Any, Any, Any]], to_units: Callable[[float], int]
) -> None:
    """Feed one-run records to ``windows`` (:meth:`StreamingWindows.add` unrolled: the audit's hot loop)."""
    unpack = struct.Struct("<d").unpack
    totals, w, inf = windows.totals, windows.w, math.inf
    for seq, t, amounts in rows:
        try:
            (value,) = unpack(amounts)
        except (struct.error, TypeError) as exc:
            raise _Malformed(seq, exc) from None
        if not 0.0 <= value < inf:
            raise _Malformed(seq, f"amounts {[value]} must be finite and >= 0")
        if not isinstance(t, int):
            raise _Malformed(seq, f"t={t!r} is not an integer")
        if t <= windows.done:
            raise _Malformed(seq, f"a record charges t={t}, more than w - 1 = {w - 1} before a later record")
        units = to_units(value)
        slot = totals.get(t)
        totals[t] = [units] if slot is None else [slot[0] + units]
        if t > windows.latest:
            windows.latest = t
            if t - w > windows.done + 4096:
                windows._finalize(t - w)


def audit_file(
    path: str | Path,
    *,
    expect_head: str | None = None,
    max_violations: int = 10,
    epsilon: float | None = None,
    w: int | None = None,
) -> FileAudit:
    """Verify the chain of a ledger file and re-check its composition theorem; never raises for a
    broken chain (that is a finding), only for a file that is not a ledger file at all.

    Everything is read as of one snapshot (the head, then the rows up to it), so a writer that
    commits meanwhile is neither a finding nor seen. ``expect_head``: a head hash kept from earlier
    (any earlier one): the file must extend it, i.e. the hash of one of its rows (or of its header,
    for an anchor taken before the first row) must equal it. ``epsilon``/``w`` (w-event files only):
    check the windows against these instead of the file's own header (e.g. a stricter budget).
    """
    override = {name: value for name, value in (("epsilon", epsilon), ("w", w)) if value is not None}
    if override:
        epsilon = None if epsilon is None else check_epsilon(epsilon)
        w = None if w is None else check_positive_int(w, "w")
    if expect_head is not None:
        try:
            if len(bytes.fromhex(expect_head)) != 32:
                raise ValueError("not 32 bytes")
        except ValueError as exc:
            raise InvalidArgument(
                f"expect_head={expect_head!r} must be a SHA-256 head in hex (64 digits): {exc}"
            ) from None
    db = open_store(path)
    name = db.name  # a URL without its password
    try:
        with db.guard("read the ledger"):
            db.begin_read()  # one read snapshot for the head and every row up to it
        header, sampler, count, head = _read_meta(db, name)
        checked = header
        if override:
            if header.notion != Notion.W_EVENT:
                raise InvalidArgument(
                    f"{', '.join(f'{k}={v!r}' for k, v in override.items())} applies to w-event ledger files; "
                    f"{name} is a {header.notion} file, whose budgets are in its header"
                )
            checked = attrs.evolve(
                header, epsilon=header.epsilon if epsilon is None else epsilon, w=header.w if w is None else w
            )
        with db.guard("read the ledger"):
            return _audit(db, str(path), header, sampler, count, head, expect_head, max_violations, checked)
    except LedgerCorrupt as exc:
        if isinstance(exc.__cause__, LedgerCorrupt) or exc.__cause__ is None:
            raise
        raise LedgerCorrupt(f"{name}: the file is damaged (truncated or overwritten): {exc}") from exc
    finally:
        db.rollback()
        db.close()


def read_meta(db: Store, path: str) -> tuple[LedgerHeader, int, str]:
    """The header, the record count and the head hash (hex) a ledger store keeps; LedgerCorrupt if
    ``path`` is not a budgetcheck ledger of this version."""
    header, _, count, head = _read_meta(db, path)
    return header, count, head


@attrs.frozen
class _Sampler:
    """The sampler a file's chained header names (None in a file made before it was chained) and the
    ``sampler`` meta entry a writer's claim compares (None if no writer claimed one yet)."""

    chained: str | None
    entry: str | None

    def problem(self) -> str | None:
        if self.chained is None or self.entry == self.chained:
            return None
        return (
            f"the sampler entry {self.entry!r} is not the sampler {self.chained!r} the hash chain covers "
            "(the meta table was edited)"
        )


def _read_meta(db: Store, path: str) -> tuple[LedgerHeader, _Sampler, int, str]:
    """:func:`read_meta` and the file's sampler."""
    try:
        with db.guard("read the meta table"):
            meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
    except LedgerCorrupt as exc:
        raise LedgerCorrupt(f"{path}: not a budgetcheck ledger file ({exc.__cause__})") from exc
    if meta.get("format") != FORMAT:
        raise LedgerCorrupt(f"{path}: format {meta.get('format')!r} is not {FORMAT!r}")
    if meta.get("version") != str(FILE_VERSION):
        raise LedgerCorrupt(f"{path}: file version {meta.get('version')!r} is not supported (expected {FILE_VERSION})")
    try:
        raw = json.loads(meta["header"])
        if not isinstance(raw, dict):
            raise InvalidArgument(f"the stored header {raw!r} is not a JSON object")
        header = parse_header(raw, ("format", "version", "sampler"))
        chained = raw.get("sampler")
        if chained is not None and not isinstance(chained, str):
            raise InvalidArgument(f"sampler={chained!r} is not a sampler name")
    except (KeyError, TypeError, ValueError, InvalidArgument) as exc:
        raise LedgerCorrupt(f"{path}: malformed meta table: {exc}") from exc
    with db.guard("read the head"):
        count, head = stored_head(db, path)
    entry = meta.get("sampler")
    return header, _Sampler(chained, None if entry is None else str(entry)), count, head.hex()


def _audit(
    db: Store,
    path: str,
    header: LedgerHeader,
    sampler: _Sampler,
    count: int,
    head: str,
    expect_head: str | None,
    max_violations: int,
    checked_against: LedgerHeader,
) -> FileAudit:
    """The chain from the file's own header (and the sampler it covers); the composition against
    ``checked_against`` (the header, or the caller's stricter ε and w)."""
    streaming = header.notion == Notion.W_EVENT
    start = genesis(header, sampler.chained).hex()
    anchor = None if expect_head is None else expect_head.lower()
    if count < _PARALLEL_FROM:
        problem, seen, last, found = verify_chain(path, 0, count, start, anchor)
        composition = _composition(db, checked_against, streaming, max_violations, upto=count)
    else:
        problem, seen, last, found, composition = _audit_parallel(
            db, path, checked_against, start, count, anchor, streaming, max_violations
        )
    if problem is None and (seen != count or last != head):
        problem = (
            f"the file ends at record {seen}, but its head names record {count}: records were removed or the "
            "head was edited"
        )
    if problem is None and anchor is not None and not found:
        problem = f"the file does not extend the expected head {anchor} (it was rolled back, rewritten or replaced)"
    checked, worst, violations, broken, violating = composition
    if problem is None and broken is not None:
        problem = broken
    if problem is None:
        problem = sampler.problem()
    return FileAudit(
        path=db.name,
        notion=header.notion,
        records=seen,
        head=last,
        problem=problem,
        checked=checked,
        worst_ratio=worst,
        violations=violations,
        violating_windows=max(violating, len(violations)),
        epsilon=checked_against.epsilon,
        w=checked_against.w,
    )


def _audit_parallel(
    db: Store,
    path: str,
    header: LedgerHeader,
    start: str,
    count: int,
    anchor: str | None,
    streaming: bool,
    max_violations: int,
) -> tuple[str | None, int, str, bool, Composition]:
    """The chain in two halves in two more processes while this one re-checks the composition.

    Each row's check needs only the stored hash of the row before it, so rows 1..m (from H_0) and
    m+1..count (from the stored H_m) are checked independently; when the first half passes, its last
    hash is the stored H_m, so the two halves together check the whole chain in order.
    """
    middle = count // 2
    stored = db.execute("SELECT hash FROM records WHERE seq = ?", (middle,)).fetchone()
    jobs = [(path, 0, middle, start, anchor)]
    if stored is not None and isinstance(stored[0], bytes):
        jobs.append((path, middle, count, stored[0].hex(), anchor))
    else:  # the middle row is missing or malformed: one sequential pass finds it
        jobs = [(path, 0, count, start, anchor)]
    try:
        with concurrent.futures.ProcessPoolExecutor(len(jobs), mp_context=multiprocessing.get_context("spawn")) as pool:
            halves = [pool.submit(verify_chain, *job) for job in jobs]
            composition = _composition(db, header, streaming, max_violations, upto=count)
            results = [half.result() for half in halves]
    except concurrent.futures.process.BrokenProcessPool:  # e.g. a __main__ that cannot be re-imported
        results = [verify_chain(*job) for job in jobs]
        composition = _composition(db, header, streaming, max_violations, upto=count)
    problem, seen, last, found = results[0]
    if problem is None and len(results) == 2:
        if seen != middle:
            problem = f"record {seen + 1} is missing"
        else:
            problem, seen, last, found_later = results[1]
            found = found or found_later
    return problem, seen, last, found, composition


Composition = tuple[int, Fraction, tuple[str, ...], str | None, int]


def _composition(
    db: Store, header: LedgerHeader, streaming: bool, max_violations: int, *, upto: int = 2**62
) -> Composition:
    """(constraints checked, worst sum / budget, violations, a malformed record) over every stored
    spend record up to row ``upto`` (releases charge nothing)."""
    if not streaming:
        kept: list[SpendRecord] = []
        for row in db.execute(f"SELECT {ROW_COLUMNS} FROM records WHERE kind = 0 AND seq <= ? ORDER BY seq", (upto,)):
            try:
                kept.append(decode_row(row, header).record)
            except LedgerCorrupt as exc:
                return 0, Fraction(0), (), str(exc), 0
        result = audit_by_header(kept, header)
        violating = int(getattr(result, "violating_windows", len(result.violations)))
        return result.checked, result.worst_ratio, result.violations, None, violating
    windows = StreamingWindows(header.w, rounding.to_units(header.epsilon), header.runs, max_violations)
    unpack = struct.Struct(f"<{header.runs}d").unpack
    to_units = functools.lru_cache(maxsize=4096)(rounding.to_units)
    broken = None
    rows = db.execute("SELECT seq, t, amounts FROM records WHERE kind = 0 AND seq <= ? ORDER BY seq", (upto,))
    try:
        if header.runs == 1:
            _add_one_run(windows, rows, to_units)
        else:
            for seq, t, amounts in rows:
                try:
                    values = unpack(amounts)
                    if not all(0.0 <= v < math.inf for v in values):
                        raise LedgerCorrupt(f"amounts {list(values)} must be finite and >= 0")
                    if not isinstance(t, int):
                        raise LedgerCorrupt(f"t={t!r} is not an integer")
                    windows.add(t, [to_units(v) for v in values])
                except (LedgerCorrupt, struct.error, TypeError) as exc:
                    raise _Malformed(seq, exc) from None
    except _Malformed as exc:
        broken = str(exc)
    windows.finish()
    worst = Fraction(0) if windows.worst is None else windows.worst.total / Fraction(header.epsilon)
    described = tuple(v.describe(header.epsilon) for v in windows.violations)
    return windows.checked, worst, described, broken, windows.violating
