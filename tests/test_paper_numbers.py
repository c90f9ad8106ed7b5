"""Numbers that disagree with the papers or the public benchmark harness (issue 31, items 4-5):
each test runs both settings and states which choice explains the difference."""

from __future__ import annotations

import numpy as np
import pytest

from budgetcheck import execute
from budgetcheck.bench.config import ArtificialStream
from budgetcheck.bench.streams import HARNESS_GROWTH
from mechanisms import FASTw

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
