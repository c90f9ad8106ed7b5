"""Hierarchical consistency by weighted least squares on a tree: post-processing of released node values.

Hay, Rastogi, Miklau, Suciu, "Boosting the accuracy of differentially private histograms through
consistency", PVLDB 3(1), 2010, §4: the consistent estimate is the least-squares solution x̄ of
min Σ_v (x̄[v] − ỹ[v])² subject to x̄[v] = Σ_{c child of v} x̄[c] for every inner node v, computed in
two passes (their Theorem 3): bottom up an estimate z[v] of each node from its own release and its
subtree, top down the residual x̄[parent] − Σ z[child] shared among the children. Hay et al. assume
one noise variance for every node; with unequal variances (Algorithm 4 perturbs node v at ε_v·ε_p/h)
the same two passes with inverse-variance weights give the weighted least-squares solution of
min Σ_v (x̄[v] − ỹ[v])² / Var[v] (Cormode et al., "Differentially private spatial decompositions",
ICDE 2012, §4, the generalisation to non-uniform budgets):

- bottom up: a leaf has z = ỹ, V = Var; an inner node v with children sum S = Σ z[c] (variance
  U = Σ V[c]) has z[v] = (ỹ[v]·U + S·Var[v]) / (U + Var[v]) and V[v] = Var[v]·U / (U + Var[v]);
- top down: x̄[root] = z[root]; a child c of v gets x̄[c] = z[c] + (x̄[v] − S[v])·V[c] / U[v].

A node of variance 0 is known exactly: a pruned node (weight ε_v = 0) is fixed at 0. A node whose
children are all fixed (U = 0) gets z = S, their sum, whatever it released itself. Two readings of
"a pruned subtree stays 0 and its parent is consistent with it" follow, for the node that cut the
subtree in Algorithm 4's Prune (its children all pruned):

- strict (``cuts=None``): that node is the sum of its pruned children, 0, like every inner node;
  pruning's "this subtree looks empty" becomes certain, and a subtree pruned wrongly takes its
  mass out of every ancestor (the ancestors' own releases are pulled down to their children's sum);
- cut nodes as leaves (``cuts`` given): that node keeps an estimate of its own, as Algorithm 4
  intends when it gives it the budget of its whole subtree (ε_v = h − i + 1); its pruned
  descendants stay 0 and drop out of the sums, and every other inner node is the sum of its
  children. The tree reconciled is the one pruning left: the unpruned nodes, the cut nodes its leaves.

Finally every inner node is set, bottom up, to the floating-point sum of its children taken left
to right in the order of :attr:`budgetcheck.Hierarchy.children`, so that each inner node equals
the sum of its children exactly (not only to rounding). The passes read only the released values
and the released pruning weights, never the secret: no privacy cost (post-processing).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from budgetcheck import Hierarchy, InvalidArgument

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


def _slots(tree: Hierarchy) -> IntArray:
    """(inner nodes, max fanout) child indices, padded with ``tree.nodes`` (a column held at 0)."""
    fanout = max((len(group) for group in tree.children), default=0)
    table = np.full((len(tree.children), fanout), tree.nodes, dtype=np.int64)
    for i, group in enumerate(tree.children):
        table[i, : len(group)] = group
    return table


def _child_sums(values: FloatArray, slots: IntArray) -> FloatArray:
    """Σ over each row of ``slots`` of ``values[:, child]``, left to right (the padding adds 0.0)."""
    total = values[:, slots[:, 0]].copy()
    for k in range(1, slots.shape[1]):
        total += values[:, slots[:, k]]
    return total


def tree_least_squares(
    tree: Hierarchy, release: FloatArray, weights: NDArray[np.integer], cuts: NDArray[np.bool_] | None = None
) -> FloatArray:
    """The inverse-variance weighted least-squares consistent release (module docstring), shape (runs, n).

    ``release`` (runs, n) are the released node values, ``weights`` (runs, n) Algorithm 4's ε_v:
    node v's noise variance is proportional to 1/ε_v² (scale σ_w/(ε_v·ε_p), the same ε_p for every
    node of a run), and ε_v = 0 marks a pruned node, fixed at 0. ``cuts`` (runs, n), when given,
    marks the nodes that cut their subtree: each is then a leaf of the tree being reconciled (its
    own release, variance 1/ε_v², its pruned descendants left at 0 and out of the sums), so every
    inner node except those equals the sum of its children; without it, they are 0 as well.
    """
    n = tree.nodes
    runs = release.shape[0] if release.ndim == 2 else -1
    if release.shape != (runs, n) or weights.shape != (runs, n):
        raise InvalidArgument(f"release {release.shape} and weights {weights.shape} must both be (runs, {n})")
    if tree.leaves == n:  # a single leaf: nothing to reconcile
        return np.asarray(release, dtype=np.float64).copy()
    slots = _slots(tree)
    levels = tree.levels
    h = tree.height
    eps = np.asarray(weights, dtype=np.float64)
    fixed = eps == 0.0
    cut_leaf = np.zeros((runs, n), dtype=np.bool_) if cuts is None else np.asarray(cuts, dtype=np.bool_) & ~fixed
    var = np.where(fixed, 0.0, 1.0 / np.where(fixed, 1.0, eps) ** 2)
    y = np.where(fixed, 0.0, np.asarray(release, dtype=np.float64))
    # one extra column (index n) stays 0: the padding of ``slots``
    z = np.zeros((runs, n + 1))
    v = np.zeros((runs, n + 1))
    s = np.zeros((runs, n + 1))
    u = np.zeros((runs, n + 1))
    leaves = np.arange(tree.leaves)
    z[:, leaves], v[:, leaves] = y[:, leaves], var[:, leaves]
    inner_levels = [np.flatnonzero((levels == level) & (np.arange(n) >= tree.leaves)) for level in range(1, h + 1)]
    for level in range(h, 0, -1):  # bottom up: a node's children sit one level below it
        inner = inner_levels[level - 1]
        if inner.size == 0:
            continue
        rows = slots[inner - tree.leaves]
        s[:, inner], u[:, inner] = _child_sums(z, rows), _child_sums(v, rows)
        total = u[:, inner] + var[:, inner]
        known = total == 0.0  # the children's sum is exact (all fixed) and the node is fixed too
        safe = np.where(known, 1.0, total)
        estimate = np.where(known, s[:, inner], (y[:, inner] * u[:, inner] + s[:, inner] * var[:, inner]) / safe)
        own = cut_leaf[:, inner]  # a node that cut its subtree stands for it: its own release and variance
        z[:, inner] = np.where(own, y[:, inner], estimate)
        v[:, inner] = np.where(own, var[:, inner], np.where(known, 0.0, var[:, inner] * u[:, inner] / safe))
    x = np.zeros((runs, n + 1))
    root = tree.root
    x[:, root] = z[:, root]
    for level in range(2, h + 1):  # top down: share each parent's residual by the children's variances
        nodes = np.flatnonzero(levels == level)
        parents = tree.parents[nodes]
        spread = u[:, parents]
        share = np.where(spread == 0.0, 0.0, v[:, nodes] / np.where(spread == 0.0, 1.0, spread))
        x[:, nodes] = z[:, nodes] + (x[:, parents] - s[:, parents]) * share
    for level in range(h, 0, -1):  # exact by construction: each inner node the sum of its children
        inner = inner_levels[level - 1]
        if inner.size:
            x[:, inner] = np.where(cut_leaf[:, inner], x[:, inner], _child_sums(x, slots[inner - tree.leaves]))
    return np.asarray(x[:, :n], dtype=np.float64)
