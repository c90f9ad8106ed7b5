"""An adversary against the personalized side (per-user w-event windows) and the live side.

Targets: PersonalizedStream's per-user companion secrets kept in their integer dtype (66dcbb6), the first
charged read binding a stream never bound (9685b23), PersonalizedLedger's per-class windows and grouped
budgets, the built-in PBD/PBA mechanisms, and LiveStream handed to a mechanism's ``releases``.

Guarantees asserted: a spend that would break a class's window is refused before any noise is drawn; a
refusal changes nothing (no window, record, partition, binding or noise: compared with a twin ledger of
the same seed on ``numpy-laplace``); the per-user data is readable only through the charged grouped
report; a bad input is an :class:`InvalidArgument` raised before the charge, never a numpy or assertion
error after it. The tests named ``test_defect_*`` fail on the code they were written against.
"""

from __future__ import annotations

import gc
import sys
import threading
from collections.abc import Callable, Iterator
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

import budgetcheck as bc
from budgetcheck.stream.secret import Secret, users_of
from mechanisms.personalized import PBA, PBD, StrictestBA, StrictestBD

NUMPY = "numpy-laplace"
DISCRETE = "discrete-laplace"
REQ = bc.RequirementSet.from_counts([((2, 1.0), 3), ((3, 2.0), 2)])  # 5 users, 2 classes
BINS = np.array([[0, 1, -1, 1, 0], [1, 1, 1, 0, -1], [2, 0, 0, -1, 2], [1, 2, 0, 0, 1]])
D = 3


def _ledger(sampler: str = NUMPY, seed: int = 5, runs: int = 1, req: bc.RequirementSet = REQ) -> bc.PersonalizedLedger:
    return bc.PersonalizedLedger(req, runs=runs, seed=seed, sampler=sampler, keep_records=True)


def _untouched(ledger: bc.PersonalizedLedger, t: int = 1) -> bool:
    """Nothing charged: no record, the full ε of every class left at t."""
    eps = [r.epsilon for r in ledger.requirements.classes]
    return not ledger.records and np.array_equal(ledger.remaining(t), np.tile(eps, (ledger.runs, 1)))


# -- defects ---------------------------------------------------------------------------------------------


def test_defect_companion_secret_is_not_released_by_a_window_ledger() -> None:
    """Attacks the per-user companion (``users_of``): a WindowLedger's first read of it must be refused.

    The companion holds each user's bin (-1..d-1), not counts; its relation is the default one-bin relation,
    so a w-event ``laplace`` derives Δ = 1 and publishes every user's bin with noise of scale 1/ε, while one
    user changing its bin moves its entry by up to d. The read also binds the whole PersonalizedStream to a
    ledger that knows nothing of the per-user windows. Found: released, charged as Δ = 1."""
    stream = bc.PersonalizedStream(REQ, BINS, dimensions=D)
    companion = users_of(stream.secret(1))
    assert companion is not None
    ledger = bc.WindowLedger(bc.WEventParams(1.0, 2), sampler=NUMPY, keep_records=True)
    with pytest.raises((bc.SecretAccess, bc.InvalidArgument)):
        ledger.laplace(companion, 1.0)
    assert not ledger.records


@pytest.mark.parametrize("op", ["laplace", "dissimilarity"])
def test_defect_live_stream_never_bound_non_integer_row_is_refused_before_the_charge(op: str) -> None:
    """Attacks a LiveStream iterated and read without ``bind`` on the default discrete sampler.

    Its claim is a plain list, so the first charged read appends the ledger without bind's checks: the row
    was never checked for integers. Found: the window is charged, then the sampler raises AssertionError
    (spent, nothing released, a traceback). Expected: InvalidArgument before anything is charged."""
    live = bc.LiveStream([(1, [0.5, 1.0])], dimensions=2)
    ledger = bc.WindowLedger(bc.WEventParams(1.0, 2), keep_records=True)  # default sampler: discrete
    secret = next(iter(live))
    with pytest.raises(bc.InvalidArgument):
        if op == "laplace":
            ledger.laplace(secret, 0.5)
        else:
            ledger.dissimilarity(secret, np.zeros((1, 2)), 0.5)
    assert not ledger.records and np.array_equal(ledger.remaining(1), [1.0])


def _not_class_counts() -> Iterator[tuple[str, Callable[[], Secret]]]:
    """Secrets of shape (n_classes,): the first axis matches the requirement set, but they hold no (C, d) counts."""
    req = bc.RequirementSet.from_counts([((2, 1.0), 1), ((3, 2.0), 1)])  # as many users as classes

    def companion() -> Secret:
        users = users_of(bc.PersonalizedStream(req, [[0, 1]], dimensions=2).secret(1))
        assert users is not None
        return users

    yield "companion", companion
    yield "guarded", lambda: bc.GuardedStream([[1.0, 2.0]]).secret(1)

    def live() -> Secret:
        stream = bc.LiveStream([(1, [1.0, 2.0])], dimensions=2)
        _KEEP.append(stream)
        return next(iter(stream))

    yield "live", live


