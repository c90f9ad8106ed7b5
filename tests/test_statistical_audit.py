"""Stage (d): neighbour pairs, decision flips, and bounds for the three notions."""

from __future__ import annotations

import numpy as np
import pytest

from budgetcheck import InvalidArgument, execute, load_mechanism
from budgetcheck._audit_stat import Run, decision_flip, personalized_audit, statistical_audit, swellfish_audit
from broken.mutants import BDDissimilarityOverPopulation, SwellfishMeasureThresholdUnits, SwellfishThresholdUnits


def _pilot(name: str, w: int = 3) -> Run:
    mechanism = load_mechanism(name)
    return lambda data, seed: execute(mechanism, data, epsilon=1.0, w=w, runs=400, seed=seed).releases


def test_decision_flip_brackets_the_share_of_publishing_runs() -> None:
    base = np.zeros((9, 1))
    height = decision_flip(_pilot("BD"), base, 0, seed=1)
    assert height is not None

    def rate(h: int) -> float:
        data = base.copy()
        data[0] += h
        releases = _pilot("BD")(data, 1)
        return float(np.mean(releases[:, 0, 0] != 0.0))

    assert rate(height) < 0.5 <= rate(height + 1)


def test_no_decision_flip_for_mechanisms_that_release_every_time() -> None:
    base = np.full((9, 1), 50.0)
    assert decision_flip(_pilot("Uniform"), base, 4, seed=1) is None
    assert decision_flip(_pilot("Sample"), base, 4, seed=1) is None


def test_the_flip_pair_is_what_catches_a_decision_with_a_made_up_sensitivity() -> None:
    """BD whose dissimilarity has 1/100 of its sensitivity: right charges, a near-true decision."""
    finding = statistical_audit(BDDissimilarityOverPopulation(), w=1, runs=4000, seed=0)
    assert finding.violates and "decision flip" in finding.position
    honest = statistical_audit(load_mechanism("BD"), w=1, runs=4000, seed=0)
    assert not honest.violates


def test_personalized_audit_compares_each_user_with_their_own_epsilon() -> None:
    finding = personalized_audit(load_mechanism("PBA"), runs=2000, seed=3)
    assert not finding.violates
    assert finding.epsilon in (0.5, 1.0) and "user" in finding.position


def test_swellfish_audit_catches_noise_that_ignores_the_temporal_sensitivity() -> None:
    with pytest.raises(InvalidArgument, match="is below"):  # declared to laplace: refused at run time
        swellfish_audit(SwellfishThresholdUnits(), runs=200, seed=0)
    assert swellfish_audit(SwellfishMeasureThresholdUnits(), runs=2000, seed=0).violates  # vouched to measure: the audit
    honest = swellfish_audit(load_mechanism("TSUniform"), runs=2000, seed=0)
    assert not honest.violates and "pattern" in honest.position
