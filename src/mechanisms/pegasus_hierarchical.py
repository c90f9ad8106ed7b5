"""Hierarchical-Stream PeGaSus with Pruning (Chen et al. CCS 2017, Algorithm 4), w-event.

Per timestamp ε/w split ε_pr + ε_p + ε_g (:class:`mechanisms.rules.SplitUniformRule`, default
1:4:1) over a :class:`budgetcheck.Hierarchy` of h levels (default: a balanced binary tree over the
d bins, the paper's §6 layout; the benchmark's flat streams run on it):

1. Prune (lines 1-17, 19): every node's count c_t(v) + noise through ``ledger.laplace_query`` of
   :class:`budgetcheck.TreeSums` at ε_pr (noise scale σ/ε_pr, σ the tree's sensitivity derived by
   the library: h for one person in one bin). Top down, a node not already pruned whose noisy
   count is below β (``pruning_threshold``, default 0: a subtree that looks empty) gets ε_v = h − i + 1 (i its level)
   and its children are pruned; pruned nodes
   get 0 and pass it on; the others get 1. Along any root-to-leaf path the weights sum to at most h
   (exactly h when every leaf is on level h).
2. Perturb (line 23): ``ledger.laplace_weighted`` with the weights ε_v at ε_p: node v gets noise
   of scale σ_w/(ε_v·ε_p), σ_w the derived sensitivity of the weighted tree (h on a balanced tree),
   i.e. the paper's ε_v·ε_p/h. Pruned nodes release 0 (line 21).
3. Group and smooth (lines 24-25): PeGaSus's grouper on every node's true counts, one
   AboveThreshold per node through ``ledger.above_threshold(query=TreeSums)`` at ε_g with
   sensitivity 2σ (the paper's ε_g/h per node with deviation sensitivity 2, summed over a path),
   θ = 5h/ε_g; the Smoother (median by default) over the node's group. A pruned node's 0 enters
   its group's history.

Consistency (``consistency``): Algorithm 4 enforces no sum constraint between a node and its
children (each node is perturbed and smoothed on its own). What holds at every timestamp and in
every run of every variant is the pruning closure: the nodes released as pruned (weight 0, value
exactly 0) are closed under taking descendants, a node whose noisy count fell below β has all its
descendants pruned, and the weights along every root-to-leaf path sum to at most h
(:class:`HierarchicalStep`). ``"pruning"`` releases Algorithm 4's values as they are (that closure
alone). The other two add the consistency a user of hierarchical aggregations expects, an inner
node equal to the sum of its children: the released node values are replaced by their
inverse-variance weighted least-squares consistent estimate (Hay et al. PVLDB 2010, §4, Theorem 3,
each node weighted by its perturbation's inverse variance ∝ ε_v²; :mod:`mechanisms._consistency`),
exact by construction (each inner node the left-to-right float sum of its children). Pruned nodes
stay 0. ``"sums-except-cuts"`` (the default) reconciles the tree pruning left: a node that cut its
subtree keeps its own estimate (Algorithm 4 gave it its subtree's budget, h − i + 1), its pruned
subtree releases 0, and every other inner node equals the sum of its children. ``"sums"`` holds for
every inner node, so a node that cut its subtree is released as 0 (the sum of its pruned children)
and a subtree pruned wrongly takes its mass out of every ancestor: on the test stream of
``tests/builtin/test_pegasus_consistency.py`` at ε = 1 its MAE over all nodes is worse than
``"pruning"``'s, which ``"sums-except-cuts"`` improves (see there). Both are post-processing of the
released values and pruning decisions; the smoother's history keeps the unreconciled values, so
groups and charges are those of ``"pruning"``.

Accounting: the three parts are charged through the ledger at every timestamp and sum to ε/w
exactly (the rule's shares). Deviations from the paper: the grouper runs on every node at a fixed
ε_g (one AboveThreshold over the node vector), so a pruned node inherits only its descendants'
perturbation shares, not their grouping shares (the paper's ε_v(ε_p + ε_g)/h − ε_g/h); the pruning
comparison has no threshold noise (its counts are already released at ε_pr, so the comparison is
post-processing); groups are capped at w timestamps as in flat PeGaSus. ``releases``/``run`` give
the leaves (the stream's d bins, as every mechanism does); :meth:`steps` and :meth:`run_nodes`
give every node.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import ClassVar

import attrs
import numpy as np
from numpy.typing import NDArray

from budgetcheck import GuardedStream, Hierarchy, InvalidArgument, TreeSums, WindowLedger
from budgetcheck.ops import FLOAT
from mechanisms._common import StepByStep, Stream, per_run_budget, per_run_column, rule_env
from mechanisms._consistency import tree_least_squares
from mechanisms._smoothing import GroupHistory, check_smoother
from mechanisms.rules import SplitUniformRule

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]


def _check_hierarchy(value: object) -> Hierarchy | None:
    if value is not None and not isinstance(value, Hierarchy):
        raise InvalidArgument(f"hierarchy={value!r} must be a budgetcheck Hierarchy or None (a balanced binary tree)")
    return value


CONSISTENCIES = ("sums", "sums-except-cuts", "pruning")


def _check_consistency(value: object) -> str:
    if value not in CONSISTENCIES:
        raise InvalidArgument(f"consistency={value!r} must be one of {CONSISTENCIES}")
    return str(value)


def _check_weight(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgument(f"weight={value!r} must be an integer >= 0")
    return value


@attrs.frozen(eq=False)
class HierarchicalStep:
    """One timestamp of every node (columns: the hierarchy's nodes, leaves first): ``release``
    (runs, n; with ``consistency="sums"`` each inner node the sum of its children), ``weights`` ε_v
    (runs, n; 0 = pruned) and ``below`` (the nodes whose noisy count fell below β and which cut their
    subtree, runs × n)."""

    release: FloatArray
    weights: IntArray
    below: BoolArray


def pruning_weights(tree: Hierarchy, noisy: FloatArray, beta: float) -> tuple[IntArray, BoolArray]:
    """Algorithm 4's Prune (lines 1-17) on noisy node counts (runs, n): (ε_v weights, cut nodes)."""
    runs, h = noisy.shape[0], tree.height
    below = noisy < beta  # NaN (a run that paid nothing) is never below: nothing is pruned
    pruned = np.zeros((runs, tree.nodes), dtype=np.bool_)
    cut = np.zeros((runs, tree.nodes), dtype=np.bool_)
    weights = np.zeros((runs, tree.nodes), dtype=np.int64)
    for level in range(1, h + 1):
        nodes = np.flatnonzero(tree.levels == level)
        if level > 1:
            parents = tree.parents[nodes]
            pruned[:, nodes] = pruned[:, parents] | cut[:, parents]
        cut[:, nodes] = below[:, nodes] & ~pruned[:, nodes]
        weights[:, nodes] = np.where(pruned[:, nodes], 0, np.where(cut[:, nodes], h - level + 1, 1))
    return weights, cut


@attrs.frozen
class PeGaSusHierarchical(StepByStep):
    """Prune + Perturb + Group + Smooth per node of a hierarchy (see the module docstring)."""

    hierarchy: Hierarchy | None = attrs.field(default=None, converter=_check_hierarchy)
    smoother: str = attrs.field(default="median", converter=check_smoother)
    threshold_factor: float = 5.0
    pruning_threshold: float = 0.0
    max_group: int | None = None
    pruning_weight: int = attrs.field(default=1, converter=_check_weight)
    perturbation_weight: int = attrs.field(default=4, converter=_check_weight)
    grouping_weight: int = attrs.field(default=1, converter=_check_weight)
    consistency: str = attrs.field(default="sums-except-cuts", converter=_check_consistency)
    name: str = attrs.field(default="PeGaSusHierarchical", init=False)
    max_stacked_runs: ClassVar[int] = 1_000

    def __attrs_post_init__(self) -> None:
        if self.perturbation_weight < 1 or self.grouping_weight < 1:
            raise InvalidArgument(
                f"perturbation_weight={self.perturbation_weight!r} and grouping_weight={self.grouping_weight!r} "
                "must be >= 1 (pruning_weight may be 0: no pruning)"
            )
        if (
            isinstance(self.pruning_threshold, bool)
            or not isinstance(self.pruning_threshold, (int, float))
            or math.isnan(self.pruning_threshold)
        ):
            raise InvalidArgument(f"pruning_threshold={self.pruning_threshold!r} must be a number (β)")

    def allocation_rule(self) -> SplitUniformRule:
        weights = (self.pruning_weight, self.perturbation_weight, self.grouping_weight)
        if self.pruning_weight == 0:
            return SplitUniformRule(weights[1:], ("perturbation", "grouping"))
        return SplitUniformRule(weights, ("pruning", "perturbation", "grouping"))

    def tree(self, dimensions: int) -> Hierarchy:
        """The hierarchy over ``dimensions`` bins: the given one (its leaves must be the bins) or a
        balanced binary tree."""
        if self.hierarchy is None:
            return Hierarchy.balanced(dimensions)
        if self.hierarchy.leaves != dimensions:
            raise InvalidArgument(f"hierarchy has {self.hierarchy.leaves} leaves; the stream has d={dimensions} bins")
        return self.hierarchy

    def steps(self, stream: Stream, ledger: WindowLedger) -> Iterator[HierarchicalStep]:
        """Every node's release at each timestamp (Algorithm 4 lines 18-29)."""
        rule, env = self.allocation_rule(), rule_env(ledger)
        charges = [per_run_budget(b) for b in rule.charges(FLOAT, env, (), None)]
        prune_budget = charges.pop(0) if self.pruning_weight else None
        perturb_budget, group_budget = charges
        tree = self.tree(stream.dimensions)
        query, h, n = TreeSums(tree), tree.height, tree.nodes
        sigma = query.sensitivity(stream.neighbours, stream.dimensions)
        cap = env.w if self.max_group is None else self.max_group
        test = ledger.above_threshold(
            epsilon=group_budget,
            sensitivity=2.0 * sigma,
            cells=(n,),
            max_footprint=cap,
            purpose="grouping",
            query=query,
        )
        history = GroupHistory(cap)
        thresholds = self.threshold_factor * h / per_run_column(group_budget)
        beta = float(self.pruning_threshold)
        for secret in stream:
            if prune_budget is None:
                weights = np.ones((ledger.runs, n), dtype=np.int64)
                cut = np.zeros((ledger.runs, n), dtype=np.bool_)
            else:
                noisy = ledger.laplace_query(secret, query, prune_budget, purpose="pruning")
                weights, cut = pruning_weights(tree, noisy, beta)
            perturbed = ledger.laplace_weighted(secret, query, weights, perturb_budget, purpose="perturbation")
            pruned = weights == 0
            filled = np.where(pruned, 0.0, perturbed)
            variances = (2.0 * (h / (np.maximum(weights, 1) * per_run_column(perturb_budget))) ** 2).reshape(-1)
            smoothed = history.step(test, secret, filled, thresholds, self.smoother, variances)[1]
            release = np.where(pruned, 0.0, smoothed)
            if self.consistency != "pruning":  # post-processing: released values and pruning decisions only
                release = tree_least_squares(tree, release, weights, cut if self.consistency != "sums" else None)
            yield HierarchicalStep(release, weights, cut)

    def releases(self, stream: Stream, ledger: WindowLedger) -> Iterator[FloatArray]:
        """The leaves' releases (the stream's d bins), one timestamp at a time."""
        for step in self.steps(stream, ledger):
            yield np.asarray(step.release[:, : stream.dimensions], dtype=np.float64)

    def run_nodes(self, stream: GuardedStream, ledger: WindowLedger) -> FloatArray:
        """Every node's releases, shape (runs, T, n)."""
        out = [step.release for step in self.steps(stream, ledger)]
        return np.asarray(np.stack(out, axis=1), dtype=np.float64)
