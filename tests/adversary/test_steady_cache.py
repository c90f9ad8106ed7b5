"""An adversary against the steady one-run charge (8b123be) and the live row handoff (ce3570f).

A one-run WindowLedger with no hook and no kept records answers ``laplace`` and ``dissimilarity`` on a
few values from constants (noise scale, sensitivity, payload size) kept under a key. Every attack here
warms that memo and then tries to make a hit give what the full operation would not: another relation
of the same shape, a foreign secret, amounts that are equal as numbers but not as types, special
doubles, a hook or exposures arriving later, a mechanism that retries after a refusal. Each result is
compared with twins on which the memo cannot apply: the same class with the steady path switched off
(``_Full``) and a ledger that keeps records. Releases, refusals, error types and messages, remaining
budget and the generator's state must be identical; for the discrete sampler (OS randomness) the
arguments handed to the noise source (values, scale, sensitivity) must be identical.

Two regressions found this way are kept: a secret of no values failed with ZeroDivisionError on the
steady path where the full operation names the fault, and a LiveStream row handed over by an
``__array__`` that ignores ``copy`` became the caller's own buffer in the vault. Not tested here: one
ledger driven from several threads at once can overspend a window on either path (its check and
commit are not one atomic step); a race is no deterministic test.
"""

from __future__ import annotations

import gc
import math
import warnings
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

import budgetcheck as bc
from budgetcheck.ledger.access import LedgerAccess
from budgetcheck.ledger.hooks import OperationHook
from budgetcheck.stream.neighbours import Neighbours


class _Full(bc.WindowLedger):
    """The full operation at every call: the steady path switched off."""

    __slots__ = ()
    _steady_notion = False


class _Recorder:
    """A noise source that notes what it is handed (values, scale, sensitivity, integral), then delegates."""

    def __init__(self, inner: Any, log: list[tuple[bytes, bytes, float, bool]]) -> None:
        self._inner, self._log = inner, log

    @property
    def name(self) -> str:
        return str(self._inner.name)

    def scale(self, *args: Any, **kwargs: Any) -> Any:
        return self._inner.scale(*args, **kwargs)

    def scale_value(self, *args: Any, **kwargs: Any) -> Any:
        return self._inner.scale_value(*args, **kwargs)

    def perturb(self, values: Any, scale: Any, sensitivity: float, *, integral: bool) -> Any:
        self._note(values, scale, sensitivity, integral)
        return self._inner.perturb(values, scale, sensitivity, integral=integral)

    def perturb_values(self, values: Any, scale: Any, sensitivity: float, *, integral: bool) -> Any:
        self._note(values, scale, sensitivity, integral)
        return self._inner.perturb_values(values, scale, sensitivity, integral=integral)

    def _note(self, values: Any, scale: Any, sensitivity: float, integral: bool) -> None:
        flat = np.asarray(values, dtype=np.float64).reshape(-1).tobytes()
        self._log.append((flat, np.asarray(scale, dtype=np.float64).reshape(-1)[:1].tobytes(), sensitivity, integral))


RELATIONS = [
    Neighbours.one_bin(1),
    Neighbours.one_bin(3),
    Neighbours.across_bins(2),
    Neighbours.across_bins(7),
    Neighbours.replace_one(),
]
SPECIAL = [5e-324, 1e-310, 2.2250738585072014e-308, 1e-300, 1e-17, 0.1, 1 / 3, 0.25, 0.5, 1.0, 1e300]


def _ledger(cls: type[bc.WindowLedger], sampler: str, *, keep: bool = False, eps: float = 1.0, w: int = 3) -> Any:
    ledger = cls(epsilon=eps, w=w, seed=7, sampler=sampler, keep_records=keep)
    log: list[tuple[bytes, bytes, float, bool]] = []
    ledger._noise = _Recorder(ledger._noise, log)
    return ledger, log


