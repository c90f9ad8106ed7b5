"""A fifth outside attack (issue 45 item 1): the grid session and the compiled allocation rule.

Written from the public API only (docs, docstrings, the names of ``budgetcheck`` and
``budgetcheck.ledger.grid``), as a contributor who wants a mechanism past the gate or an over-spend into
production. The session (``grid_session`` inside ``grid_sessions()``) promises the ledger's charges,
records, releases and refusals bit for bit, and never to be a way around the ledger; ``kernel_ops``
promises the doubles of ``budgetcheck.ops.FLOAT``'s directed roundings.

Each test states the guarantee it attacks and asserts it. Attacks that are open today are strict xfails whose
reason names the route; the others are regression guards.
"""

from __future__ import annotations

import copy
import math
import os
import pickle
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from fractions import Fraction
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import budgetcheck as bc
from budgetcheck import BudgetExceeded, GuardedStream, InvalidArgument, WindowLedger, kernel_ops, ops, rounding
from budgetcheck.ledger import grid
from budgetcheck.ledger.grid import GridSession, grid_session, grid_sessions

PURPOSES = ("dissimilarity", "publication")
TINY = 5e-324  # the smallest subnormal
BIGGEST = sys.float_info.max


def _data(length: int = 12, d: int = 3, seed: int = 5) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 30, size=(length, d)).astype(np.float64)


def _ledger(epsilon: float, w: int, runs: int, seed: int = 9) -> WindowLedger:
    return WindowLedger(epsilon=epsilon, w=w, runs=runs, seed=seed, sampler="numpy-laplace", keep_records=True)


def _pair(
    epsilon: float = 1.0, w: int = 3, runs: int = 4, d: int = 3, seed: int = 9, length: int = 12
) -> tuple[WindowLedger, GridSession, GuardedStream, WindowLedger, GuardedStream]:
    """A ledger with a session over its stream, and a twin ledger (same data, seed) without one."""
    data = _data(length, d)
    ledger, twin = _ledger(epsilon, w, runs, seed), _ledger(epsilon, w, runs, seed)
    stream, twin_stream = GuardedStream(data), GuardedStream(data)
    ledger.bind(stream)
    twin.bind(twin_stream)
    with grid_sessions():
        session = grid_session(ledger, stream, PURPOSES)
    assert session is not None
    return ledger, session, stream, twin, twin_stream


def _records(ledger: WindowLedger) -> list[str]:
    return [str(r.to_json()) for r in ledger.records]


def _exact_window(ledger: WindowLedger, t: int) -> list[Fraction]:
    totals = [Fraction(0)] * ledger.runs
    for record in ledger.records:
        if t - ledger.params.w < record.t <= t:
            totals = [a + Fraction(float(x)) for a, x in zip(totals, record.amounts.tolist(), strict=True)]
    return totals


def _down(value: Fraction) -> float:
    """The largest double <= value (value >= 0)."""
    x = float(value)
    return math.nextafter(x, 0.0) if Fraction(x) > value else x


def _outcome(call: Callable[[], Any]) -> tuple[str, bytes]:
    """What one operation did: its release's bytes, or the class of its refusal."""
    try:
        out = call()
    except (BudgetExceeded, InvalidArgument) as error:
        return (type(error).__name__, b"")
    return ("ok", b"" if out is None else np.asarray(out, dtype=np.float64).tobytes())


# ---------------------------------------------------------------------------------------------------------
# Reachability: a user mechanism opening grid_sessions() itself
# ---------------------------------------------------------------------------------------------------------

_OPENER = """
import os
import attrs
import numpy as np
from budgetcheck import rounding
from budgetcheck.ledger.grid import grid_session, grid_sessions


@attrs.frozen
class Mech:
    name: str = "opener"

    def run(self, stream, ledger):
        with grid_sessions():
            session = grid_session(ledger, stream, ("publication",))
        with open(os.environ["ATTACK5_LOG"], "a", encoding="utf-8") as log:
            log.write(f"{ledger.runs} {session is not None}\\n")
        budget = rounding.share(ledger.params.epsilon, ledger.params.w)
        out = np.zeros((ledger.runs, stream.length, stream.dimensions))
        for secret in stream:
            via = session if session is not None else ledger
            out[:, secret.t - 1] = via.laplace(secret, budget)
        return out
"""


