"""Issue 42, item 7: a signal handler that raises inside ``spend()`` leaves the ledger whole and usable.

Before the fix a SIGALRM handler raising during the first multi-run spends of a process left numba's
registries half made: every later spend raised ``RuntimeError: generator raised StopIteration`` (once
the process aborted, "double free"). Each scenario runs in a fresh interpreter (the kernels' first
import and compilation are what is at stake), with a SIGALRM timer armed at a random moment of every
spend, then checks that the window sums equal the sums of the records (nothing half applied) and that
spends still work.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

_SCRIPT = textwrap.dedent(
    """
    import random, signal, sys
    import numpy as np
    from budgetcheck import WindowLedger, rounding

    class Interrupted(Exception):
        pass

    armed = False

    def handler(signum, frame):
        if armed:
            raise Interrupted()

    signal.signal(signal.SIGALRM, handler)
    seed, runs, spends = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    rng = random.Random(seed)
    w = 6
    ledger = WindowLedger(epsilon=1.0, w=w, runs=runs, keep_records=True)
    interrupted = completed = 0
    t = 0
    for i in range(spends):
        t += rng.choice((0, 1, 1, 2)) if t else 1
        amounts = np.array([rng.choice((0.0, 2.0**-9, 0.01, 0.03)) for _ in range(runs)])
        try:
            armed = True
            signal.setitimer(signal.ITIMER_REAL, rng.uniform(1e-6, 1.5e-3))
            ledger.spend(t, amounts, purpose="spend")
            completed += 1
        except Interrupted:
            interrupted += 1
        except Exception as exc:  # a refusal (the window is full) is fine; anything else is the defect
            if type(exc).__name__ != "BudgetExceeded":
                print("BROKEN", type(exc).__name__, exc)
                sys.exit(2)
        finally:
            armed = False
            signal.setitimer(signal.ITIMER_REAL, 0)

    def from_records(end):
        sums = [0] * runs
        for record in ledger.records:
            if end - w < record.t <= end:
                for run, value in enumerate(np.broadcast_to(record.amounts, (runs,)).tolist()):
                    sums[run] += rounding.to_units(value)
        return tuple(sums)

    if not completed:
        print("BROKEN no spend completed")
        sys.exit(2)
    end = ledger.t
    assert ledger.window_sum(end) == from_records(end), "window sums differ from the records"
    left = ledger.remaining(end + 1)
    ledger.spend(end + 1, left, purpose="after")  # remaining() is always spendable
    assert ledger.window_sum(end + 1) == from_records(end + 1)
    print("OK", interrupted, completed)
    """
)


@pytest.mark.parametrize(("seed", "runs"), [(1, 5), (2, 5), (3, 1)])
def test_spends_interrupted_at_random_moments_leave_the_ledger_whole(seed: int, runs: int) -> None:
    """1,500 spends, each with a SIGALRM handler raising at a random moment: afterwards the sums equal the records
    and spends work (before: every later spend raised RuntimeError, or the process aborted)."""
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(seed), str(runs), "1500"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, (done.returncode, done.stdout[-2000:], done.stderr[-4000:])
    verdict, interrupted, completed = done.stdout.split()[-3:]
    assert verdict == "OK"
    assert int(interrupted) > 0 and int(completed) > 0  # the handler did fire inside spends, and spends went through


class _Interrupted(BaseException):
    """What a signal handler raises (a KeyboardInterrupt-like exception), injected at a chosen point."""


def _interrupt_once(monkeypatch: pytest.MonkeyPatch, owner: type, name: str) -> list[int]:
    """Make ``owner.name`` raise _Interrupted on its first call after doing its work half: the call count."""
    original = getattr(owner, name)
    calls: list[int] = []

    def interrupted(self: object, *args: object) -> object:
        calls.append(1)
        result = original(self, *args)
        if len(calls) == 1:
            raise _Interrupted
        return result

    monkeypatch.setattr(owner, name, interrupted)
    return calls


@pytest.mark.parametrize("runs", [1, 4])
def test_a_commit_interrupted_half_way_is_completed_before_anything_else(
    monkeypatch: pytest.MonkeyPatch, runs: int
) -> None:
    """The exception lands after the window moved and before the record was kept: the next read completes the
    spend (the window and the records agree), and the ledger goes on."""
    import numpy as np

    import budgetcheck as bc
    from budgetcheck.ledger.scalar_windows import ScalarWindows
    from budgetcheck.ledger.windows import ExactWindows

    ledger = bc.WindowLedger(epsilon=1.0, w=3, runs=runs, keep_records=True)
    for t in (1, 2, 3):
        ledger.spend(t, np.full(runs, 0.25), purpose="before")
    if runs == 1:
        calls = _interrupt_once(monkeypatch, ScalarWindows, "commit_units")
    else:
        calls = _interrupt_once(monkeypatch, ExactWindows, "commit_quick")
    with pytest.raises(_Interrupted):
        ledger.spend(4, np.full(runs, 0.5), purpose="interrupted")
    assert calls == [1]
    assert [record.purpose for record in ledger.records][-1] == "interrupted"  # completed by the read
    assert ledger.t == 4
    assert ledger.remaining(4).tolist() == [0.0] * runs  # 0.25 + 0.25 + 0.5: t = 2..4
    with pytest.raises(bc.BudgetExceeded):
        ledger.spend(4, np.full(runs, 2.0**-1074), purpose="one ulp over")
    ledger.spend(5, np.full(runs, 0.25), purpose="after")
    assert len(ledger.records) == 5


def test_a_commit_that_cannot_be_completed_makes_the_ledger_refuse(monkeypatch: pytest.MonkeyPatch) -> None:
    """A personalized commit interrupted between its class windows: every later operation is refused cleanly."""
    import numpy as np

    import budgetcheck as bc
    from budgetcheck.ledger.windows import ExactWindows

    requirements = bc.RequirementSet.from_counts([((2, 1.0), 3), ((3, 0.5), 2)])
    ledger = bc.PersonalizedLedger(requirements, runs=2, keep_records=True)
    ledger.spend(1, np.array([0.25, 0.125]), purpose="before")
    _interrupt_once(monkeypatch, ExactWindows, "commit_quick")
    with pytest.raises(_Interrupted):
        ledger.spend(2, np.array([0.25, 0.125]), purpose="interrupted")
    with pytest.raises(bc.LedgerCorrupt, match="was interrupted"):
        ledger.spend(3, np.array([0.25, 0.125]), purpose="refused")
    with pytest.raises(bc.LedgerCorrupt, match="was interrupted"):
        ledger.remaining(3)
