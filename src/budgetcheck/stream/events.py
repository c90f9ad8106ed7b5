"""Per-user input of a live personalized publisher (Du et al. 2025's setting: each user i, with
requirement (w_i, ε_i), sits in at most one of d bins per timestamp).

Requirements file: one ``user,w,epsilon`` line per user (an optional ``user,w,epsilon`` header,
``#`` comments). Events: CSV ``t,user,bin`` or JSON lines ``{"t": t, "user": u, "bin": b}``; a
row holding only ``t`` (CSV ``t``, JSON ``{"t": t}``) closes timestamp t, with or without events.
Events of one timestamp are consecutive; a timestamp is complete when a later t arrives, when it is
closed, or when the input ends. Its secret is the (classes, d) count of users per class and bin.
User ids are compared as strings.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Hashable, Iterable, Iterator
from pathlib import Path
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from budgetcheck.ledger.errors import BadRow, InvalidArgument
from budgetcheck.ledger.requirements import Requirement, RequirementSet
from budgetcheck.ledger.validation import MAX_T, check_positive_int

FloatArray = NDArray[np.float64]
Event = tuple[int, int, str | None, int]  # (line number, t, user or None for a closing row, bin)
FORMATS: Final = ("csv", "jsonl")


_INTEGER_TEXT = re.compile(r"\+?([0-9]{1,19})(?:\.0*)?")
_BIN_TEXT = re.compile(r"[0-9]{1,18}")


def parse_timestamp(value: Any, number: int) -> int:
    """An input row's t: an integer in [1, 2^62], read exactly — never through a float (2^53 + 1
    stays 2^53 + 1). Text "3", "+3" and "3.0" and JSON 3 are accepted; a JSON float only when it is
    integral and at most 2^53 (beyond that it no longer says which integer was meant)."""
    if isinstance(value, str):
        match = _INTEGER_TEXT.fullmatch(value.strip())
        t = int(match.group(1)) if match else None
    elif isinstance(value, int) and not isinstance(value, bool):
        t = value
    elif isinstance(value, float) and value.is_integer() and abs(value) <= 2**53:
        t = int(value)
    else:
        t = None
    if t is None or not 1 <= t <= MAX_T:
        shown = value if not isinstance(value, (str, int)) or len(str(value)) <= 40 else f"{str(value)[:40]}…"
        raise BadRow(f"t={shown!r} must be an integer from 1 to 2^62", row=number)
    return t


MAX_ROW: Final = 1 << 16  # characters in one input row; a longer one is a bad row, not a memory or time sink


def json_row(text: str, number: int) -> Any:
    """A JSON-lines row decoded, or :class:`BadRow`: malformed JSON, integers of thousands of digits,
    nesting deeper than the parser's stack and rows longer than :data:`MAX_ROW` are bad rows."""
    check_row_length(text, number)
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, "exceeds the limit for integer string conversion"
        raise BadRow(f"not JSON: {str(exc)[:120]}", row=number) from None


def check_row_length(text: str, number: int) -> None:
    """Refuse a row that is not UTF-8 (see :func:`content_lines`) or longer than :data:`MAX_ROW`."""
    if isinstance(text, Undecodable):
        raise BadRow(f"not UTF-8: {text.reason}", row=number)
    if len(text) > MAX_ROW:
        raise BadRow(f"the row has {len(text):,} characters, more than the {MAX_ROW:,} allowed", row=number)


class Undecodable(str):
    """A row of bytes that are not UTF-8, kept (with U+FFFD for the bad bytes) to be refused by its number."""

    reason: str


def _undecodable(raw: bytes, exc: UnicodeDecodeError) -> Undecodable:
    text = Undecodable(raw.decode("utf-8", errors="replace").strip())
    text.reason = f"byte {raw[exc.start : exc.start + 1]!r} at position {exc.start + 1} ({exc.reason})"
    return text


BOM: Final = "\ufeff"


def decoded_lines(lines: Iterable[str | bytes]) -> Iterator[str]:
    """Lines as text. Bytes are decoded as UTF-8; a line that is not UTF-8 becomes an
    :class:`Undecodable` (a bad row named by its number, never an exception of the reader). A
    byte-order mark at the very start of the input is dropped (spreadsheet exports write one); a
    BOM anywhere else is part of its row. CRLF line ends are stripped like LF."""
    for number, line in enumerate(lines, start=1):
        if isinstance(line, bytes):
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError as exc:
                yield _undecodable(line, exc)
                continue
        else:
            text = line
        yield text[1:] if number == 1 and text.startswith(BOM) else text


def read_text_lines(path: str | Path, *, source: str) -> list[str]:
    """A small input file (requirements, policies) as lines of text, or :class:`InvalidArgument`
    naming ``source`` and the line that is not UTF-8 (a leading BOM is dropped)."""
    lines = list(decoded_lines(Path(path).read_bytes().splitlines()))
    for number, line in enumerate(lines, start=1):
        if isinstance(line, Undecodable):
            raise InvalidArgument(f"{source} line {number}: not UTF-8: {line.reason}")
    return lines


