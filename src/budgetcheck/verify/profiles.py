"""The profiles of ``budgetcheck verify`` (how much time it spends) and its stage letters.

Kept apart from :mod:`budgetcheck.verify.stages` so that the command line can offer them without
loading the stages, which need the ``verify`` extra (:mod:`budgetcheck.extras`).
"""

from __future__ import annotations

import attrs


@attrs.frozen
class Profile:
    """How much time ``verify`` spends: generated cases, proof range, audit runs."""

    examples: int
    w_max: int  # of the proof
    audit_runs: int
    explore: str  # the exploration budget (budgetcheck.verify.explore.BUDGETS): w up to 64 or 128, T = 4w


PROFILES = {
    # quick replays 60 cases (the corpus's replay mutants are all caught at 60): exploration now
    # covers the spends at w up to 64, and the profile must stay under 2 minutes on 2 cores
    "quick": Profile(examples=60, w_max=12, audit_runs=4000, explore="quick"),
    "thorough": Profile(examples=1000, w_max=128, audit_runs=40000, explore="thorough"),
}
STAGES = "abcde"  # a replay, b secret access, c proof, d statistical audit, e exploration and rule conformance
