"""AdaPub (Wang, Yang, Ren, Zhao, Lam, IPCCC 2019): dimension grouping and time clustering.

Per timestamp ε/w (:class:`mechanisms.rules.SplitUniformRule`, 4:1): perturbation ε_p = 0.8ε/w,
clustering ε_c = 0.2ε/w.

- t = 1: every dimension c + Lap(1/ε_p).
- Dimension grouping (only the last release r_{t−1}): g = 20 random pivots in
  [min r_{t−1}, max r_{t−1}) plus a −∞ sentinel; a dimension joins the bucket of the largest pivot
  <= its last release; each bucket's sum gets Lap(1/ε_p) (``ledger.laplace_groups``: buckets are
  disjoint, one charge) and every member receives sum/|G|. With one dimension that is its own
  Laplace release, which is what runs (no pivots drawn, no empty buckets noised).
- Time clustering per dimension: a PID threshold θ_t = max(1, δ_t²/ε) from the feedback
  E_t = |r_{t−1} − x_t|/max(x_t, 1), δ_t = K_p E_t + K_i mean(E since the cluster opened)
  + K_d (E_t − E_{t−1}). The open cluster is extended while its deviation (true counts) stays
  below θ_t; the release is the median of the cluster's grouped values x.

Deviation (accounting rules §3): as published, the cluster test re-reads every true count of the
open cluster at every step without bound. Here it is an AboveThreshold with footprint accounting
(``ledger.above_threshold``): threshold noise Lap(4/ε_c) per cluster, query noise Lap(8/ε_c), and
every read charged once. Consequently a timestamp where the test fires closes the cluster and
stands alone (as in PeGaSus); the next timestamp opens a new cluster. Clusters are capped at w.
``grouping=False, clustering=False`` is the public harness's configuration: Uniform at 0.8ε/w.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar, TypeVar

import attrs
import numpy as np
from numpy.typing import NDArray

from budgetcheck import Secret, WindowLedger
from budgetcheck.kernels import compiled
from budgetcheck.ops import FLOAT
from mechanisms._common import StepByStep, Stream, per_run_budget, per_run_column, rule_env
from mechanisms._smoothing import GroupHistory
from mechanisms.rules import SplitUniformRule

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]
_Item = TypeVar("_Item", bound=np.generic)


def pivot_buckets(last_release: FloatArray, pivots: FloatArray) -> IntArray:
    """Bucket of every dimension: 0 below every pivot (the −∞ sentinel), else 1 + the index of the
    largest pivot <= the dimension's last release. Shapes (runs, d) and (runs, g) → (runs, d)."""
    return np.asarray((pivots[:, None, :] <= last_release[:, :, None]).sum(axis=-1), dtype=np.int64)


@compiled
def _pid_threshold(
    last: FloatArray,
    x: FloatArray,
    feedback: FloatArray,
    epsilon: FloatArray,
    kp: float,
    ki: float,
    kd: float,
    pending: FloatArray,
    threshold: FloatArray,
) -> None:
    """The PID threshold θ_t = max(1, δ_t²/ε) of every run (``epsilon``: one per run) and dimension
    (arrays flattened, run-major), in one pass, each operation in the order of the whole-array form
    (the same doubles; its oracle is in the tests): pending[0] = E_t = |r_{t−1} − x_t|/max(x_t, 1),
    pending[1] = Σ E including E_t, pending[2] = its count. ``not (v < 1)`` keeps numpy's NaN."""
    d = x.size // epsilon.size
    for run in range(epsilon.size):
        e = epsilon[run]
        for i in range(run * d, (run + 1) * d):
            value = x[i]
            error = abs(last[i] - value) / (value if not (value < 1.0) else 1.0)
            total, count = feedback[1, i] + error, feedback[2, i] + 1.0
            control = kp * error + ki * total / count + kd * (error - feedback[0, i])
            ratio = control * control / e
            threshold[i] = ratio if not (ratio < 1.0) else 1.0
            pending[0, i], pending[1, i], pending[2, i] = error, total, count


@compiled
def _pid_close(fresh: BoolArray, pending: FloatArray, feedback: FloatArray) -> None:
    """feedback ← (E_t, Σ E, count) after the test (flattened): a cluster that opened or fired starts over at E_t."""
    for i in range(fresh.size):
        error = pending[0, i]
        feedback[0, i] = error
        feedback[1, i] = error if fresh[i] else pending[1, i]
        feedback[2, i] = 1.0 if fresh[i] else pending[2, i]


