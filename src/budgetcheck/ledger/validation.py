"""Validation at the public boundary, in one place. Messages name the argument and its value."""

from __future__ import annotations

import math
import numbers
import reprlib
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import NDArray

from budgetcheck.kernels import compiled
from budgetcheck.ledger.errors import InvalidArgument

FloatArray = NDArray[np.float64]


def check_epsilon(value: object, name: str = "epsilon") -> float:
    """A privacy budget: a real number, finite and > 0."""
    if type(value) is float and 0.0 < value < math.inf:  # the common case, without the ABC check
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidArgument(f"{name}={value!r} must be a finite number > 0, not {type(value).__name__}")
    as_float = _as_float(value, name)
    if not math.isfinite(as_float) or as_float <= 0.0:
        raise InvalidArgument(f"{name}={value!r} must be a finite number > 0")
    if _inexact(value, as_float):  # as amounts are (see _exact_doubles): the nearest double may be above it
        raise InvalidArgument(
            f"{name}={value!r}: no double equals it (the nearest is {as_float!r}); a budget must be exactly a double"
        )
    return as_float


def _as_float(value: numbers.Real | int | float, name: str) -> float:
    """float(value), or the refusal of a number beyond every double (2**1100, Fraction(10**400)): Python
    raises OverflowError there, which is bad input like any other, named."""
    try:
        return float(value)
    except OverflowError:
        raise InvalidArgument(f"{name}={value!r} must be a finite number: it is beyond the largest double") from None


def check_nonnegative(value: object, name: str) -> float:
    """A public number that sets a sensitivity (a Swellfish threshold): finite, >= 0 and exactly a double."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidArgument(f"{name}={value!r} must be a finite number >= 0, not {type(value).__name__}")
    as_float = _as_float(value, name)
    if not math.isfinite(as_float) or as_float < 0.0:
        raise InvalidArgument(f"{name}={value!r} must be a finite number >= 0")
    if _inexact(value, as_float):
        raise InvalidArgument(
            f"{name}={value!r}: no double equals it (the nearest is {as_float!r}); it must be a double"
        )
    return as_float


def check_declared_sensitivity(value: object, name: str = "sensitivity") -> float:
    """A sensitivity a mechanism declares beside the computed one: an int or a float, finite and > 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgument(f"{name}={value!r} must be a finite number > 0 (or None: the computed one)")
    declared = _as_float(value, name)
    if not math.isfinite(declared) or declared <= 0.0:
        raise InvalidArgument(f"{name}={value!r} must be a finite number > 0 (or None: the computed one)")
    return declared


def _inexact(value: object, as_float: float) -> bool:
    """Whether ``value`` (a real number, or a 0-d array of one) differs from the double ``as_float`` it
    converts to; a value of a kind not known here counts as inexact (refused, never rounded)."""
    if isinstance(value, np.ndarray):
        if value.ndim:
            return True
        value = value[()]
    if isinstance(value, (float, np.floating)) and not isinstance(value, np.longdouble):
        return False  # float16/32/64 convert exactly
    if isinstance(value, np.longdouble):
        return bool(value != np.longdouble(as_float))
    if isinstance(value, (numbers.Rational, np.integer)):
        return Fraction(int(value) if isinstance(value, np.integer) else value) != Fraction(as_float)
    return True


MAX_VALUE = float(2**53)  # the largest |value| of a stream: exact integers; any sum, mean or difference a mechanism
# computes from d <= 2^20 of them stays finite, so no operation can fail on the data after its charge
MAX_RUNS = 2**24  # the most runs of one ledger: its per-run arrays stay allocatable (16,777,216 runs; the
# benchmark's largest stacked pass is about 12,000); a ledger too large for the machine below it is refused too
MAX_T = 2**62  # the largest timestamp: every store keeps t as a 64-bit integer with room for t + w


def check_timestamp(value: object, name: str = "t") -> int:
    """A timestamp: an integer in [1, 2^62] (bools and floats refused)."""
    t = check_positive_int(value, name)
    if t > MAX_T:
        raise InvalidArgument(f"{name}={t} is beyond the largest timestamp 2^62 = {MAX_T}")
    return t


