"""Hierarchical aggregations of a stream's bins: a tree whose leaves are the d bins.

Chen et al. 2017 (PeGaSus), §5: a collection AGG of aggregated streams with h levels, e.g. the
access points of a campus (leaves) and their buildings and the campus (inner nodes = sums of their
children). Nodes 0..d−1 are the leaves (bin j is node j); inner node d + i has the children
``children[i]``. Each inner node is the sum of the leaves below it, so one person counted in one
leaf is counted in that leaf and every ancestor: the release of all node counts is the linear
query :class:`budgetcheck.ledger.queries.TreeSums`, whose sensitivity the library derives from
this tree and the stream's neighbouring relation (the depth of the deepest leaf, for one bin).
"""

from __future__ import annotations

import attrs
import numpy as np
from numpy.typing import NDArray

from budgetcheck.ledger.errors import InvalidArgument

IntArray = NDArray[np.int64]


def _check_leaves(instance: object, attribute: attrs.Attribute[int], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidArgument(f"leaves={value!r} must be an integer >= 1 (the number of bins d)")


def _frozen_children(value: object) -> tuple[tuple[int, ...], ...]:
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise InvalidArgument(f"children={value!r} must be a sequence of sequences of node indices")
    out = []
    for i, group in enumerate(value):
        if isinstance(group, (str, bytes)) or not hasattr(group, "__iter__"):
            raise InvalidArgument(f"children[{i}]={group!r} must be a sequence of node indices")
        members = tuple(group)
        for node in members:
            if isinstance(node, (bool, np.bool_)) or not isinstance(node, (int, np.integer)):
                raise InvalidArgument(f"children[{i}]={members!r} holds {node!r}, which is not a node index")
        out.append(tuple(int(node) for node in members))
    return tuple(out)


@attrs.frozen(eq=False)
class Hierarchy:
    """A tree over ``leaves`` bins; inner node ``leaves + i`` has the children ``children[i]``.

    Validated: every child index names a node, no node has two parents (a leaf twice), no node is
    its own ancestor, every inner node has at least two children (a node with one child would
    repeat its child's stream), and exactly one node (the root) has no parent. With one leaf and
    no inner node the tree is that leaf alone. Levels count from the root (level 1, as
    Algorithm 4's ``for level i = 1 to h``); ``height`` is h, the largest level.
    """

    leaves: int = attrs.field(validator=_check_leaves)
    children: tuple[tuple[int, ...], ...] = attrs.field(converter=_frozen_children)
    parents: IntArray = attrs.field(init=False)
    levels: IntArray = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        nodes = self.leaves + len(self.children)
        parents = np.full(nodes, -1, dtype=np.int64)
        for i, group in enumerate(self.children):
            node = self.leaves + i
            if len(group) < 2:
                raise InvalidArgument(
                    f"children[{i}]={group!r}: inner node {node} needs at least two children (one child repeats it)"
                )
            for child in group:
                if not 0 <= child < nodes:
                    raise InvalidArgument(f"children[{i}]={group!r} names node {child}, outside [0, {nodes})")
                if child == node:
                    raise InvalidArgument(f"children[{i}]={group!r}: node {node} is its own child (not a tree)")
                if parents[child] == node:
                    raise InvalidArgument(f"children[{i}]={group!r} lists node {child} twice")
                if parents[child] >= 0:
                    kind = "leaf" if child < self.leaves else "node"
                    raise InvalidArgument(
                        f"children: {kind} {child} appears under two parents, nodes {parents[child]} and {node}"
                    )
                parents[child] = node
        roots = np.flatnonzero(parents < 0)
        if roots.size != 1:
            raise InvalidArgument(
                f"children={self.children!r} over leaves={self.leaves} is not a tree: "
                f"{roots.size} nodes have no parent ({roots[:8].tolist()}); exactly one root is needed"
            )
        levels = np.zeros(nodes, dtype=np.int64)
        levels[roots[0]] = 1
        order = [int(roots[0])]
        for node in order:  # breadth first from the root: a node on a cycle is never reached
            for child in self._children_of(node):
                levels[child] = levels[node] + 1
                order.append(child)
        if len(order) != nodes:
            unreached = np.flatnonzero(levels == 0)
            raise InvalidArgument(
                f"children={self.children!r} is not a tree: nodes {unreached[:8].tolist()} lie on a cycle "
                "and are not below the root"
            )
        parents.setflags(write=False)
        levels.setflags(write=False)
        object.__setattr__(self, "parents", parents)
        object.__setattr__(self, "levels", levels)

    def _children_of(self, node: int) -> tuple[int, ...]:
        return self.children[node - self.leaves] if node >= self.leaves else ()

    @property
    def nodes(self) -> int:
        """The number of nodes (leaves and inner nodes): the length of a release."""
        return self.leaves + len(self.children)

    @property
    def root(self) -> int:
        return int(np.flatnonzero(self.parents < 0)[0])

    @property
    def height(self) -> int:
        """h, the number of levels (1 for a single leaf)."""
        return int(self.levels.max())

    def children_of(self, node: int) -> tuple[int, ...]:
        """The children of ``node`` (none for a leaf)."""
        if isinstance(node, bool) or not isinstance(node, (int, np.integer)) or not 0 <= node < self.nodes:
            raise InvalidArgument(f"node={node!r} must be an integer in [0, {self.nodes})")
        return self._children_of(int(node))

    def bottom_up(self) -> IntArray:
        """The inner nodes, deepest level first (each after all its children)."""
        inner = np.arange(self.leaves, self.nodes, dtype=np.int64)
        return np.asarray(inner[np.argsort(-self.levels[inner], kind="stable")], dtype=np.int64)

    def matrix(self) -> NDArray[np.float64]:
        """The (nodes, leaves) 0/1 matrix A with A[v, j] = 1 iff leaf j is v or below v: node counts = A·x."""
        a = np.zeros((self.nodes, self.leaves))
        for leaf in range(self.leaves):
            node = leaf
            while node >= 0:
                a[node, leaf] = 1.0
                node = int(self.parents[node])
        a.setflags(write=False)
        return a

    @classmethod
    def flat(cls, leaves: int) -> Hierarchy:
        """One level of aggregation: a root over all the leaves (h = 2; leaves >= 2)."""
        if isinstance(leaves, bool) or not isinstance(leaves, int) or leaves < 2:
            raise InvalidArgument(f"leaves={leaves!r} must be an integer >= 2 for a root over the leaves")
        return cls(leaves, (tuple(range(leaves)),))

    @classmethod
    def balanced(cls, leaves: int, fanout: int = 2) -> Hierarchy:
        """Leaves grouped ``fanout`` at a time, level by level, up to one root (Chen et al. 2017, §6:
        a binary tree over 128 access points). A last group of one joins the group before it, so no
        node has one child; every leaf sits at the same level."""
        if isinstance(fanout, bool) or not isinstance(fanout, int) or fanout < 2:
            raise InvalidArgument(f"fanout={fanout!r} must be an integer >= 2")
        _check_leaves(None, attrs.fields(cls).leaves, leaves)
        children: list[tuple[int, ...]] = []
        current = list(range(leaves))
        while len(current) > 1:
            groups = [current[i : i + fanout] for i in range(0, len(current), fanout)]
            if len(groups[-1]) == 1:
                last = groups.pop()
                groups[-1] = groups[-1] + last
            parents = []
            for group in groups:
                parents.append(leaves + len(children))
                children.append(tuple(group))
            current = parents
        return cls(leaves, tuple(children))