def _outcome(call: Callable[[], Any], deterministic: bool) -> tuple[Any, ...]:
    try:
        out = np.asarray(call())
    except Exception as exc:  # noqa: BLE001 - the twins must fail alike, whatever the failure
        return (type(exc).__name__, str(exc))
    return ("ok", out.shape, out.tobytes() if deterministic else None)


def _state(ledger: Any, t: int) -> tuple[Any, ...]:
    left = np.asarray(ledger.remaining(max(t, 1))).tobytes()
    seeded = ledger._noise.name == "numpy-laplace"  # the discrete sampler draws from the OS, not _rng
    rng = ledger._rng.bit_generator.state["state"] if seeded else None
    return (ledger.t, ledger.refusals, left, repr(rng))


def _play(
    cls: type[bc.WindowLedger],
    sampler: str,
    relation: Neighbours,
    shape: tuple[int, ...],
    calls: Sequence[tuple[str, object]],
    *,
    keep: bool = False,
    eps: float = 1.0,
) -> tuple[list[tuple[Any, ...]], list[tuple[bytes, bytes, float, bool]], tuple[Any, ...]]:
    ledger, log = _ledger(cls, sampler, keep=keep, eps=eps)
    rows = (np.arange(len(calls) * math.prod(shape)).reshape(len(calls), *shape) % 5).astype(np.float64)
    classes = None if len(shape) == 1 else shape[0]
    stream = bc.LiveStream(
        ((t + 1, row) for t, row in enumerate(rows)), dimensions=shape[-1], classes=classes, neighbours=relation
    )
    ledger.bind(stream)
    deterministic = sampler == "numpy-laplace"
    last = np.zeros((1, *shape))
    out = []
    for secret, (op, amount) in zip(stream, calls, strict=True):
        if op == "l":
            result = _outcome(lambda s=secret, a=amount: ledger.laplace(s, a), deterministic)
            if deterministic and result[0] == "ok":
                last = np.frombuffer(result[2]).reshape(1, *shape)
        else:
            result = _outcome(lambda s=secret, a=amount, b=last: ledger.dissimilarity(s, b, a), deterministic)
        out.append(result)
    if cls is bc.WindowLedger and not keep:
        _WARM.append(bool(ledger._steady))
    return out, log, _state(ledger, ledger.t)


_WARM: list[bool] = []  # whether a steady twin's memo was filled (the path under attack was taken)


