"""The true stream is reachable only through charged ledger operations (benchmark M-R4)."""

from __future__ import annotations

import copy
import operator
import pickle
import sys
from collections.abc import Callable

import numpy as np
import pytest

from budgetcheck import GuardedStream, InvalidArgument, SecretAccess, WEventParams, WindowLedger
from budgetcheck.stream.secret import reveal


def _secret() -> object:
    return GuardedStream([[3.0, 4.0]]).secret(1)


FORBIDDEN: list[tuple[str, Callable[[object], object]]] = [
    ("float", float),
    ("int", int),
    ("bool", bool),
    ("len", len),
    ("iter", lambda s: list(s)),  # type: ignore[call-overload]
    ("index", lambda s: s[0]),  # type: ignore[index]
    ("eq", lambda s: s == 3),
    ("lt", lambda s: s < 3),  # type: ignore[operator]
    ("ge", lambda s: s >= 3),  # type: ignore[operator]
    ("add", lambda s: s + 1),  # type: ignore[operator]
    ("radd", lambda s: 1 + s),  # type: ignore[operator]
    ("mul", lambda s: s * 2),  # type: ignore[operator]
    ("neg", operator.neg),
    ("abs", abs),
    ("round", round),
    ("np.asarray", np.asarray),
    ("np.array", np.array),
    ("np.max", np.max),
    ("np.add", lambda s: np.add(s, 1)),
    ("format", lambda s: f"{s:.2f}"),
    ("pickle", pickle.dumps),
    ("copy", copy.copy),
    ("deepcopy", copy.deepcopy),
    ("contains", lambda s: 3 in s),  # type: ignore[operator]
]


@pytest.mark.parametrize(("label", "use"), FORBIDDEN, ids=[label for label, _ in FORBIDDEN])
def test_every_direct_read_of_a_secret_raises(label: str, use: Callable[[object], object]) -> None:
    """float(), comparison, numpy conversion, truthiness, iteration, ... all raise SecretAccess."""
    with pytest.raises(SecretAccess, match=r"Secret\(t=1, shape=\(2,\)\): the true values of a timestamp are a secret"):
        use(_secret())


def test_repr_shows_metadata_only() -> None:
    secret = _secret()
    assert repr(secret) == "Secret(t=1, shape=(2,))" == f"{secret}"
    assert not hasattr(secret, "__dict__")


def test_reveal_outside_a_charge_raises() -> None:
    """Even the private accessor refuses outside a charged ledger operation."""
    with pytest.raises(SecretAccess, match="outside a charged ledger operation"):
        reveal(_secret())


def test_stream_cannot_be_pickled() -> None:
    with pytest.raises(SecretAccess, match="cannot be pickled"):
        pickle.dumps(GuardedStream([[1.0]]))


def test_a_bound_stream_refuses_a_second_ledger() -> None:
    """Reading through a private second ledger would keep spends out of the record."""
    stream = GuardedStream([[1.0], [2.0]])
    main = WindowLedger(WEventParams(1.0, 2), sampler="numpy-laplace", keep_records=True)
    main.bind(stream)
    shadow = WindowLedger(WEventParams(1.0, 2), sampler="numpy-laplace", keep_records=True)
    with pytest.raises(SecretAccess, match="another ledger"):
        shadow.laplace(stream.secret(1), 0.5)
    assert shadow.records == () and main.records == ()


def test_measure_charges_and_hides_nothing_else() -> None:
    """measure runs fn once on a read-only copy and adds Laplace noise of scale sensitivity/ε."""
    stream = GuardedStream([[1.0, 2.0, 3.0]])
    ledger = WindowLedger(
        WEventParams(1e9, 1), runs=4, sampler="numpy-laplace", keep_records=True, trusted_code=True, allow_vouched=True
    )
    seen: list[np.ndarray] = []

    def total(values: np.ndarray) -> float:
        seen.append(values)
        return float(values.sum())

    result = ledger.measure(total, stream.secret(1), sensitivity=1.0, epsilon=1e9)
    assert result.shape == (4,)
    np.testing.assert_allclose(result, 6.0, atol=1e-6)
    assert seen == []  # fn ran in a forked process: what it kept died with it
    assert ledger.records[0].purpose == "measurement" and ledger.records[0].sensitivity == 1.0
    assert ledger.records[0].vouched and ledger.vouched == 1
    trusting = WindowLedger(
        WEventParams(1e9, 1), runs=4, sampler="numpy-laplace", trusted_code=True, allow_vouched=True
    )
    trusting.measure(
        total, GuardedStream([[1.0, 2.0, 3.0]]).secret(1), sensitivity=1.0, epsilon=1e9, isolation="trusted"
    )
    assert len(seen) == 1 and not seen[0].flags.writeable  # trusted: in this process, on a read-only copy


def test_laplace_and_dissimilarity_are_seeded_and_reproducible() -> None:
    def run(seed: int) -> tuple[np.ndarray, np.ndarray]:
        stream = GuardedStream([[10.0, 20.0]])
        ledger = WindowLedger(WEventParams(1.0, 1), runs=3, seed=seed, sampler="numpy-laplace", keep_records=True)
        dis = ledger.dissimilarity(stream.secret(1), np.zeros((3, 2)), 0.5)
        out = ledger.laplace(stream.secret(1), [0.5, 0.0, 0.25])
        return dis, out

    a, b = run(11), run(11)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    assert np.isnan(a[1][1]).all() and np.isfinite(a[1][[0, 2]]).all()
    assert not np.array_equal(run(12)[1][0], a[1][0])