_KEEP: list[object] = []
_SECRETS = dict(_not_class_counts())
_CLASS_OPS: dict[str, Callable[[bc.PersonalizedLedger, Secret], object]] = {
    "sample_release": lambda ledger, secret: ledger.sample_release(secret, 0.25),
    "sample_dissimilarity": lambda ledger, secret: ledger.sample_dissimilarity(secret, np.zeros((1, 2)), 0.25),
    "local_report": lambda ledger, secret: ledger.local_report(secret, 0.25),
}


@pytest.mark.parametrize("op", list(_CLASS_OPS))
@pytest.mark.parametrize("source", list(_SECRETS))
def test_defect_personalized_ledger_refuses_a_secret_without_class_counts_before_the_charge(
    source: str, op: str
) -> None:
    """Attacks ``_check_class_secret``: it compares only the first axis of the shape with n_classes.

    A one-dimensional secret of n_classes values (a GuardedStream or LiveStream of d = n_classes, or a
    PersonalizedStream's per-user companion when n_users = n_classes) passes, is charged, and then fails
    in the sampler or the oracle with IndexError. Expected: InvalidArgument, nothing charged."""
    req = bc.RequirementSet.from_counts([((2, 1.0), 1), ((3, 2.0), 1)])
    ledger = _ledger(req=req)
    with pytest.raises(bc.InvalidArgument):
        _CLASS_OPS[op](ledger, _SECRETS[source]())
    assert _untouched(ledger)


@pytest.mark.parametrize("op", list(_CLASS_OPS))
@pytest.mark.parametrize(
    "row",
    [[[-1.0, 0.0], [1.0, 1.0]], [[3.0, 3.0], [1.0, 1.0]]],
    ids=["negative count", "more users than the class has"],
)
def test_defect_live_personalized_row_with_impossible_counts_is_refused_before_the_charge(
    op: str, row: list[list[float]]
) -> None:
    """Attacks a live personalized publisher: (C, d) rows are checked finite and bounded only.

    A negative count, or a class holding more users in its bins than it has, is charged and then fails in
    numpy's binomial or multinomial with ValueError('n < 0') (sample_release of the second row even
    publishes). Expected: InvalidArgument when the row is handed out or before the charge; nothing charged."""
    live = bc.LiveStream([(1, row)], dimensions=2, classes=2)
    ledger = _ledger(req=bc.RequirementSet.from_counts([((2, 1.0), 3), ((3, 2.0), 2)]))
    ledger.bind(live)
    with pytest.raises(bc.InvalidArgument):
        secret = next(iter(live))
        _CLASS_OPS[op](ledger, secret)
    assert _untouched(ledger)


def test_defect_a_refused_grouped_report_does_not_fix_the_partition() -> None:
    """Attacks ``local_report_groups``: ``_divide(k)`` runs before the charge is checked.

    A first grouped report over budget is refused, yet the ledger is split into its k groups from then on
    (and the refusal counts as history), so a twin ledger that never tried accepts groups=2 where this one
    raises. A refusal must change nothing."""
    stream, twin_stream = (bc.PersonalizedStream(REQ, BINS, dimensions=D) for _ in range(2))
    ledger, twin = _ledger(), _ledger()
    with pytest.raises(bc.BudgetExceeded):
        ledger.local_report_groups(stream.secret(1), np.full((1, 2, 3), 5.0), groups=3)
    assert ledger.groups == twin.groups == 1
    good = np.full((1, 2, 2), 0.25)
    assert np.array_equal(
        ledger.local_report_groups(stream.secret(1), good, groups=2),
        twin.local_report_groups(twin_stream.secret(1), good, groups=2),
    )


@pytest.mark.parametrize("notion", ["w-event", "personalized"])
def test_defect_a_refused_first_read_does_not_bind_the_stream(notion: str) -> None:
    """Attacks the implicit bind (9685b23): ``claim`` binds before the charge is checked.

    A first read refused as over budget leaves the never-bound stream owned by the refusing ledger: the
    ledger meant to read it then gets SecretAccess. A refusal must change nothing (nothing was read, so no
    spend can hide). Low severity: it refuses more, never less."""
    if notion == "w-event":
        stream: Any = bc.GuardedStream([[1.0, 2.0]])
        first, second = (bc.WindowLedger(bc.WEventParams(1.0, 2), sampler=NUMPY) for _ in range(2))
        with pytest.raises(bc.BudgetExceeded):
            first.laplace(stream.secret(1), 5.0)
        second.laplace(stream.secret(1), 0.5)
    else:
        stream = bc.PersonalizedStream(REQ, BINS, dimensions=D)
        first_p, second_p = _ledger(), _ledger()
        with pytest.raises(bc.BudgetExceeded):
            first_p.sample_release(stream.secret(1), 5.0)
        second_p.sample_release(stream.secret(1), 0.5)


def test_defect_bins_of_huge_python_ints_get_a_message_that_fits() -> None:
    """Attacks ``_check_bins`` with a Python int beyond int64 (numpy makes an object array).

    Refused, but with 'bins must have shape (T, 5) ..., got shape (1, 5)': the message contradicts itself.
    Expected: a message about the entry's type or range, not its shape."""
    with pytest.raises(bc.InvalidArgument) as caught:
        bc.PersonalizedStream(REQ, [[0, 1, 2**70, 0, 0]], dimensions=D)
    assert "got shape (1, 5)" not in str(caught.value)


