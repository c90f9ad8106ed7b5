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
    assert finding.epsilon in (0.5, 1.0, 8 * 0.5, 8 * 1.0) and "user" in finding.position  # one user or a group of 8


def test_swellfish_audit_catches_noise_that_ignores_the_temporal_sensitivity() -> None:
    with pytest.raises(InvalidArgument, match="is below"):  # declared to laplace: refused at run time
        swellfish_audit(SwellfishThresholdUnits(), runs=200, seed=0)
    assert swellfish_audit(SwellfishMeasureThresholdUnits(), runs=2000, seed=0).violates  # vouched to measure: the audit
    honest = swellfish_audit(load_mechanism("TSUniform"), runs=2000, seed=0)
    assert not honest.violates and "pattern" in honest.position


# -- issue 28, item 5 -------------------------------------------------------------------------------------

from broken.mutants import PrefixCountsDeclaresOne  # noqa: E402
from budgetcheck import verify_mechanism  # noqa: E402


def _one_column_audit(mechanism: object, w: int, runs: int) -> float:
    """The audit as it was before issue 28: d = 1 streams, ±1 at one timestamp, one column read."""
    from budgetcheck._audit_stat import NeighbourPair, _audit

    base = np.full((3 * w, 1), 50.0)
    pairs = []
    for position in (w, 2 * w - 1):
        for direction in (1.0, -1.0):
            neighbour = base.copy()
            neighbour[position, 0] += direction
            pairs.append(NeighbourPair("old", base, neighbour, (position,), direction, 0, 1.0))

    def run(data: np.ndarray, seed: int) -> np.ndarray:
        return execute(mechanism, data, epsilon=1.0, w=w, runs=runs, seed=seed).releases  # type: ignore[arg-type]

    return _audit(run, pairs, runs=runs, alpha=0.05, seed=0, w=w).lower_bound


def test_a_vector_query_with_l1_sensitivity_2_declaring_1_is_caught_only_at_d_2() -> None:
    """Class 3: the cumulative histogram moves both columns when one individual joins bin 0 (loss 2ε
    at w = 1). The old one-column audit stays below ε; the d = 2 audit proves a loss above ε."""
    assert _one_column_audit(PrefixCountsDeclaresOne(), 1, 4000) <= 1.0
    finding = statistical_audit(PrefixCountsDeclaresOne(), w=1, runs=4000, seed=0)
    assert finding.violates and finding.lower_bound > 1.0 and "bin 0" in finding.position, finding
    stage = {s.stage: s for s in verify_mechanism("broken.mutants:PrefixCountsDeclaresOne", stages="d").stages}
    assert stage["statistical audit"].verdict == "fail", stage


def test_the_moved_neighbour_is_held_to_two_epsilon_not_one() -> None:
    """A correct histogram (Uniform at d = 2) loses up to 2ε when one individual moves between bins:
    the pair must be compared with 2ε or every correct histogram mechanism would be a false alarm."""
    finding = statistical_audit(load_mechanism("Uniform"), w=1, runs=4000, seed=0)
    assert not finding.violates


def test_the_linear_event_sees_a_change_at_a_later_timestamp() -> None:
    """Weights chosen on one half over every (t, column): a mechanism that releases the change one
    timestamp late (at t + 1, in the last column) is invisible to the changed-timestamp statistics."""
    from budgetcheck import GuardedStream, WindowLedger, rounding

    class Late:
        name = "late"

        def run(self, stream: GuardedStream, ledger: WindowLedger) -> np.ndarray:
            budget = rounding.share(ledger.params.epsilon, ledger.params.w)
            out = np.zeros((ledger.runs, stream.length, stream.dimensions))
            for secret in stream:
                # too little noise (a vouched sensitivity: laplace() refuses one below the stream's), shown late
                noisy = ledger.measure(lambda v: v, secret, sensitivity=0.25, epsilon=budget)
                if secret.t < stream.length:
                    out[:, secret.t, -1] = noisy[:, 0]
            return out

    finding = statistical_audit(Late(), w=1, runs=4000, seed=0)
    assert finding.violates and "linear event" in finding.position, finding


def test_tssample_has_a_positive_bound_now() -> None:
    """TSSample was left at 0.000 when the pattern sat only at the start and end of J."""
    finding = swellfish_audit(load_mechanism("TSSample"), runs=4000, seed=0)
    assert 0.3 < finding.lower_bound <= finding.epsilon, finding
