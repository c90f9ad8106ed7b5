"""One run's release of a few values runs on Python floats: the same draws and doubles as the array path.

A one-run ledger's ``laplace`` and ``dissimilarity`` on a payload of at most ``_FEW`` values compute
on Python floats (the live publisher's case). An adversary drives it and a twin forced onto the
array path (``_FEW = 0``) with the same seed through the same operations — payloads of 1 to 9
values anywhere in [−2^53, 2^53], last releases up to ±2^900, amounts of
zero, subnormal and huge budgets — and every release must agree bit for bit (NaN where unpaid),
as must the generator's state afterwards. A bad last release is refused by name before any charge.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import budgetcheck as bc
from budgetcheck.ledger import core

VALUES = st.floats(min_value=-(2.0**53), max_value=2.0**53, allow_nan=False)
LAST = st.floats(min_value=-(2.0**900), max_value=2.0**900, allow_nan=False)  # sums stay finite
AMOUNTS = st.sampled_from([0.0, 5e-324, 1e-300, 1e-3, 0.25, 1.0, 1e300])


def _ledger(d: int, rows: list[list[float]]) -> tuple[bc.WindowLedger, bc.LiveStream]:
    ledger = bc.WindowLedger(epsilon=1e308, w=4, seed=9, sampler="numpy-laplace")
    stream = bc.LiveStream(((t + 1, np.array(row)) for t, row in enumerate(rows)), dimensions=d)
    ledger.bind(stream)
    return ledger, stream


def _bits(values: np.ndarray) -> bytes:
    return np.asarray(values, dtype=np.float64).tobytes()


@settings(max_examples=150, deadline=None)
@given(st.data(), st.integers(1, 9))
def test_few_values_release_what_the_array_path_releases(data: st.DataObject, d: int) -> None:
    steps = data.draw(st.integers(1, 6))
    rows = [data.draw(st.lists(VALUES, min_size=d, max_size=d)) for _ in range(steps)]
    plan = [
        (
            data.draw(st.sampled_from(["laplace", "dissimilarity"])),
            data.draw(AMOUNTS),
            data.draw(st.lists(LAST, min_size=d, max_size=d)),
        )
        for _ in range(steps)
    ]
    releases: list[list[bytes]] = []
    states = []
    for few in (core._FEW, 0):
        saved, core._FEW = core._FEW, few
        try:
            ledger, stream = _ledger(d, rows)
            out = []
            for secret, (op, amount, last) in zip(stream, plan, strict=True):
                if op == "laplace":
                    got = ledger.laplace(secret, amount)
                    assert got.shape == (1, d) and got.dtype == np.float64
                else:
                    got = ledger.dissimilarity(secret, np.array([last]), amount)
                    assert got.shape == (1,) and got.dtype == np.float64
                out.append(_bits(got))
            releases.append(out)
            states.append(ledger._rng.bit_generator.state)
        finally:
            core._FEW = saved
    assert releases[0] == releases[1]
    assert states[0] == states[1]


@pytest.mark.parametrize("bad", [np.array([[np.nan, 1.0]]), np.array([[np.inf, 1.0]]), np.zeros((1, 3)), np.zeros(2)])
def test_a_bad_last_release_is_refused_by_name_before_any_charge(bad: np.ndarray) -> None:
    ledger, stream = _ledger(2, [[1.0, 2.0]])
    secret = next(iter(stream))
    before = ledger.remaining(1)
    with pytest.raises(bc.InvalidArgument, match="last_release"):
        ledger.dissimilarity(secret, bad, 0.5)
    assert ledger.remaining(1) == before


def test_a_last_release_as_a_list_takes_the_array_path_with_the_same_result() -> None:
    outs = []
    for last in ([[3.0, 4.0]], np.array([[3.0, 4.0]])):
        ledger, stream = _ledger(2, [[1.0, 2.0]])
        outs.append(_bits(ledger.dissimilarity(next(iter(stream)), last, 0.5)))
    assert outs[0] == outs[1]