@pytest.mark.parametrize(
    "row",
    [["a", 1.0], [[1.0], [1.0, 2.0]], {"x": 1.0}, [1 + 2j, 1.0]],
    ids=["text", "ragged", "dict", "complex"],
)
def test_defect_a_live_row_that_is_not_numbers_is_an_invalid_argument(row: Any) -> None:
    """Attacks ``LiveStream._secret``: ``np.array(values, dtype=float64)`` runs outside any try.

    A row of text, a ragged row, a dict or a complex number escapes as numpy's ValueError or TypeError
    (the text one quoting the row's entry) instead of the InvalidArgument every other bad row gets, so a
    publisher that catches InvalidArgument to skip bad rows dies. Nothing is charged."""
    live = bc.LiveStream([(1, row)], dimensions=2)
    ledger = bc.WindowLedger(bc.WEventParams(1.0, 2), sampler=NUMPY, keep_records=True)
    ledger.bind(live)
    with pytest.raises(bc.InvalidArgument):
        next(iter(live))
    assert not ledger.records


# -- what held: per-user bins in their integer dtype ------------------------------------------------------


def _grouped_then_sampled(bins: Any, d: int = D, req: bc.RequirementSet = REQ) -> NDArray[np.float64]:
    stream = bc.PersonalizedStream(req, bins, dimensions=d)
    ledger = _ledger(req=req)
    out = [ledger.local_report_groups(stream.secret(1), np.full((1, req.n_classes, 2), 0.125), groups=2)]
    out += [ledger.sample_release(secret, 0.0625) for secret in list(stream)[1:]]
    out += [ledger.local_report_groups(stream.secret(stream.length), np.full((1, req.n_classes, 2), 0.125), groups=2)]
    return np.array(out)


@pytest.mark.parametrize(
    "dtype", [np.int8, np.int16, np.int32, np.int64, ">i4", ">i8", np.float16, np.float32, np.float64, np.longdouble]
)
def test_signed_and_float_bins_give_the_same_releases_as_int64(dtype: Any) -> None:
    """Bins as int8..int64, big-endian, or integral floats: grouped reports and sampled releases are the
    same numbers as int64 bins (twin ledgers of one seed)."""
    assert np.array_equal(_grouped_then_sampled(BINS.astype(dtype)), _grouped_then_sampled(BINS))


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32, np.uint64, ">u8"])
def test_unsigned_bins_give_the_same_releases_as_int64(dtype: Any) -> None:
    """Unsigned bins (no -1: every user present) agree with int64 bins."""
    present = np.where(BINS < 0, 2, BINS)
    assert np.array_equal(_grouped_then_sampled(present.astype(dtype)), _grouped_then_sampled(present))


def test_non_adjacent_classes_and_many_bins_take_the_bincount_path_alike() -> None:
    """Classes not adjacent in column order and d > 16 (class_counts' bincount path), int8 vs int64."""
    req = bc.RequirementSet({"a": (2, 1.0), "b": (3, 2.0), "c": (2, 1.0), "d": (3, 2.0), "e": (4, 0.5)})
    assert req.class_ranges is None
    bins = np.random.default_rng(3).integers(-1, 20, size=(4, 5))
    assert np.array_equal(_grouped_then_sampled(bins.astype(np.int8), 20, req), _grouped_then_sampled(bins, 20, req))


@pytest.mark.parametrize(
    ("dtype", "value", "d"),
    [(np.uint8, 255, 256), (np.int8, 127, 128), (np.uint16, 65535, 65536), (np.int16, 32767, 32768)],
)
def test_the_largest_bin_of_a_small_dtype_is_counted_in_its_own_bin(dtype: Any, value: int, d: int) -> None:
    """A bin at its dtype's maximum (group_counts rounds through float16/float32 for small dtypes)."""
    from budgetcheck.ledger.local import group_counts
    from budgetcheck.stream.secret import charged

    req = bc.RequirementSet.from_counts([((2, 1.0), 3)])
    stream = bc.PersonalizedStream(req, np.array([[value, value, 0]], dtype=dtype), dimensions=d)
    users = users_of(stream.secret(1))
    assert users is not None
    with charged(users) as bins:
        assert bins.dtype == np.dtype(dtype)
        counts = group_counts(bins, req.user_classes, 1, 1, d)
    assert counts[0, value] == 2 and counts[0, 0] == 1 and counts.sum() == 3


@pytest.mark.parametrize(
    "bins",
    [
        np.array([[255, 0, 0, 0, 0]], np.uint8),
        np.array([[2**64 - 1, 0, 0, 0, 0]], np.uint64),
        np.array([[2**63 - 1, 0, 0, 0, 0]], np.int64),
        np.array([[-(2**63), 0, 0, 0, 0]], np.int64),
        np.array([[-2, 0, 0, 0, 0]], np.int8),
        np.array([[True, False, True, False, True]]),
        np.array([[2.0**63, 0, 0, 0, 0]]),
        np.array([[-1.5, 0, 0, 0, 0]]),
        np.array([[np.nan, 0, 0, 0, 0]]),
        np.array([[np.inf, 0, 0, 0, 0]]),
        np.array([[1 + 0j, 0, 0, 0, 0]]),
        np.zeros((1, 5), dtype="m8[s]"),
        np.zeros((0, 5), dtype=np.int8),
        np.zeros((2, 4), dtype=np.int8),
        np.zeros(5, dtype=np.int8),
    ],
    ids=lambda b: f"{b.dtype}{b.shape}",
)
def test_bins_out_of_range_or_of_a_wrong_kind_are_refused(bins: NDArray[Any]) -> None:
    """Near the dtype limits, bool, non-integral or non-finite floats, complex, timedelta, wrong shapes."""
    with pytest.raises(bc.InvalidArgument):
        bc.PersonalizedStream(REQ, bins, dimensions=D)