def _flat(array: NDArray[_Item]) -> NDArray[_Item]:
    """``array`` as one contiguous row (a view when it is contiguous already)."""
    return np.ascontiguousarray(array).reshape(-1)


@attrs.frozen
class AdaPub(StepByStep):
    """AdaPub with an AboveThreshold cluster test (see the module docstring)."""

    grouping: bool = True
    clustering: bool = True
    pivots: int = 20
    kp: float = 0.9
    ki: float = 0.1
    kd: float = 0.0
    seed: int = 0
    perturbation_weight: int = 4
    clustering_weight: int = 1
    name: str = attrs.field(default="AdaPub", init=False)
    # small passes: the per-run work (sorted groups, noise) outgrows the caches of a large one
    max_stacked_runs: ClassVar[int] = 1_000

    def allocation_rule(self) -> SplitUniformRule:
        return SplitUniformRule((self.perturbation_weight, self.clustering_weight), ("perturbation", "clustering"))

    def releases(self, stream: Stream, ledger: WindowLedger) -> Iterator[FloatArray]:
        rule, env = self.allocation_rule(), rule_env(ledger)
        perturb_budget, cluster_budget = (per_run_budget(b) for b in rule.charges(FLOAT, env, (), None))
        epsilon = per_run_column(per_run_budget(env.epsilon))
        runs, d = ledger.runs, stream.dimensions
        rng = np.random.default_rng(self.seed)
        test = (
            ledger.above_threshold(
                epsilon=cluster_budget, sensitivity=2.0, cells=(d,), max_footprint=env.w, purpose="clustering"
            )
            if self.clustering
            else None
        )
        history = GroupHistory(env.w)
        last = np.zeros((runs, d))
        feedback = np.zeros((3, runs, d))  # E_{t−1}, Σ E since the cluster opened, count
        pending = np.empty((3, runs, d))  # E_t and the sum and count with it (see _pid_threshold)
        threshold = np.empty((runs, d))
        run_epsilon = np.ascontiguousarray(np.broadcast_to(epsilon, (runs, 1))[:, 0], dtype=np.float64)
        flat_feedback, flat_pending, flat_threshold = (
            feedback.reshape(3, -1),
            pending.reshape(3, -1),
            threshold.reshape(-1),
        )  # views
        for secret in stream:
            t = secret.t
            x = self._perturb(ledger, secret, perturb_budget, last, rng, t)
            if test is not None:
                _pid_threshold(
                    _flat(last),
                    _flat(x),
                    flat_feedback,
                    run_epsilon,
                    self.kp,
                    self.ki,
                    self.kd,
                    flat_pending,
                    flat_threshold,
                )
                answer, x = history.step(test, secret, x, threshold, "median", 0.0)
                _pid_close(_flat(answer.opened | answer.above), flat_pending, flat_feedback)
            last = x
            yield x

    def _perturb(
        self,
        ledger: WindowLedger,
        secret: Secret,
        budget: float | FloatArray,
        last: FloatArray,
        rng: np.random.Generator,
        t: int,
    ) -> FloatArray:
        """x_t: per-dimension Laplace at t = 1, without grouping or with one dimension (which every
        bucketing leaves alone in its bucket: its group sum is its value); else pivot buckets on r_{t−1}."""
        if not self.grouping or t == 1 or last.shape[1] == 1:
            return ledger.laplace(secret, budget, purpose="perturbation")
        low, high = last.min(axis=1, keepdims=True), last.max(axis=1, keepdims=True)
        pivots = low + (high - low) * rng.random((ledger.runs, self.pivots))
        labels = pivot_buckets(last, pivots)
        groups = self.pivots + 1  # ε per group: (G,), or (runs, G) with one ε per run
        group_budgets = (
            np.full(groups, budget) if isinstance(budget, float) else np.repeat(budget[:, None], groups, axis=1)
        )
        sums = ledger.laplace_groups(secret, labels, group_budgets, purpose="perturbation")
        sizes = (labels[:, :, None] == np.arange(self.pivots + 1)).sum(axis=1)
        return np.asarray(np.take_along_axis(sums / np.maximum(sizes, 1.0), labels, axis=1), dtype=np.float64)
