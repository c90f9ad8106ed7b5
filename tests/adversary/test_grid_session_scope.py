"""Where a grid session can open: the benchmark runner's block only, never under verify (any thread)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

import budgetcheck as bc

_THREADED_OPENER = """
import os
import threading
import attrs
import numpy as np
from budgetcheck import rounding
from budgetcheck.ledger.grid import grid_session, grid_sessions


@attrs.frozen
class Mech:
    name: str = "threaded-opener"

    def run(self, stream, ledger):
        held = []

        def open_one():
            with grid_sessions():
                held.append(grid_session(ledger, stream, ("publication",)))

        thread = threading.Thread(target=open_one)
        thread.start()
        thread.join()
        session = held[0]
        with open(os.environ["SCOPE_LOG"], "a", encoding="utf-8") as log:
            log.write(f"{ledger.runs} {session is not None}\\n")
        budget = rounding.share(ledger.params.epsilon, ledger.params.w)
        out = np.zeros((ledger.runs, stream.length, stream.dimensions))
        for secret in stream:
            via = session if session is not None else ledger
            out[:, secret.t - 1] = via.laplace(secret, budget)
        return out
"""


def test_a_mechanism_under_verify_gets_no_session_from_a_thread_it_starts(
    mechanism_module: Callable[[str, str], str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Guarantee: verify's stages run the ledger's own path; a thread the mechanism starts (which does not
    inherit the stage's context) and opens ``grid_sessions()`` in gets no session either."""
    log = tmp_path / "sessions.log"
    monkeypatch.setenv("SCOPE_LOG", str(log))
    name = mechanism_module("scope_threaded_opener", _THREADED_OPENER)
    result = bc.verify_mechanism(f"{name}:Mech", examples=3, stages="ab")
    lines = log.read_text(encoding="utf-8").splitlines()
    assert result.meets("bounded")
    assert lines, "the mechanism never ran under verify"
    assert [line for line in lines if line.endswith("True")] == []


def test_the_same_thread_opener_gets_sessions_outside_verify(
    mechanism_module: Callable[[str, str], str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The control: outside verify the thread's ``grid_sessions()`` block does give a session (so the test above
    shows the barring, not a mechanism that never could get one), with the ledger's releases."""
    import numpy as np

    log = tmp_path / "sessions.log"
    monkeypatch.setenv("SCOPE_LOG", str(log))
    name = mechanism_module("scope_threaded_opener_control", _THREADED_OPENER)
    data = np.arange(36.0).reshape(12, 3)
    bc.execute(bc.load_mechanism(f"{name}:Mech"), data, epsilon=1.0, w=3, runs=4, seed=0)
    assert log.read_text(encoding="utf-8").splitlines() == ["4 True"]
