"""Stage (d) of ``verify``: a StatDP-style statistical lower bound on the privacy loss.

For a pair of w-neighbouring streams (one count changed by 1 at the start, middle or end of a
window) the mechanism runs many seeded times on each (batched: one ledger of R runs). An output
event "Σ of the releases over the changed timestamps >= τ" is chosen on a first half of the runs;
on the second half the one-sided Clopper-Pearson bounds give, with confidence 1 − α (Bonferroni
over all events tried), ε_lb = ln(p_low(D) / p_high(D')). ε_lb > ε proves a violation, e.g. a
release whose declared sensitivity is too small.
"""

from __future__ import annotations

import math

import attrs
import numpy as np
from scipy.stats import beta

from budgetcheck._mechanism import StreamMechanism, execute


@attrs.frozen
class StatFinding:
    """The largest lower bound found and where."""

    epsilon: float
    w: int
    lower_bound: float
    position: str
    threshold: float
    runs: int

    @property
    def violates(self) -> bool:
        return self.lower_bound > self.epsilon


def _clopper_pearson(successes: int, trials: int, alpha: float) -> tuple[float, float]:
    low = 0.0 if successes == 0 else float(beta.ppf(alpha, successes, trials - successes + 1))
    high = 1.0 if successes == trials else float(beta.ppf(1 - alpha, successes + 1, trials - successes))
    return low, high


def statistical_audit(
    mechanism: StreamMechanism, *, epsilon: float = 1.0, w: int = 3, runs: int = 4000, alpha: float = 0.05, seed: int = 0
) -> StatFinding:
    """The largest confident lower bound on the loss over the tested neighbour pairs and events."""
    length = 3 * w
    base = np.full((length, 1), 50.0)
    positions = {"start": w, "middle": w + w // 2, "end": 2 * w - 1}  # 0-based timestamp of the change
    tests = [(name, pos, direction) for name, pos in positions.items() for direction in (1.0, -1.0)]
    quantiles = (0.5, 0.9, 0.99)
    tries = len(tests) * len(quantiles) * 2
    best = StatFinding(epsilon=epsilon, w=w, lower_bound=0.0, position="-", threshold=0.0, runs=runs)
    for index, (name, position, direction) in enumerate(tests):
        neighbour = base.copy()
        neighbour[position, 0] += direction
        first = execute(mechanism, base, epsilon=epsilon, w=w, runs=runs, seed=seed + 2 * index).releases
        second = execute(mechanism, neighbour, epsilon=epsilon, w=w, runs=runs, seed=seed + 2 * index + 1).releases
        stat_a = direction * first[:, position, 0]
        stat_b = direction * second[:, position, 0]
        half = runs // 2
        for q in quantiles:
            threshold = float(np.quantile(stat_b[:half], q))  # chosen on the selection half
            for upper, lower in ((stat_b[half:], stat_a[half:]), (stat_a[half:], stat_b[half:])):
                hits_upper = int(np.sum(upper >= threshold))
                hits_lower = int(np.sum(lower >= threshold))
                p_low, _ = _clopper_pearson(hits_upper, upper.size, alpha / tries)
                _, p_high = _clopper_pearson(hits_lower, lower.size, alpha / tries)
                if p_low > 0 and p_high > 0:
                    bound = math.log(p_low / p_high)
                    if bound > best.lower_bound:
                        best = StatFinding(epsilon=epsilon, w=w, lower_bound=bound, position=name, threshold=threshold, runs=runs)
    return best
