"""``budgetcheck publish``: a live publisher on a durable ledger (w-event, personalized or Swellfish).

w-event and Swellfish: one timestamp per row (CSV ``t,c_1,...,c_d`` or JSON lines ``{"t": t, "counts": [...]}``).
Personalized: per-user rows (see :mod:`budgetcheck.stream.events`) and a requirement per user. It
runs a mechanism's release generator over a :class:`LiveStream` through a ledger kept in a file,
and writes each release as soon as it is final. Order per timestamp: spends committed to the file
(inside each charged operation) → release recorded in the file (t is a primary key: never twice)
→ release written out. After a crash the publisher replays the file (the mechanism re-spends
exactly the stored spends and gets the stored outputs, so it is back in the same state), writes
out the releases the output file is missing, and continues with the first unpublished row.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any, Final

import attrs
import numpy as np
from numpy.typing import NDArray

from budgetcheck.durable.checkpoint import DEFAULT_EVERY, PrivateKeyLike, sign_stop
from budgetcheck.durable.journal import LOCK_TIMEOUT, canonical
from budgetcheck.durable.ledger_file import replay_ledger
from budgetcheck.durable.transaction import store_release
from budgetcheck.ledger.errors import BadRow, InvalidArgument, LedgerCorrupt
from budgetcheck.ledger.noise import DISCRETE, NUMPY
from budgetcheck.ledger.notion import Notion
from budgetcheck.ledger.params import WEventParams
from budgetcheck.ledger.paths import check_output_path
from budgetcheck.ledger.personalized import PersonalizedLedger
from budgetcheck.ledger.policies import PolicyCollection
from budgetcheck.ledger.requirements import RequirementSet
from budgetcheck.ledger.swellfish import SwellfishLedger
from budgetcheck.ledger.validation import MAX_VALUE
from budgetcheck.ledger.wevent import WindowLedger
from budgetcheck.stream.events import (
    FORMATS,
    check_row_length,
    content_lines,
    json_row,
    parse_events,
    parse_timestamp,
    timestamps,
)
from budgetcheck.stream.live import LiveStream

FloatArray = NDArray[np.float64]
MAX_LIVE_W: Final = (
    1 << 20
)  # the largest w (and user w_i, policy |J|) a publisher takes: a live mechanism keeps O(w) state


@attrs.frozen
class PublishSummary:
    """What a publish run did: timestamps replayed from the file, published now, rows rejected."""

    replayed: int
    rewritten: int
    published: int
    rejected: tuple[str, ...]
    head: str


def parse_rows(
    lines: Iterable[str | bytes], *, fmt: str, dimensions: int, integers: bool
) -> Iterator[tuple[int, int, FloatArray] | BadRow]:
    """(line number, t, counts) per non-empty line, or the :class:`BadRow` error of a malformed one.

    A CSV's first line may be a header naming the columns (``t,c1,c2``: its first field is ``t``); it
    is skipped when it names t and ``dimensions`` counts, and a row error otherwise.
    """
    first = True
    for number, text in content_lines(lines, fmt):
        try:
            if first and fmt == "csv" and _is_header(text, number, dimensions):
                continue
            yield parse_row(text, number, fmt=fmt, dimensions=dimensions, integers=integers)
        except BadRow as exc:
            yield exc
        finally:
            first = False


def _is_header(text: str, number: int, dimensions: int) -> bool:
    """Whether a CSV line is the header ``t,<name>,…`` of ``dimensions`` counts (BadRow if it is a header
    of another width: the command's -d and the file disagree)."""
    fields = _fields(text, "csv", number)
    if fields[0].lower() != "t":
        return False
    if len(fields) != dimensions + 1:
        raise BadRow(
            f"the header {text[:80]!r} names {len(fields) - 1} counts, but dimensions={dimensions} "
            f"(-d {dimensions}): run with -d {len(fields) - 1}",
            row=number,
        )
    return True


def parse_row(text: str, number: int, *, fmt: str, dimensions: int, integers: bool) -> tuple[int, int, FloatArray]:
    """One row: (line number, t, counts); raises :class:`BadRow` naming the line."""
    fields = _fields(text, fmt, number)
    if len(fields) != dimensions + 1:
        raise BadRow(f"expected t and {dimensions} counts, got {len(fields)} fields: {text[:80]!r}", row=number)
    t = parse_timestamp(fields[0], number)
    try:
        counts = np.array([_count(x) for x in fields[1:]], dtype=np.float64)
    except (TypeError, ValueError, OverflowError) as exc:
        raise BadRow(f"counts must be numbers: {str(exc)[:120]}", row=number) from None
    if not (np.abs(counts) <= MAX_VALUE).all():
        raise BadRow(f"counts must be finite and at most 2^53, got {counts.tolist()}", row=number)
    if (counts < 0).any():
        raise BadRow(f"counts must be >= 0, got {counts.tolist()}", row=number)
    if integers and not np.array_equal(counts, np.round(counts)):
        raise BadRow(f"the discrete sampler publishes integer counts, got {counts.tolist()}", row=number)
    return number, t, counts


def _count(value: Any) -> float:
    """A count as a float: numbers and numeric text; booleans, nested values and integers beyond a
    float's range are refused (a 5,000-digit integer, 10^400)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise TypeError(f"{str(value)[:40]!r} is not a number")
    return float(value)


def _fields(text: str, fmt: str, number: int) -> list[Any]:
    if fmt == "csv":
        check_row_length(text, number)
        return [part.strip() for part in text.split(",")]
    obj = json_row(text, number)
    if not isinstance(obj, dict) or set(obj) != {"t", "counts"} or not isinstance(obj["counts"], list):
        raise BadRow(f'expected {{"t": ..., "counts": [...]}}, got {text[:80]!r}', row=number)
    return [obj["t"], *obj["counts"]]


def publish(
    mechanism: Any,
    lines: Iterable[str | bytes],
    ledger_path: str | Path,
    *,
    dimensions: int,
    epsilon: float | None = None,
    w: int | None = None,
    requirements: RequirementSet | None = None,
    policies: PolicyCollection | None = None,
    out: IO[str] | None = None,
    out_path: str | Path | None = None,
    fmt: str = "csv",
    output_format: str | None = None,
    sampler: str = DISCRETE,
    durability: str = "full",
    lock_timeout: float = LOCK_TIMEOUT,
    skip_bad_rows: bool = False,
    on_reject: Callable[[str], None] | None = None,
    signing_key: PrivateKeyLike | None = None,
    checkpoint_every: int = DEFAULT_EVERY,
    trusted_code: bool = False,
    allow_vouched: bool = False,
) -> PublishSummary:
    """Publish ``lines`` through ``mechanism`` on the ledger file (see the module docstring).

    w-event mechanisms take ``epsilon`` and ``w``; personalized ones take ``requirements`` (each
    user's (w_i, ε_i)) and per-user rows, and draw with numpy (the Sampling Mechanism's sampler);
    Swellfish ones take ``epsilon`` and ``policies`` (a timestamp no policy is relevant at has
    Δ_Q^t = 0 and is released exactly, as the notion allows).
    Exactly one of ``out`` (e.g. stdout: at least once — a restart first writes the last stored
    release again, the only one a crash can have kept from the stream, so a consumer that keeps
    one line per t sees every release) and ``out_path`` (a file: reconciled with the ledger at
    every start, so every release is in it exactly once) is given. ``lock_timeout``: seconds to wait
    for another writer of the same file before LedgerBusy (nothing charged, nothing released).
    ``signing_key``: the Ed25519 private key (or its PEM file) that signs checkpoints of the chain: every
    release, every ``checkpoint_every`` records and the stop; at start the store's checkpoints of its key
    are verified first (docs/explanation/tamper-evidence.md).
    ``trusted_code``, ``allow_vouched``: the publisher (the ledger's owner) allows the mechanism in-process code
    (``isolation='trusted'``) and vouched sensitivities (``measure``); refused by default, before any charge.
    """
    if not callable(getattr(mechanism, "releases", None)):
        raise InvalidArgument(
            f"mechanism {getattr(mechanism, 'name', mechanism)!r} cannot publish live: it has no releases(stream, "
            "ledger) generator"
        )
    if (out is None) == (out_path is None):
        raise InvalidArgument("give exactly one of out (a stream) and out_path (a file)")
    if out_path is not None:
        out_path = check_output_path(out_path, "out_path")  # before the ledger is opened: nothing charged
    out_fmt = (
        fmt if output_format is None else output_format
    )  # fmt: the input rows' format (and the output's by default)
    for name, given in (("fmt", fmt), ("output_format", out_fmt)):
        if given not in FORMATS:
            raise InvalidArgument(f"{name}={given!r} must be one of {list(FORMATS)}")
    ledger = _ledger(
        mechanism,
        epsilon=epsilon,
        w=w,
        requirements=requirements,
        policies=policies,
        sampler=sampler,
        owner=(trusted_code, allow_vouched),
    )
    replay_ledger(
        ledger_path,
        ledger,
        durability=durability,
        lock_timeout=lock_timeout,
        signing_key=signing_key,
        checkpoint_every=checkpoint_every,
    )
    journal = ledger.journal
    assert journal is not None
    try:
        claim: dict[str, Any] = {"mechanism": str(mechanism.name), "dimensions": dimensions, "format": out_fmt}
        if requirements is not None:
            claim["users"] = hashlib.sha256(
                canonical(
                    [[str(u), requirements.class_of(u).w, requirements.class_of(u).epsilon] for u in requirements.users]
                )
            ).hexdigest()
        journal.claim("publisher", canonical(claim).decode())
        stored = journal.releases()
        rewritten = 0
        if out_path is not None:
            written = _reconcile(Path(out_path), len(stored))
            handle: IO[str] = open(out_path, "a", encoding="utf-8")
            for t, value in stored[written:]:
                _write(handle, t, value, out_fmt, sampler)
                rewritten += 1
            _flush(handle, durability)
        else:
            assert out is not None
            handle = out
            if stored:  # a crash between storing and writing it can only have lost the last release
                _write(handle, *stored[-1], out_fmt, sampler)
                _flush(handle, durability)
                rewritten = 1
        try:
            rejected: list[str] = []

            def skip(error: BadRow) -> None:
                if not skip_bad_rows:
                    raise error
                rejected.append(str(error))
                if on_reject is not None:
                    on_reject(str(error))

            last = stored[-1][0] if stored else 0
            replayed = [t for t, _ in stored]
            if requirements is None:
                rows = _accepted(
                    parse_rows(lines, fmt=fmt, dimensions=dimensions, integers=sampler == DISCRETE), last, skip
                )
                stream = LiveStream(rows, dimensions=dimensions, replayed=replayed)
            else:
                groups = timestamps(
                    parse_events(lines, fmt=fmt), requirements, dimensions=dimensions, published=last, skip=skip
                )
                stream = LiveStream(groups, dimensions=dimensions, classes=requirements.n_classes, replayed=replayed)
            ledger.bind(stream)
            published = 0
            for index, value in enumerate(mechanism.releases(stream, ledger)):
                row = np.asarray(value, dtype=np.float64)[0]
                if index < len(stored):
                    if not np.array_equal(row, stored[index][1]):
                        raise LedgerCorrupt(
                            f"replaying t={stored[index][0]} gave {row.tolist()}, the file recorded "
                            f"{stored[index][1].tolist()}"
                        )
                    continue
                store_release(ledger, stream.current, row)
                _write(handle, stream.current, row, out_fmt, sampler)
                _flush(handle, durability)
                published += 1
        finally:
            if out_path is not None:
                handle.close()
        return PublishSummary(
            replayed=len(stored),
            rewritten=rewritten,
            published=published,
            rejected=tuple(rejected),
            head=journal.head()[1],
        )
    finally:
        try:
            sign_stop(journal, sys.exc_info()[1])  # a signed stop: what a restart must find at least
        finally:
            ledger.close()


def _ledger(
    mechanism: Any,
    *,
    epsilon: float | None,
    w: int | None,
    requirements: RequirementSet | None,
    policies: PolicyCollection | None,
    sampler: str,
    owner: tuple[bool, bool],
) -> WindowLedger | PersonalizedLedger | SwellfishLedger:
    """The in-memory ledger the file is replayed into, for the mechanism's notion; never one whose
    noise could be recomputed (a reproducible sampler is for experiments, not for publishing)."""
    if sampler == NUMPY:
        raise InvalidArgument(
            f"sampler={sampler!r} is reproducible noise (a seeded generator): whoever learns the seed and the "
            f"session can subtract it from the releases and recover the true counts; a publisher draws from "
            f"the OS CSPRNG ({DISCRETE!r}, the default)"
        )
    _check_windows(w, requirements, policies)
    trusted_code, allow_vouched = owner  # the publisher's consent (WindowLedger's trusted_code, allow_vouched)
    notion = getattr(mechanism, "notion", Notion.W_EVENT)
    if requirements is not None and policies is not None:
        raise InvalidArgument(
            "give requirements (a personalized publisher) or policies (a Swellfish publisher), not both"
        )
    wanted = (
        Notion.PERSONALIZED
        if requirements is not None
        else Notion.SWELLFISH
        if policies is not None
        else Notion.W_EVENT
    )
    if notion != wanted:
        how = {
            Notion.PERSONALIZED: "requirements (per-user w and epsilon)",
            Notion.SWELLFISH: "epsilon and policies",
            Notion.W_EVENT: "epsilon and w",
        }.get(notion, "its notion's parameters")
        raise InvalidArgument(f"mechanism {mechanism.name!r} is a {notion} mechanism: give it {how}")
    if notion == Notion.SWELLFISH:
        assert policies is not None
        if epsilon is None or w is not None:
            raise InvalidArgument(
                f"a Swellfish publisher needs epsilon and policies (w comes from them), got epsilon={epsilon!r}, "
                f"w={w!r}"
            )
        return SwellfishLedger(
            policies, epsilon=epsilon, runs=1, sampler=sampler, trusted_code=trusted_code, allow_vouched=allow_vouched
        )
    if requirements is None:
        if epsilon is None or w is None:
            raise InvalidArgument(f"a w-event publisher needs epsilon and w, got epsilon={epsilon!r}, w={w!r}")
        return WindowLedger(
            WEventParams(epsilon=epsilon, w=w),
            runs=1,
            sampler=sampler,
            trusted_code=trusted_code,
            allow_vouched=allow_vouched,
        )
    if epsilon is not None or w is not None:
        raise InvalidArgument(
            f"a personalized publisher takes w and epsilon per user from the requirements, not epsilon={epsilon!r}, "
            f"w={w!r}"
        )
    return PersonalizedLedger(
        requirements, runs=1, sampler=sampler, trusted_code=trusted_code, allow_vouched=allow_vouched
    )


def _check_windows(w: int | None, requirements: RequirementSet | None, policies: PolicyCollection | None) -> None:
    """Refuse a w, a user's w_i or a policy's |J| beyond :data:`MAX_LIVE_W` before anything is opened
    (a 5,000-digit w from a requirements file would otherwise hang the mechanism)."""
    found = [("w", w)] if isinstance(w, int) else []
    found += [(f"requirements class {i}: w", c.w) for i, c in enumerate(requirements.classes)] if requirements else []
    found += [("the policies' largest |J|", policies.max_interval)] if policies else []
    for name, value in found:
        if value > MAX_LIVE_W:
            shown = str(value) if value < 10**30 else f"{str(value)[:12]}... ({len(str(value))} digits)"
            raise InvalidArgument(
                f"{name}={shown} is beyond the {MAX_LIVE_W:,} a live publisher takes (its mechanism "
                "keeps state for every timestamp of a window)"
            )


def _accepted(
    rows: Iterator[tuple[int, int, FloatArray] | BadRow], published: int, skip: Callable[[BadRow], None]
) -> Iterator[tuple[int, FloatArray]]:
    """Rows after the last published t; malformed or non-increasing rows go to ``skip`` (which may raise)."""
    previous = published
    for parsed in rows:
        try:
            if isinstance(parsed, BadRow):
                raise parsed
            number, t, counts = parsed
            if t <= published:
                continue  # published before the restart
            if t <= previous:
                raise BadRow(f"t={t} does not increase (the previous row had t={previous})", row=number)
        except BadRow as exc:
            skip(exc)
            continue
        previous = t
        yield t, counts


def _reconcile(path: Path, stored: int) -> int:
    """How many complete release lines the output file holds (a torn last line is cut off)."""
    if not path.exists():
        return 0
    data = path.read_bytes()
    cut = data.rfind(b"\n") + 1
    if cut != len(data):
        with open(path, "r+b") as handle:
            handle.truncate(cut)
    lines = data[:cut].count(b"\n")
    if lines > stored:
        raise LedgerCorrupt(
            f"{path} holds {lines} releases but the ledger file recorded only {stored}: not the output of this ledger"
        )
    return lines


def _write(handle: IO[str], t: int, value: FloatArray, fmt: str, sampler: str) -> None:
    numbers = [int(v) if sampler == DISCRETE and float(v).is_integer() else float(v) for v in value.tolist()]
    if fmt == "csv":
        handle.write(",".join([str(t), *(repr(v) for v in numbers)]) + "\n")
    else:
        handle.write(json.dumps({"t": t, "counts": numbers}) + "\n")  # the key of the input rows


def _flush(handle: IO[str], durability: str) -> None:
    handle.flush()
    if durability == "full" and hasattr(handle, "fileno"):
        try:
            os.fsync(handle.fileno())
        except (OSError, ValueError):  # a pipe or terminal: nothing to sync
            pass