def test_bins_mutated_after_construction_change_no_later_read() -> None:
    """The caller keeps the int8 array it passed and overwrites it: class counts and companions are copies."""
    bins = BINS.astype(np.int8)
    stream = bc.PersonalizedStream(REQ, bins, dimensions=D)
    bins[:] = 0
    ledger, twin = _ledger(), _ledger()
    twin_stream = bc.PersonalizedStream(REQ, BINS, dimensions=D)
    mine = [ledger.local_report_groups(stream.secret(1), np.full((1, 2, 2), 0.125), groups=2)]
    theirs = [twin.local_report_groups(twin_stream.secret(1), np.full((1, 2, 2), 0.125), groups=2)]
    mine += [ledger.sample_release(s, 0.0625) for s in list(stream)[1:]]
    theirs += [twin.sample_release(s, 0.0625) for s in list(twin_stream)[1:]]
    assert np.array_equal(np.array(mine), np.array(theirs))


def test_from_events_with_numpy_unsigned_bins() -> None:
    """from_events with np.uint8 bins and np.int64 timestamps builds the same stream as the bins array."""
    events: list[tuple[Any, object, Any]] = [
        (np.int64(t + 1), user, np.uint8(b)) for t, row in enumerate(BINS) for user, b in enumerate(row) if b >= 0
    ]
    a = bc.PersonalizedStream.from_events(REQ, events, length=len(BINS), dimensions=D)
    ledger, twin = _ledger(), _ledger()
    b = bc.PersonalizedStream(REQ, BINS, dimensions=D)
    assert np.array_equal(
        np.array([ledger.sample_release(s, 0.0625) for s in a]), np.array([twin.sample_release(s, 0.0625) for s in b])
    )


# -- what held: streams never bound ------------------------------------------------------------------------

_FRACTIONS = [[0.5, 1.25], [2.0, 3.0]]


def _swellfish(sampler: str = DISCRETE) -> bc.SwellfishLedger:
    policies = bc.PolicyCollection([bc.StreamPolicy(1, 2, [1.0])])
    return bc.SwellfishLedger(policies, epsilon=1.0, sampler=sampler, keep_records=True)


_UNBOUND_OPS: dict[str, Callable[[Secret], Any]] = {
    "window laplace": lambda s: bc.WindowLedger(bc.WEventParams(1.0, 2), keep_records=True).laplace(s, 0.5),
    "window laplace steady": lambda s: bc.WindowLedger(bc.WEventParams(1.0, 2)).laplace(s, 0.5),
    "window dissimilarity steady": lambda s: bc.WindowLedger(bc.WEventParams(1.0, 2)).dissimilarity(
        s, np.zeros((1, 2)), 0.5
    ),
    "window laplace_bins": lambda s: bc.WindowLedger(bc.WEventParams(1.0, 2), keep_records=True).laplace_bins(
        s, [0.5, 0.25]
    ),
    "window laplace_groups": lambda s: bc.WindowLedger(bc.WEventParams(1.0, 2), keep_records=True).laplace_groups(
        s, [0, 0], [0.5]
    ),
    "window held_laplace": lambda s: bc.WindowLedger(bc.WEventParams(1.0, 2), keep_records=True).held_laplace(
        s, 0.5, True
    ),
    "window measure_footprint": lambda s: bc.WindowLedger(
        bc.WEventParams(1.0, 2), keep_records=True, trusted_code=True, allow_vouched=True
    ).measure_footprint(np.sum, [s], sensitivity=1.0, epsilon=0.5, isolation="trusted"),
    "swellfish laplace": lambda s: _swellfish().laplace(s, 0.5),
    "swellfish release_exact": lambda s: _swellfish().release_exact(s),
}


@pytest.mark.parametrize("op", list(_UNBOUND_OPS))
def test_non_integer_stream_never_bound_is_refused_before_any_charge(op: str) -> None:
    """Every charged operation's first read of a never-bound non-integer GuardedStream on the discrete
    sampler raises InvalidArgument naming numpy-laplace; the stream stays unbound."""
    stream = bc.GuardedStream(_FRACTIONS)
    with pytest.raises(bc.InvalidArgument, match="numpy-laplace"):
        _UNBOUND_OPS[op](stream.secret(1))
    numpy_ledger = bc.WindowLedger(
        bc.WEventParams(1.0, 2), sampler=NUMPY, keep_records=True, trusted_code=True, allow_vouched=True
    )
    numpy_ledger.laplace(stream.secret(1), 0.5)  # not bound by the refusal
    assert len(numpy_ledger.records) == 1


