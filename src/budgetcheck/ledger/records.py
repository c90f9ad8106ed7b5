"""Immutable spend records and their JSON-lines form (interpreted separately by the auditor)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator
from typing import Any

import attrs
import numpy as np
from numpy.typing import NDArray

from budgetcheck.ledger.errors import InvalidArgument
from budgetcheck.ledger.notion import Notion, check_notion
from budgetcheck.ledger.policies import StreamPolicy
from budgetcheck.ledger.requirements import Requirement
from budgetcheck.ledger.validation import check_epsilon, check_label, check_positive_int, check_timestamp, float_array

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
    """Parse an exported ledger; unknown formats or versions are refused, never guessed.

    Every field is checked as strictly as the ledger that wrote it checks it: integers are integers
    (``2.5``, ``2.0`` and ``true`` are refused, never rounded), amounts are finite and >= 0, t is in
    [1, 2^62]; a field the format does not have is refused (InvalidArgument naming the line).
    """
    iterator = iter(lines)
    try:
        first = next(iterator)
    except StopIteration:
        raise InvalidArgument("ledger log is empty: expected a header line") from None
    head = _parse(first, 1)
    if head.get("format") != FORMAT:
        raise InvalidArgument(f"line 1: format={head.get('format')!r} is not {FORMAT!r}")
    if type(head.get("version")) is not int or head.get("version") != VERSION:
        raise InvalidArgument(f"line 1: version={head.get('version')!r} is not supported (expected {VERSION})")
    try:
        header = parse_header(head, ("format", "version"))
    except InvalidArgument as exc:
        raise InvalidArgument(f"line 1: malformed header: {exc}") from None
    records = []
    for number, line in enumerate(iterator, start=2):
        if not line.strip():
            continue
        raw = _parse(line, number)
        try:
            record = parse_record(raw, header)
        except InvalidArgument as exc:
            raise InvalidArgument(f"line {number}: malformed record: {exc}") from None
        records.append(record)
    return header, records


_HEADER_FIELDS = frozenset(("notion", "epsilon", "w", "runs", "classes", "policies"))
_RECORD_FIELDS = frozenset(("t", "purpose", "amounts", "sensitivity", "noise_scale", "sampler", "vouched"))


def parse_header(raw: dict[str, Any], extra: Iterable[str] = ()) -> LedgerHeader:
    """A header's fields (``to_json`` without format and version; ``extra`` keys are the caller's),
    each checked as the ledgers check their parameters; InvalidArgument naming the first bad one."""
    _known_fields(raw, _HEADER_FIELDS | set(extra))
    for name in ("notion", "epsilon", "w", "runs"):
        if name not in raw:
            raise InvalidArgument(f"the field {name!r} is missing")
    notion = check_notion(raw["notion"])
    epsilon = check_epsilon(raw["epsilon"])
    w = check_positive_int(raw["w"], "w")
    runs = check_positive_int(raw["runs"], "runs")
    classes = []
    for index, item in enumerate(_list(raw.get("classes", []), "classes")):
        entry = _list(item, f"classes[{index}]")
        if len(entry) != 3:
            raise InvalidArgument(f"classes[{index}]={item!r} must be [w, epsilon, users]")
        try:
            requirement = Requirement(w=entry[0], epsilon=entry[1])
        except InvalidArgument as exc:
            raise InvalidArgument(f"classes[{index}]: {exc}") from None
        classes.append((requirement.w, requirement.epsilon, check_positive_int(entry[2], f"classes[{index}] users")))
    policies = []
    for index, item in enumerate(_list(raw.get("policies", []), "policies")):
        entry = _list(item, f"policies[{index}]")
        if len(entry) != 3:
            raise InvalidArgument(f"policies[{index}]={item!r} must be [start, end, thresholds]")
        start = check_timestamp(entry[0], f"policies[{index}] start")
        end = check_timestamp(entry[1], f"policies[{index}] end")
        try:
            policy = StreamPolicy(start, end, _list(entry[2], f"policies[{index}] thresholds"))
        except InvalidArgument as exc:
            raise InvalidArgument(f"policies[{index}]: {exc}") from None
        policies.append((policy.start, policy.end, policy.thresholds))
    if (notion == Notion.PERSONALIZED) != bool(classes):
        raise InvalidArgument(f"notion={notion.value!r} with {len(classes)} requirement classes")
    if (notion == Notion.SWELLFISH) != bool(policies):
        raise InvalidArgument(f"notion={notion.value!r} with {len(policies)} policies")
    return LedgerHeader(notion=notion, epsilon=epsilon, w=w, runs=runs, classes=classes, policies=policies)


def parse_record(raw: dict[str, Any], header: LedgerHeader) -> SpendRecord:
    """One exported spend record, each field checked as the ledger checks a spend (t in [1, 2^62],
    a non-empty purpose, amounts finite and >= 0 of the header's shape); InvalidArgument naming it."""
    _known_fields(raw, _RECORD_FIELDS)
    for name in ("t", "purpose", "amounts"):
        if name not in raw:
            raise InvalidArgument(f"the field {name!r} is missing")
    t = check_timestamp(raw["t"])
    purpose = check_label(raw["purpose"])
    amounts = float_array(raw["amounts"], "amounts", "a list of finite numbers >= 0")
    if amounts.size and not (np.isfinite(amounts) & (amounts >= 0.0)).all():
        bad = next(float(v) for v in amounts.flat if not 0.0 <= v < math.inf)
        raise InvalidArgument(f"amounts holds {bad!r}; every amount must be a finite number >= 0")
    expected = (header.runs, len(header.classes)) if header.classes else (header.runs,)
    grouped = header.classes and amounts.ndim == 3 and amounts.shape[2] >= 1  # per (class, group)
    if amounts.shape[: len(expected)] != expected or (amounts.ndim != len(expected) and not grouped):
        raise InvalidArgument(f"amounts of shape {amounts.shape}, the header implies {expected}")
    sensitivity = raw.get("sensitivity")
    if sensitivity is not None:
        if isinstance(sensitivity, bool) or not isinstance(sensitivity, (int, float)):
            raise InvalidArgument(f"sensitivity={sensitivity!r} must be a finite number >= 0 or null")
        sensitivity = float(sensitivity)
        if not 0.0 <= sensitivity < math.inf:
            raise InvalidArgument(f"sensitivity={sensitivity!r} must be a finite number >= 0 or null")
    scales = raw.get("noise_scale")
    noise_scale = None
    if scales is not None:
        noise_scale = float_array(none_to_inf(_list(scales, "noise_scale")), "noise_scale", "a list of numbers >= 0")
        if np.isnan(noise_scale).any() or (noise_scale < 0.0).any():
            raise InvalidArgument(f"noise_scale={scales!r} must hold numbers >= 0 (null for none released)")
    sampler = raw.get("sampler")
    if sampler is not None:
        sampler = check_label(sampler, "sampler")
    vouched = raw.get("vouched", False)
    if type(vouched) is not bool:
        raise InvalidArgument(f"vouched={vouched!r} must be true or false")
    return SpendRecord(
        t=t,
        purpose=purpose,
        amounts=amounts,
        sensitivity=sensitivity,
        noise_scale=noise_scale,
        sampler=sampler,
        vouched=vouched,
    )


def _known_fields(raw: dict[str, Any], known: Iterable[str]) -> None:
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise InvalidArgument(f"unknown field {unknown[0]!r} (this format has {sorted(known)})")


def _list(value: object, name: str) -> list[Any]:
    if not isinstance(value, list):
        raise InvalidArgument(f"{name}={value!r} must be a list")
    return value


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
    """One line as a JSON object; NaN and Infinity (not JSON) and nesting too deep to parse are refused."""
    try:
        value = json.loads(line, parse_constant=_not_json)
    except json.JSONDecodeError as exc:
        raise InvalidArgument(f"line {number}: not JSON: {exc}") from exc
    except RecursionError:
        raise InvalidArgument(f"line {number}: not a ledger line: JSON nested too deeply to parse") from None
    except ValueError as exc:  # _not_json
        raise InvalidArgument(f"line {number}: {exc}") from None
    if not isinstance(value, dict):
        raise InvalidArgument(f"line {number}: expected a JSON object, got {line.strip()!r}")
    return value


def _not_json(name: str) -> Any:
    """``parse_constant`` of :func:`_parse`: Python's json reads NaN and Infinity, which JSON has not."""
    raise ValueError(f"{name} is not a JSON number (a ledger writes finite amounts only)")
