"""A measured function cannot keep what it sees: attacks from a malicious mechanism author.

Each attack is a ``fn`` handed to ``measure`` that tries to get the true values back into the
mechanism's process by a route other than its noisy result. Every attack is run twice: with the
default isolation (a forked process per call) the parent must see nothing; with the documented
opt-out ``isolation='trusted'`` the same attack must succeed — proof that the test would notice
a leak (so a passing test is not a test that looks in the wrong place).
"""

from __future__ import annotations

import os
import stat
import struct
import sys
import threading
import time
import types
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import budgetcheck as bc

SECRET = 987654.0  # the true value in every bin; no noise the tests add comes near it
FORK, TRUSTED = "fork", "trusted"
_GLOBAL: list[Any] = []


class _Holder:
    kept: Any = None


def _ledger(isolation: str, data: Any = None) -> tuple[bc.WindowLedger, list[bc.Secret], Callable[..., Any]]:
    stream = bc.GuardedStream(np.full((3, 2), SECRET) if data is None else data)
    ledger = bc.WindowLedger(
        epsilon=3e6, w=3, sampler="numpy-laplace", keep_records=True, trusted_code=True, allow_vouched=True
    )
    ledger.bind(stream)

    def measure(fn: Callable[[np.ndarray], Any], secret: bc.Secret, shape: tuple[int, ...] = ()) -> np.ndarray:
        return ledger.measure(fn, secret, sensitivity=1.0, epsilon=1e6, isolation=isolation, shape=shape)

    return ledger, list(stream), measure


def _holds(value: Any) -> bool:
    """Whether ``value`` (or what it contains, a few levels down) holds the secret value."""
    if isinstance(value, np.ndarray):
        return value.dtype.kind in "fiu" and bool((value == SECRET).any())
    if isinstance(value, (list, tuple, set)):
        return any(_holds(v) for v in value)
    if isinstance(value, dict):
        return any(_holds(v) for v in value.values())
    if isinstance(value, (int, float)):
        return value == SECRET
    return isinstance(value, str) and "987654" in value


# --- attacks that store the data somewhere the mechanism can read it afterwards -----------------------


def _closure(measure: Callable[..., Any], secret: bc.Secret) -> Any:
    kept: list[Any] = []
    measure(lambda v: kept.append(v.copy()) or v.sum(), secret)
    return kept


def _global(measure: Callable[..., Any], secret: bc.Secret) -> Any:
    _GLOBAL.clear()
    measure(lambda v: _GLOBAL.append(v.tolist()) or v.sum(), secret)
    return list(_GLOBAL)


def _class_attribute(measure: Callable[..., Any], secret: bc.Secret) -> Any:
    _Holder.kept = None

    def fn(v: np.ndarray) -> float:
        _Holder.kept = v.copy()
        return float(v.sum())

    measure(fn, secret)
    return _Holder.kept


def _module_attribute(measure: Callable[..., Any], secret: bc.Secret) -> Any:
    def fn(v: np.ndarray) -> float:
        np.kept_by_attacker = v.copy()  # type: ignore[attr-defined]
        bc.kept_by_attacker = float(v[0])  # type: ignore[attr-defined]
        return float(v.sum())

    measure(fn, secret)
    found = [getattr(np, "kept_by_attacker", None), getattr(bc, "kept_by_attacker", None)]
    for module in (np, bc):
        if hasattr(module, "kept_by_attacker"):
            delattr(module, "kept_by_attacker")
    return found


def _environment(measure: Callable[..., Any], secret: bc.Secret) -> Any:
    def fn(v: np.ndarray) -> float:
        os.environ["KEPT_BY_ATTACKER"] = repr(v.tolist())
        return float(v.sum())

    measure(fn, secret)
    return os.environ.pop("KEPT_BY_ATTACKER", None)


def _sys_modules(measure: Callable[..., Any], secret: bc.Secret) -> Any:
    def fn(v: np.ndarray) -> float:
        module = types.ModuleType("kept_by_attacker")
        module.values = v.copy()  # type: ignore[attr-defined]
        sys.modules["kept_by_attacker"] = module
        return float(v.sum())

    measure(fn, secret)
    module = sys.modules.pop("kept_by_attacker", None)
    return getattr(module, "values", None)


