"""Immutable spend records and their JSON-lines form (interpreted separately by the auditor)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator
from typing import Any, cast

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


def is_frozen(arr: np.ndarray[Any, Any]) -> bool:
    """Whether ``arr`` and every array it is a view of are read-only (so numpy's ``setflags`` alone cannot
    make ``arr`` writable, unless the owner is an array: an owner can re-flag itself writable)."""
    base: object = arr
    while base is not None:
        if isinstance(base, bytes):  # immutable memory (np.frombuffer): no array over it can be made writable
            return True
        if not isinstance(base, np.ndarray) or base.flags.writeable:
            return False
        base = base.base
    return True


def frozen(value: object) -> FloatArray:
    """A float64 array over immutable memory (a ``bytes`` object): no numpy route (``setflags``, ``.base``,
    ``np.frombuffer``, a memoryview) can write to it. ``value`` itself when it already is one.

    What the array *object* shows can still be changed in place (``__setstate__``, assigning ``dtype``,
    ``shape`` or ``strides``), never the memory: so whatever the ledger keeps is an object no caller
    receives, and what a caller receives (:attr:`SpendRecord.amounts`) is a fresh view each time.
    """
    arr = value if type(value) is np.ndarray and value.dtype == np.float64 else np.asarray(value, dtype=np.float64)
    if _whole_bytes(arr) is not None:
        return arr
    return np.frombuffer(np.ascontiguousarray(arr).tobytes(), dtype=np.float64).reshape(arr.shape)


def _whole_bytes(arr: FloatArray) -> bytes | None:
    """The ``bytes`` object ``arr`` covers exactly (contiguous, native float64, every byte), or None."""
    base: object = arr.base
    while isinstance(base, np.ndarray):
        base = base.base
    if (
        type(base) is bytes
        and arr.flags.c_contiguous
        and arr.dtype == np.float64
        and arr.dtype.isnative
        and arr.nbytes == len(base)
    ):
        return base
    return None


# a float64 array as immutable bytes and its shape (8 bytes for a larger shape: one value, broadcast)
_Frozen = tuple[bytes, tuple[int, ...]]


def _freeze(value: object) -> _Frozen:
    """``value`` as float64 bytes and shape; an array of one repeated double keeps it once (a budget the same
    in every run: 8 bytes whatever the number of runs); an array over bytes already shares them."""
    arr = value if type(value) is np.ndarray and value.dtype == np.float64 else np.array(value, dtype=np.float64)
    shape = tuple(int(n) for n in arr.shape)
    whole = _whole_bytes(arr)
    if whole is not None:  # shared with the ledger's other records already
        return whole, shape
    if arr.size > 1:
        bits = (
            arr.reshape(-1).view(np.int64)
            if arr.flags.c_contiguous
            else np.ascontiguousarray(arr).reshape(-1).view(np.int64)
        )
        if bool((bits == bits[0]).all()):
            return arr.reshape(-1)[:1].tobytes(), shape
    return np.ascontiguousarray(arr).tobytes(), shape


def fresh_view(arr: FloatArray) -> FloatArray:
    """A read-only copy of ``arr`` sharing no memory with it (:func:`_thaw`): what a ledger hands out of what
    it keeps."""
    return _thaw(_freeze(arr))


def _thaw(frozen_value: _Frozen) -> FloatArray:
    """A fresh read-only array over a fresh copy of the bytes of :func:`_freeze` (new memory at every call).

    A copy, not a view of the kept bytes: an array's ``__array_interface__`` gives the address of its memory,
    and numpy builds a writable array over any address it is given, so a view would hand out the kept bytes
    themselves (which ledgers of one process may share). The copy is a ``bytes`` object too, so no numpy
    route makes the array writable; one that writes to its memory anyway changes nothing the ledger keeps."""
    data, shape = frozen_value
    flat = np.frombuffer(memoryview(data).tobytes(), dtype=np.float64)  # a new bytes object: immutable, not shared
    if flat.size == math.prod(shape):
        return flat.reshape(shape)
    return np.broadcast_to(flat, shape)


class SpendRecord(tuple[Any, ...]):
    """One charge: at timestamp ``t`` each run r spent ``amounts[r]`` for ``purpose``.

    ``sensitivity`` and ``noise_scale`` (per run, or per run and bin for ``laplace_bins``; inf where
    nothing was released) are set when the charge paid for a Laplace release; ``sampler`` names the
    noise source. ``vouched``: the sensitivity is the caller's word (``measure``), not derived by the
    library, so only the statistical audit can check it.

    Immutable by every route Python offers without reaching into memory (the history a ledger hands
    out is the history it keeps): a tuple, so no attribute can be set, not even with
    ``object.__setattr__``; its arrays are kept as ``bytes``, and ``amounts`` and ``noise_scale`` are
    fresh read-only views of them at every access (no ``setflags``, ``.base``, ``np.frombuffer`` or
    in-place ``__setstate__`` on one reaches another). A pickle or copy is rebuilt through the
    constructor. ``evolve`` gives a record with some fields replaced.

    >>> import numpy as np
    >>> record = SpendRecord(t=3, purpose="publication", amounts=np.array([0.25, 0.5]))
    >>> record.amounts.flags.writeable, record.amounts.tolist()
    (False, [0.25, 0.5])
    """

    __slots__ = ()

    def __new__(
        cls,
        t: int,
        purpose: str,
        amounts: object,
        sensitivity: float | None = None,
        noise_scale: object = None,
        sampler: str | None = None,
        vouched: bool = False,
    ) -> SpendRecord:
        scales = None if noise_scale is None else _freeze(noise_scale)
        return super().__new__(cls, (t, purpose, _freeze(amounts), sensitivity, scales, sampler, vouched))

    @property
    def t(self) -> int:
        return cast(int, self[0])

    @property
    def purpose(self) -> str:
        return cast(str, self[1])

    @property
    def amounts(self) -> FloatArray:
        """The budget of every run, as a fresh read-only copy of shape ``(runs,)`` (``(runs, classes[, groups])``
        for a personalized ledger)."""
        return _thaw(self[2])

    @property
    def sensitivity(self) -> float | None:
        return cast("float | None", self[3])

    @property
    def noise_scale(self) -> FloatArray | None:
        """The Laplace scales paid for (a fresh read-only view), or None."""
        return None if self[4] is None else _thaw(self[4])

    @property
    def sampler(self) -> str | None:
        return cast("str | None", self[5])

    @property
    def vouched(self) -> bool:
        return cast(bool, self[6])

    def evolve(self, **changes: Any) -> SpendRecord:
        """A record with the fields named in ``changes`` replaced (``attrs.evolve`` for this record)."""
        fields: dict[str, Any] = {
            "t": self.t,
            "purpose": self.purpose,
            "amounts": self.amounts,
            "sensitivity": self.sensitivity,
            "noise_scale": self.noise_scale,
            "sampler": self.sampler,
            "vouched": self.vouched,
        }
        unknown = sorted(set(changes) - set(fields))
        if unknown:
            raise InvalidArgument(f"SpendRecord has no field {unknown[0]!r} (its fields are {sorted(fields)})")
        fields.update(changes)
        return SpendRecord(**fields)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle and copy through the constructor: an unpickled record is as immutable as this one."""
        return (
            SpendRecord,
            (self.t, self.purpose, self.amounts, self.sensitivity, self.noise_scale, self.sampler, self.vouched),
        )

    def __repr__(self) -> str:
        vouched = ", vouched=True" if self.vouched else ""
        return (
            f"SpendRecord(t={self.t!r}, purpose={self.purpose!r}, amounts={self.amounts!r}, "
            f"sensitivity={self.sensitivity!r}, noise_scale={self.noise_scale!r}, sampler={self.sampler!r}{vouched})"
        )

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict; floats keep their exact value (repr round-trips). ``vouched`` appears only
        when true, so records without it are the bytes they always were."""
        scales = self.noise_scale
        out = {
            "t": self.t,
            "purpose": self.purpose,
            "amounts": self.amounts.tolist(),
            "sensitivity": self.sensitivity,
            "noise_scale": None if scales is None else finite_or_none(scales),
            "sampler": self.sampler,
        }
        if self.vouched:
            out["vouched"] = True
        return out


def snapshot(records: Iterable[object]) -> tuple[SpendRecord, ...]:
    """``records`` as a tuple of plain :class:`SpendRecord` values, each field read once: what an auditor
    checks cannot change under it (a list edited meanwhile, a subclass or stand-in whose ``amounts``
    answers differently at each read). Refuses items that are not spend records."""
    kept = []
    for index, record in enumerate(tuple(records)):
        if type(record) is SpendRecord:
            kept.append(record)
            continue
        try:
            kept.append(
                SpendRecord(
                    t=record.t,  # type: ignore[attr-defined]
                    purpose=record.purpose,  # type: ignore[attr-defined]
                    amounts=np.array(record.amounts, dtype=np.float64),  # type: ignore[attr-defined]
                    sensitivity=getattr(record, "sensitivity", None),
                    noise_scale=getattr(record, "noise_scale", None),
                    sampler=getattr(record, "sampler", None),
                    vouched=bool(getattr(record, "vouched", False)),
                )
            )
        except (AttributeError, TypeError, ValueError) as exc:
            raise InvalidArgument(
                f"records[{index}]={record!r} is not a spend record (t, purpose, amounts): {exc}"
            ) from None
    return tuple(kept)


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