def check_runs(value: object, name: str = "runs") -> int:
    """A number of runs: an integer in [1, 2^24] (:data:`MAX_RUNS`)."""
    runs = check_positive_int(value, name)
    if runs > MAX_RUNS:
        raise InvalidArgument(f"{name}={runs} is more than the {MAX_RUNS:,} runs (2^24) one ledger holds")
    return runs


def check_positive_int(value: object, name: str, *, minimum: int = 1) -> int:
    """An integer >= minimum (bools and integral floats such as 2.0 are refused)."""
    if type(value) is int and value >= minimum:  # the common case, without the ABC check
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InvalidArgument(f"{name}={value!r} must be an integer >= {minimum}")
    as_int = int(value)
    if as_int < minimum:
        raise InvalidArgument(f"{name}={value!r} must be an integer >= {minimum}")
    return as_int


def check_label(value: object, name: str = "purpose") -> str:
    """A short non-empty label such as 'publication' or 'dissimilarity' (text a ledger store can keep:
    UTF-8, so no lone surrogate such as '\\ud800')."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidArgument(f"{name}={value!r} must be a non-empty string")
    if not is_utf8(value):
        raise InvalidArgument(f"{name}={value!r} must be text without a lone surrogate (it cannot be stored as UTF-8)")
    return value


def is_utf8(text: str) -> bool:
    """Whether ``text`` can be encoded as UTF-8 (it holds no lone surrogate, e.g. '\\udc80' from a byte that
    ``errors="surrogateescape"`` decoded)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_amounts(value: object, runs: int, name: str = "epsilon") -> FloatArray:
    """Per-run budget amounts: a scalar or an array of shape (runs,), each finite and >= 0.

    Zero means "this run spends nothing here". Returns a read-only float64 array (fresh, except for a
    positive float and one run: the one array of that value, shared by every charge that spends it).
    """
    if type(value) is float and math.isfinite(value) and value >= 0.0:  # the common scalar: no array checks
        if runs == 1 and value > 0.0:
            shared = _ONE_RUN.get(value)
            if shared is not None:
                return shared
        arr = np.full(runs, value)
        arr.setflags(write=False)
        if runs == 1 and value > 0.0:  # a one-run mechanism's budgets recur (BD's ε/(2w) at every timestamp)
            # over immutable bytes: numpy refuses to make it (or any view of it) writable; a read-only array
            # that owns its memory can be made writable again (records keep this one, and it is shared)
            arr = np.frombuffer(arr.tobytes(), dtype=np.float64)
            if len(_ONE_RUN) >= _ONE_RUN_KEPT:
                _ONE_RUN.clear()
            _ONE_RUN[value] = arr
        return arr
    arr = float_array(value, name, "a finite number >= 0 or an array of them")
    if arr.ndim == 0:
        arr = np.full(runs, float(arr))
    if arr.shape != (runs,):
        raise InvalidArgument(
            f"{name} has shape {arr.shape}; the ledger accounts for {runs} runs, so it must be a scalar or have shape "
            f"({runs},)"
        )
    return _finite_nonnegative(arr, name)


_ONE_RUN: dict[float, FloatArray] = {}  # positive amount -> its read-only array of one run (check_amounts)
_ONE_RUN_KEPT = 256


def check_amount_rows(value: object, rows: int, runs: int, name: str = "epsilon") -> FloatArray:
    """Budgets of ``rows`` spends: shape (rows,) (one per spend, for every run) or (rows, runs),
    each finite and >= 0. Returns a fresh read-only array of shape (rows, 1) (the same for every
    run: broadcast it) or (rows, runs)."""
    arr = float_array(value, name, "an array of finite numbers >= 0")
    if arr.shape == (rows,):
        arr = arr.reshape(rows, 1).copy()  # its own base, so records can share read-only views of it
    if arr.shape not in ((rows, 1), (rows, runs)):
        raise InvalidArgument(
            f"{name} has shape {arr.shape}; expected ({rows},) or ({rows}, {runs}) for {rows} spends and {runs} runs"
        )
    one_column = arr.shape[1] == 1 and runs != 1  # named by the spend alone, as it was given
    return _finite_nonnegative(arr, name, (lambda index: index[:1]) if one_column else None)


