"""A live stream hands its row to the vault once, and holds nothing of it while the mechanism steps.

The row is copied once (the caller's array is never the payload), checked, frozen and put in the vault
as it is; the stream's iterator keeps no reference to it or to the caller's row once the secret is out.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest

import budgetcheck as bc


def test_a_live_secret_and_its_iterator_do_not_reach_the_payload() -> None:
    """The row is copied once and handed to the vault; while the mechanism holds the secret, neither the
    secret, its class, the stream nor the stream's iterator lead to it within two references."""
    payload = np.array([123457.0, 98765.0])
    stream = bc.LiveStream(iter([(1, payload.tolist())]), dimensions=2)
    iterator = iter(stream)
    secret = next(iterator)

    def holds(found: object) -> bool:
        items = found.values() if isinstance(found, dict) else found if isinstance(found, (list, tuple)) else [found]
        return any(isinstance(x, np.ndarray) and x.shape == payload.shape and np.array_equal(x, payload) for x in items)

    for start in (secret, type(secret), stream, iterator):
        seen = gc.get_referents(start)
        assert not any(holds(x) for x in seen)
        assert not any(holds(y) for x in seen for y in gc.get_referents(x))


def test_the_callers_array_is_never_the_payload() -> None:
    """Writing to the row after handing it over changes nothing a charged operation reads."""
    row = np.array([5.0, 7.0])
    ledger = bc.WindowLedger(epsilon=1e300, w=2, seed=3, sampler="numpy-laplace")
    stream = bc.LiveStream(iter([(1, row)]), dimensions=2)
    ledger.bind(stream)
    secret = next(iter(stream))
    row[:] = 1e6
    distance = ledger.dissimilarity(secret, np.array([[5.0, 7.0]]), 1e300)
    assert abs(float(distance[0])) < 1.0


def test_a_bad_row_is_refused_at_its_timestamp_by_name() -> None:
    for values in ([1.0, np.nan], [1.0, 2.0**54], [1.0, 2.0, 3.0]):
        stream = bc.LiveStream(iter([(1, values)]), dimensions=2)
        with pytest.raises(bc.InvalidArgument, match="row t=1"):
            next(iter(stream))


def test_a_stream_iterated_before_its_ledger_is_bound_is_refused_before_any_charge() -> None:
    """A row handed out before ``bind`` was not checked for the ledger's sampler (the discrete
    sampler needs integer counts): binding then is refused, and nothing is spent."""
    stream = bc.LiveStream(iter([(1, [0.5, 1.5]), (2, [1.0, 2.0])]), dimensions=2)
    early = next(iter(stream))
    ledger = bc.WindowLedger(epsilon=1.0, w=2, seed=0, keep_records=True)  # discrete sampler: integer counts
    with pytest.raises(bc.InvalidArgument, match="bind the ledger before iterating"):
        ledger.bind(stream)
    assert early.t == 1 and float(ledger.remaining(1)[0]) == 1.0 and ledger.records == ()


def test_binding_first_checks_every_row_for_the_sampler() -> None:
    stream = bc.LiveStream(iter([(1, [0.5, 1.5])]), dimensions=2)
    bc.WindowLedger(epsilon=1.0, w=2, seed=0).bind(stream)
    with pytest.raises(bc.InvalidArgument, match="row t=1 must hold integer counts"):
        next(iter(stream))
