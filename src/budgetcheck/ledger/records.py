"""Immutable spend records and their JSON-lines form (interpreted separately by the auditor)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

import attrs
import numpy as np
from numpy.typing import NDArray

from budgetcheck.ledger.errors import InvalidArgument

FORMAT = "budgetcheck.ledger"
VERSION = 1
FloatArray = NDArray[np.float64]


def _readonly(value: object) -> FloatArray:
    """A read-only float array that nothing can change: ``value`` itself when it and every array it
    views are read-only float64 already (the ledger's own validated amounts and scales, shared
    between records), else a read-only copy."""
    if isinstance(value, np.ndarray) and value.dtype == np.float64 and is_frozen(value):
        return value
    arr = np.array(value, dtype=np.float64)
    arr.setflags(write=False)
    return arr


def is_frozen(arr: np.ndarray[Any, Any]) -> bool:
    """Whether ``arr`` and every array it is a view of are read-only (nothing can change it)."""
    base: object = arr
    while base is not None:
        if isinstance(base, bytes):  # immutable memory (np.frombuffer): no array over it can be made writable
            return True
        if not isinstance(base, np.ndarray) or base.flags.writeable:
            return False
        base = base.base
    return True


def _readonly_or_none(value: object) -> FloatArray | None:
    return None if value is None else _readonly(value)


@attrs.frozen(eq=False)
class SpendRecord:
    """One charge: at timestamp ``t`` each run r spent ``amounts[r]`` for ``purpose``.

    ``sensitivity`` and ``noise_scale`` (per run, or per run and bin for ``laplace_bins``; inf where
    nothing was released) are set when the charge paid for a Laplace release; ``sampler`` names the
    noise source. ``vouched``: the sensitivity is the caller's word (``measure``), not derived by the
    library, so only the statistical audit can check it.
    """

    t: int
    purpose: str
    amounts: FloatArray = attrs.field(converter=_readonly)
    sensitivity: float | None = None
    noise_scale: FloatArray | None = attrs.field(default=None, converter=_readonly_or_none)
    sampler: str | None = None
    vouched: bool = False

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict; floats keep their exact value (repr round-trips). ``vouched`` appears only
        when true, so records without it are the bytes they always were."""
        out = {
            "t": self.t,
            "purpose": self.purpose,
            "amounts": self.amounts.tolist(),
            "sensitivity": self.sensitivity,
            "noise_scale": None if self.noise_scale is None else finite_or_none(self.noise_scale),
            "sampler": self.sampler,
        }
        if self.vouched:
            out["vouched"] = True
        return out


def _class_tuple(value: Any) -> tuple[tuple[int, float, int], ...]:
    return tuple((int(w), float(eps), int(n)) for w, eps, n in value)


def _policy_tuple(value: Any) -> tuple[tuple[int, int, tuple[float, ...]], ...]:
    return tuple((int(a), int(b), tuple(float(x) for x in theta)) for a, b, theta in value)


@attrs.frozen
class LedgerHeader:
    """The first line of an exported ledger: what notion and parameters it was kept under.

    ``classes`` (personalized ledgers): (w_c, ε_c, n_c) per requirement class, in the column order
    of the records' amounts. ``policies`` (Swellfish ledgers): (J start, J end, θ) per policy.
    """

    notion: str
    epsilon: float
    w: int
    runs: int
    classes: tuple[tuple[int, float, int], ...] = attrs.field(default=(), converter=_class_tuple)
    policies: tuple[tuple[int, int, tuple[float, ...]], ...] = attrs.field(default=(), converter=_policy_tuple)

    def to_json(self) -> dict[str, Any]:
        head: dict[str, Any] = {
            "format": FORMAT,
            "version": VERSION,
            "notion": self.notion,
            "epsilon": self.epsilon,
            "w": self.w,
            "runs": self.runs,
        }
        if self.classes:
            head["classes"] = [list(c) for c in self.classes]
        if self.policies:
            head["policies"] = [[a, b, list(theta)] for a, b, theta in self.policies]
        return head


def dump_lines(header: LedgerHeader, records: Iterable[SpendRecord]) -> Iterator[str]:
    """The ledger as JSON lines: the header, then one record per line."""
    yield json.dumps(header.to_json(), allow_nan=False)
    for record in records:
        yield json.dumps(record.to_json(), allow_nan=False)


def load_lines(lines: Iterable[str]) -> tuple[LedgerHeader, list[SpendRecord]]:
    """Parse an exported ledger; unknown formats or versions are refused, never guessed."""
    iterator = iter(lines)
    try:
        first = next(iterator)
    except StopIteration:
        raise InvalidArgument("ledger log is empty: expected a header line") from None
    head = _parse(first, 1)
    if head.get("format") != FORMAT:
        raise InvalidArgument(f"line 1: format={head.get('format')!r} is not {FORMAT!r}")
    if head.get("version") != VERSION:
        raise InvalidArgument(f"line 1: version={head.get('version')!r} is not supported (expected {VERSION})")
    try:
        header = LedgerHeader(
            notion=str(head["notion"]),
            epsilon=float(head["epsilon"]),
            w=int(head["w"]),
            runs=int(head["runs"]),
            classes=head.get("classes", ()),
            policies=head.get("policies", ()),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidArgument(f"line 1: malformed header {first.strip()!r}: {exc}") from exc
    records = []
    for number, line in enumerate(iterator, start=2):
        if not line.strip():
            continue
        raw = _parse(line, number)
        try:
            scales = raw.get("noise_scale")
            record = SpendRecord(
                t=int(raw["t"]),
                purpose=str(raw["purpose"]),
                amounts=raw["amounts"],
                sensitivity=None if raw.get("sensitivity") is None else float(raw["sensitivity"]),
                noise_scale=None if scales is None else none_to_inf(scales),
                sampler=raw.get("sampler"),
                vouched=raw.get("vouched", False) is True,
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidArgument(f"line {number}: malformed record {line.strip()!r}: {exc}") from exc
        expected = (header.runs, len(header.classes)) if header.classes else (header.runs,)
        grouped = header.classes and record.amounts.ndim == 3 and record.amounts.shape[2] >= 1  # per (class, group)
        if record.amounts.shape[: len(expected)] != expected or (record.amounts.ndim != len(expected) and not grouped):
            raise InvalidArgument(
                f"line {number}: amounts of shape {record.amounts.shape}, the header implies {expected}"
            )
        records.append(record)
    return header, records


def finite_or_none(values: FloatArray) -> Any:
    """Nested lists of floats with None where the value is infinite (JSON has no inf)."""
    if values.ndim == 0:
        return float(values) if np.isfinite(values) else None
    return [finite_or_none(v) for v in values]


def none_to_inf(values: Any) -> Any:
    if isinstance(values, list):
        return [none_to_inf(v) for v in values]
    return np.inf if values is None else float(values)


def _parse(line: str, number: int) -> dict[str, Any]:
    try:
        value = json.loads(line)
    except json.JSONDecodeError as exc:
        raise InvalidArgument(f"line {number}: not JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise InvalidArgument(f"line {number}: expected a JSON object, got {line.strip()!r}")
    return value
