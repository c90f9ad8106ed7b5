"""A live publisher's recurring charge: its constants are validated once, everything else at every step.

A one-run w-event ledger (no hook, no kept records) keeps, for ``laplace`` and ``dissimilarity`` on a
few values, the noise scale and sensitivity of an amount it has validated, keyed by the operation, the
purpose, the amount, the relation's fields and the secret's shape. An adversary warms that memo and then
tries what it must not let through: a refused spend, bad arguments, a secret of another ledger's stream,
a secret reused at a later timestamp, a second stream of another relation, a relation whose fields were
changed. Each is refused by name, or released exactly as the full operation releases it, bit for bit
(the full operation: the same ledger class with the steady path switched off).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import budgetcheck as bc
from budgetcheck import rounding
from budgetcheck.ledger.noise import DiscreteLaplace, NumpyLaplace
from budgetcheck.stream.neighbours import Neighbours

EPS = 1.0
W = 4


def _live(rows: np.ndarray, neighbours: Neighbours | None = None) -> bc.LiveStream:
    extra = {} if neighbours is None else {"neighbours": neighbours}
    return bc.LiveStream(((t + 1, row) for t, row in enumerate(rows)), dimensions=rows.shape[1], **extra)


def _ledger() -> bc.WindowLedger:
    return bc.WindowLedger(epsilon=EPS, w=W, seed=5, sampler="numpy-laplace")


@pytest.fixture
def full_path(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(bc.WindowLedger, "_steady_notion", False)
    yield


def _left(ledger: bc.WindowLedger, t: int) -> float:
    return float(np.asarray(ledger.remaining(t)).reshape(-1)[0])


def _steps(ledger: bc.WindowLedger, stream: bc.LiveStream) -> list[bytes]:
    """A BD-like step: a dissimilarity at a fixed share, a publication at a varying one."""
    out: list[bytes] = []
    last = np.zeros((1, stream.dimensions))
    for i, secret in enumerate(stream):
        dis = ledger.dissimilarity(secret, last, EPS / (2 * W))
        out.append(dis.tobytes())
        amount = EPS / (4 * W) if i % 3 else EPS / (8 * W)
        last = ledger.laplace(secret, amount, purpose="publication")
        out.append(last.tobytes())
    out.append(np.float64(_left(ledger, ledger.t)).tobytes())
    out.append(ledger._rng.bit_generator.state["state"]["state"].to_bytes(16, "little"))  # type: ignore[attr-defined]
    return out


RELATIONS = [None, Neighbours.one_bin(3), Neighbours("replace-one", 1), Neighbours.across_bins(2)]


@pytest.mark.parametrize("relation", RELATIONS, ids=repr)
def test_the_steady_path_releases_what_the_full_operation_releases(relation: Neighbours | None) -> None:
    rows = np.random.default_rng(1).integers(0, 50, size=(40, 3)).astype(np.float64)
    ledger = _ledger()
    stream = _live(rows, relation)
    ledger.bind(stream)
    steady = _steps(ledger, stream)
    assert ledger._steady  # the path was taken
    saved = bc.WindowLedger._steady_notion
    bc.WindowLedger._steady_notion = False  # type: ignore[misc]
    try:
        ledger = _ledger()
        stream = _live(rows, relation)
        ledger.bind(stream)
        assert _steps(ledger, stream) == steady
        assert not ledger._steady
    finally:
        bc.WindowLedger._steady_notion = saved  # type: ignore[misc]


def test_a_refusal_on_a_warm_memo_raises_and_changes_nothing() -> None:
    ledger = _ledger()
    stream = _live(np.ones((3, 2)))
    ledger.bind(stream)
    secrets = iter(stream)
    first = next(secrets)
    ledger.laplace(first, 0.5)
    ledger.laplace(first, 0.25)
    state = ledger._rng.bit_generator.state
    remaining = _left(ledger, 1)
    with pytest.raises(bc.BudgetExceeded):
        ledger.laplace(first, 0.5)  # warm: validated at t = 1, refused now
    with pytest.raises(bc.BudgetExceeded):
        ledger.dissimilarity(first, np.zeros((1, 2)), 0.5)
    assert ledger.refusals == 2 and _left(ledger, 1) == remaining
    assert ledger._rng.bit_generator.state == state
    ledger.laplace(first, remaining)  # spending remaining() is never refused
    assert _left(ledger, 1) == 0.0


@pytest.mark.parametrize(
    ("epsilon", "purpose", "last", "match"),
    [
        (-0.1, "publication", None, "epsilon"),
        (math.nan, "publication", None, "epsilon"),
        (math.inf, "publication", None, "epsilon"),
        (0.1, "", None, "purpose"),
        (0.1, "   ", None, "purpose"),
        (0.1, "dissimilarity", np.array([[math.nan, 0.0]]), "last_release"),
        (0.1, "dissimilarity", np.zeros((1, 3)), "last_release"),
        (0.1, "dissimilarity", np.zeros(2), "last_release"),
    ],
)
def test_bad_arguments_on_a_warm_memo_are_refused_by_name(
    epsilon: float, purpose: str, last: np.ndarray | None, match: str
) -> None:
    ledger = _ledger()
    stream = _live(np.ones((3, 2)))
    ledger.bind(stream)
    secret = next(iter(stream))
    ledger.laplace(secret, 0.1, purpose="publication")
    ledger.dissimilarity(secret, np.zeros((1, 2)), 0.1)
    remaining = _left(ledger, 1)
    with pytest.raises(bc.InvalidArgument, match=match):
        if last is None:
            ledger.laplace(secret, epsilon, purpose=purpose)
        else:
            ledger.dissimilarity(secret, last, epsilon)
    assert _left(ledger, 1) == remaining


def test_a_secret_of_another_ledgers_stream_is_refused_on_a_warm_memo() -> None:
    ours, theirs = _ledger(), _ledger()
    mine, other = _live(np.ones((2, 2))), _live(np.ones((2, 2)))
    ours.bind(mine)
    theirs.bind(other)
    ours.laplace(next(iter(mine)), 0.1)
    foreign = next(iter(other))
    before = _left(ours, 1)
    with pytest.raises(bc.SecretAccess):
        ours.laplace(foreign, 0.1)
    with pytest.raises(bc.SecretAccess):
        ours.dissimilarity(foreign, np.zeros((1, 2)), 0.1)
    assert _left(ours, 1) == before


def test_a_secret_is_not_reused_at_a_later_timestamp() -> None:
    ledger = _ledger()
    stream = _live(np.ones((3, 2)))
    ledger.bind(stream)
    secrets = iter(stream)
    first = next(secrets)
    ledger.laplace(first, 0.1)
    ledger.laplace(next(secrets), 0.1)
    with pytest.raises(bc.TimestampOrder):
        ledger.laplace(first, 0.1)
    with pytest.raises(bc.TimestampOrder):
        ledger.dissimilarity(first, np.zeros((1, 2)), 0.1)


def test_another_relation_or_changed_fields_get_their_own_sensitivity() -> None:
    """Two streams of one ledger under different relations, then an attempt to change a relation in place
    (refused since issue 43, item 3: the data model is fixed): each release has the noise its relation's
    sensitivity needs (the same as the full operation's)."""
    rows = np.full((2, 2), 10.0)

    def releases() -> list[bytes]:
        ledger = _ledger()
        relation = Neighbours.one_bin(1)
        one, three = _live(rows, relation), _live(rows, Neighbours.one_bin(3))
        ledger.bind(one)
        ledger.bind(three)
        a, b = next(iter(one)), next(iter(three))
        out = [ledger.laplace(a, 0.05).tobytes(), ledger.laplace(b, 0.05).tobytes()]
        out.append(ledger.dissimilarity(b, np.zeros((1, 2)), 0.05).tobytes())
        with pytest.raises(bc.Fixed):
            object.__setattr__(relation, "bound", 5)  # refused: the relation keeps its bound of 1
        out.append(ledger.laplace(a, 0.05).tobytes())
        out.append(ledger.dissimilarity(a, np.zeros((1, 2)), 0.05).tobytes())
        return out

    steady = releases()
    saved = bc.WindowLedger._steady_notion
    bc.WindowLedger._steady_notion = False  # type: ignore[misc]
    try:
        assert releases() == steady
    finally:
        bc.WindowLedger._steady_notion = saved  # type: ignore[misc]


def test_the_memo_holds_no_data_and_binding_clears_it() -> None:
    payload = np.array([[123457.0, 98765.0]])
    ledger = _ledger()
    stream = _live(payload)
    ledger.bind(stream)
    secret = next(iter(stream))
    ledger.laplace(secret, 0.1)
    ledger.dissimilarity(secret, np.zeros((1, 2)), 0.1)
    for key, constants in ledger._steady.items():
        assert all(isinstance(part, (str, float, int, tuple)) for part in (*key, *constants))
        assert 123457.0 not in constants and 98765.0 not in constants
    ledger.bind(_live(np.ones((1, 2))))
    assert not ledger._steady


def test_a_hooked_or_recording_ledger_takes_the_full_operation() -> None:
    ledger = bc.WindowLedger(epsilon=EPS, w=W, seed=5, sampler="numpy-laplace", keep_records=True)
    stream = _live(np.ones((2, 2)))
    ledger.bind(stream)
    secret = next(iter(stream))
    ledger.laplace(secret, 0.1)
    ledger.dissimilarity(secret, np.zeros((1, 2)), 0.1)
    assert not ledger._steady and len(ledger.records) == 2


@settings(max_examples=300, deadline=None)
@given(
    st.floats(min_value=5e-324, max_value=1e308, allow_nan=False),
    st.floats(min_value=5e-324, allow_nan=False, allow_infinity=True),
    st.booleans(),
)
def test_one_budgets_scale_is_the_arrays_bit_for_bit(sensitivity: float, budget: float, integral: bool) -> None:
    """The steady path's scale of one amount (a double) is the array path's, for both noise sources."""
    for source in (NumpyLaplace(np.random.default_rng(0)), DiscreteLaplace()):
        value = source.scale_value(sensitivity, budget, integral=integral)
        if isinstance(source, DiscreteLaplace) and not math.isfinite(
            rounding.scale_up(source._covered(sensitivity, integral), np.array([budget]))[0]
        ):  # a scale past the largest double: the discrete sampler refuses it on both paths
            assert value is None
            with pytest.raises(bc.InvalidArgument, match="too small for the discrete-laplace sampler"):
                source.scale(sensitivity, np.array([budget]), integral=integral)
            continue
        expected = source.scale(sensitivity, np.array([budget]), integral=integral)[0]
        assert value is not None and np.float64(value).tobytes() == np.float64(expected).tobytes()
    for source in (NumpyLaplace(np.random.default_rng(0)), DiscreteLaplace()):  # outside the case: the array path
        assert source.scale_value(sensitivity, 0.0, integral=integral) is None
        assert source.scale_value(sensitivity, -budget, integral=integral) is None
    assert NumpyLaplace(np.random.default_rng(0)).scale_value(math.nan, budget, integral=integral) is None
