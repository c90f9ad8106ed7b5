"""LBU, PLBU, LSP, LBD and LBA on the personalized ledger: per-user windows audited independently,
an unbiased PLBU, and budgets that follow each user's own (w_i, ε_i)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import budgetcheck as bc
from mechanisms import BUILTIN, LBA, LBD, LBU, LSP, PLBU

LOCAL = ("PLBU", "LBU", "LSP", "LBD", "LBA")


def _run(
    mechanism: object, requirements: bc.RequirementSet, bins: np.ndarray, d: int, runs: int = 3
) -> bc.Execution[bc.PersonalizedLedger]:
    return bc.execute_personalized(mechanism, requirements, bins, dimensions=d, runs=runs, seed=4)


@pytest.mark.parametrize("name", LOCAL)
def test_every_users_window_stays_within_its_own_epsilon(name: str) -> None:
    """Brute force over the records in exact rationals: every window of w_c timestamps of class c sums to <= ε_c."""
    requirements = bc.RequirementSet.from_counts([((3, 0.5), 40), ((7, 1.0), 30), ((7, 2.0), 30)])
    rng = np.random.default_rng(0)
    bins = rng.integers(-1, 4, size=(40, 100))
    bins[15:25, :60] = 3  # a jump: the adaptive ones publish and skip
    execution = _run(BUILTIN[name](), requirements, bins, 4)
    assert execution.releases.shape == (3, 40, 4) and np.isfinite(execution.releases).all()
    spent = np.zeros((41, 3, 3), dtype=object)
    spent[:] = Fraction(0)
    for record in execution.ledger.records:
        assert record.sampler.startswith("local-oracle:")
        for run in range(3):
            for c in range(3):
                spent[record.t, run, c] += Fraction(float(record.amounts[run, c]))
    worst = Fraction(0)
    for c, req in enumerate(requirements.classes):
        for run in range(3):
            for t in range(1, 41):
                window = sum(spent[max(1, t - req.w + 1) : t + 1, run, c])
                assert window <= Fraction(req.epsilon), (name, req, run, t)
                worst = max(worst, window / Fraction(req.epsilon))
    assert worst > Fraction(1, 4), worst  # the budget is used, not left idle


def test_plbu_charges_each_class_its_own_share_and_lbu_the_strictest() -> None:
    requirements = bc.RequirementSet.from_counts([((4, 0.5), 5), ((8, 2.0), 5)])
    bins = np.zeros((6, 10), dtype=np.int64)
    plbu = _run(PLBU(), requirements, bins, 2, runs=1)
    lbu = _run(LBU(), requirements, bins, 2, runs=1)
    assert {tuple(r.amounts[0]) for r in plbu.ledger.records} == {(0.125, 0.25)}
    assert {tuple(r.amounts[0]) for r in lbu.ledger.records} == {(0.0625, 0.0625)}  # ε/w with (max w, min ε) = (8, 0.5)
    lsp = _run(LSP(strictest=False), requirements, bins, 2, runs=1)
    assert [(r.t, tuple(r.amounts[0])) for r in lsp.ledger.records] == [(1, (0.5, 2.0)), (5, (0.5, 0.0))]


def test_plbu_is_unbiased_over_runs() -> None:
    """Mean of 3000 runs at each of 3 timestamps within 4.5 standard errors of the truth per bin
    (false-failure rate for a random seed < 3·3·2·3.4e-6 < 1e-4)."""
    requirements = bc.RequirementSet.from_counts([((2, 1.0), 600), ((3, 3.0), 400)])
    rng = np.random.default_rng(3)
    bins = rng.integers(0, 3, size=(3, 1000))
    execution = _run(PLBU(), requirements, bins, 3, runs=3000)
    truth = np.stack([(bins == j).sum(axis=1) for j in range(3)], axis=1)
    mean = execution.releases.mean(axis=0)
    se = execution.releases.std(axis=0, ddof=1) / np.sqrt(3000)
    assert np.abs((mean - truth) / se).max() < 4.5


def test_the_adaptive_ones_publish_after_a_jump_and_skip_some() -> None:
    requirements = bc.RequirementSet.from_counts([((10, 4.0), 3000)])
    bins = np.zeros((30, 3000), dtype=np.int64)
    bins[15:, :] = 1
    for mechanism in (LBD(), LBA()):
        execution = _run(mechanism, requirements, bins, 2, runs=2)
        publications = {r.t for r in execution.ledger.records if r.purpose == "publication"}
        assert 1 in publications and any(16 <= t <= 20 for t in publications), (mechanism, publications)
        assert len(publications) < 30, (mechanism, publications)  # the variance test skips some timestamps
        after = execution.releases[:, 25]
        assert np.all(after[:, 1] > 2000), after
