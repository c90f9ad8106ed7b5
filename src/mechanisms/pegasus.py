"""PeGaSus (Chen, Machanavajjhala, Hay, Miklau, CCS 2017) in its w-event parameterisation.

Per timestamp ε/w (:class:`mechanisms.rules.SplitUniformRule`, 4:1): the Perturber releases
c̃_t = c_t + Lap(1/ε_p) with ε_p = 0.8ε/w; the Grouper is an AboveThreshold per run and dimension
with ε_g = 0.2ε/w (``ledger.above_threshold``): a closed group opens {t} with a fresh noisy
threshold θ̃ = θ + Lap(4/ε_g); an open group G is extended by t iff dev(G ∪ {t}) + Lap(8/ε_g) < θ̃
(dev = Σ|c − mean| of the *true* counts, sensitivity < 2), else t becomes a closed singleton;
θ = 5/ε_g. The Smoother (median by default, average, James–Stein) releases the smoothed c̃ over
the group holding t.

Accounting (accounting rules §3): the grouper reads past true counts of the open group, which
Theorem 3 does not cover. The ledger's footprint rule charges each AboveThreshold instance ε_g at
every timestamp it reads, once — i.e. ε_g at t — so a window pays w(ε_p + ε_g) = ε; this is the
paper's own group-privacy argument made explicit.

Deviations: groups are capped at ``max_group`` timestamps (default None: w; pass the stream
length for the paper's unbounded groups) so that a query's work stays bounded; a capped group is
closed by that public rule.
``grouping=False`` reproduces the public harness (singleton groups: Uniform at 0.8ε/w).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

import attrs
import numpy as np
from numpy.typing import NDArray

from budgetcheck import WindowLedger
from budgetcheck.ops import FLOAT
from mechanisms._common import StepByStep, Stream, per_run_budget, per_run_column, rule_env
from mechanisms._smoothing import GroupHistory, check_smoother
from mechanisms.rules import SplitUniformRule

FloatArray = NDArray[np.float64]


@attrs.frozen
class PeGaSus(StepByStep):
    """Perturber + Grouper + Smoother (see the module docstring)."""

    smoother: str = attrs.field(default="median", converter=check_smoother)
    grouping: bool = True
    threshold_factor: float = 5.0
    max_group: int | None = None
    perturbation_weight: int = 4
    grouping_weight: int = 1
    name: str = attrs.field(default="PeGaSus", init=False)
    # small passes: the per-run work (sorted groups, noise) outgrows the caches of a large one
    max_stacked_runs: ClassVar[int] = 1_000

    def allocation_rule(self) -> SplitUniformRule:
        return SplitUniformRule((self.perturbation_weight, self.grouping_weight), ("perturbation", "grouping"))

    def releases(self, stream: Stream, ledger: WindowLedger) -> Iterator[FloatArray]:
        rule, env = self.allocation_rule(), rule_env(ledger)
        perturb_budget, group_budget = (per_run_budget(b) for b in rule.charges(FLOAT, env, (), None))
        cap = env.w if self.max_group is None else self.max_group
        test = (
            ledger.above_threshold(
                epsilon=group_budget, sensitivity=2.0, cells=(stream.dimensions,), max_footprint=cap, purpose="grouping"
            )
            if self.grouping
            else None
        )
        history = GroupHistory(cap)
        thresholds = self.threshold_factor / per_run_column(group_budget)
        noise_variance = 2.0 / perturb_budget**2  # per run: repeated over the d rows of each run
        variances = (
            noise_variance if isinstance(noise_variance, float) else np.repeat(noise_variance, stream.dimensions)
        )
        for secret in stream:
            perturbed = ledger.laplace(secret, perturb_budget, purpose="perturbation")
            if test is None:
                yield perturbed
            else:
                yield history.step(test, secret, perturbed, thresholds, self.smoother, variances)[1]
