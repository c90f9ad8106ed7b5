"""The contract of a measured function's call (issue 43): a declared default and deadline, checked before
the charge; an overrun gives the default on time; a machine without the sandbox refuses the call."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

import budgetcheck as bc


def _ledger() -> tuple[bc.WindowLedger, list[bc.Secret]]:
    stream = bc.GuardedStream(np.array([[5.0, 7.0]] * 4))
    ledger = bc.WindowLedger(epsilon=1.0, w=4, sampler="numpy-laplace", allow_vouched=True, trusted_code=True)
    ledger.bind(stream)
    return ledger, list(stream)


@pytest.mark.parametrize(
    ("name", "value"),
    [("deadline", 0), ("deadline", -1.0), ("deadline", float("nan")), ("deadline", 1e9), ("deadline", "1")]
    + [("deadline", True), ("default", float("inf")), ("default", [1.0, 2.0, 3.0]), ("default", "x")],
)
def test_a_bad_deadline_or_default_is_refused_before_the_charge(name: str, value: Any) -> None:
    ledger, secrets = _ledger()
    with pytest.raises(bc.InvalidArgument, match=f"{name}="):
        ledger.measure(np.sum, secrets[0], sensitivity=1.0, epsilon=0.25, shape=(2,), **{name: value})
    with pytest.raises(bc.InvalidArgument, match=f"{name}="):
        ledger.measure_footprint(np.sum, [secrets[0]], sensitivity=1.0, epsilon=0.25, shape=(2,), **{name: value})
    assert ledger.t == 0 and ledger.remaining(1).tolist() == [1.0]


def test_an_overrun_gives_the_default_at_the_deadline() -> None:
    ledger, secrets = _ledger()

    def slow(values: np.ndarray) -> float:
        time.sleep(5.0)
        return float(values.sum())

    ledger.measure(np.sum, secrets[0], sensitivity=1.0, epsilon=0.25, deadline=0.2)  # the first charge compiles
    start = time.perf_counter()
    out = ledger.measure(slow, secrets[1], sensitivity=1.0, epsilon=0.5, default=-1000.0, deadline=0.2)
    took = time.perf_counter() - start
    assert out[0] < -900.0 and 0.2 <= took < 2.0  # the default, noised at scale 2; on time, not after 5 s
    assert [(f.t, f.operation) for f in ledger.failures] == [(2, "measure")]


def test_a_threshold_statistic_that_fails_gives_its_default_per_cell() -> None:
    ledger, secrets = _ledger()
    test = ledger.above_threshold(epsilon=0.1, sensitivity=2.0, cells=(2,))
    test.query(secrets[0], bc.deviation, 0.0)  # opens the instances

    def failing(footprints: np.ndarray) -> np.ndarray:
        raise RuntimeError

    answer = test.query(secrets[1], failing, 0.0, default=[1e6, -1e6], deadline=0.2)
    assert answer.above.tolist() == [[True, False]]  # the default, tested like any value
    assert [f.operation for f in ledger.failures] == ["query"]


def test_without_the_sandbox_a_forked_call_is_refused_before_the_charge(monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine where seccomp cannot be installed (simulated): refused with the reason, nothing charged;
    the in-process opt-out still runs."""
    monkeypatch.setattr("budgetcheck.ledger.sandbox.unavailable", lambda: "the sandbox needs Linux (seccomp-bpf)")
    ledger, secrets = _ledger()
    assert not ledger.allows_unsandboxed
    with pytest.raises(bc.InvalidArgument, match=r"fn cannot be sandboxed here \(the sandbox needs Linux"):
        ledger.measure(np.sum, secrets[0], sensitivity=1.0, epsilon=0.25)
    test = ledger.above_threshold(epsilon=0.1, sensitivity=2.0, cells=(2,))
    with pytest.raises(bc.InvalidArgument, match="cannot be sandboxed"):
        test.query(secrets[0], lambda footprints: footprints[:, 0], 0.0)
    assert ledger.t == 0 and ledger.remaining(1).tolist() == [1.0]
    assert ledger.measure(np.sum, secrets[0], sensitivity=1.0, epsilon=0.25, isolation="trusted").shape == (1,)


def test_a_kernel_that_refuses_the_filter_is_found_before_the_charge(monkeypatch: pytest.MonkeyPatch) -> None:
    """libseccomp loads but the kernel refuses the filter (simulated: the child's confinement fails): the probe
    child finds it once, and forked calls are refused before any charge instead of always giving the default."""
    from budgetcheck.ledger import sandbox

    def refused(answer_fd: int) -> None:
        raise OSError(22, "seccomp: Invalid argument")

    monkeypatch.setattr(sandbox, "confine", refused)
    sandbox.unavailable.cache_clear()
    try:
        ledger, secrets = _ledger()
        with pytest.raises(bc.InvalidArgument, match="the kernel refused the seccomp filter"):
            ledger.measure(np.sum, secrets[0], sensitivity=1.0, epsilon=0.25)
        assert ledger.t == 0 and ledger.remaining(1).tolist() == [1.0]
    finally:
        monkeypatch.undo()
        sandbox.unavailable.cache_clear()
    assert sandbox.unavailable() is None  # this machine's kernel takes it