def check_bin_amounts(
    value: object, runs: int, bins: int, name: str = "epsilon", *, scalar: bool = False
) -> FloatArray:
    """Per-run, per-bin (or per-class) budgets: shape (runs, bins) or (bins,) (or a scalar if
    ``scalar``), each finite and >= 0 (read-only)."""
    arr = float_array(value, name, "an array of finite numbers >= 0")
    if arr.shape == (bins,) or (scalar and arr.ndim == 0):
        arr = np.broadcast_to(arr, (runs, bins)).copy()
    if arr.shape != (runs, bins):
        raise InvalidArgument(f"{name} has shape {arr.shape}; expected ({runs}, {bins}) or ({bins},)")
    return _finite_nonnegative(arr, name)


def float_array(value: object, name: str, expected: str) -> FloatArray:
    """A fresh float64 array of ``value``, naming ``expected`` when it is not numbers: booleans,
    strings (``"0.1"`` is not converted), None and other objects are refused, alone or inside arrays, and
    so are numbers no double equals (Fraction(1, 3), 2**53 + 1: see :func:`_exact_doubles`)."""
    if type(value) is np.ndarray and value.dtype == np.float64:  # a mechanism's budgets: a copy, nothing to convert
        return value.copy()
    if type(value) is float:  # a double already: nothing to check for exactness
        return np.array(value)
    if value is None or isinstance(value, (bool, str, bytes)):
        raise InvalidArgument(f"{name}={value!r} must be {expected}, not {type(value).__name__}")
    try:
        raw = np.asarray(value)
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(f"{name}={value!r} must be {expected}") from exc
    if raw.dtype.kind == "O":  # e.g. Fractions (accepted if a double equals them) or a None or a string (refused)
        for item in raw.flat:
            if isinstance(item, bool) or not isinstance(item, numbers.Real):
                raise InvalidArgument(f"{name} holds {item!r} ({type(item).__name__}); it must be {expected}")
    elif raw.dtype.kind not in "iuf":
        raise InvalidArgument(f"{name}={value!r} must be {expected}, not an array of {raw.dtype}")
    try:
        arr = np.array(raw, dtype=np.float64)
    except (TypeError, ValueError, OverflowError) as exc:
        raise InvalidArgument(f"{name}={value!r} must be {expected}") from exc
    if not isinstance(value, np.ndarray) and raw.dtype.kind == "f":  # numpy may have rounded an int beside a float
        try:
            given = np.array(value, dtype=object)  # the numbers as given (0-d arrays among them unwrapped below)
        except ValueError:  # ragged: numpy refused it above unless it held doubles only
            given = None
        if given is None or given.shape != arr.shape:
            raise InvalidArgument(f"{name}={value!r} must be {expected}: a sequence of numbers of one shape")
        raw = given
    return _exact_doubles(raw, arr, name)


def _exact_doubles(raw: NDArray[Any], arr: FloatArray, name: str) -> FloatArray:
    """``arr`` (raw as doubles), refused if some entry is a number that no double equals: a Fraction such as
    1/3, an integer beyond 2^53, a long double. Budgets are exact sums of doubles (units of 2^-1127); rounding
    such a number to nearest could charge below its value (three Fraction(1, 3) plus 2^-60 would fit ε = 1),
    rounding it up would refuse three thirds that fit: it is refused, as Decimal is. Doubles, float32 and
    integers up to 2^53 convert exactly and pass untouched; Fraction(1, 4) is charged as 0.25."""
    if raw.dtype.kind == "f" and raw.dtype.itemsize <= 8:
        return arr
    if raw.dtype.kind in "iu" and (raw.size == 0 or (raw.max() <= 2**53 and raw.min() >= -(2**53))):
        return arr
    exact = raw.reshape(-1).tolist() if raw.dtype.kind == "O" else list(raw.reshape(-1))
    for item, converted in zip(exact, arr.reshape(-1).tolist(), strict=True):
        if math.isfinite(converted) and _inexact(item, converted):
            raise InvalidArgument(
                f"{name} holds {item!r}, which no double equals (the nearest is {converted!r}): a budget must be "
                "exactly a double; pass a float knowingly (rounding.share(total, parts) is the largest share that fits)"
            )
    return arr


