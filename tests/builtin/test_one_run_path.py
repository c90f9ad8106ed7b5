"""One run, stepped on plain numbers, spends and releases exactly what the vectorised path does.

``dissimilarity_framework`` runs a one-run ledger under one ε (a live publisher) on plain Python
numbers; the vectorised loop over runs is the reference. Both are run here on the same seeded
ledger and stream, and every release and every record (timestamp, purpose, amounts, noise scale,
sensitivity) must agree bit for bit, on streams whose jumps flip the publish decisions, at budgets
from tiny to large, with and without filtering, on the w-event and the Swellfish ledger. The fixed
schedules (Uniform, Sample, Hybrid) stepped one timestamp at a time must equal their batch run
(one ``laplace_series``), and a live stream the guarded one.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import budgetcheck as bc
from mechanisms import BUILTIN, _common

DISSIMILARITY = ("BD", "BA", "BDShifted", "BAShifted")
SWELLFISH = ("TSBD", "TSBA")
SCHEDULES = ("Uniform", "Sample", "Hybrid")
POLICIES = bc.PolicyCollection([bc.StreamPolicy(3, 10, [1.0]), bc.StreamPolicy(12, 30, [2.0, 1.0])])


def _counts(seed: int, length: int = 60, d: int = 3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    counts = rng.poisson(30, size=(length, d)).astype(float)
    counts[15:19] += 400  # jumps: publish decisions flip on and off
    counts[40:] *= 0.0
    return counts


def _vectorised(
    rule: Any, env: Any, stream: Any, ledger: Any, filtering: bool
) -> Iterator[np.ndarray]:  # the reference: the loop over runs, on a ledger of one run
    return _common._dissimilarity_runs(rule, env, stream, ledger, filtering)


def _signature(run: Any) -> tuple[bytes, list[tuple[Any, ...]]]:
    records = [
        (
            r.t,
            r.purpose,
            r.amounts.tobytes(),
            None if r.noise_scale is None else r.noise_scale.tobytes(),
            r.sensitivity,
        )
        for r in run.ledger.records
    ]
    return np.ascontiguousarray(run.releases).tobytes(), records


def _execute(name: str, counts: np.ndarray, epsilon: float, w: int, filtering: bool) -> Any:
    if name in SWELLFISH:  # no filtering option; w is the policies' largest interval
        return bc.execute_swellfish(BUILTIN[name](), POLICIES, counts, epsilon=epsilon, runs=1, seed=5)
    return bc.execute(BUILTIN[name](filtering=filtering), counts, epsilon=epsilon, w=w, runs=1, seed=5)


CASES = [(name, False) for name in SWELLFISH] + [
    (name, filtering) for name in DISSIMILARITY for filtering in (False, True)
]


@pytest.mark.parametrize(("name", "filtering"), CASES)
@pytest.mark.parametrize(("epsilon", "w"), [(1.0, 1), (0.5, 4), (2.0, 12), (1e-3, 5), (1e-200, 3), (300.0, 7)])
def test_one_run_on_plain_numbers_is_the_vectorised_run_bit_for_bit(
    name: str, epsilon: float, w: int, filtering: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    counts = _counts(int(epsilon * 1000) % 97 + w)
    plain = _execute(name, counts, epsilon, w, filtering)
    with monkeypatch.context() as patch:
        patch.setattr(_common, "_one_run_dissimilarity", _vectorised)
        reference = _execute(name, counts, epsilon, w, filtering)
    got, expected = _signature(plain), _signature(reference)
    assert len(expected[1]) >= len(counts)  # a dissimilarity at every timestamp at least: the comparison has content
    assert got[1] == expected[1]
    assert got[0] == expected[0]


def test_the_one_run_path_is_the_one_taken_and_publishes_on_jumps(monkeypatch: pytest.MonkeyPatch) -> None:
    """Guard the test above: one run under one ε takes the plain path (and it publishes more than once)."""
    taken = []
    original = _common._one_run_dissimilarity

    def spy(*args: Any) -> Iterator[np.ndarray]:
        taken.append(args[3].runs)
        return original(*args)

    monkeypatch.setattr(_common, "_one_run_dissimilarity", spy)
    run = bc.execute(BUILTIN["BD"](), _counts(1), epsilon=1.0, w=4, runs=1, seed=5)
    assert taken == [1]
    assert sum(r.purpose == "publication" for r in run.ledger.records) >= 2
    bc.execute(BUILTIN["BD"](), _counts(1), epsilon=1.0, w=4, runs=2, seed=5)
    assert taken == [1]


@pytest.mark.parametrize("name", SCHEDULES + ("BD", "BA"))
def test_stepping_one_run_live_is_the_batch_run(name: str) -> None:
    """A publisher stepping a LiveStream releases what the batch run of the same seed releases."""
    counts = _counts(3, length=80, d=2)
    batch = bc.execute(BUILTIN[name](), counts, epsilon=0.7, w=9, runs=1, seed=8)
    ledger = bc.WindowLedger(epsilon=0.7, w=9, seed=8, sampler="numpy-laplace", keep_records=True)
    stream = bc.LiveStream(((t + 1, row) for t, row in enumerate(counts)), dimensions=2)
    ledger.bind(stream)
    live = np.stack([np.array(values) for values in BUILTIN[name]().releases(stream, ledger)], axis=1)
    assert live.shape == batch.releases.shape
    assert live.tobytes() == np.ascontiguousarray(batch.releases).tobytes()
    assert [(r.t, r.purpose, r.amounts.tobytes()) for r in ledger.records] == [
        (r.t, r.purpose, r.amounts.tobytes()) for r in batch.ledger.records
    ]