def test_a_mechanism_under_verify_never_holds_a_session(
    mechanism_module: Callable[[str, str], str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Guarantee: verify runs the ledger's own path; a session is unreachable there, even to a mechanism that
    opens ``grid_sessions()`` itself."""
    log = tmp_path / "sessions.log"
    monkeypatch.setenv("ATTACK5_LOG", str(log))
    name = mechanism_module("attack5_opener", _OPENER)
    result = bc.verify_mechanism(f"{name}:Mech", examples=3, stages="ab")
    held = [line for line in log.read_text(encoding="utf-8").splitlines() if line.endswith("True")]
    assert result.meets("bounded")
    assert held == [], f"{len(held)} of the mechanism's ledgers under verify gave it a session"


def test_importing_a_mechanism_cannot_switch_sessions_on_for_the_process(
    mechanism_module: Callable[[str, str], str],
) -> None:
    """Guarantee: sessions are the runner's block only; loading a third party's module leaves every later
    ledger (another mechanism's verify, a user's execute) on the ledger's own path."""
    name = mechanism_module(
        "attack5_leak",
        """
        import attrs
        import numpy as np
        from budgetcheck.ledger.grid import grid_sessions

        _KEPT = grid_sessions()
        _KEPT.__enter__()  # left open


        @attrs.frozen
        class Mech:
            name: str = "leak"

            def run(self, stream, ledger):
                return np.zeros((ledger.runs, stream.length, stream.dimensions))
        """,
    )
    ledger, stream = _ledger(1.0, 3, 2), GuardedStream(_data())
    ledger.bind(stream)
    bc.load_mechanism(f"{name}:Mech")
    try:
        assert grid_session(ledger, stream, PURPOSES) is None
    finally:
        sys.modules[name]._KEPT.__exit__(None, None, None)  # what this test switched on, switched off


def test_a_mechanism_opening_its_own_session_under_execute_is_still_refused_one_ulp_over(
    mechanism_module: Callable[[str, str], str],
) -> None:
    """Guarantee: whoever opens a session, its window check is the ledger's: a mechanism under ``execute`` that
    takes a session and asks one ulp over ε in a window is refused, and ``execute`` keeps the records exact."""
    name = mechanism_module(
        "attack5_greedy",
        """
        import math
        import attrs
        import numpy as np
        from budgetcheck import BudgetExceeded
        from budgetcheck.ledger.grid import grid_session, grid_sessions


        @attrs.frozen
        class Mech:
            name: str = "greedy"

            def run(self, stream, ledger):
                with grid_sessions():
                    session = grid_session(ledger, stream, ("publication",))
                assert session is not None
                out = np.zeros((ledger.runs, stream.length, stream.dimensions))
                session.laplace(stream.secret(1), 0.5)
                try:
                    session.laplace(stream.secret(2), math.nextafter(0.5, 1.0))
                except BudgetExceeded:
                    out[:] = -1.0  # the refusal, seen by the test
                return out
        """,
    )
    execution = bc.execute(bc.load_mechanism(f"{name}:Mech"), _data(), epsilon=1.0, w=3, runs=4, seed=0)
    assert (execution.releases == -1.0).all()
    assert [r.t for r in execution.ledger.records] == [1]
    report = bc.audit_windows(execution.ledger.records, epsilon=1.0, w=3, runs=4)
    assert report.ok


def test_a_session_is_refused_on_a_ledger_a_mechanism_has_already_used() -> None:
    """Guarantee: a session starts only from a fresh ledger; a mechanism that charged directly first and then
    opens one gets None (the ledger's path), so the session never restarts a window the ledger filled."""
    ledger, stream = _ledger(1.0, 3, 4), GuardedStream(_data())
    ledger.bind(stream)
    ledger.laplace(stream.secret(1), 0.75)
    with grid_sessions():
        assert grid_session(ledger, stream, PURPOSES) is None
    with pytest.raises(BudgetExceeded):
        ledger.laplace(stream.secret(2), 0.5)


def test_two_sessions_over_one_ledger_cannot_each_spend_the_window() -> None:
    """Guarantee: a second session over the same ledger is not a second budget: either it is refused (None),
    or the first session's spends count against it."""
    ledger, session, stream, _, _ = _pair()
    session.laplace(stream.secret(1), np.full(4, 0.75))
    with grid_sessions():
        second = grid_session(ledger, stream, PURPOSES)
    if second is not None:
        with pytest.raises(BudgetExceeded):
            second.laplace(stream.secret(2), np.full(4, 0.5))
    with pytest.raises(BudgetExceeded):
        session.laplace(stream.secret(2), np.full(4, 0.5))
    assert all(total <= 1 for total in _exact_window(ledger, 2))


# ---------------------------------------------------------------------------------------------------------
# Over-spending through a session: held arrays, records, interleaving
# ---------------------------------------------------------------------------------------------------------


def test_mutating_the_callers_amounts_after_a_charge_refunds_nothing() -> None:
    """Guarantee: the record keeps the amount charged, not the caller's array: zeroing it after the call (the
    session shares a purpose's repeated row) neither rewrites the record nor frees the window."""
    ledger, session, stream, _, _ = _pair()
    amounts = np.full(4, 0.6)
    session.laplace(stream.secret(1), amounts)
    amounts[:] = 0.0
    session.laplace(stream.secret(1), amounts)  # the same array, now nothing: a shared row would follow it
    amounts[:] = 0.7
    with pytest.raises(BudgetExceeded):
        session.laplace(stream.secret(2), amounts)
    assert [r.amounts.tolist() for r in ledger.records] == [[0.6] * 4, [0.0] * 4]


def _rewrite(array: np.ndarray, value: float) -> None:
    """A writable array over a read-only array's memory, built from its public ``__array_interface__``."""
    interface = dict(array.__array_interface__)
    interface["data"] = (interface["data"][0], False)
    np.asarray(type("Holder", (), {"__array_interface__": interface})())[:] = value


def test_a_record_the_session_materialises_cannot_be_made_writable_or_refund() -> None:
    """Guarantee: records the session materialises later are immutable, and rewriting their memory through the
    array interface frees no budget (the ledger's windows are its own). Odd amounts: a row may be shared."""
    ledger, session, stream, _, _ = _pair()
    session.laplace(stream.secret(1), np.full(4, 0.60101))
    session.laplace(stream.secret(1), np.full(4, 0.0))
    record = ledger.records[0]
    with pytest.raises(ValueError):
        record.amounts.setflags(write=True)
    original = record.amounts.copy()
    _rewrite(record.amounts, 0.0)
    try:
        with pytest.raises(BudgetExceeded):
            ledger.laplace(stream.secret(2), 0.7)
    finally:
        _rewrite(record.amounts, 0.0)
        record.amounts[...]  # still readable
        _rewrite(record.amounts, float(original[0]))


def test_rewriting_a_record_before_the_ledger_first_sums_its_windows_refunds_nothing() -> None:
    """Guarantee: the session hands over exact windows "summed when first read"; a record rewritten after the
    hand-over (``records`` read) but before any window was summed must not lower that sum."""
    ledger, session, stream, _, _ = _pair(w=3)
    for t in (1, 2):
        session.laplace(stream.secret(t), np.full(4, 0.40107))
    records = ledger.records  # the hand-over: windows not summed yet
    originals = [r.amounts.copy() for r in records]
    for r in records:
        _rewrite(r.amounts, 0.0)
    try:
        with pytest.raises(BudgetExceeded):
            ledger.spend(3, 0.5, purpose="after")
    finally:
        for r, original in zip(records, originals, strict=True):
            _rewrite(r.amounts, float(original[0]))


def test_the_release_arrays_handed_out_are_not_rewritten_by_later_operations() -> None:
    """Guarantee: what a session returns is the caller's; a later operation (or a refused one) does not write
    into it (else a refused or interrupted draw could surface through an old array)."""
    _, session, stream, _, _ = _pair()
    first = session.laplace(stream.secret(1), np.full(4, 0.25))
    kept = first.copy()
    with pytest.raises(BudgetExceeded):
        session.laplace(stream.secret(1), np.full(4, 0.8))
    session.laplace(stream.secret(2), np.full(4, 0.25))
    assert first.tobytes() == kept.tobytes()


@pytest.mark.parametrize("direct", ["spend", "laplace", "remaining", "records", "dissimilarity"])
def test_interleaving_direct_ledger_calls_never_doubles_the_budget(direct: str) -> None:
    """Guarantee: a ledger used directly between session operations counts every spend, and the session counts
    every direct spend, so alternating the two never exceeds ε in a window (and gives the twin's outcomes)."""
    ledger, session, stream, twin, twin_stream = _pair(epsilon=1.0, w=3)
    outcomes, twin_outcomes = [], []
    for t in range(1, 7):
        outcomes.append(_outcome(lambda: session.laplace(stream.secret(t), np.full(4, 0.375))))
        twin_outcomes.append(_outcome(lambda: twin.laplace(twin_stream.secret(t), np.full(4, 0.375))))
        if direct == "spend":
            outcomes.append(_outcome(lambda: ledger.spend(t, 0.25, purpose="direct")))
            twin_outcomes.append(_outcome(lambda: twin.spend(t, 0.25, purpose="direct")))
        elif direct == "laplace":
            outcomes.append(_outcome(lambda: ledger.laplace(stream.secret(t), 0.25)))
            twin_outcomes.append(_outcome(lambda: twin.laplace(twin_stream.secret(t), 0.25)))
        elif direct == "dissimilarity":
            last = np.ones((4, 3))
            outcomes.append(_outcome(lambda: ledger.dissimilarity(stream.secret(t), last, 0.25)))
            twin_outcomes.append(_outcome(lambda: twin.dissimilarity(twin_stream.secret(t), last, 0.25)))
        elif direct == "remaining":
            outcomes.append(("ok", ledger.remaining(t).tobytes()))
            twin_outcomes.append(("ok", twin.remaining(t).tobytes()))
        else:
            outcomes.append(("ok", str(len(ledger.records)).encode()))
            twin_outcomes.append(("ok", str(len(twin.records)).encode()))
    assert outcomes == twin_outcomes
    assert _records(ledger) == _records(twin)
    for t in range(1, 7):
        assert all(total <= 1 for total in _exact_window(ledger, t))


_THREE_A_TIMESTAMP = """
import numpy as np
import budgetcheck as bc
from budgetcheck.ledger.grid import grid_session, grid_sessions

data = np.arange(36.0).reshape(12, 3)


def make():
    ledger = bc.WindowLedger(epsilon=1.0, w=3, runs=4, seed=1, sampler="numpy-laplace", keep_records=True)
    stream = bc.GuardedStream(data)
    ledger.bind(stream)
    return ledger, stream


ledger, stream = make()
twin, twin_stream = make()
with grid_sessions():
    session = grid_session(ledger, stream, ("dissimilarity", "publication"))
for t in range(1, 13):
    for j in range(3):
        amounts = np.full(4, 0.01 * (3 * t + j + 1) / 40)
        mine = session.laplace(stream.secret(t), amounts)
        theirs = twin.laplace(twin_stream.secret(t), amounts)
        assert mine.tobytes() == theirs.tobytes(), (t, j)
assert [r.to_json() for r in ledger.records] == [r.to_json() for r in twin.records]
print("same as the ledger")
"""


def test_more_charges_than_the_session_preallocated_are_the_ledgers_not_a_heap_overflow() -> None:
    """Guarantee: whatever a mechanism does through a session (here 3 releases a timestamp at distinct
    amounts, which a user's mechanism that opened a session may do), it gets the ledger's releases and records;
    what the session cannot hold, the ledger runs. Run in a child process: the failure corrupts the heap."""
    child = subprocess.run(
        [sys.executable, "-c", _THREE_A_TIMESTAMP], capture_output=True, text=True, timeout=120, check=False
    )
    assert child.returncode == 0 and "same as the ledger" in child.stdout, child.stderr[-600:]


_ODD_AMOUNTS: dict[str, Any] = {
    "int": 1,
    "bool": True,
    "list": [0.1, 0.2, 0.3],
    "too short": np.array([0.1, 0.2]),
    "too long": np.full(4, 0.1),
    "column": np.full((3, 1), 0.1),
    "row": np.full((1, 3), 0.1),
    "float32": np.float32(0.1),
    "float32 array": np.full(3, 0.1, np.float32),
    "float16 array": np.full(3, 0.1, np.float16),
    "longdouble array": np.full(3, 0.1, np.longdouble),
    "fraction": Fraction(1, 10),
    "str": "0.1",
    "complex": 0.1 + 0j,
    "object array": np.array([0.1, None, 0.2], dtype=object),
    "int array": np.array([0, 1, 0]),
    "strided": np.full(6, 0.1)[::2],
    "big-endian": np.full(3, 0.1, ">f8"),
    "None": None,
}
_ODD_LAST: dict[str, Any] = {
    "1-d": np.zeros(3),
    "wrong d": np.zeros((3, 4)),
    "list": [[0.0] * 3] * 3,
    "int": np.zeros((3, 3), int),
    "inf": np.full((3, 3), np.inf),
    "float32": np.zeros((3, 3), np.float32),
    "object": np.zeros((3, 3), object),
    "scalar": 0.0,
    "big-endian": np.zeros((3, 3), ">f8"),
    "fortran": np.asfortranarray(np.arange(9.0).reshape(3, 3)),
    "strided": np.arange(18.0).reshape(3, 6)[:, ::2],
}


def _either(call: Callable[[], Any]) -> tuple[str, ...]:
    try:
        out = np.asarray(call())
    except Exception as error:  # the exact class and message are compared with the ledger's
        return (type(error).__name__, str(error))
    return ("ok", out.tobytes().hex(), str(out.shape))


@pytest.mark.parametrize("operation", ["laplace", "dissimilarity", "laplace_bins"])
@pytest.mark.parametrize("amounts", list(_ODD_AMOUNTS), ids=list(_ODD_AMOUNTS))
def test_odd_types_and_shapes_of_amounts_get_the_ledgers_answer(amounts: str, operation: str) -> None:
    """Guarantee: any type or shape of amount (ints, bools, lists, float16/32, longdouble, Fraction, str,
    complex, object arrays, strided or big-endian arrays, None, a row or column) gets the ledger's answer
    through a session: the same release, or the same error and message, with the same records."""
    value = _ODD_AMOUNTS[amounts]
    ledger, session, stream, twin, twin_stream = _pair(runs=3)
    calls = {
        "laplace": (
            lambda: session.laplace(stream.secret(1), value),
            lambda: twin.laplace(twin_stream.secret(1), value),
        ),
        "dissimilarity": (
            lambda: session.dissimilarity(stream.secret(1), np.zeros((3, 3)), value),
            lambda: twin.dissimilarity(twin_stream.secret(1), np.zeros((3, 3)), value),
        ),
        "laplace_bins": (
            lambda: session.laplace_bins(stream.secret(1), value),
            lambda: twin.laplace_bins(twin_stream.secret(1), value),
        ),
    }
    mine, theirs = calls[operation]
    assert _either(mine) == _either(theirs)
    assert _records(ledger) == _records(twin)


@pytest.mark.parametrize("last", list(_ODD_LAST), ids=list(_ODD_LAST))
def test_odd_last_releases_get_the_ledgers_answer(last: str) -> None:
    """Guarantee: a dissimilarity's last release of any type or shape gets the ledger's answer."""
    value = _ODD_LAST[last]
    ledger, session, stream, twin, twin_stream = _pair(runs=3)
    assert _either(lambda: session.dissimilarity(stream.secret(1), value, 0.1)) == _either(
        lambda: twin.dissimilarity(twin_stream.secret(1), value, 0.1)
    )
    assert _records(ledger) == _records(twin)


def test_stacked_streams_give_each_run_its_own_streams_release() -> None:
    """Guarantee: on stacked streams (the runner's batches: run r reads stream r // (runs / streams)) a
    session releases each run's own stream, as the ledger does, bit for bit."""
    parts = [np.full((5, 2), 0.0), np.full((5, 2), 1000.0), np.full((5, 2), 5000.0)]
    outputs = []
    for use_session in (True, False):
        ledger, stream = _ledger(1.0, 3, 6), GuardedStream.stacked(parts)
        ledger.bind(stream)
        via: Any = ledger
        if use_session:
            with grid_sessions():
                via = grid_session(ledger, stream, PURPOSES)
            assert via is not None
        released = [
            via.laplace(stream.secret(1), np.full(6, 0.5)),
            via.laplace_bins(stream.secret(2), np.full(2, 0.25)),
        ]
        released.append(via.dissimilarity(stream.secret(3), np.zeros((6, 2)), np.full(6, 0.25)))
        outputs.append(b"".join(np.asarray(r).tobytes() for r in released) + str(_records(ledger)).encode())
    assert outputs[0] == outputs[1]


# ---------------------------------------------------------------------------------------------------------
# Differential fuzz: the session against a twin ledger, operation for operation
# ---------------------------------------------------------------------------------------------------------

_EPSILONS = [1.0, 0.7, 1e-300, TINY, 2.0**-1060, 1e300, BIGGEST, 3.0]


_Program = tuple[Any, int, int, int, list[tuple[str, int, float, int, str]]]
_RELATIONS = [
    bc.Neighbours.one_bin(),
    bc.Neighbours.one_bin(3),
    bc.Neighbours.across_bins(2),
    bc.Neighbours.replace_one(),
]


@st.composite
def _programs(draw: st.DrawFn) -> _Program:
    runs = draw(st.sampled_from([2, 3]))
    epsilon: Any = draw(
        st.sampled_from(_EPSILONS) | st.lists(st.sampled_from(_EPSILONS), min_size=runs, max_size=runs).map(tuple)
    )
    w = draw(st.sampled_from([1, 2, 3, 5]))
    relation = draw(st.integers(0, len(_RELATIONS) - 1))
    steps = draw(
        st.lists(
            st.tuples(
                st.sampled_from(["laplace", "dissimilarity", "bins", "total", "left", "over", "direct"]),
                st.integers(0, 2),  # how far t moves on
                st.sampled_from([0.0, -0.0, TINY, 2.0**-1022, 0.5, 1.0, 1e-17, math.nan, math.inf, -TINY, 0.3]),
                st.integers(0, 2),  # which run gets the odd amount
                st.sampled_from(["publication", "dissimilarity", "other"]),
            ),
            min_size=1,
            max_size=12,
        )
    )
    return epsilon, w, runs, relation, steps


def _run_program(program: _Program, use_session: bool) -> tuple[list[tuple[str, bytes]], list[str]]:
    epsilon, w, runs, relation, steps = program
    data = _data(40, 2)

    def make() -> tuple[WindowLedger, GuardedStream]:
        if isinstance(epsilon, tuple):
            ledger = WindowLedger.with_epsilons(
                np.array(epsilon), w, seed=9, sampler="numpy-laplace", keep_records=True
            )
        else:
            ledger = _ledger(epsilon, w, runs)
        stream = GuardedStream(data, neighbours=_RELATIONS[relation])
        ledger.bind(stream)
        return ledger, stream

    ledger, stream = make()
    twin, twin_stream = make()  # the oracle of what is left: never the ledger under test (a read hands over)
    eps = np.broadcast_to(np.array(epsilon, dtype=np.float64), (runs,))
    session: Any = ledger
    if use_session:
        with grid_sessions():
            session = grid_session(ledger, stream, PURPOSES)
        assert session is not None
    outcomes: list[tuple[str, bytes]] = []
    t = 1
    for kind, step, scale, odd, purpose in steps:
        t = min(t + step, 40)
        secret, twin_secret = stream.secret(t), twin_stream.secret(t)
        amounts = eps * 0.25
        amounts[odd % runs] = scale * eps[odd % runs] if math.isfinite(scale) and scale != 0.0 else scale
        if kind in ("left", "over"):
            left = twin.remaining(t)
            with np.errstate(over="ignore"):  # one ulp over the largest double is inf: refused as well
                amounts = left.copy() if kind == "left" else np.nextafter(left, np.inf)
        if kind == "laplace" or kind in ("left", "over"):
            outcome = _outcome(lambda: session.laplace(secret, amounts, purpose=purpose))
            twin_outcome = _outcome(lambda: twin.laplace(twin_secret, amounts, purpose=purpose))
        elif kind == "dissimilarity":
            last = np.full((runs, 2), 3.5)
            outcome = _outcome(lambda: session.dissimilarity(secret, last, amounts, purpose=purpose))
            twin_outcome = _outcome(lambda: twin.dissimilarity(twin_secret, last, amounts, purpose=purpose))
        elif kind == "bins":
            bins = np.stack([amounts, amounts * 0.5], axis=1)
            outcome = _outcome(lambda: session.laplace_bins(secret, bins, purpose=purpose))
            twin_outcome = _outcome(lambda: twin.laplace_bins(twin_secret, bins, purpose=purpose))
        elif kind == "total":
            outcome = _outcome(lambda: session.laplace_query(secret, bc.Total(), amounts, purpose=purpose))
            twin_outcome = _outcome(lambda: twin.laplace_query(twin_secret, bc.Total(), amounts, purpose=purpose))
        else:
            outcome = _outcome(lambda: ledger.spend(t, amounts, purpose="direct"))
            twin_outcome = _outcome(lambda: twin.spend(t, amounts, purpose="direct"))
        assert outcome[0] == twin_outcome[0], (kind, t, amounts.tolist(), outcome[0], twin_outcome[0])
        if kind == "left":
            assert outcome[0] == "ok", ("remaining() refused", t, amounts.tolist())
        outcomes.append(outcome)
    return outcomes, _records(ledger)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_programs())
def test_the_session_charges_refuses_and_releases_what_the_ledger_does(program: _Program) -> None:
    """Guarantee: on any sequence of operations (ε huge, tiny or subnormal, per run or shared, w = 1, each
    neighbouring relation, amounts NaN, ±inf, −0.0, subnormal, exactly what is left, one ulp over it, purposes
    outside the session's, Total queries, direct spends in between), the session's outcome of each (the
    release's bytes, or the refusal's class) and the records at the end are the ledger's own."""
    with np.errstate(over="ignore", invalid="ignore"):  # noise times 1/ε overflows to ±inf for ε near 2**-1022
        assert _run_program(program, True) == _run_program(program, False)


@pytest.mark.parametrize("runs", [2, grid.MOST_RUNS])
@pytest.mark.parametrize("epsilon", [1.0, BIGGEST, TINY])
def test_exactly_what_is_left_is_never_refused_and_one_ulp_over_is(runs: int, epsilon: float) -> None:
    """Guarantee: at the session's size cutoff, with ε the largest double or the smallest subnormal, spending
    exactly ``remaining()`` is never refused, and one ulp more in one run is (with nothing recorded)."""
    ledger, session, stream, twin, twin_stream = _pair(epsilon=epsilon, w=2, runs=runs, d=1)
    first = np.full(runs, _down(Fraction(epsilon) / 3))
    session.laplace(stream.secret(1), first)
    twin.laplace(twin_stream.secret(1), first)
    left = twin.remaining(2)
    over = left.copy()
    over[runs - 1] = np.nextafter(left[runs - 1], np.inf)
    with pytest.raises(BudgetExceeded):
        session.laplace(stream.secret(2), over)
    session.laplace(stream.secret(2), left)
    assert len(ledger.records) == 2
    assert all(total <= Fraction(epsilon) for total in _exact_window(ledger, 2))


def test_runs_above_the_cutoff_take_the_ledgers_path() -> None:
    """Guarantee: past ``MOST_RUNS`` no session is made (the ledger's path runs)."""
    ledger, stream = _ledger(1.0, 2, grid.MOST_RUNS + 1), GuardedStream(_data(4, 1))
    ledger.bind(stream)
    with grid_sessions():
        assert grid_session(ledger, stream, PURPOSES) is None


# ---------------------------------------------------------------------------------------------------------
# Exceptions mid-operation, threads, fork
# ---------------------------------------------------------------------------------------------------------


def _interrupt_at(k: int) -> Callable[[FrameType, str, object], Any]:
    """A trace that raises KeyboardInterrupt at the k-th line run in budgetcheck's ledger code (what a
    SIGALRM handler raising there does)."""
    count = [0]

    def local(frame: FrameType, event: str, arg: object) -> Any:
        if event == "line":
            count[0] += 1
            if count[0] == k:
                raise KeyboardInterrupt
        return local

    def trace(frame: FrameType, event: str, arg: object) -> Any:
        path = frame.f_code.co_filename.replace(os.sep, "/")
        return local if "/budgetcheck/ledger/" in path else None

    return trace


def test_an_interrupt_at_any_line_of_a_session_operation_never_loses_a_charge() -> None:
    """Guarantee: an exception raised anywhere in a session's operation (a KeyboardInterrupt, a raising SIGALRM
    handler) leaves the ledger either charged or unchanged, never a release without its record and never a
    window the ledger undercounts: afterwards, one ulp over what the records leave is refused."""
    epsilon, runs = 1.0, 3
    interrupted = 0
    for k in range(1, 400):
        ledger, session, stream, _, _ = _pair(epsilon=epsilon, w=3, runs=runs)
        session.laplace(stream.secret(1), np.full(runs, 0.25))
        sys.settrace(_interrupt_at(k))
        try:
            session.laplace(stream.secret(2), np.full(runs, 0.375))
        except KeyboardInterrupt:
            interrupted += 1
        else:
            break
        finally:
            sys.settrace(None)
        spent = _exact_window(ledger, 2)
        assert all(total in (Fraction(0.25), Fraction(0.25) + Fraction(0.375)) for total in spent)
        left = [_down(Fraction(epsilon) - total) for total in spent]
        over = np.array([math.nextafter(x, 1.0) for x in left])
        for via in (session, ledger):
            with pytest.raises(BudgetExceeded):
                via.laplace(stream.secret(2), over)
        session.laplace(stream.secret(2), np.array(left))
        assert all(total <= Fraction(epsilon) for total in _exact_window(ledger, 2))
    assert interrupted > 0  # the interrupts did land inside the operation


_FIRST_CALL_ALARM = """
import signal
import sys

import numpy as np

import budgetcheck as bc
from budgetcheck.ledger.grid import grid_session, grid_sessions

ledger = bc.WindowLedger(epsilon=1.0, w=3, runs=4, seed=1, sampler="numpy-laplace", keep_records=True)
stream = bc.GuardedStream(np.arange(36.0).reshape(12, 3))
ledger.bind(stream)
with grid_sessions():
    session = grid_session(ledger, stream, ("dissimilarity", "publication"))


class Alarm(Exception):
    pass


def ring(*_):
    raise Alarm


signal.signal(signal.SIGALRM, ring)
signal.setitimer(signal.ITIMER_REAL, float(sys.argv[1]))
try:
    session.laplace(stream.secret(1), np.full(4, 0.5))
except Alarm:
    pass
signal.setitimer(signal.ITIMER_REAL, 0)
session.laplace(stream.secret(2), np.full(4, 0.25))
session.dissimilarity(stream.secret(3), np.zeros((4, 3)), np.full(4, 0.25))
try:
    session.laplace(stream.secret(3), np.full(4, 0.5))  # [1, 3] would hold 0.5 + 0.25 + 0.25 + 0.5 or 1.0
    print("third accepted")
except bc.BudgetExceeded:
    print("third refused")
print([(r.t, float(r.amounts[0])) for r in ledger.records])
"""


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs setitimer")
@pytest.mark.parametrize("delay", [0.004, 0.013, 0.016])
def test_a_raising_sigalrm_during_a_sessions_first_call_leaves_it_usable_and_exact(delay: float) -> None:
    """Guarantee: a SIGALRM handler that raises during a session's first operation (its kernels being loaded or
    compiled; issue 42's route) leaves the process able to run later operations, and the ledger exact: the
    interrupted spend is either recorded whole or not at all, and the windows count exactly what is recorded."""
    child = subprocess.run(
        [sys.executable, "-c", _FIRST_CALL_ALARM, str(delay)], capture_output=True, text=True, timeout=120, check=False
    )
    assert child.returncode == 0, child.stderr[-800:]
    verdict, records = child.stdout.splitlines()[-2:]
    if records.startswith("[(1, 0.5)"):
        assert verdict == "third refused" and records == "[(1, 0.5), (2, 0.25), (3, 0.25)]"
    else:
        assert verdict == "third accepted" and records == "[(2, 0.25), (3, 0.25), (3, 0.5)]"


def test_threads_racing_through_one_session_cannot_both_spend_the_window() -> None:
    """Guarantee: the compiled check-and-commit (GIL released) is not a race: four threads asking 0.6 of ε = 1
    at once through one session leave exactly one charge."""
    for _ in range(25):
        ledger, session, stream, _, _ = _pair(runs=500, d=20)
        secret = stream.secret(1)
        barrier, accepted = threading.Barrier(4), []

        def charge(session: GridSession = session, secret: bc.Secret = secret) -> None:
            barrier.wait()
            try:
                session.laplace(secret, 0.6)
                accepted.append(1)
            except BudgetExceeded:
                pass

        threads = [threading.Thread(target=charge) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(accepted) == 1
        assert len(ledger.records) == 1


@pytest.mark.parametrize("hand_over", [False, True])
def test_a_session_racing_the_ledger_used_directly_cannot_both_spend_the_window(hand_over: bool) -> None:
    """Guarantee: a thread charging through the session while another charges the ledger directly (after
    reading its records, which hands the session's state over, or not) leaves exactly one 0.6 of ε = 1."""
    for _ in range(20):
        ledger, session, stream, _, _ = _pair(runs=500, d=20)
        secret = stream.secret(1)
        barrier, accepted = threading.Barrier(2), []

        def through_session(session: GridSession = session, secret: bc.Secret = secret) -> None:
            barrier.wait()
            try:
                session.laplace(secret, 0.6)
                accepted.append("session")
            except BudgetExceeded:
                pass

        def directly(ledger: WindowLedger = ledger) -> None:
            barrier.wait()
            if hand_over:
                ledger.records  # a read: the hand-over
            try:
                ledger.spend(1, 0.6, purpose="direct")
                accepted.append("ledger")
            except BudgetExceeded:
                pass

        threads = [threading.Thread(target=through_session), threading.Thread(target=directly)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(accepted) == 1, accepted
        assert len(ledger.records) == 1


def test_grid_sessions_does_not_leak_into_other_threads() -> None:
    """Guarantee: ``grid_sessions()`` is the runner's block only: a thread started inside it does not get
    sessions (its mechanism keeps the ledger's path unless it opens the block itself)."""
    got: list[bool] = []
    ledger, stream = _ledger(1.0, 3, 4), GuardedStream(_data())
    ledger.bind(stream)

    def look() -> None:
        got.append(grid_session(ledger, stream, PURPOSES) is not None)

    with grid_sessions():
        thread = threading.Thread(target=look)
        thread.start()
        thread.join()
    assert got == [False]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_draws_what_the_ledgers_path_draws_and_charges_its_own_copy() -> None:
    """Guarantee: a session in a forked child behaves as the ledger's path in a forked child (same draws), and
    the child's spends never reach the parent's ledger."""

    def child_release(use_session: bool) -> tuple[bytes, bytes]:
        ledger, session, stream, twin, twin_stream = _pair()
        via, secret = (session, stream) if use_session else (twin, twin_stream)
        via.laplace(secret.secret(1), np.full(4, 0.1))
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover (the child)
            try:
                out = via.laplace(secret.secret(2), np.full(4, 0.75))
                os.write(write, out.tobytes())
            finally:
                os._exit(0)
        os.close(write)
        os.waitpid(pid, 0)
        child = b""
        while chunk := os.read(read, 65536):
            child += chunk
        os.close(read)
        parent = via.laplace(secret.secret(2), np.full(4, 0.75))
        return child, parent.tobytes()

    session_child, session_parent = child_release(True)
    ledger_child, ledger_parent = child_release(False)
    assert session_child == ledger_child and session_parent == ledger_parent


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_fork_while_a_thread_charges_through_the_session_leaves_the_child_a_whole_ledger() -> None:
    """Guarantee: a process forked while another thread is inside a session's operation gets a ledger whose
    windows are its records' (nothing half committed): in the child, one ulp over what the records leave is
    refused, and exactly that is not."""
    runs, w, length = 200, 50, 400
    ledger, session, stream, _, _ = _pair(runs=runs, w=w, d=10, length=length)
    stop = threading.Event()

    def spin() -> None:
        for t in range(1, length + 1):
            if stop.is_set():
                return
            session.laplace(stream.secret(t), np.full(runs, 1e-3 * (1 + t % 5)))

    thread = threading.Thread(target=spin)
    thread.start()
    verdicts = []
    try:
        for _ in range(8):
            read, write = os.pipe()
            pid = os.fork()
            if pid == 0:  # pragma: no cover (the child)
                verdict = "no records"
                try:
                    records = ledger.records
                    if records:
                        last = records[-1].t
                        spent = sum((Fraction(float(r.amounts[0])) for r in records if r.t > last - w), Fraction(0))
                        left = _down(Fraction(1) - spent)
                        verdict = "whole"
                        try:
                            ledger.spend(last, math.nextafter(left, 2.0), purpose="over")
                            verdict = "one ulp over accepted"
                        except BudgetExceeded:
                            pass
                        try:
                            ledger.spend(last, left, purpose="left")
                        except BudgetExceeded:
                            verdict += ", what is left refused"
                except BaseException as error:  # reported to the parent
                    verdict = f"{type(error).__name__}: {error}"
                finally:
                    os.write(write, verdict.encode()[:500])
                    os._exit(0)
            os.close(write)
            os.waitpid(pid, 0)
            verdicts.append(os.read(read, 1000).decode())
            os.close(read)
    finally:
        stop.set()
        thread.join()
    assert set(verdicts) <= {"whole", "no records"} and "whole" in verdicts, verdicts


def test_no_session_over_a_durable_ledger(tmp_path: Path) -> None:
    """Guarantee: a journalled ledger (``open_ledger``) keeps the ledger's own path: a session would hold spends
    the journal has not written (lost on a crash, then spent again)."""
    ledger = bc.open_ledger(tmp_path / "l.bcl", _ledger(1.0, 3, 2))
    stream = GuardedStream(_data())
    ledger.bind(stream)
    with grid_sessions():
        assert grid_session(ledger, stream, PURPOSES) is None


def test_a_copy_of_a_ledger_mid_session_is_not_a_fresh_budget() -> None:
    """Guarantee: copying a ledger while a session holds its state (``copy.copy``; deepcopy and pickle are
    refused) never yields a ledger that has forgotten the session's spends."""
    ledger, session, stream, _, _ = _pair(runs=2)
    session.laplace(stream.secret(1), np.full(2, 0.75))

    def repickled(ledger: WindowLedger) -> WindowLedger:
        copied: WindowLedger = pickle.loads(pickle.dumps(ledger))
        return copied

    for duplicate in (copy.copy, copy.deepcopy, repickled):
        try:
            other = duplicate(ledger)
        except TypeError:
            continue  # refused outright
        with pytest.raises(BudgetExceeded):
            other.spend(2, 0.5, purpose="copy")
    with pytest.raises(BudgetExceeded):
        ledger.spend(2, 0.5, purpose="original")


# ---------------------------------------------------------------------------------------------------------
# True values and noise
# ---------------------------------------------------------------------------------------------------------


def test_a_zero_budget_reads_nothing_through_the_session() -> None:
    """Guarantee: a run that pays nothing gets NaN, not its true values, on every session operation."""
    _, session, stream, twin, twin_stream = _pair()
    zero = np.zeros(4)
    assert np.isnan(session.laplace(stream.secret(1), zero)).all()
    assert np.isnan(session.dissimilarity(stream.secret(2), np.zeros((4, 3)), zero)).all()
    assert np.isnan(session.laplace_bins(stream.secret(3), np.zeros((4, 3)))).all()
    assert np.isnan(twin.laplace(twin_stream.secret(1), zero)).all()


def test_the_session_noise_follows_the_seed_and_only_the_seed() -> None:
    """Guarantee: the session draws the ledger's generator (the twin's doubles); two seeds give different
    noise, and a session's draws continue the ledger's stream after a hand-over (no replay of uniforms)."""
    ledger, session, stream, twin, twin_stream = _pair(seed=11)
    _, other, other_stream, _, _ = _pair(seed=12)
    a = session.laplace(stream.secret(1), np.full(4, 0.2))
    assert a.tobytes() == twin.laplace(twin_stream.secret(1), np.full(4, 0.2)).tobytes()
    assert a.tobytes() != other.laplace(other_stream.secret(1), np.full(4, 0.2)).tobytes()
    session.sync()
    b = ledger.laplace(stream.secret(2), 0.2)
    assert b.tobytes() == twin.laplace(twin_stream.secret(2), 0.2).tobytes()
    assert not np.array_equal(a - _data()[0], b - _data()[1])


# ---------------------------------------------------------------------------------------------------------
# Bench: the runner's path (sessions) against the ledger's path, for built-ins and a user's copy of one
# ---------------------------------------------------------------------------------------------------------


@pytest.fixture
def copied_bd(mechanism_module: Callable[[str, str], str]) -> Iterator[str]:
    """A third party's copy of BD: a subclass under its own name, in its own module."""
    yield mechanism_module(
        "attack5_copy",
        """
        import attrs
        from budgetcheck import load_mechanism

        _BD = type(load_mechanism("BD"))


        @attrs.frozen
        class Mech(_BD):
            name: str = "MyBD"
        """,
    )


@pytest.mark.parametrize("reference", ["BD", "BA", "DSATw", "FASTw", "RescueDP", "copy"])
def test_the_runners_path_gives_the_ledgers_releases_and_records(reference: str, copied_bd: str) -> None:
    """Guarantee: a pass inside ``grid_sessions()`` (the runner's ``batch_releases``) gives the same releases,
    records and what is left as the same pass outside it, for built-ins and for a user's copy of one."""
    name = f"{copied_bd}:Mech" if reference == "copy" else reference
    rng = np.random.default_rng(3)
    data = [rng.integers(0, 40, size=(60, 2)).astype(np.float64) for _ in range(2)]
    epsilons = np.repeat([0.5, 1.0], 3)

    def run(session: bool) -> Any:
        stream = GuardedStream.stacked(data)
        mechanism = bc.load_mechanism(name)
        if not session:
            return bc.execute(mechanism, stream, epsilon=epsilons, w=7, runs=epsilons.size, seed=4)
        with grid_sessions():
            return bc.execute(mechanism, stream, epsilon=epsilons, w=7, runs=epsilons.size, seed=4)

    inside, outside = run(True), run(False)
    assert inside.releases.tobytes() == outside.releases.tobytes()
    assert _records(inside.ledger) == _records(outside.ledger)
    assert inside.ledger.remaining(61).tobytes() == outside.ledger.remaining(61).tobytes()


@pytest.mark.parametrize("reference", ["BD", "BA", "FASTw", "DSATw", "RescueDP"])
@pytest.mark.parametrize(
    ("length", "w", "runs", "d", "epsilon"),
    [
        (1, 1, 2, 1, 1.0),
        (2, 1, 2, 2, 1.0),
        (3, 3, 2, 1, 1.0),
        (30, 5, 2, 3, 1e-300),
        (30, 5, 2, 3, 1e300),
        (30, 5, 2, 2, 2.0**-800),  # the compiled share's range: its bottom, and just below
        (30, 5, 3, 2, math.nextafter(2.0**-800, 0.0)),
        (30, 5, 2, 2, 2.0**999),  # its top (2**1000), and past it in one run
        (30, 5, 3, 2, 2.0**1000),
        (3, 2, grid.MOST_RUNS, 1, 1.0),  # the session's size cutoff
    ],
)
def test_tiny_streams_and_extreme_budgets_give_the_same_pass_inside_and_outside(
    reference: str, length: int, w: int, runs: int, d: int, epsilon: float
) -> None:
    """Guarantee: at the edges (T = 1, w = 1, runs = 2, ε = 1e-300 or 1e300 per run, either side of the compiled
    ``share``'s range [2**-800, 2**1000], within one batch) a built-in's pass inside
    ``grid_sessions()`` ends as outside it: the same releases and records, or the same error."""
    data = np.random.default_rng(length).integers(0, 40, size=(length, d)).astype(np.float64)
    epsilons = np.linspace(epsilon, 2 * epsilon, runs)

    def run(session: bool) -> tuple[str, bytes, list[str]]:
        mechanism = bc.load_mechanism(reference)
        try:
            with np.errstate(all="ignore"):
                if not session:
                    out = bc.execute(mechanism, data, epsilon=epsilons, w=w, runs=runs, seed=3)
                else:
                    with grid_sessions():
                        out = bc.execute(mechanism, data, epsilon=epsilons, w=w, runs=runs, seed=3)
        except bc.BudgetcheckError as error:  # e.g. RescueDP's non-finite releases at 1e-300, on both paths
            return (f"{type(error).__name__}: {error}", b"", [])
        return ("ok", out.releases.tobytes(), _records(out.ledger))

    assert run(True) == run(False)


@pytest.mark.parametrize("reference", ["BD", "copy"])
def test_the_runners_batch_releases_are_the_ledgers_pass_outside_the_runner(reference: str, copied_bd: str) -> None:
    """Guarantee: ``batch_releases`` (what ``budgetcheck bench`` runs, sessions on) gives, for a built-in and for
    a user's copy of it, the releases of the same pass run outside the runner on the ledger's own path."""
    import attrs

    from budgetcheck.bench import Benchmark
    from budgetcheck.bench.runner import batch_releases, batch_truths

    name = f"{copied_bd}:Mech" if reference == "copy" else reference
    base = Benchmark.paper(real=(), runs=3).select(
        streams=("s40-a10",), epsilons=(1.0,), ws=(40,), mechanisms=("BD",), streams_per_cell=1
    )
    bench = attrs.evolve(base, mechanisms=(name,))
    (batch,) = dict.fromkeys(bench.batch(cell) for cell in bench.cells())
    assert len(batch.epsilons) == 1 and bench.draws(bench.stream(batch.streams[0])) == 1
    inside = np.concatenate(batch_releases(bench, batch))  # stream by stream, each (runs, T, d)
    data = [truth for per_spec in batch_truths(bench, batch) for truth in per_spec]
    stream = GuardedStream(data[0]) if len(data) == 1 else GuardedStream.stacked(data)
    epsilons = np.tile(np.repeat(batch.epsilons, bench.runs), len(data))
    outside = bc.execute(
        bc.load_mechanism(batch.mechanism), stream, epsilon=epsilons, w=batch.w, runs=epsilons.size, seed=batch.seed
    )
    assert inside.shape == outside.releases.shape
    assert inside.tobytes() == outside.releases.tobytes()


# ---------------------------------------------------------------------------------------------------------
# kernel_ops against FLOAT's directed roundings and the exact values
# ---------------------------------------------------------------------------------------------------------

_DOUBLES = st.floats(min_value=0.0, max_value=2.0**1000, allow_nan=False, allow_infinity=False) | st.sampled_from(
    [TINY, 2.0**-1022, 2.0**-800, 2.0**-1021, 1.0, 0.1, 1e-310, 2.0**1000]
)


def _float_op(name: str, *args: Any) -> float:
    return float(np.asarray(getattr(ops.FLOAT, name)(*args), dtype=np.float64).reshape(-1)[0])


def _is_down(result: float, exact: Fraction, slack: int = 0) -> bool:
    """At most ``exact`` (>= 0), and at most ``slack`` doubles below the largest double <= exact."""
    above = result
    for _ in range(slack + 1):
        above = math.nextafter(above, math.inf)
    return Fraction(result) <= exact and (exact == 0 or Fraction(above) > exact)


@settings(max_examples=300, deadline=None)
@given(total=st.floats(min_value=2.0**-800, max_value=2.0**1000), parts=st.integers(1, 10**6))
def test_kernel_share_is_floats_share_and_the_largest_safe_part(total: float, parts: int) -> None:
    """Guarantee: ``k_share(total, parts)`` is FLOAT's ``share`` and the largest x with parts·x <= total."""
    got = kernel_ops.k_share(total, parts)
    assert got == _float_op("share", np.array([total]), parts) == rounding.share(total, parts)
    assert Fraction(got) * parts <= Fraction(total) < Fraction(math.nextafter(got, math.inf)) * parts


def _underflows(exact: Fraction) -> bool:
    """A positive value below half the smallest subnormal: round to nearest gives 0, and so does rounding down."""
    return 0 < exact <= Fraction(TINY) / 2


@settings(max_examples=1500, deadline=None)
@given(x=_DOUBLES, y=_DOUBLES)
def test_kernel_products_quotients_and_differences_round_down_as_float_does(x: float, y: float) -> None:
    """Guarantee: the compiled directed roundings give FLOAT's doubles: x·y, x/y, max(x − y, 0) and x/2
    rounded down, never above the exact value and at most one double under the largest double below it (the
    conservative step FLOAT takes near underflow, e.g. 1·5e-324 gives 0, 1/3.0497682040100606e300 one double
    under; the kernel's is the same)."""
    product = kernel_ops.k_mul_down(x, y)
    assert product == float(rounding.mul_down(np.array([x]), np.array([y]))[0])
    if math.isfinite(product) and Fraction(x) * Fraction(y) <= Fraction(BIGGEST):
        assert _is_down(product, Fraction(x) * Fraction(y), slack=1)
    if y > 0 and not _underflows(Fraction(x) / Fraction(y)):
        quotient = kernel_ops.k_div_down(x, y)
        assert quotient == float(rounding.div_down(np.array([x]), np.array([y]))[0])
        if Fraction(x) / Fraction(y) <= Fraction(BIGGEST):
            assert _is_down(quotient, Fraction(x) / Fraction(y), slack=1)
    difference = kernel_ops.k_sub_down(x, y)
    assert difference == _float_op("sub_down", np.array([x]), np.array([y]))
    assert _is_down(difference, max(Fraction(x) - Fraction(y), Fraction(0)))
    if not _underflows(Fraction(x) / 2):
        half = kernel_ops.k_half_down(x)
        assert half == _float_op("half_down", np.array([x]))
        assert _is_down(half, Fraction(x) / 2, slack=1)


@pytest.mark.parametrize(("x", "y"), [(TINY, 2.0), (TINY, 3.0), (1e-300, 1e300), (TINY, 1e10)])
def test_a_budget_rounded_down_is_never_negative(x: float, y: float) -> None:
    """Guarantee: a non-negative budget divided or halved "rounded down" stays a budget (>= 0): here the exact
    value is positive and below every double but 0, so the answer is 0.0."""
    results = [
        kernel_ops.k_div_down(x, y),
        float(rounding.div_down(np.array([x]), np.array([y]))[0]),
    ]
    if y == 2.0:
        results += [kernel_ops.k_half_down(x), _float_op("half_down", np.array([x]))]
    assert all(value >= 0.0 for value in results), results


_BUDGETS = st.sampled_from([0.0, TINY, 1e-300, 0.1, 1.0 / 3.0, 0.25, 1e300]) | st.floats(
    min_value=0.0, max_value=10.0, allow_nan=False
)


@settings(max_examples=200, deadline=None)
@given(width=st.integers(1, 5), values=st.lists(_BUDGETS, min_size=1, max_size=30))
def test_kernel_slide_bounds_the_windows_exact_sum_from_above(width: int, values: list[float]) -> None:
    """Guarantee: a compiled rule's window (``KernelOps.slide`` over its ring) keeps the last ``width`` budgets
    and a total never below their exact sum (a rule that read less would allocate over ε)."""
    ring = np.zeros((width, 1))  # (slots, runs): one run's window, slot-major as the back-end keeps it
    compiled = kernel_ops.kernel_ops(ring)
    window = kernel_ops.Window(0, 0, 0.0, 0)
    for k, value in enumerate(values):
        window = compiled.slide(window, value)
        last = values[max(0, k + 1 - width) : k + 1]
        assert Fraction(window.total) >= sum((Fraction(x) for x in last), Fraction(0))
        assert sorted(ring[:, 0].tolist()) == sorted(last + [0.0] * (width - len(last)))


@settings(max_examples=300, deadline=None)
@given(
    value=_BUDGETS,
    other=_BUDGETS,
    numerator=st.integers(0, 60),
    denominator=st.integers(1, 60),
    parts=st.integers(1, 1000),
)
def test_kernel_ops_methods_give_floats_doubles(
    value: float, other: float, numerator: int, denominator: int, parts: int
) -> None:
    """Guarantee: the methods of the compiled ``ops`` (what a rule's ``charges`` calls) give, one run at a time,
    the doubles of ``budgetcheck.ops.FLOAT`` on the same values."""
    compiled = kernel_ops.kernel_ops(np.zeros((1, 2)))
    assert compiled.fraction_down(value, numerator, denominator) == _float_op(
        "fraction_down", np.array([value]), numerator, denominator
    )
    assert compiled.mul_down(value, other) == _float_op("mul_down", np.array([value]), other)
    assert compiled.sub_down(value, other) == _float_op("sub_down", np.array([value]), np.array([other]))
    assert compiled.minimum(value, other) == _float_op("minimum", np.array([value]), np.array([other]))
    if not _underflows(Fraction(value) / 2):
        assert compiled.half_down(value) == _float_op("half_down", np.array([value]))
    if kernel_ops.usable_epsilon(np.array([value])) and value > 0:
        assert compiled.share(value, parts) == _float_op("share", np.array([value]), parts)