def _finite_nonnegative(
    arr: FloatArray, name: str, shown: Callable[[tuple[int, ...]], tuple[int, ...]] | None = None
) -> FloatArray:
    """``arr``, read-only, when every entry is finite and >= 0; else the first bad entry, by its index
    (``shown`` picks the part of the index to print)."""
    if arr.size and _finite_and_nonnegative(arr.reshape(-1)):  # else the search below names the first bad entry
        arr.setflags(write=False)
        return arr
    bad = ~np.isfinite(arr) | (arr < 0.0)
    if bad.any():
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        label = ", ".join(str(i) for i in (shown(index) if shown else index))
        raise InvalidArgument(f"{name}[{label}]={float(arr[index])!r} must be a finite number >= 0")
    arr.setflags(write=False)
    return arr


@compiled
def _finite_and_nonnegative(values: FloatArray) -> bool:
    """Whether every value is finite and >= 0, in one pass (NaN is neither)."""
    for value in values:
        if not (0.0 <= value < math.inf):
            return False
    return True


def check_sensitivity(value: object, name: str = "sensitivity") -> float:
    """A query sensitivity: finite and > 0."""
    return check_epsilon(value, name)


def check_stream(data: object, name: str = "data") -> FloatArray:
    """A stream of d-dimensional query results: shape (T, d) (or (T,) for d = 1), finite, T, d >= 1.

    Ragged rows, NaN, infinities and non-numeric entries are refused with the offending row.
    """
    if isinstance(data, np.ndarray):
        rows: Any = data
    else:
        try:
            rows = list(data)  # type: ignore[call-overload]
        except TypeError as exc:
            raise InvalidArgument(f"{name} must be a sequence of rows, got {type(data).__name__}") from exc
        widths = [_row_width(row) for row in rows]
        for index, width in enumerate(widths):
            if width != widths[0]:
                raise InvalidArgument(f"{name} is ragged: row {index + 1} has {width} values, row 1 has {widths[0]}")
    try:
        raw = np.asarray(rows)
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(f"{name} must hold numbers only: {exc}") from exc
    _check_real(raw, name)
    try:
        arr = np.array(raw, dtype=np.float64)
    except (TypeError, ValueError, OverflowError) as exc:
        raise InvalidArgument(f"{name} must hold numbers only: {exc}") from exc
    if arr.ndim == 1:
        arr = arr.reshape(-1, 1)
    if arr.ndim != 2:
        raise InvalidArgument(f"{name} must have shape (T, d), got shape {arr.shape}")
    if arr.shape[0] < 1 or arr.shape[1] < 1:
        raise InvalidArgument(f"{name} must have at least one timestamp and one dimension, got shape {arr.shape}")
    bad = ~(np.abs(arr) <= MAX_VALUE)  # NaN and infinities fail too
    if bad.any():
        t, d = (int(i) for i in np.argwhere(bad)[0])
        raise InvalidArgument(
            f"{name} has {float(arr[t, d])!r} at timestamp t={t + 1}, dimension {d}: values must be finite "
            f"and at most 2^53 in size"
        )
    arr.setflags(write=False)
    return arr


