"""LPD and LPA (Ren et al. 2022, LDP-IDS §5): every user reports at most once per window, with the whole ε."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import budgetcheck as bc
from mechanisms import BUILTIN


@pytest.mark.parametrize("name", ["LPD", "LPA"])
def test_every_group_reports_at_most_once_per_window_and_the_budget_is_used(name: str) -> None:
    """Brute force over the records, per (class, group, run), in exact rationals (independent of the ledger)."""
    requirements = bc.RequirementSet.from_counts([((3, 0.5), 40), ((4, 1.0), 30), ((4, 2.0), 30)])
    rng = np.random.default_rng(0)
    bins = rng.integers(-1, 3, size=(30, 100))
    bins[12:20, :70] = 2  # a jump
    execution = bc.execute_personalized(BUILTIN[name](), requirements, bins, dimensions=3, runs=3, seed=4)
    assert execution.releases.shape == (3, 30, 3) and np.isfinite(execution.releases).all()
    k = 2 * 4  # 2W, W the strictest window
    spent: dict[tuple[int, int, int, int], Fraction] = {}
    for record in execution.ledger.records:
        assert record.amounts.shape == (3, 3, k) and record.sampler.startswith("local-oracle:")
        for (run, c, g), amount in np.ndenumerate(record.amounts):
            if amount:
                assert amount == 0.5  # the whole strictest ε, never a fraction
                spent[(record.t, run, c, g)] = spent.get((record.t, run, c, g), Fraction(0)) + Fraction(amount)
    reports = [0] * k
    for c, req in enumerate(requirements.classes):
        for run in range(3):
            for g in range(k):
                for t in range(1, 31):
                    window = sum(spent.get((s, run, c, g), Fraction(0)) for s in range(max(1, t - req.w + 1), t + 1))
                    assert window <= Fraction(req.epsilon), (name, req, run, g, t)
                reports[g] += sum(1 for s in range(1, 31) if (s, run, c, g) in spent)
    # the dissimilarity groups report in turn, every W = 4 timestamps; the publication pool is used
    assert min(reports[:4]) > 0 and max(reports[:4]) <= 3 * 3 * 8  # at most once per W = 4 of T = 30
    assert sum(reports[4:]) > 0
    publications = {r.t for r in execution.ledger.records if r.purpose == "publication"}
    assert publications and len(publications) < 30  # the variance test skips some timestamps


def test_lpd_and_lpa_follow_a_jump() -> None:
    requirements = bc.RequirementSet.from_counts([((5, 4.0), 4000)])
    bins = np.zeros((30, 4000), dtype=np.int64)
    bins[15:] = 1
    for name in ("LPD", "LPA"):
        execution = bc.execute_personalized(BUILTIN[name](), requirements, bins, dimensions=2, runs=2, seed=1)
        assert np.all(execution.releases[:, 5, 0] > 3000) and np.all(execution.releases[:, 27, 1] > 3000), name