def _thread_outliving_the_call(measure: Callable[..., Any], secret: bc.Secret) -> Any:
    box: list[Any] = []

    def fn(v: np.ndarray) -> float:
        copy = v.copy()
        threading.Thread(target=lambda: (time.sleep(0.2), box.append(copy)), daemon=True).start()
        return float(v.sum())

    measure(fn, secret)
    time.sleep(0.5)  # long after the call: the thread (if it still lives anywhere here) has written
    return box


def _later_timestamp(measure: Callable[..., Any], secrets: list[bc.Secret]) -> Any:
    """fn at t = 1 keeps the values; fn at t = 2 (whose own data is all zero) returns them."""
    store: dict[str, Any] = {}

    def fn(v: np.ndarray) -> np.ndarray:
        if "kept" in store:
            return np.asarray(store["kept"])
        store["kept"] = v.copy()
        return np.zeros_like(v)

    measure(fn, secrets[0], (2,))
    return measure(fn, secrets[1], (2,))  # ε = 1e6: the noise is about 1e-6, the leak would be exact to 1e-5


# --- attacks through what comes back -------------------------------------------------------------


class _Carrier(np.ndarray):  # type: ignore[type-arg]
    """An ndarray subclass with the data in an attribute."""

    kept: Any = None


def _ndarray_subclass(measure: Callable[..., Any], secret: bc.Secret) -> Any:
    def fn(v: np.ndarray) -> np.ndarray:
        out = np.zeros(2).view(_Carrier)
        out.kept = v.copy()
        return out

    result = measure(fn, secret, (2,))
    return [type(result) is not np.ndarray, getattr(result, "kept", None), getattr(result, "__dict__", {})]


class _Rereads:
    """An object whose __array__ and __float__ stash (and return) the data whenever they are called."""

    stash: list[Any] = []

    def __init__(self, values: np.ndarray) -> None:
        self._values = values

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        _Rereads.stash.append(self._values.copy())
        return np.zeros(2)

    def __float__(self) -> float:
        _Rereads.stash.append(self._values.copy())
        return 0.0


def _object_rereading(measure: Callable[..., Any], secret: bc.Secret) -> Any:
    _Rereads.stash = []
    result = measure(lambda v: _Rereads(v), secret, (2,))
    return [list(_Rereads.stash), type(result) is not np.ndarray]


ATTACKS = [
    _closure,
    _global,
    _class_attribute,
    _module_attribute,
    _environment,
    _sys_modules,
    _thread_outliving_the_call,
    _ndarray_subclass,
    _object_rereading,
]


def _leaked(found: Any) -> bool:
    return _holds(found) or (isinstance(found, list) and any(x is True or _holds(x) for x in found))


@pytest.mark.parametrize("attack", ATTACKS, ids=lambda a: a.__name__.strip("_"))
def test_nothing_fn_stores_reaches_the_mechanisms_process(attack: Callable[..., Any]) -> None:
    ledger, secrets, measure = _ledger(FORK)
    found = attack(measure, secrets[0])
    assert not _leaked(found), found
    assert ledger.vouched == 1 and ledger.records[-1].vouched  # it was charged, and marked vouched


@pytest.mark.parametrize(
    "attack", [a for a in ATTACKS if a not in (_ndarray_subclass,)], ids=lambda a: a.__name__.strip("_")
)
def test_the_same_attacks_succeed_in_process_so_the_check_would_see_a_leak(attack: Callable[..., Any]) -> None:
    """Control: with isolation='trusted' each attack gets the data back (the opt-out is what it says)."""
    _, secrets, measure = _ledger(TRUSTED)
    assert _leaked(attack(measure, secrets[0]))


def test_values_kept_at_one_timestamp_cannot_be_returned_at_a_later_one() -> None:
    data = np.array([[SECRET, SECRET], [0.0, 0.0], [0.0, 0.0]])
    _, secrets, measure = _ledger(FORK, data)
    assert np.abs(_later_timestamp(measure, secrets)).max() < 1.0
    _, secrets, measure = _ledger(TRUSTED, data)
    assert np.abs(_later_timestamp(measure, secrets) - SECRET).max() < 1.0  # control: in-process it works


class _DataNamedError(Exception):
    pass