def _twins(*args: Any, **kwargs: Any) -> list[Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an infinite scale overflows noise·scale, in every twin
        return [
            _play(bc.WindowLedger, *args, **kwargs),
            _play(_Full, *args, **kwargs),
            _play(bc.WindowLedger, *args, keep=True, **kwargs),
        ]


@pytest.mark.parametrize("sampler", ["numpy-laplace", "discrete-laplace"])
@pytest.mark.parametrize("relation", RELATIONS, ids=str)
def test_a_warm_memo_releases_what_the_full_operation_releases(sampler: str, relation: Neighbours) -> None:
    """Random and special amounts (subnormal, tiny, huge: refused or an infinite scale), both operations,
    several shapes: every step equals the full operation's (bit for bit with the seeded sampler)."""
    rng = np.random.default_rng(abs(hash((sampler, str(relation)))) % 2**32)
    _WARM.clear()
    for shape in [(3,), (7,), (2, 3)]:
        for eps in (1.0, 1e-300):
            pool = SPECIAL if eps == 1.0 else [1e-302, 5e-301, 5e-324]
            amounts = [float(a) for a in rng.choice(pool, 6)] + [float(a) for a in rng.uniform(0, 0.5, 10) * eps]
            calls = [("l" if len(shape) == 1 and rng.random() < 0.5 else "d", a) for a in amounts]
            if sampler == "discrete-laplace":  # an infinite or huge scale may overflow a draw, at random
                calls = [(op, a) for op, a in calls if a >= 1e-17 * eps]
            steady, full, kept = _twins(sampler, relation, shape, calls, eps=eps)
            assert steady == full == kept, (shape, eps)
    assert any(_WARM)


def test_a_second_stream_of_another_relation_gets_its_own_sensitivity() -> None:
    """The memo is warm for one-bin(1) on shape (3,); streams of the same shape under across-bins(7),
    replace-one and one-bin(1) again, bound to the same ledger in turn, are charged at their own
    sensitivity: what the full operation hands the noise source, bit for bit."""
    relations = [Neighbours.one_bin(1), Neighbours.across_bins(7), Neighbours.replace_one(), Neighbours.one_bin(1)]
    outcomes = []
    for cls in (bc.WindowLedger, _Full):
        ledger, log = _ledger(cls, "numpy-laplace", w=10_000)
        releases = []
        for k, relation in enumerate(relations):
            rows = ((3 * k + t, [1.0, 2.0, 3.0]) for t in (1, 2, 3))
            stream = bc.LiveStream(rows, dimensions=3, neighbours=relation)
            ledger.bind(stream)
            for secret in stream:
                releases.append(ledger.laplace(secret, 0.01).tobytes())
                releases.append(ledger.dissimilarity(secret, np.zeros((1, 3)), 0.01).tobytes())
        outcomes.append((log, releases, _state(ledger, ledger.t)))
    assert outcomes[0] == outcomes[1]
    assert sorted({entry[2] for entry in outcomes[0][0] if entry[3]}) == [1.0, 2.0, 7.0]


def test_a_same_ledger_rebind_to_another_relation_is_not_served_the_old_constants() -> None:
    """One ledger, one stream at a time (a LiveStream of one-bin(1) is bound and read; then a GuardedStream
    cannot be bound to it, but a user-built secret of across-bins(7) carries its own relation): whatever a
    secret's relation says is what the noise covers."""
    ledger, log = _ledger(bc.WindowLedger, "numpy-laplace", w=10_000)
    stream = bc.LiveStream(((t, [1.0, 2.0, 3.0]) for t in (1, 2)), dimensions=3)
    ledger.bind(stream)
    for secret in stream:
        ledger.laplace(secret, 0.25)
    assert ledger._steady
    wide = bc.Secret(3, np.array([1.0, 2.0, 3.0]), neighbours=Neighbours.across_bins(7))
    ledger.laplace(wide, 0.25)
    assert log[-1][2] == 7.0
    assert log[-1][1] == np.float64(math.nextafter(7.0 / 0.25, math.inf)).tobytes()


def _amount_outcomes(cls: type[bc.WindowLedger], amounts: Sequence[object]) -> list[tuple[Any, ...]]:
    ledger, _ = _ledger(cls, "numpy-laplace", w=2)
    stream = bc.GuardedStream(np.arange(2 * len(amounts) * 2, dtype=np.float64).reshape(-1, 2) % 7)
    ledger.bind(stream)
    secrets = list(stream)
    out = []
    for i, amount in enumerate(amounts):
        for secret in secrets[2 * i : 2 * i + 2]:
            out.append(_outcome(lambda s=secret, a=amount: ledger.laplace(s, a), True))
            out.append(_outcome(lambda s=secret, a=amount: ledger.dissimilarity(s, np.zeros((1, 2)), a), True))
            out.append(_state(ledger, secret.t))
    return out


def test_amounts_equal_as_numbers_but_of_other_types_act_as_the_full_operation() -> None:
    """0.25 as a float warms the memo; the same value as numpy float64/float32, Fraction, a 0-d array,
    and zeros, NaN, inf, negatives, bools and strings interleaved: identical results and errors."""
    amounts: list[object] = [0.25, np.float64(0.25), np.float32(0.25), Fraction(1, 4), np.array(0.25), 0.25]
    amounts += [0.0, -0.0, math.nan, math.inf, -0.25, True, 1, "0.25", [0.25], np.array([0.25]), 0.25, 1.0]
    assert _amount_outcomes(bc.WindowLedger, amounts) == _amount_outcomes(_Full, amounts)


def test_purposes_and_last_releases_are_checked_at_every_step() -> None:
    def play(cls: type[bc.WindowLedger]) -> list[tuple[Any, ...]]:
        ledger, _ = _ledger(cls, "numpy-laplace", w=1)
        stream = bc.GuardedStream(np.ones((12, 2)))
        ledger.bind(stream)
        out = []
        purposes: list[object] = ["publication", " ", "", None, 3, "publication", "x" * 10_000]
        lasts: list[object] = [
            np.zeros((1, 2)),
            np.zeros((1, 2), dtype=np.float32),
            [[0.0, 0.0]],
            np.array([[math.nan, 0.0]]),
            np.zeros((2,)),
            np.zeros((1, 3)),
            np.zeros((1, 2)),
        ]
        for secret, purpose, last in zip(stream, purposes + purposes[:5], lasts + lasts[:5], strict=False):
            out.append(_outcome(lambda s=secret, p=purpose: ledger.laplace(s, 0.1, purpose=p), True))
            out.append(_outcome(lambda s=secret, b=last: ledger.dissimilarity(s, b, 0.1), True))
            out.append(_outcome(lambda s=secret, p=purpose, b=last: ledger.dissimilarity(s, b, 0.1, purpose=p), True))
            out.append(_state(ledger, secret.t))
        return out

    assert play(bc.WindowLedger) == play(_Full)


def test_a_foreign_or_reused_secret_is_refused_on_a_warm_memo_and_changes_nothing() -> None:
    def play(cls: type[bc.WindowLedger]) -> list[tuple[Any, ...]]:
        mine, _ = _ledger(cls, "numpy-laplace", w=4)
        theirs, _ = _ledger(cls, "numpy-laplace", w=4)
        ours, other = bc.GuardedStream(np.ones((6, 2))), bc.GuardedStream(np.ones((6, 2)))
        mine.bind(ours)
        theirs.bind(other)
        out = []
        for secret, foreign in zip(ours, other, strict=True):
            out.append(_outcome(lambda s=secret: mine.laplace(s, 0.1), True))
            out.append(_outcome(lambda s=foreign: mine.laplace(s, 0.1), True))
            out.append(_outcome(lambda s=foreign: mine.dissimilarity(s, np.zeros((1, 2)), 0.1), True))
            out.append(_state(mine, secret.t))
        out.append(_outcome(lambda: mine.laplace(next(iter(ours)), 0.1), True))  # t=1, after t=6
        out.append(_state(mine, mine.t))
        return out

    steady, full = play(bc.WindowLedger), play(_Full)
    assert steady == full
    assert steady[1][0] == "SecretAccess" and steady[-2][0] == "TimestampOrder"


def test_a_mechanism_that_retries_after_refusals_matches_the_full_operation() -> None:
    """Spend the window, catch BudgetExceeded, halve and retry (a warm memo at every amount tried)."""

    def play(cls: type[bc.WindowLedger]) -> list[tuple[Any, ...]]:
        ledger, _ = _ledger(cls, "numpy-laplace", eps=1.0, w=3)
        stream = bc.GuardedStream(np.arange(30, dtype=np.float64).reshape(15, 2))
        ledger.bind(stream)
        out = []
        for secret in stream:
            amount = 0.6
            while amount > 1e-3:
                try:
                    out.append(("ok", ledger.laplace(secret, amount).tobytes(), amount))
                    break
                except bc.BudgetExceeded as exc:
                    out.append(("refused", str(exc), _state(ledger, secret.t)))
                    amount /= 2
        out.append(_state(ledger, ledger.t))
        return out

    steady, full = play(bc.WindowLedger), play(_Full)
    assert steady == full
    assert any(entry[0] == "refused" for entry in steady)


def test_exposures_after_a_warm_memo_count_in_every_window() -> None:
    """Pan-private discards (exposures) after the memo filled: the next plain charges see them."""

    def play(cls: type[bc.WindowLedger]) -> list[tuple[Any, ...]]:
        ledger, _ = _ledger(cls, "numpy-laplace", eps=1.0, w=3)
        stream = bc.GuardedStream(np.ones((12, 2)))
        ledger.bind(stream)
        out = []
        for i, secret in enumerate(stream):
            if i in (3, 4):
                out.append(_outcome(lambda s=secret: ledger.held_laplace(s, 0.5, np.array([False])), True))
            out.append(_outcome(lambda s=secret: ledger.laplace(s, 0.3), True))
            out.append(_state(ledger, secret.t))
        return out

    steady, full = play(bc.WindowLedger), play(_Full)
    assert steady == full
    assert any(entry[0] == "BudgetExceeded" for entry in steady)


class _Tap(OperationHook):
    """A verification-style tap: notes every record the ledger commits."""

    __slots__ = ("seen",)

    def __init__(self, inner: OperationHook | None) -> None:
        super().__init__(inner)
        self.seen: list[tuple[int, str, float, bytes]] = []

    def take(self, record: Any) -> bool:
        self.seen.append((record.t, record.purpose, record.sensitivity, np.asarray(record.noise_scale).tobytes()))
        return super().take(record)


def test_a_hook_installed_after_a_warm_memo_sees_every_charge(tmp_path: Any) -> None:
    """A tap installed once the memo is warm gets a record of every later charge (none is taken on the
    steady path), the releases stay the full operation's, and after it is removed the memo serves again.
    A durable file cannot be opened on a used ledger at all."""
    outcomes = []
    for cls in (bc.WindowLedger, _Full):
        ledger, _ = _ledger(cls, "numpy-laplace", w=4)
        stream = bc.LiveStream(((t, [float(t), 1.0]) for t in range(1, 9)), dimensions=2)
        ledger.bind(stream)
        out = []
        access = LedgerAccess(ledger)
        tap = None
        for secret in stream:
            if secret.t == 3:
                tap = access.install(_Tap)
            if secret.t == 6 and tap is not None:
                access.uninstall(tap)
            out.append(ledger.laplace(secret, 0.1).tobytes())
            out.append(ledger.dissimilarity(secret, np.zeros((1, 2)), 0.05).tobytes())
        assert tap is not None
        assert [(t, p) for t, p, _, _ in tap.seen] == [
            (t, p) for t in (3, 4, 5) for p in ("publication", "dissimilarity")
        ]
        outcomes.append((out, tap.seen, _state(ledger, ledger.t)))
        with pytest.raises(bc.InvalidArgument, match="already been used"):
            bc.open_ledger(str(tmp_path / f"{cls.__name__}.db"), ledger)
    assert outcomes[0] == outcomes[1]


def test_the_memo_and_ledger_hold_no_payload_value() -> None:
    """Distinctive payload values never appear in anything reachable from the ledger or the stream's
    iterator within a few referent hops (the memo holds constants only)."""
    marks = [987654.0, 123457.0, 555553.0]
    ledger = bc.WindowLedger(epsilon=1.0, w=4, seed=3, sampler="numpy-laplace")
    stream = bc.LiveStream(((t, marks) for t in range(1, 5)), dimensions=3)
    ledger.bind(stream)
    iterator = iter(stream)
    for secret in iterator:
        ledger.laplace(secret, 0.1)
        ledger.dissimilarity(secret, np.zeros((1, 3)), 0.05)
        del secret
        break
    assert all(type(v) is float or type(v) is int for c in ledger._steady.values() for v in c)
    seen: set[int] = set()
    frontier: list[object] = [ledger, ledger._steady]
    for _ in range(4):
        nxt: list[object] = []
        for obj in frontier:
            if id(obj) in seen or obj is stream or obj is marks:
                continue  # the stream holds its source: the caller's own rows
            seen.add(id(obj))
            if isinstance(obj, float):
                assert obj not in marks
            if isinstance(obj, np.ndarray) and obj.dtype == np.float64:
                assert not np.isin(obj, marks).any()
            nxt.extend(gc.get_referents(obj))
        frontier = nxt


class _Kept:
    """A row object whose ``__array__`` ignores ``copy=True`` and hands back the array it keeps (a ring
    buffer written in place by the caller): numpy trusts it not to alias."""

    def __init__(self) -> None:
        self.buffer = np.array([2.0, 3.0, 4.0])

    def __array__(self, dtype: object = None, copy: object = None) -> np.ndarray:
        return self.buffer


def test_a_live_row_never_aliases_an_array_the_caller_keeps() -> None:
    """ce3570f hands LiveStream's one copy to the vault without a second one; an ``__array__`` that
    ignores ``copy`` made that "copy" the caller's own buffer: frozen under the caller (its next write
    failed) and, once the caller re-enabled writes, changed after the row's checks had passed."""
    kept = _Kept()
    stream = bc.LiveStream(((t, kept) for t in (1, 2)), dimensions=3)
    ledger = bc.WindowLedger(epsilon=1.0, w=4, seed=3, sampler="discrete-laplace")
    ledger.bind(stream)
    iterator = iter(stream)
    first = next(iterator)
    assert kept.buffer.flags.writeable  # the caller's buffer is still the caller's
    kept.buffer[:] = [0.5, math.nan, 2.0**60]  # not a row the stream would admit
    released = ledger.dissimilarity(first, np.array([[2.0, 3.0, 4.0]]), 0.2)  # reads the checked row
    assert np.isfinite(released).all()
    assert ledger.laplace(first, 0.2).shape == (1, 3)


def test_an_empty_secret_fails_as_the_full_operation_fails() -> None:
    """8b123be: a dissimilarity of a secret of no values divided its sensitivity by the count 0 before the
    secret was checked, so a foreign secret or a bad timestamp raised ZeroDivisionError instead of the
    full operation's SecretAccess or InvalidArgument."""

    def play(cls: type[bc.WindowLedger]) -> list[tuple[Any, ...]]:
        mine, _ = _ledger(cls, "numpy-laplace", w=2)
        theirs, _ = _ledger(cls, "numpy-laplace", w=2)
        empty = bc.Secret(1, np.zeros(0))
        out = [_outcome(lambda: theirs.laplace(empty, 0.1), True)]  # claimed by theirs
        for secret, ledger in ((empty, mine), (bc.Secret(0, np.zeros(0)), mine), (bc.Secret(2, np.zeros(0)), mine)):
            out.append(_outcome(lambda s=secret, led=ledger: led.dissimilarity(s, np.zeros((1, 0)), 0.5), True))
            out.append(_state(mine, 1))
        return out

    steady, full = play(bc.WindowLedger), play(_Full)
    assert steady == full
    assert [entry[0] for entry in steady[1::2]] == ["SecretAccess", "InvalidArgument", "ZeroDivisionError"]


def test_a_relation_cannot_be_changed_in_place_after_the_memo_filled() -> None:
    """Neighbours is frozen, and since issue 43 (item 3) object.__setattr__ cannot change it either: both
    attempts are refused, and the steady path and the full operation keep the relation's noise throughout."""

    def play(cls: type[bc.WindowLedger]) -> tuple[list[bytes], list[tuple[bytes, bytes, float, bool]]]:
        relation = Neighbours.one_bin(1)
        ledger, log = _ledger(cls, "numpy-laplace", w=100)
        stream = bc.LiveStream(((t, [1.0, 2.0, 3.0]) for t in range(1, 7)), dimensions=3, neighbours=relation)
        ledger.bind(stream)
        out = []
        for secret in stream:
            if secret.t == 3:
                with pytest.raises(bc.Fixed):
                    object.__setattr__(relation, "bound", 5)
            if secret.t == 5:
                with pytest.raises(bc.Fixed):
                    object.__setattr__(relation, "kind", "replace-one")
            out.append(ledger.laplace(secret, 0.1).tobytes())
            out.append(ledger.dissimilarity(secret, np.zeros((1, 3)), 0.05).tobytes())
        return out, log

    steady, full = play(bc.WindowLedger), play(_Full)
    assert steady == full
    assert [entry[2] for entry in steady[1] if entry[3]] == [1.0] * 6  # before: [1, 1, 5, 5, 2, 2]