def load_requirements(lines: Iterable[str], *, source: str = "requirements") -> RequirementSet:
    """``user,w,epsilon`` lines as a :class:`RequirementSet` keyed by user id (a string)."""
    pairs: dict[Hashable, tuple[int, float]] = {}
    for number, line in enumerate(lines, start=1):
        text = line.strip()
        if not text or text.startswith("#") or (number == 1 and text.replace(" ", "").lower() == "user,w,epsilon"):
            continue
        fields = [part.strip() for part in text.split(",")]
        if len(fields) != 3 or not fields[0]:
            raise InvalidArgument(f"{source} line {number}: expected user,w,epsilon, got {text[:80]!r}")
        user, w, epsilon = fields
        if user in pairs:
            raise InvalidArgument(f"{source} line {number}: user {user!r} is listed twice")
        try:
            pairs[user] = (int(w), float(epsilon))
        except ValueError:
            raise InvalidArgument(
                f"{source} line {number}: w={w[:40]!r} must be an integer and epsilon={epsilon[:40]!r} a number"
            ) from None
        try:
            Requirement(*pairs[user])
        except InvalidArgument as exc:
            raise InvalidArgument(f"{source} line {number}: {str(exc)[:200]}") from None
    if not pairs:
        raise InvalidArgument(f"{source} lists no users: a personalized publisher needs at least one")
    try:
        return RequirementSet(pairs)
    except InvalidArgument as exc:
        raise InvalidArgument(f"{source}: {exc}") from None


def content_lines(lines: Iterable[str | bytes], fmt: str) -> Iterator[tuple[int, str]]:
    """(1-based line number, stripped text) of the lines that are neither empty nor ``#`` comments;
    ``fmt`` must be one of :data:`FORMATS` (checked before the first line is read)."""
    if fmt not in FORMATS:
        raise InvalidArgument(f"format={fmt!r} must be one of {list(FORMATS)}")
    return (
        (number, line if isinstance(line, Undecodable) else line.strip())
        for number, line in enumerate(decoded_lines(lines), start=1)
        if line.strip() and not line.strip().startswith("#")
    )


def parse_events(lines: Iterable[str | bytes], *, fmt: str) -> Iterator[Event | BadRow]:
    """(line number, t, user, bin) per non-empty line, or the :class:`BadRow` of a malformed one."""
    for number, text in content_lines(lines, fmt):
        try:
            fields = _fields(text, fmt, number)
            t = parse_timestamp(fields[0], number)
            if len(fields) == 1:
                yield number, t, None, -1
                continue
            user, raw_bin = fields[1:]
            if (
                isinstance(raw_bin, bool)
                or not isinstance(raw_bin, (int, str))
                or not _BIN_TEXT.fullmatch(str(raw_bin).strip())
            ):
                raise BadRow(f"bin={str(raw_bin)[:40]!r} must be a non-negative integer", row=number)
            yield number, t, str(user), int(str(raw_bin).strip())
        except BadRow as exc:
            yield exc


def _fields(text: str, fmt: str, number: int) -> list[Any]:
    if fmt == "csv":
        check_row_length(text, number)
        fields = [part.strip() for part in text.split(",")]
    else:
        obj = json_row(text, number)
        if (
            not isinstance(obj, dict)
            or set(obj) not in ({"t"}, {"t", "user", "bin"})
            or isinstance(obj.get("user"), (dict, list))
        ):
            raise BadRow(
                f'expected {{"t": ..., "user": ..., "bin": ...}} or {{"t": ...}}, got {text[:80]!r}', row=number
            )
        fields = [obj["t"]] if len(obj) == 1 else [obj["t"], obj["user"], obj["bin"]]
    if len(fields) not in (1, 3):
        raise BadRow(
            f"expected t,user,bin (or t alone to close t), got {len(fields)} fields: {text[:80]!r}", row=number
        )
    return fields


def timestamps(
    events: Iterator[Event | BadRow],
    requirements: RequirementSet,
    *,
    dimensions: int,
    published: int,
    skip: Callable[[BadRow], None],
) -> Iterator[tuple[int, FloatArray]]:
    """Group events into (t, counts per class and bin), for t after ``published``.

    ``skip(error)`` decides a malformed event: return to drop it and go on, or raise to stop. An
    unknown user, a bin outside [0, d), a user twice in one timestamp, an event for a closed or
    earlier timestamp are malformed; nothing of such a row is counted.
    """
    dimensions = check_positive_int(dimensions, "dimensions")
    classes = requirements.user_classes
    current, counts, seen, closed = 0, np.zeros((requirements.n_classes, dimensions)), set[int](), published
    for event in events:
        try:
            if isinstance(event, BadRow):
                raise event
            number, t, user, b = event
            if t <= published:
                continue  # published before the restart
            if t < current or t <= closed:
                raise BadRow(f"t={t} comes after t={max(current, closed)}: timestamps must not go back", row=number)
            if t > current and current > closed:
                yield current, counts
                counts, seen = np.zeros_like(counts), set()
            current = t
            if user is None:
                yield t, counts
                counts, seen, closed = np.zeros_like(counts), set(), t
                continue
            try:
                index = requirements.index_of(user)
            except InvalidArgument:
                raise BadRow(f"user {user!r} is not in the requirements file", row=number) from None
            if not 0 <= b < dimensions:
                raise BadRow(f"bin={b} must be in [0, {dimensions})", row=number)
            if index in seen:
                raise BadRow(f"user {user!r} already has a bin at t={t}", row=number)
            seen.add(index)
            counts[classes[index], b] += 1.0
        except BadRow as exc:
            skip(exc)
    if current > closed:
        yield current, counts
