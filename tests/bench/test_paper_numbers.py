"""Numbers that disagree with the papers or the public benchmark harness (issue 31, items 4-5):
each test runs both settings and states which choice explains the difference."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budgetcheck import PersonalizedLedger, RequirementSet, execute, execute_personalized
from budgetcheck.bench.config import ArtificialStream
from budgetcheck.bench.personalized_study import binary_bins, probabilities
from budgetcheck.bench.streams import HARNESS_GROWTH
from mechanisms import BA, BD, PBA, PBD, FASTw, StrictestBA, StrictestBD
from mechanisms.personalized import publication_threshold

# MAE of the public harness's FAST_w class (its defaults: ratio 0.075, blocks of w + 1, integer
# predictions), 1,000 runs at w = 120, ε = 1 on ArtificialStream(s, 10, 1000, 1.3).data(0),
# each stream written to a one-column file and fed to the harness's run().
HARNESS_FAST_MAE_A10 = {40: 7.820, 60: 7.701, 80: 7.690, 100: 7.949, 120: 7.720}


def _fast_mae(season: int, ratio: float, *, integer_predictions: bool = False) -> float:
    data = ArtificialStream(season, 10.0, 1000, HARNESS_GROWTH).data(0)
    releases = execute(FASTw(sampling_ratio=ratio), data, epsilon=1.0, w=120, runs=300, seed=11).releases
    if integer_predictions:  # the harness casts its predictions, most releases, to int (towards 0)
        releases = np.trunc(releases)
    return float(np.abs(releases - data[None]).mean())


@pytest.mark.parametrize("season", sorted(HARNESS_FAST_MAE_A10))
def test_fast_w_gap_to_the_harness_is_its_sampling_ratio(season: int) -> None:
    """At the paper's 15 % ratio M = 18 samples of ε/(2M) per block: twice the Laplace scale of the
    harness's 7.5 % (M = 9), and twice its MAE on a = 10; at 7.5 % the gap is gone but for the
    harness's integer cast of predictions (about 7 %), which accounts for the rest."""
    harness = HARNESS_FAST_MAE_A10[season]
    paper, halved = _fast_mae(season, 0.15), _fast_mae(season, 0.075)
    assert paper / halved > 1.75, (paper, halved)
    assert paper / harness > 1.8, (paper, harness)
    assert 1.0 < halved / harness < 1.12, (halved, harness)
    assert 0.96 < _fast_mae(season, 0.075, integer_predictions=True) / harness < 1.04


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from([20, 40, 120]), st.sampled_from([0.2, 0.6, 1.0]), st.integers(1, 500)),
        min_size=1,
        max_size=4,
        unique_by=lambda c: c[:2],
    ),
    st.floats(1e-4, 0.5),
)
def test_baselines_test_against_lambda_and_pbd_against_root_err(
    classes: list[tuple[int, float, int]], share: float
) -> None:
    """Kellaris et al. Figure 2 line 7 / Figure 4 line 10: dis > λ = 1/ε_{t,2}; Du et al. Algorithm 4
    line 7: dis > √err_opt, whose noise term alone is 2/θ², so PBD's test is at least √2/θ."""
    requirements = RequirementSet.from_counts([((w, e), n) for w, e, n in classes])
    ledger = PersonalizedLedger(requirements, runs=2)
    candidate = np.array([[share * r.epsilon for r in requirements.classes]] * 2)
    strict = np.full_like(candidate, share * requirements.strictest().epsilon)
    np.testing.assert_allclose(publication_threshold(ledger, strict, strictest=True), 1.0 / strict[:, 0], rtol=1e-12)
    theta, error = ledger.reporting_error(candidate)
    personal = publication_threshold(ledger, candidate, strictest=False)
    np.testing.assert_allclose(personal, np.sqrt(error), rtol=1e-12)
    assert (personal >= np.sqrt(2.0) / theta * (1 - 1e-12)).all()
    assert np.isinf(publication_threshold(ledger, np.zeros_like(candidate), strictest=True)).all()


def _publications(releases: np.ndarray) -> np.ndarray:
    """Publications per run: timestamps whose release differs from the previous one (t = 1 counts)."""
    changed = np.any(releases[:, 1:] != releases[:, :-1], axis=2).sum(axis=1)
    return np.asarray(changed + np.any(releases[:, 0] != 0.0, axis=1), dtype=np.float64)


@pytest.mark.parametrize(
    ("baseline", "plain", "personal"), [(StrictestBD(), BD(), PBD()), (StrictestBA(), BA(), PBA())], ids=["BD", "BA"]
)
def test_du_baselines_publish_as_kellaris_on_one_requirement(
    baseline: PBD | PBA, plain: BD | BA, personal: PBD | PBA
) -> None:
    """With every user at (w, ε) the baseline is Kellaris's mechanism on the counts: the same number of
    publications per run, in distribution; the √2-higher test of PBD would publish far less here."""
    users, w, epsilon, runs = 2000, 20, 1.0, 200
    rng = np.random.default_rng(5)
    bins = binary_bins(probabilities("Sin", 200, rng), users, rng)
    counts = np.stack([(bins == 0).sum(axis=1), (bins == 1).sum(axis=1)], axis=1).astype(np.float64)
    requirements = RequirementSet.from_counts([((w, epsilon), users)])
    ours = _publications(execute_personalized(baseline, requirements, bins, dimensions=2, runs=runs, seed=1).releases)
    kellaris = _publications(execute(plain, counts, epsilon=epsilon, w=w, runs=runs, seed=2).releases)
    root_err = _publications(
        execute_personalized(personal, requirements, bins, dimensions=2, runs=runs, seed=3).releases
    )
    standard_error = np.sqrt(ours.var() / runs + kellaris.var() / runs)
    assert abs(ours.mean() - kellaris.mean()) < 4 * standard_error, (ours.mean(), kellaris.mean())
    assert root_err.mean() < kellaris.mean() - 8 * standard_error, (root_err.mean(), kellaris.mean())