@pytest.mark.parametrize("op", ["sample_release", "local_report"])
def test_a_guarded_stream_never_bound_is_refused_by_a_personalized_ledger_and_stays_unbound(op: str) -> None:
    """A GuardedStream holds no (classes, d) counts: a PersonalizedLedger refuses it before the claim
    (InvalidArgument, nothing charged), so the refused read binds nothing."""
    stream = bc.GuardedStream(_FRACTIONS)
    ledger = _ledger(DISCRETE)
    with pytest.raises(bc.InvalidArgument, match="not from a PersonalizedStream"):
        getattr(ledger, op)(stream.secret(1), 0.5)
    assert _untouched(ledger)
    numpy_ledger = bc.WindowLedger(bc.WEventParams(1.0, 2), sampler=NUMPY, keep_records=True)
    numpy_ledger.laplace(stream.secret(1), 0.5)
    assert len(numpy_ledger.records) == 1


@pytest.mark.parametrize("ledger_kind", ["personalized", "swellfish"])
def test_a_stacked_stream_never_bound_is_refused_by_ledgers_that_do_not_stack(ledger_kind: str) -> None:
    """A stacked GuardedStream read first by a PersonalizedLedger or SwellfishLedger: InvalidArgument, no charge."""
    stream = bc.GuardedStream.stacked([[[1.0, 2.0]], [[3.0, 4.0]]])
    if ledger_kind == "personalized":
        ledger = _ledger(runs=2)
        with pytest.raises(bc.InvalidArgument, match="stacked|not from a PersonalizedStream"):
            ledger.sample_release(stream.secret(1), 0.5)
        assert _untouched(ledger)
    else:
        swell = bc.SwellfishLedger(
            bc.PolicyCollection([bc.StreamPolicy(1, 2, [1.0])]), epsilon=1.0, runs=2, sampler=NUMPY, keep_records=True
        )
        with pytest.raises(bc.InvalidArgument, match="stacked"):
            swell.laplace(stream.secret(1), 0.5)
        assert not swell.records


def test_a_personalized_stream_read_first_by_its_companion_route_binds_once() -> None:
    """A grouped report is the first read (through the companion): the stream is bound to that ledger, and
    another PersonalizedLedger's read of any timestamp is SecretAccess."""
    stream = bc.PersonalizedStream(REQ, BINS, dimensions=D)
    owner, other = _ledger(), _ledger()
    owner.local_report_groups(stream.secret(1), np.full((1, 2, 2), 0.25), groups=2)
    with pytest.raises(bc.SecretAccess):
        other.sample_release(stream.secret(2), 0.25)
    with pytest.raises(bc.SecretAccess):
        other.local_report_groups(stream.secret(2), np.full((1, 2, 2), 0.25), groups=2)
    assert _untouched(other, 2)


def test_secrets_of_a_collected_stream_still_bind_and_report() -> None:
    """The PersonalizedStream is garbage-collected; its secrets (and their companions) are still read
    through one ledger only, and give the grouped report a live stream gives."""
    secrets = list(bc.PersonalizedStream(REQ, BINS, dimensions=D))
    gc.collect()
    ledger, twin = _ledger(), _ledger()
    twin_stream = bc.PersonalizedStream(REQ, BINS, dimensions=D)
    eps = np.full((1, 2, 2), 0.25)
    assert np.array_equal(
        ledger.local_report_groups(secrets[0], eps, groups=2),
        twin.local_report_groups(twin_stream.secret(1), eps, groups=2),
    )
    with pytest.raises(bc.SecretAccess):
        _ledger().sample_release(secrets[1], 0.25)