def _raise_with_the_data(v: np.ndarray) -> float:
    named = type(f"E{int(v[0])}", (Exception,), {})  # a class whose name spells the data
    raise named(v.copy(), f"{v.tolist()}")


def _raise_builtin(v: np.ndarray) -> float:
    raise KeyError(f"{v.tolist()}")


def _exit_the_child(v: np.ndarray) -> float:
    os._exit(int(v[0]) % 256)


def _sys_exit(v: np.ndarray) -> float:
    sys.exit(f"{v.tolist()}")


def _forge_a_failure(v: np.ndarray) -> float:
    """Write a message of its own into the result pipe: a 'failure' whose text is the data."""
    text = f"raised {v.tolist()}".encode()
    message = struct.pack("<bq", 1, len(text)) + text
    for name in os.listdir("/proc/self/fd"):
        try:
            fd = int(name)
            if fd > 2 and stat.S_ISFIFO(os.fstat(fd).st_mode):  # not the terminal's: that is the OS's channel
                os.write(fd, struct.pack("<q", len(message)) + message)
        except OSError:
            pass
    os._exit(0)


def _forge_a_huge_answer(v: np.ndarray) -> float:
    for name in os.listdir("/proc/self/fd"):
        try:
            fd = int(name)
            if fd > 2 and stat.S_ISFIFO(os.fstat(fd).st_mode):  # not the terminal's: that is the OS's channel
                os.write(fd, struct.pack("<q", 1 << 40))
        except OSError:
            pass
    os._exit(0)


@pytest.mark.parametrize(
    "fn",
    [_raise_with_the_data, _raise_builtin, _exit_the_child, _sys_exit, _forge_a_failure, _forge_a_huge_answer],
    ids=lambda f: f.__name__.strip("_"),
)
def test_a_failing_or_forging_fn_reports_no_value(fn: Callable[..., Any]) -> None:
    """Whatever fn does, the call gives the default (0.0, noised at scale 1e-6) and raises nothing; the owner's
    record says it failed, without anything of fn's."""
    ledger, secrets, measure = _ledger(FORK)
    out = measure(fn, secrets[0])
    assert abs(out[0]) < 1.0 and not _holds(out)
    (failure,) = ledger.failures
    assert failure.t == 1 and "987654" not in failure.reason
    assert ledger.t == 1  # the charge stands: the data was read
    assert abs(measure(lambda v: v.sum(), secrets[1])[0] - 2 * SECRET) < 1.0  # the ledger goes on


def test_a_grandchild_is_never_made_and_the_call_takes_its_deadline() -> None:
    def fn(v: np.ndarray) -> float:
        if os.fork() == 0:  # a grandchild that would inherit the pipe and live on: the sandbox refuses it
            time.sleep(3)
            os._exit(0)
        return float(v.sum())

    ledger, secrets, measure = _ledger(FORK)
    start = time.monotonic()
    result = measure(fn, secrets[0])
    assert time.monotonic() - start < 2.0 and abs(result[0]) < 1.0 and len(ledger.failures) == 1


def test_a_read_of_another_secret_gives_the_default() -> None:
    """Whether fn read another Secret may follow the data: it is one more failure, told to the owner only."""
    ledger, secrets, measure = _ledger(FORK)
    assert abs(measure(lambda v: float(secrets[1]), secrets[0])[0]) < 1.0 and len(ledger.failures) == 1
    ledger, secrets, measure = _ledger(TRUSTED)
    assert abs(measure(lambda v: float(secrets[1]), secrets[0])[0]) < 1.0
    assert [f.reason for f in ledger.failures] == ["read a Secret outside its charge"]


def test_results_are_plain_finite_float_arrays_of_the_declared_shape() -> None:
    ledger, secrets, measure = _ledger(FORK)
    out = measure(lambda v: np.arange(6.0).reshape(2, 3) + v[0] * 0, secrets[0], (2, 3))
    assert type(out) is np.ndarray and out.dtype == np.float64 and out.shape == (1, 2, 3)
    assert abs(measure(lambda v: np.array([np.inf]), secrets[1], (1,))).max() < 1.0  # the default
    assert len(ledger.failures) == 1
    footprint = ledger.measure_footprint(lambda v: v.sum(axis=1), secrets[1:], sensitivity=1.0, epsilon=1e5, shape=(2,))
    assert footprint.shape == (1, 2) and [r.vouched for r in ledger.records[-2:]] == [True, True]


