"""The mechanism's contract with the harness, checked before any stage: a broken contract is the
author's error to fix (exit 2, pointing at their method), not a privacy verdict.

One run on a small constant stream, as ``execute`` runs it: a release of the wrong shape or a
non-finite one raises :class:`MechanismContractError` naming the method's file and line. Anything else
that run does (an overspend, a crash, a secret read) is left to the stages, which report it with a
shrunk reproduction.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from budgetcheck.ledger.errors import MeasurementFailed, MechanismContractError
from budgetcheck.mechanism.execute import execute
from budgetcheck.verify.owner import ledger_flags


def check_contract(mechanism: Any) -> None:
    """Raise :class:`MechanismContractError` when a w-event ``mechanism`` breaks the (runs, T, d) finite
    contract on a constant stream (T = 6, d = 2, 2 runs, ε = 1, w = 3).

    >>> from mechanisms import BUILTIN
    >>> check_contract(BUILTIN["Uniform"]())  # returns quietly
    """
    if getattr(mechanism, "notion", "w-event") != "w-event":
        return  # personalized and Swellfish runs need their own inputs; their stages check the shape
    try:
        execute(mechanism, np.full((6, 2), 5.0), epsilon=1.0, w=3, runs=2, seed=0, **ledger_flags())
    except MeasurementFailed:
        return  # the user's measured function failed: a stage's finding, not the contract
    except MechanismContractError:
        raise
    except Exception:  # noqa: BLE001 — every other outcome is the stages' to find and report
        return