@pytest.mark.parametrize("kind", ["guarded", "personalized", "live"])
def test_two_ledgers_racing_for_the_first_read_leave_exactly_one_owner(kind: str) -> None:
    """Two threads, two ledgers, one never-bound stream, released together by a barrier, 150 times with a
    tiny switch interval: exactly one read succeeds, the other is SecretAccess. A live stream never bound
    is refused by both (its rows were handed out unchecked for either ledger)."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for _ in range(150):
            secret, read = _race_target(kind)
            ok, refused = [False, False], [False, False]
            barrier = threading.Barrier(2)

            def go(i: int, ledger: Any) -> None:
                barrier.wait()
                try:
                    read(ledger, secret)
                    ok[i] = True
                except bc.SecretAccess:
                    pass
                except bc.InvalidArgument:
                    refused[i] = kind == "live"

            ledgers = [_race_ledger(kind) for _ in range(2)]
            threads = [threading.Thread(target=go, args=(i, ledgers[i])) for i in range(2)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert (sum(ok), sum(refused)) == ((0, 2) if kind == "live" else (1, 0))
    finally:
        sys.setswitchinterval(previous)


def _race_ledger(kind: str) -> Any:
    if kind == "personalized":
        return _ledger()
    return bc.WindowLedger(bc.WEventParams(1.0, 2), sampler=NUMPY, keep_records=True)


def _race_target(kind: str) -> tuple[Secret, Callable[[Any, Secret], object]]:
    if kind == "personalized":
        return bc.PersonalizedStream(REQ, BINS, dimensions=D).secret(1), lambda led, s: led.sample_release(s, 0.25)
    if kind == "live":
        live = bc.LiveStream([(1, [1.0, 2.0])], dimensions=2)
        _KEEP.append(live)
        return next(iter(live)), lambda led, s: led.laplace(s, 0.5)
    return bc.GuardedStream([[1.0, 2.0]]).secret(1), lambda led, s: led.laplace(s, 0.5)


def test_bind_racing_inside_the_claim_check_leaves_one_owner(monkeypatch: pytest.MonkeyPatch) -> None:
    """A switch between ``claim``'s emptiness check and the bind (forced by a barrier in ``_bind_claim``):
    both ledgers reach StreamClaim.bind; the second sees the first and raises SecretAccess."""
    barrier = threading.Barrier(2, timeout=5)

    original = bc.WindowLedger._bind_claim

    def slow(self: bc.WindowLedger, claim: Any) -> None:
        barrier.wait()
        original(self, claim)

    monkeypatch.setattr(bc.WindowLedger, "_bind_claim", slow)

    secret = bc.GuardedStream([[1.0, 2.0]]).secret(1)
    outcomes: list[str] = []

    def go(ledger: bc.WindowLedger) -> None:
        try:
            ledger.laplace(secret, 0.5)
            outcomes.append("read")
        except bc.SecretAccess:
            outcomes.append("refused")

    ledgers = [bc.WindowLedger(bc.WEventParams(1.0, 2), sampler=NUMPY, keep_records=True) for _ in range(2)]
    threads = [threading.Thread(target=go, args=(led,)) for led in ledgers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["read", "refused"]
    assert sum(len(led.records) for led in ledgers) == 1


# -- what held: PersonalizedLedger windows -----------------------------------------------------------------

REQ3 = bc.RequirementSet.from_counts([((2, 1.0), 2), ((3, 0.7), 2), ((1, 0.3), 1)])


def _oracle_ok(records: Any, req: bc.RequirementSet, groups: int = 1) -> bool:
    """Σ of every class's (and group's) window of w_c timestamps, per run, in Fractions: <= ε_c."""
    spent: dict[tuple[int, int, int, int], Fraction] = {}
    for record in records:
        amounts = np.asarray(record.amounts)
        for (run, c), _ in np.ndenumerate(amounts[..., 0] if amounts.ndim == 3 else amounts):
            for g in range(groups):
                value = amounts[run, c, g] if amounts.ndim == 3 else amounts[run, c]
                key = (run, c, g, record.t)
                spent[key] = spent.get(key, Fraction(0)) + Fraction(float(value))
    for (run, c, g, t), _ in list(spent.items()):
        w = req.classes[c].w
        for end in range(t, t + w):
            total = sum((spent.get((run, c, g, s), Fraction(0)) for s in range(end - w + 1, end + 1)), Fraction(0))
            if total > Fraction(req.classes[c].epsilon):
                return False
    return True


def test_one_ulp_over_a_class_window_is_refused_and_exactly_the_rest_is_not() -> None:
    """Per class (w, ε): half of ε at t=1, then the next double above the other half at t=2 is refused for
    that class only (the others spend nothing); the exact other half passes; twin ledgers agree bit for bit."""
    for c, requirement in enumerate(REQ3.classes):
        ledger, twin = _ledger(req=REQ3), _ledger(req=REQ3)
        half = np.zeros(3)
        half[c] = requirement.epsilon / 2
        over = half.copy()
        over[c] = np.nextafter(requirement.epsilon - half[c], np.inf)
        for led in (ledger, twin):
            led.spend(1, half, purpose="first half")
        if requirement.w >= 2:
            with pytest.raises(bc.BudgetExceeded):
                ledger.spend(2, over, purpose="one ulp over")
        else:  # w = 1: t=2 is a fresh window
            ledger.spend(2, over, purpose="fresh window")
            twin.spend(2, over, purpose="fresh window")
        rest = np.zeros(3)
        rest[c] = requirement.epsilon - half[c]
        assert Fraction(float(rest[c])) + Fraction(float(half[c])) == Fraction(requirement.epsilon)
        if requirement.w >= 2:
            ledger.spend(2, rest, purpose="rest")
            twin.spend(2, rest, purpose="rest")
        assert ledger.window_sum(2) == twin.window_sum(2)
        assert [r.amounts.tolist() for r in ledger.records] == [r.amounts.tolist() for r in twin.records]
        assert _oracle_ok(ledger.records, REQ3)


def test_spending_exactly_the_remaining_is_never_refused() -> None:
    """200 random steps: at each t every class spends remaining(t) times a random fraction, or exactly
    remaining(t); never refused, and the Fraction oracle holds for every class window."""
    rng = np.random.default_rng(11)
    ledger = _ledger(req=REQ3, runs=2)
    for t in range(1, 201):
        left = ledger.remaining(t)
        assert (left >= 0).all()
        take = np.where(rng.random(left.shape) < 0.3, left, left * rng.random(left.shape))
        ledger.spend(t, take, purpose="rest")
    assert _oracle_ok(ledger.records, REQ3)


_REFUSED_OPS: dict[str, Callable[[bc.PersonalizedLedger, Secret], object]] = {
    "spend": lambda led, s: led.spend(s.t, [0.0, 5.0], purpose="x"),
    "sample_release": lambda led, s: led.sample_release(s, [0.1, 5.0]),
    "sample_dissimilarity": lambda led, s: led.sample_dissimilarity(s, np.zeros((1, D)), [5.0, 0.1]),
    "local_report": lambda led, s: led.local_report(s, [0.1, 5.0]),
    "local_report_groups": lambda led, s: led.local_report_groups(s, [[[0.1, 0.1], [0.1, 5.0]]], groups=2),
}


@pytest.mark.parametrize("op", list(_REFUSED_OPS))
def test_a_refusal_changes_no_window_record_or_noise(op: str) -> None:
    """A refused call between two accepted ones: windows, records and every later release equal a twin
    that never tried (same seed, numpy-laplace; the partition is fixed first so the refusal is only a charge)."""
    stream, twin_stream = (bc.PersonalizedStream(REQ, BINS, dimensions=D) for _ in range(2))
    ledger, twin = _ledger(), _ledger()
    eps = np.full((1, 2, 2), 0.125)
    out: list[NDArray[np.float64]] = []
    twin_out: list[NDArray[np.float64]] = []
    for led, st, sink in ((ledger, stream, out), (twin, twin_stream, twin_out)):
        sink.append(led.local_report_groups(st.secret(1), eps, groups=2))
    with pytest.raises(bc.BudgetExceeded):
        _REFUSED_OPS[op](ledger, stream.secret(2))
    for led, st, sink in ((ledger, stream, out), (twin, twin_stream, twin_out)):
        sink.append(led.sample_release(st.secret(2), 0.125))
        sink.append(led.local_report_groups(st.secret(3), eps, groups=2))
        sink.append(led.sample_dissimilarity(st.secret(4), np.zeros((1, D)), 0.0625))
    assert all(np.array_equal(a, b) for a, b in zip(out, twin_out, strict=True))
    assert ledger.window_sum(4) == twin.window_sum(4)
    assert [(r.t, r.amounts.tolist()) for r in ledger.records] == [(r.t, r.amounts.tolist()) for r in twin.records]
    assert ledger.refusals == 1


@pytest.mark.parametrize("groups", [2.0, True, "2", 0, -1, None, [2]])
def test_groups_of_a_wrong_type_or_zero_are_refused_before_the_charge(groups: Any) -> None:
    """groups as a float, bool, string, 0, negative, None or list: InvalidArgument, nothing charged, partition 1."""
    stream = bc.PersonalizedStream(REQ, BINS, dimensions=D)
    ledger = _ledger()
    with pytest.raises(bc.InvalidArgument):
        ledger.local_report_groups(stream.secret(1), np.full((1, 2, 2), 0.25), groups=groups)
    assert _untouched(ledger) and ledger.groups == 1


@pytest.mark.parametrize("epsilon", [np.full((1, 2, 3), 0.25), np.full((2, 2), 0.25), np.full((1, 2, 2), np.nan)])
def test_grouped_budgets_of_a_wrong_shape_are_refused(epsilon: NDArray[np.float64]) -> None:
    """A (runs, classes, k) budget whose k differs from groups, a 2-D budget, NaN: InvalidArgument."""
    stream = bc.PersonalizedStream(REQ, BINS, dimensions=D)
    ledger = _ledger()
    with pytest.raises(bc.InvalidArgument):
        ledger.local_report_groups(stream.secret(1), epsilon, groups=2)
    assert _untouched(ledger) and ledger.groups == 1


def test_a_grouped_budget_array_mutated_after_the_call_changes_nothing_charged() -> None:
    """The caller overwrites its budget buffer after each call: records and windows keep what was charged."""
    stream = bc.PersonalizedStream(REQ, BINS, dimensions=D)
    ledger = _ledger()
    buffer = np.full((1, 2, 2), 0.5)
    ledger.local_report_groups(stream.secret(1), buffer, groups=2)
    before = ledger.window_sum(1)
    buffer[:] = 0.0
    assert ledger.window_sum(1) == before
    assert ledger.records[0].amounts.tolist() == [[[0.5, 0.5], [0.5, 0.5]]]
    buffer[:] = 0.5  # class 0 (w=2, ε=1) already holds 0.5: another 0.5 is exactly ε
    ledger.local_report_groups(stream.secret(2), buffer, groups=2)
    with pytest.raises(bc.BudgetExceeded):
        ledger.local_report_groups(stream.secret(2), buffer, groups=2)
    assert _oracle_ok(ledger.records, REQ, groups=2)


@pytest.mark.parametrize("mechanism", [PBD(), PBA(), StrictestBD(), StrictestBA()], ids=lambda m: m.name)
@pytest.mark.parametrize("runs", [1, 3])
def test_builtin_personalized_mechanisms_never_exceed_any_class_window(mechanism: Any, runs: int) -> None:
    """PBD, PBA and their strictest baselines run by execute_personalized over 40 timestamps: the records'
    sums per class window (Fractions) never exceed ε_c; nothing refused."""
    req = bc.RequirementSet.from_counts([((2, 0.9), 30), ((5, 1.7), 20), ((3, 0.4), 25)])
    bins = np.random.default_rng(4).integers(-1, 4, size=(40, 75))
    out = bc.execute_personalized(mechanism, req, bins, dimensions=4, runs=runs, seed=2)
    assert out.releases.shape == (runs, 40, 4)
    assert out.ledger.refusals == 0
    assert _oracle_ok(out.ledger.records, req)


# -- what held: LiveStream ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "row",
    [[1.0], [1.0, 2.0, 3.0], [[1.0, 2.0]], [np.nan, 1.0], [np.inf, 1.0], [2.0**60, 1.0], [None, 1.0]],
    ids=["short", "long", "2-D", "NaN", "inf", "huge", "None"],
)
def test_a_bad_live_row_is_refused_when_handed_out_and_charges_nothing(row: list[Any]) -> None:
    """Wrong shape, NaN, infinity, beyond 2^53: InvalidArgument at iteration, before any charge; the rows
    before it were released."""
    live = bc.LiveStream([(1, [1.0, 2.0]), (2, row)], dimensions=2)
    ledger = bc.WindowLedger(bc.WEventParams(1.0, 2), sampler=NUMPY, keep_records=True)
    ledger.bind(live)
    it = iter(live)
    ledger.laplace(next(it), 0.25)
    with pytest.raises(bc.InvalidArgument):
        next(it)
    assert len(ledger.records) == 1


def test_a_live_stream_is_bound_to_one_ledger_and_iterated_once() -> None:
    """A second ledger's bind is SecretAccess; bind after iteration is refused; a second iteration is refused."""
    live = bc.LiveStream([(1, [1.0, 2.0])], dimensions=2)
    first, second = (bc.WindowLedger(bc.WEventParams(1.0, 2), sampler=NUMPY) for _ in range(2))
    first.bind(live)
    with pytest.raises(bc.SecretAccess):
        second.bind(live)
    secret = next(iter(live))
    with pytest.raises(bc.SecretAccess):
        second.laplace(secret, 0.5)
    with pytest.raises(bc.InvalidArgument):
        iter(live)
    late = bc.LiveStream([(1, [1.0, 2.0])], dimensions=2)
    next(iter(late))
    with pytest.raises(bc.InvalidArgument, match="before iterating"):
        first.bind(late)