def test_stacked_streams_get_each_streams_own_result() -> None:
    stream = bc.GuardedStream.stacked([[[1.0, 1.0]], [[5.0, 5.0]]])
    ledger = bc.WindowLedger(epsilon=1e6, w=1, runs=4, sampler="numpy-laplace", trusted_code=True, allow_vouched=True)
    ledger.bind(stream)
    out = ledger.measure(lambda v: v.sum(), next(iter(stream)), sensitivity=1.0, epsilon=1e6)
    assert np.allclose(out, [2.0, 2.0, 10.0, 10.0], atol=1e-3)


def test_isolation_is_checked_and_the_opt_out_named() -> None:
    _, secrets, _ = _ledger(FORK)
    ledger = bc.WindowLedger(epsilon=1.0, w=1)
    with pytest.raises(bc.InvalidArgument, match="isolation='none' must be 'fork'.*'trusted'"):
        ledger.measure(lambda v: v, secrets[0], sensitivity=1.0, epsilon=0.5, isolation="none")


def test_the_vouched_flag_survives_export_and_the_ledger_file(tmp_path: Any) -> None:
    from budgetcheck import open_ledger

    data = np.array([[3.0, 4.0], [5.0, 6.0]])
    path = tmp_path / "ledger.db"
    with open_ledger(
        path, bc.WindowLedger(epsilon=1.0, w=2, sampler="numpy-laplace", trusted_code=True, allow_vouched=True)
    ) as ledger:
        stream = bc.GuardedStream(data)
        ledger.bind(stream)
        first, second = list(stream)
        ledger.laplace(first, 0.25)
        ledger.measure(lambda v: v.sum(), second, sensitivity=2.0, epsilon=0.25)
        records = ledger.records
        assert [r.vouched for r in records] == [False, True]
        header, loaded = bc.load_lines(ledger.jsonl())
        assert [r.vouched for r in loaded] == [False, True]
    with open_ledger(
        path, bc.WindowLedger(epsilon=1.0, w=2, sampler="numpy-laplace", trusted_code=True, allow_vouched=True)
    ) as reopened:
        assert [r.vouched for r in reopened.records] == [False, True]
        assert reopened.remaining(2).tolist() == [0.5]


@pytest.mark.parametrize("streams", [1, 2])
def test_a_shape_whose_answer_could_never_come_back_is_refused_before_the_charge(streams: int) -> None:
    """The largest declared shape allowed alone would need framing beyond what the parent reads, and a stacked
    pass sends one result per stream: such a call was charged and then always failed. It is refused first, for
    measure and measure_footprint, and the forked child's limit is exactly what the check computes."""
    from budgetcheck.ledger.isolation import MOST_BYTES, answer_bytes

    stream = bc.GuardedStream.stacked([[[1.0]]] * streams) if streams > 1 else bc.GuardedStream([[1.0]])
    ledger = bc.WindowLedger(epsilon=1.0, w=1, runs=streams, trusted_code=True, allow_vouched=True)
    ledger.bind(stream)
    secret = next(iter(stream))
    largest = MOST_BYTES // 8 if streams == 1 else MOST_BYTES // 16
    assert answer_bytes((largest,), streams) > MOST_BYTES  # what the child would have had to send
    with pytest.raises(bc.InvalidArgument, match=f"shape=\\({largest},\\).*more than {MOST_BYTES:,} bytes"):
        ledger.measure(lambda v: np.zeros(largest), secret, sensitivity=1.0, epsilon=0.5, shape=(largest,))
    assert ledger.remaining(1).tolist() == [1.0] * streams
    if streams == 1:
        with pytest.raises(bc.InvalidArgument, match="more than"):
            ledger.measure_footprint(lambda v: v, [secret], sensitivity=1.0, epsilon=0.5, shape=(largest,))
        assert ledger.remaining(1).tolist() == [1.0]
    fits = (MOST_BYTES - answer_bytes((), streams)) // (8 * streams)  # the largest count the framing leaves room for
    assert answer_bytes((fits,), streams) <= MOST_BYTES
    assert ledger.measure(lambda v: np.zeros(2), secret, sensitivity=1.0, epsilon=0.5, shape=(2,)).shape == (streams, 2)
