"""Conformance of the grid session (``budgetcheck.ledger.grid``, issue 45 item 1): the benchmark's path and
the ledger's own path, run on the same seeds, charge the same records and release the same doubles.

Each mechanism the session runs is executed twice on the same stream, budgets and seed: once through the
ledger's operations (what ``verify`` and every user's ``execute`` run) and once inside
:func:`grid_sessions` (what ``budgetcheck bench`` runs). Every record is compared field by field (amounts
and noise scales bit for bit), the releases bit for bit, and the ledger's state after the pass (what
``remaining`` gives) exactly.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from budgetcheck import GuardedStream, WindowLedger, execute, load_mechanism
from budgetcheck.ledger import grid
from budgetcheck.ledger.grid import grid_sessions
from budgetcheck.ledger.records import SpendRecord

pytestmark = pytest.mark.bitwise

SESSION_MECHANISMS = ("BD", "BA", "FASTw", "DSATw", "RescueDP")


def _bits(values: np.ndarray) -> bytes:
    return np.ascontiguousarray(values, dtype=np.float64).tobytes()


def _same_record(a: SpendRecord, b: SpendRecord) -> bool:
    scales_a, scales_b = a.noise_scale, b.noise_scale
    return (
        (a.t, a.purpose, a.sensitivity, a.sampler, a.vouched) == (b.t, b.purpose, b.sensitivity, b.sampler, b.vouched)
        and _bits(a.amounts) == _bits(b.amounts)
        and (scales_a is None) == (scales_b is None)
        and (scales_a is None or scales_b is None or _bits(scales_a) == _bits(scales_b))
    )


def _execute(
    mechanism: str, data: np.ndarray | GuardedStream, epsilons: np.ndarray, w: int, seed: int, session: bool
) -> Any:
    if not session:
        return execute(load_mechanism(mechanism), data, epsilon=epsilons, w=w, runs=epsilons.size, seed=seed)
    with grid_sessions():
        return execute(load_mechanism(mechanism), data, epsilon=epsilons, w=w, runs=epsilons.size, seed=seed)


def _streams(seed: int, dimensions: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 40, size=(120, dimensions)).astype(np.float64) for _ in range(2)]


@pytest.mark.parametrize("mechanism", SESSION_MECHANISMS)
@pytest.mark.parametrize(
    ("seed", "dimensions", "w"), [(0, 1, 10), (1, 3, 7), (2, 20, 30), (3, 128, 5), (4, 129, 5), (5, 1, 30)]
)
def test_session_charges_and_releases_what_the_ledger_does(mechanism: str, seed: int, dimensions: int, w: int) -> None:
    streams = _streams(seed, dimensions)
    epsilons = np.tile(np.repeat([0.1, 1.0, 3.0], 4), len(streams))  # several ε per ledger, as the grid stacks them
    opened = []
    original = grid.GridSession.open

    def counted(*args: object) -> object:
        session = original(*args)  # type: ignore[arg-type]
        opened.append(session)
        return session

    grid.GridSession.open = counted  # type: ignore[assignment, method-assign]
    try:
        plain = _execute(mechanism, GuardedStream.stacked(streams), epsilons, w, seed, session=False)
        fast = _execute(mechanism, GuardedStream.stacked(streams), epsilons, w, seed, session=True)
    finally:
        grid.GridSession.open = original  # type: ignore[method-assign]
    # rows of more than 128 values take the ledger's path; so does RescueDP's grouping (d > 1: laplace_groups)
    expected = dimensions <= grid._MOST_VALUES and not (mechanism == "RescueDP" and dimensions > 1)
    assert (bool(opened) and opened[0] is not None) == expected, "the session path was (not) taken"
    assert _bits(plain.releases) == _bits(fast.releases)
    expected, got = plain.ledger.records, fast.ledger.records
    assert len(expected) == len(got) > 0
    assert all(_same_record(a, b) for a, b in zip(expected, got, strict=True))
    if opened and opened[0] is not None:  # every operation of the pass went through the session, none to the ledger
        assert opened[0].operations == len(got)
    assert plain.ledger.t == fast.ledger.t
    for t in (plain.ledger.t, plain.ledger.t + 1, plain.ledger.t + w):
        assert _bits(plain.ledger.remaining(t)) == _bits(fast.ledger.remaining(t))


@pytest.mark.parametrize("mechanism", ["BD", "DSATw"])
def test_the_paper_grids_stacked_batch_takes_the_session(mechanism: str) -> None:
    """The paper grid's vary-ε batch stacks 20 streams x 100 runs x 6 ε = 12,000 runs in one pass: it runs
    through the session (it did not while sessions stopped at 6,000 runs), with the ledger's records and
    releases bit for bit (short streams here)."""
    rng = np.random.default_rng(12)
    streams = [rng.integers(0, 40, size=(25, 1)).astype(np.float64) for _ in range(20)]
    epsilons = np.tile(np.repeat([0.1, 0.3, 0.5, 0.7, 0.9, 1.0], 100), len(streams))
    assert epsilons.size == 12_000
    opened = []
    original = grid.GridSession.open

    def counted(*args: object) -> object:
        session = original(*args)  # type: ignore[arg-type]
        opened.append(session)
        return session

    grid.GridSession.open = counted  # type: ignore[assignment, method-assign]
    try:
        plain = _execute(mechanism, GuardedStream.stacked(streams), epsilons, 10, 3, session=False)
        fast = _execute(mechanism, GuardedStream.stacked(streams), epsilons, 10, 3, session=True)
    finally:
        grid.GridSession.open = original  # type: ignore[method-assign]
    assert opened and opened[0] is not None, "the 12,000-run pass did not take the session"
    assert _bits(plain.releases) == _bits(fast.releases)
    expected, got = plain.ledger.records, fast.ledger.records
    assert len(expected) == len(got) == opened[0].operations > 0
    assert all(_same_record(a, b) for a, b in zip(expected, got, strict=True))


@pytest.mark.parametrize("mechanism", SESSION_MECHANISMS)
def test_a_ledger_used_after_the_pass_continues_from_the_same_state(mechanism: str) -> None:
    """After a session's pass the ledger takes further spends exactly as after the ledger's own pass."""
    data = _streams(7, 2)[0]
    epsilons = np.repeat([0.5, 2.0], 5)
    plain = _execute(mechanism, data, epsilons, 6, 4, session=False)
    fast = _execute(mechanism, data, epsilons, 6, 4, session=True)
    for execution in (plain, fast):
        ledger: WindowLedger = execution.ledger
        ledger.spend(ledger.t + 1, np.asarray(ledger.remaining(ledger.t + 1)), purpose="top-up")
    assert all(_same_record(a, b) for a, b in zip(plain.ledger.records, fast.ledger.records, strict=True))


def test_the_runner_takes_the_session_for_bd() -> None:
    """``batch_releases`` (the benchmark runner) opens sessions; the releases stay those pinned in
    test_grid_releases.py, which runs the same function."""
    from budgetcheck.bench import Benchmark
    from budgetcheck.bench.runner import batch_releases

    bench = Benchmark.paper(real=(), runs=2).select(streams=("s40-a10",), epsilons=(1.0,), ws=(40,), mechanisms=("BD",))
    opened = []
    original = grid.GridSession.open

    def counted(*args: object) -> object:
        session = original(*args)  # type: ignore[arg-type]
        opened.append(session)
        return session

    grid.GridSession.open = counted  # type: ignore[assignment, method-assign]
    try:
        (batch,) = dict.fromkeys(bench.batch(cell) for cell in bench.cells())
        batch_releases(bench, batch)
    finally:
        grid.GridSession.open = original  # type: ignore[method-assign]
    assert opened and opened[0] is not None


@pytest.mark.parametrize("count", [1, 2, 3, 7, 8, 9, 16, 17, 63, 127, 128])
def test_the_compiled_row_sum_is_numpys(count: int) -> None:
    """The dissimilarity's sum of |last − values| over a row: numpy's add.reduce order, bit for bit."""
    rng = np.random.default_rng(count)
    rows = np.abs(rng.standard_normal((50, count))) * np.exp2(rng.integers(-30, 30, size=(50, count)))
    expected = np.add.reduce(rows, axis=1)
    got = np.array([grid._add_reduce(np.ascontiguousarray(row)) for row in rows])
    assert _bits(expected) == _bits(got)


def test_bd_runs_its_rule_compiled_from_its_own_code() -> None:
    """On the session's path BD's rule is ``BDRule.charges``/``advance`` compiled (kernel_ops), not FLOAT:
    the conformance above then compares the compiled rule with the proved one run on FLOAT."""
    import mechanisms._compiled as compiled_step
    from mechanisms.rules import BDRule

    taken = []
    original = compiled_step._releases

    def counted(*args: Any) -> Any:
        taken.append(type(args[0]))
        return original(*args)

    compiled_step._releases = counted  # type: ignore[assignment]
    try:
        _execute("BD", _streams(11, 2)[0], np.repeat([0.2, 1.0], 3), 5, 0, session=True)
        _execute("BA", _streams(11, 2)[0], np.repeat([0.2, 1.0], 3), 5, 0, session=True)
    finally:
        compiled_step._releases = original
    assert taken == [BDRule]
    charges = compiled_step._kernels(BDRule)
    assert charges is compiled_step._kernels(BDRule)  # compiled once per process
    assert BDRule.charges.__code__.co_filename.endswith("rules.py")