def test_live_rows_mutated_by_the_caller_after_push_change_no_release() -> None:
    """The producer reuses one buffer for every row and overwrites it right after each is handed out:
    releases equal those of a stream of fresh rows (twin ledgers of one seed)."""
    data = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    buffer = np.zeros(2)

    def rows() -> Iterator[tuple[int, NDArray[np.float64]]]:
        for t, row in enumerate(data, start=1):
            buffer[:] = row
            yield t, buffer
            buffer[:] = 1e9

    live = bc.LiveStream(rows(), dimensions=2)
    fresh = bc.LiveStream(((t, row.copy()) for t, row in enumerate(data, start=1)), dimensions=2)
    out = []
    for stream in (live, fresh):
        ledger = bc.WindowLedger(bc.WEventParams(1.0, 3), sampler=NUMPY, seed=4)
        ledger.bind(stream)
        secrets = list(stream)  # every row handed out (and overwritten) before any read
        out.append(np.array([ledger.laplace(s, 0.25) for s in secrets]))
    assert np.array_equal(out[0], out[1])


@pytest.mark.parametrize("mechanism", [PBD(), PBA()], ids=lambda m: m.name)
def test_personalized_releases_over_a_live_stream_match_the_offline_run(mechanism: Any) -> None:
    """``mechanism.releases`` over a LiveStream of the class counts equals ``run`` over the PersonalizedStream
    (same seed, numpy-laplace), and its records keep every class window."""
    req = bc.RequirementSet.from_counts([((2, 0.9), 6), ((3, 1.7), 4)])
    bins = np.random.default_rng(8).integers(-1, 3, size=(12, 10))
    stream = bc.PersonalizedStream(req, bins, dimensions=3)
    offline = _ledger(req=req, seed=3)
    offline.bind(stream)
    expected = mechanism.run(stream, offline)
    counts = [
        (t, [[np.count_nonzero((bins[t - 1] == b) & (req.user_classes == c)) for b in range(3)] for c in range(2)])
        for t in range(1, 13)
    ]
    live = bc.LiveStream(counts, dimensions=3, classes=2)
    online = _ledger(req=req, seed=3)
    online.bind(live)
    got = np.array(list(mechanism.releases(live, online)))
    assert np.array_equal(got[:, 0], expected[0])
    assert _oracle_ok(online.records, req)


def test_personalized_live_row_of_fractions_is_refused_on_the_discrete_sampler() -> None:
    """A (C, d) live row that is not integral, bound first to a discrete PersonalizedLedger: InvalidArgument
    when handed out, nothing charged."""
    live = bc.LiveStream([(1, [[0.5, 1.0], [1.0, 1.0]])], dimensions=2, classes=2)
    ledger = _ledger(DISCRETE)
    ledger.bind(live)
    with pytest.raises(bc.InvalidArgument, match="integer"):
        ledger.sample_release(next(iter(live)), 0.25)
    assert _untouched(ledger)
