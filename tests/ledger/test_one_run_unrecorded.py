"""A one-run ledger that keeps no records charges without building one: the same guarantee.

An in-memory :class:`WindowLedger` of one run with ``keep_records=False`` (a live publisher's
default) checks and commits a charge without a ``SpendRecord``. An adversary drives it and a twin
that keeps its records with the same seed through the same operations — spends of exactly
``remaining()``, one ulp more, zero, huge amounts, charges through ``laplace`` and
``dissimilarity`` — and every outcome must agree: accepted or refused, the released values bit for
bit, ``remaining()``, the refusal count and the worst refused ratio. A refusal changes nothing.
"""

from __future__ import annotations

import gc
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import budgetcheck as bc
from budgetcheck.ledger.validation import check_amounts
from budgetcheck.stream import secret as secret_module

OPS = st.lists(
    st.tuples(
        st.sampled_from(["spend", "laplace", "dissimilarity"]),
        st.sampled_from(["remaining", "ulp_over", "half", "zero", "huge", "tiny", "share"]),
        st.integers(0, 2),  # how far t moves on
    ),
    min_size=1,
    max_size=40,
)


def _amount(kind: str, left: float, w: int) -> float:
    return {
        "remaining": left,
        "ulp_over": math.nextafter(left, math.inf),
        "half": left / 2,
        "zero": 0.0,
        "huge": 1e300,
        "tiny": 5e-324,
        "share": bc.rounding.share(1.0, w),
    }[kind]


def _value(remaining: object) -> float:
    return float(np.asarray(remaining, dtype=np.float64).reshape(-1)[0])


def _ledgers(epsilon: float, w: int) -> list[tuple[bc.WindowLedger, bc.LiveStream]]:
    pairs = []
    for keep in (False, True):
        ledger = bc.WindowLedger(epsilon=epsilon, w=w, seed=3, sampler="numpy-laplace", keep_records=keep)
        rows = ((t, np.array([t % 7, 3.0])) for t in range(1, 10_000))
        stream = bc.LiveStream(rows, dimensions=2)
        ledger.bind(stream)
        pairs.append((ledger, stream))
    return pairs


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([0.1, 1.0, 3.0]), st.integers(1, 6), OPS)
def test_unrecorded_charges_decide_exactly_as_recorded_ones(
    epsilon: float, w: int, ops: list[tuple[str, str, int]]
) -> None:
    (lean, lean_stream), (kept, kept_stream) = _ledgers(epsilon, w)
    secrets = [iter(lean_stream), iter(kept_stream)]
    current = [next(secrets[0]), next(secrets[1])]
    accepted = refused = 0
    for op, kind, step in ops:
        for _ in range(step):
            current = [next(secrets[0]), next(secrets[1])]
        t = current[0].t
        left = _value(lean.remaining(t))
        assert left == _value(kept.remaining(t))
        amount = _amount(kind, left, w)
        outcomes = []
        for ledger, secret in ((lean, current[0]), (kept, current[1])):
            try:
                if op == "spend":
                    out = None
                    ledger.spend(t, amount, purpose="reservation")
                elif op == "laplace":
                    out = ledger.laplace(secret, amount)
                else:
                    out = ledger.dissimilarity(secret, np.zeros((1, 2)), amount)
                outcomes.append(("ok", None if out is None else out.tobytes()))
            except bc.BudgetExceeded as exc:
                outcomes.append(("refused", str(exc)))
        assert outcomes[0] == outcomes[1], (op, kind, amount)
        if kind == "remaining":
            assert outcomes[0][0] == "ok"  # spending remaining() is never refused
        if kind in ("ulp_over", "huge") and math.nextafter(left, math.inf) <= amount:
            assert outcomes[0][0] == "refused" or amount == 0.0  # one ulp over what is left is refused
        accepted += outcomes[0][0] == "ok"
        refused += outcomes[0][0] == "refused"
        if outcomes[0][0] == "refused":
            assert _value(lean.remaining(t)) == left  # a refusal changes nothing
        assert _value(lean.remaining(t)) == _value(kept.remaining(t))
        assert lean.t == kept.t
        assert lean.refusals == kept.refusals == refused
        assert lean.worst_refused_ratio == kept.worst_refused_ratio
    assert accepted + refused == len(ops)
    assert len(kept.records) == accepted


def test_the_lean_ledger_keeps_no_records_and_says_so() -> None:
    (lean, stream), _ = _ledgers(1.0, 4)
    secret = next(iter(stream))
    lean.laplace(secret, 0.25)
    with pytest.raises(bc.InvalidArgument, match="keep_records=True"):
        _ = lean.records
    assert _value(lean.remaining(1)) == 0.75


def test_a_shared_one_run_amount_cannot_be_changed() -> None:
    first, second = check_amounts(0.125, 1), check_amounts(0.125, 1)
    assert first is second and first.tolist() == [0.125]
    with pytest.raises(ValueError):
        first[0] = 1.0
    with pytest.raises(ValueError):
        first.setflags(write=True)
    assert check_amounts(0.0, 1) is not check_amounts(0.0, 1)  # zero (either sign) is never shared
    assert math.copysign(1.0, float(check_amounts(-0.0, 1)[0])) < 0


def test_a_dropped_secret_leaves_the_vault() -> None:
    """Secrets of a long live stream do not pile up in the vault (the finalizer forgets them)."""
    store = secret_module._PORT.gi_frame.f_locals["store"]
    gc.collect()
    secret_module.Secret(1, np.zeros(2))  # its payload leaves at the next vault operation
    before = len(store)
    stream = bc.LiveStream(((t, np.array([1.0, 2.0])) for t in range(1, 2001)), dimensions=2)
    ledger = bc.WindowLedger(epsilon=1.0, w=5, seed=1, sampler="numpy-laplace")
    ledger.bind(stream)
    for secret in stream:
        ledger.laplace(secret, bc.rounding.share(1.0, 5))
    secret_module.Secret(1, np.zeros(2))
    assert len(store) <= before + 2