def test_measure_with_no_budget_never_runs_fn() -> None:
    """ε = 0 for every run would read the data for free: refused before fn sees anything."""
    stream = GuardedStream([[1.0, 2.0]])
    ledger = WindowLedger(WEventParams(1.0, 1), runs=2, sampler="numpy-laplace", keep_records=True)
    seen: list[object] = []
    with pytest.raises(InvalidArgument, match="would read the data without paying"):
        ledger.measure(seen.append, stream.secret(1), sensitivity=1.0, epsilon=0.0)
    assert seen == [] and ledger.records == ()


def test_inside_a_charge_only_the_charged_secret_is_open() -> None:
    """fn of measure(secret t=1) cannot reveal the (future) data of t=2: the call gives the default (0.0,
    noised), and the owner's record says fn read a Secret outside its charge (neither where nor what)."""
    stream = GuardedStream([[1.0], [2.0]])
    ledger = WindowLedger(
        WEventParams(1.0, 2), sampler="numpy-laplace", keep_records=True, seed=5, trusted_code=True, allow_vouched=True
    )
    ledger.bind(stream)
    future = stream.secret(2)
    out = ledger.measure(lambda v: reveal(future), stream.secret(1), sensitivity=1.0, epsilon=0.5, isolation="trusted")
    np.testing.assert_allclose(out, np.random.default_rng(5).laplace(0.0, 2.0, (1,)), rtol=1e-12)
    assert [f.reason for f in ledger.failures] == ["read a Secret outside its charge"]


# -- issue 28, item 6: the public routes to the vault -------------------------------------------------------

import gc  # noqa: E402
import weakref  # noqa: E402


def _holds(found: object, payload: np.ndarray) -> bool:
    """Whether ``found`` is (or directly contains) an array equal to ``payload``."""
    items = found.values() if isinstance(found, dict) else found if isinstance(found, (list, tuple, set)) else [found]
    return any(isinstance(x, np.ndarray) and x.shape == payload.shape and np.array_equal(x, payload) for x in items)


def _marker_stream() -> tuple[object, np.ndarray]:
    from budgetcheck import GuardedStream

    payload = np.array([[123457.0, 98765.0]])
    stream = GuardedStream(payload)
    return stream, payload[0]


def test_no_method_globals_name_the_vault() -> None:
    """A mechanism's first try: Secret.<method>.__globals__ (or importing the module) gives no dict of
    payloads, and no module-level object of _secret holds one."""
    import budgetcheck.stream.secret as module

    stream, payload = _marker_stream()
    secret = next(iter(stream))  # type: ignore[call-overload]
    for function in (type(secret).__new__, type(secret).__repr__, module.charged, module.reveal, module.claim):
        for value in function.__globals__.values():  # type: ignore[attr-defined]
            assert not _holds(value, payload), value
            for inner in getattr(value, "__closure__", None) or ():
                assert not _holds(inner.cell_contents, payload)
            assert not _holds(getattr(value, "__self__", None), payload)


def test_the_finalize_registry_does_not_lead_to_the_vault() -> None:
    stream, payload = _marker_stream()
    for info in list(weakref.finalize._registry.values()):  # type: ignore[attr-defined]
        assert not _holds(getattr(info.func, "__self__", None), payload)
        assert not any(_holds(arg, payload) for arg in info.args)


def test_gc_referents_of_a_secret_its_class_and_its_stream_do_not_reach_the_payload() -> None:
    stream, payload = _marker_stream()
    secret = next(iter(stream))  # type: ignore[call-overload]
    for start in (secret, type(secret), stream):
        seen = gc.get_referents(start)
        assert not any(_holds(x, payload) for x in seen)
        assert not any(_holds(y, payload) for x in seen for y in gc.get_referents(x))


def test_a_measure_function_cannot_name_its_exception_after_the_data() -> None:
    """Class 4: fn raises an exception whose class name, message and arguments carry the data; nothing leaves
    measure() but the default answer, and the owner's record names none of it."""
    from budgetcheck import GuardedStream, WEventParams, WindowLedger

    def fn(values: np.ndarray) -> np.ndarray:
        kind = type(f"Count{int(values[0])}", (Exception,), {})
        raise kind(values, f"{values[0]}")

    ledger = WindowLedger(
        WEventParams(epsilon=1.0, w=1), runs=1, seed=0, sampler="numpy-laplace", trusted_code=True, allow_vouched=True
    )
    stream = GuardedStream([[424242.0]])
    ledger.bind(stream)
    out = ledger.measure(fn, next(iter(stream)), sensitivity=1.0, epsilon=1.0)
    assert abs(out[0]) < 100.0 and "424242" not in repr(ledger.failures)


def test_ledgers_in_several_threads_read_their_secrets_without_interfering() -> None:
    """The vault is one generator; threads that create and read secrets at once take turns (a
    generator entered from two threads would raise 'generator already executing')."""
    import threading

    from budgetcheck import GuardedStream, execute
    from mechanisms import Uniform

    errors: list[BaseException] = []
    results: dict[int, np.ndarray] = {}

    def work(index: int) -> None:
        try:
            for _ in range(20):
                run = execute(Uniform(), np.full((40, 3), float(index)), epsilon=1.0, w=5, runs=2, seed=index)
                results[index] = run.releases
                GuardedStream(np.ones((5, 2)))  # secrets made and dropped while others read
        except BaseException as exc:  # noqa: BLE001 — reported below with the thread's index
            errors.append(exc)

    def churn() -> None:
        try:
            for _ in range(3000):
                GuardedStream(np.ones((5, 2)))
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    switching = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch inside the vault's generator, as they may on a busy host
    try:
        threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        threads += [threading.Thread(target=churn) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(switching)
    assert not errors, errors
    alone = {
        i: execute(Uniform(), np.full((40, 3), float(i)), epsilon=1.0, w=5, runs=2, seed=i).releases for i in range(4)
    }
    assert all(np.array_equal(results[i], alone[i]) for i in range(4))