def _check_real(raw: NDArray[Any], name: str) -> None:
    """Real numbers only: complex values (whose imaginary part a conversion would drop), strings
    (which numpy would parse), dates and other objects are refused, naming the first one."""
    if raw.dtype.kind in "biuf":
        return
    if raw.dtype.kind == "O":
        for index, item in enumerate(raw.flat):
            if not isinstance(item, numbers.Real):
                where = tuple(int(i) for i in np.unravel_index(index, raw.shape))
                raise InvalidArgument(
                    f"{name} must hold real numbers only, got {item!r} ({type(item).__name__}) at index {where}"
                )
        return
    first = f" (first value {raw.reshape(-1)[0].tolist()!r})" if raw.size else ""
    raise InvalidArgument(f"{name} must hold real numbers only, got an array of {raw.dtype}{first}")


def _row_width(row: object) -> int:
    if isinstance(row, (str, bytes)):
        return -1
    if isinstance(row, numbers.Real):
        return 0
    try:
        return len(row)  # type: ignore[arg-type]
    except TypeError:
        return -1


def check_release_row(values: object, shape: tuple[int, ...], name: str = "last_release") -> FloatArray:
    """A mechanism's last release as a finite float64 array of ``shape``: refused as InvalidArgument (so that
    the operation binds nothing) when it is not numbers, has another shape or holds NaN or infinities."""
    try:
        last = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        raise InvalidArgument(f"{name}={reprlib.repr(values)} must be finite numbers of shape {shape}") from None
    if last.shape != shape or not np.isfinite(last).all():
        raise InvalidArgument(f"{name} must be finite with shape {shape}, got shape {last.shape}")
    return last


def check_epsilons(epsilons: object, name: str = "epsilons") -> FloatArray:
    """Per-run privacy budgets (``WindowLedger.with_epsilons``): a fresh float array of shape (runs,),
    runs >= 1, each finite and > 0 and exactly a double; the message names ``epsilons[r]`` and its value."""
    if isinstance(epsilons, np.ndarray) and _doubles_exactly(epsilons) and epsilons.ndim == 1 and epsilons.size:
        bad = np.flatnonzero(~(np.isfinite(epsilons) & (epsilons > 0.0)))  # doubles already: checked at once
        if bad.size:
            check_epsilon(float(epsilons[bad[0]]), f"{name}[{int(bad[0])}]")
        return np.array(epsilons, dtype=np.float64)
    values = np.asarray(epsilons, dtype=object)  # the values as given: True is refused, not read as 1.0
    if values.ndim != 1 or values.size == 0:
        raise InvalidArgument(f"{name}={epsilons!r} must be a non-empty 1-d sequence of budgets, one per run")
    return np.array([check_epsilon(value, f"{name}[{r}]") for r, value in enumerate(values.tolist())], dtype=np.float64)


def check_query_epsilon(epsilon: object, runs: int) -> float | FloatArray:
    """An AboveThreshold query's ε: a number, or a read-only array of shape (runs,) (a ledger of
    several ε), each finite and > 0."""
    if not isinstance(epsilon, np.ndarray) or epsilon.ndim == 0:
        return check_epsilon(epsilon.item() if isinstance(epsilon, np.ndarray) else epsilon)
    if epsilon.shape != (runs,) or epsilon.dtype.kind not in "fiu":
        raise InvalidArgument(
            f"epsilon={epsilon!r} must be a finite number > 0 or an array of {runs} of them (one per run)"
        )
    if not _doubles_exactly(epsilon):  # int64 2**62 + 1 or a long double 0.1: refused as the scalar is
        return _read_only(check_epsilons(epsilon, "epsilon"))
    if not (np.isfinite(epsilon) & (epsilon > 0)).all():
        raise InvalidArgument(
            f"epsilon={epsilon!r} must be a finite number > 0 or an array of {runs} of them (one per run)"
        )
    return _read_only(np.array(epsilon, dtype=np.float64))


def _doubles_exactly(values: NDArray[Any]) -> bool:
    """Whether every entry of an array of this dtype is exactly a double (float16/32/64): the fast paths; any
    other dtype (a long double, an integer beyond 2^53) is checked entry by entry, as a scalar is."""
    return values.dtype.kind == "f" and values.dtype.itemsize <= 8


def _read_only(values: FloatArray) -> FloatArray:
    values.setflags(write=False)
    return values
