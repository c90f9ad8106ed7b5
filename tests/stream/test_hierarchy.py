"""Hierarchies of aggregations (Chen et al. 2017, §5): malformed trees are refused naming the argument and
value; TreeSums's sensitivity equals the brute-force maximum over neighbours; a weighted release and an
AboveThreshold over a tree's nodes cost what the library derives, never what a caller asserts."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budgetcheck import GuardedStream, Hierarchy, InvalidArgument, Linear, Neighbours, TreeSums, WindowLedger, deviation
from budgetcheck.ledger.queries import weighted_sensitivity

RELATIONS = [Neighbours.one_bin(), Neighbours.one_bin(3), Neighbours.across_bins(2), Neighbours.replace_one()]


@pytest.mark.parametrize(
    ("leaves", "children", "message"),
    [
        (3, ((0, 1),), "2 nodes have no parent"),
        (3, ((0, 1), (1, 2), (3, 4)), "leaf 1 appears under two parents"),
        (4, ((0, 1), (2, 3), (4, 5), (4, 6)), "node 4 appears under two parents"),
        (2, ((0,),), "inner node 2 needs at least two children"),
        (2, ((0, 1, 2),), "node 2 is its own child"),
        (2, ((0, 1), (2, 2)), "lists node 2 twice"),
        (2, ((0, 1), (5, 1)), "names node 5, outside [0, 4)"),
        (4, ((0, 1), (2, 6), (3, 5)), "lie on a cycle"),  # root 4; nodes 5 and 6 are each other's parent
        (2, (), "2 nodes have no parent"),
        (0, (), "leaves=0"),
        (True, (), "leaves=True"),
        (2, "ab", "children='ab'"),
        (2, ((0, 1.5),), "holds 1.5"),
        (2, ((0, True),), "holds True"),
        (2, (0, 1), "children[0]=0"),
    ],
)
def test_malformed_hierarchies_are_refused_naming_argument_and_value(
    leaves: object, children: object, message: str
) -> None:
    with pytest.raises(InvalidArgument, match=message.replace("[", r"\[").replace(")", r"\)").replace("(", r"\(")):
        Hierarchy(leaves, children)  # type: ignore[arg-type]


def test_builders_refuse_bad_sizes() -> None:
    with pytest.raises(InvalidArgument, match="fanout=1"):
        Hierarchy.balanced(8, 1)
    with pytest.raises(InvalidArgument, match="leaves=1"):
        Hierarchy.flat(1)
    with pytest.raises(InvalidArgument, match="leaves=-3"):
        Hierarchy.balanced(-3)
    with pytest.raises(InvalidArgument, match="node=9"):
        Hierarchy.balanced(4).children_of(9)


@given(st.integers(1, 70), st.integers(2, 5))
@settings(max_examples=60, deadline=None)
def test_balanced_trees_are_trees_with_every_leaf_on_the_last_level(leaves: int, fanout: int) -> None:
    tree = Hierarchy.balanced(leaves, fanout)
    a = tree.matrix()
    assert tree.levels[:leaves].tolist() == [tree.height] * leaves
    assert all(2 <= len(c) <= 2 * fanout - 1 for c in tree.children)
    assert a[tree.root].tolist() == [1.0] * leaves  # the root holds every leaf
    assert a[:leaves].tolist() == np.eye(leaves).tolist()
    for node in tree.bottom_up():  # an inner node holds exactly the union of its children
        assert a[node].tolist() == a[list(tree.children_of(int(node)))].sum(axis=0).tolist()
    rounds, n = 0, leaves
    while n > 1:  # ⌈n/fanout⌉ groups per level, a leftover of one joining the group before
        n, rounds = -(-n // fanout) - (n % fanout == 1), rounds + 1
    assert tree.height == 1 + rounds


def brute_force(query: TreeSums | Linear, relation: Neighbours, d: int) -> float:
    xs = np.array(list(itertools.product(range(4), repeat=d)), dtype=np.float64)
    best = 0.0
    for delta in np.array(list(relation.changes(d)), dtype=np.float64).reshape(-1, d):
        moved = xs + delta
        inside = ((moved >= 0) & (moved <= 3)).all(axis=1)
        if inside.any():
            best = max(best, float(np.abs(query.apply(moved[inside]) - query.apply(xs[inside])).sum(axis=1).max()))
    return best


TREES = [
    Hierarchy.balanced(4),
    Hierarchy.flat(3),
    Hierarchy(4, ((0, 1), (4, 2), (5, 3))),  # a caterpillar: leaves at levels 4, 4, 3, 2
    Hierarchy(5, ((0, 1), (2, 3, 4), (5, 6))),
    Hierarchy.balanced(1),
]


@pytest.mark.parametrize("tree", TREES, ids=lambda t: repr(t.children))
@pytest.mark.parametrize("relation", RELATIONS, ids=str)
def test_tree_sums_sensitivity_is_the_brute_force_maximum(tree: Hierarchy, relation: Neighbours) -> None:
    query = TreeSums(tree)
    d = tree.leaves
    computed = query.sensitivity(relation, d)
    assert computed == brute_force(query, relation, d)
    assert computed == Linear(tree.matrix()).sensitivity(relation, d)  # the generic matrix path agrees


@given(st.integers(2, 5), st.data())
@settings(max_examples=40, deadline=None)
def test_weighted_sensitivity_is_the_brute_force_maximum_of_the_weighted_query(
    leaves: int, data: st.DataObject
) -> None:
    tree = data.draw(
        st.sampled_from([Hierarchy.balanced(leaves), Hierarchy.flat(leaves), Hierarchy.balanced(leaves, 3)])
    )
    weights = np.array(data.draw(st.lists(st.integers(0, 4), min_size=tree.nodes, max_size=tree.nodes)))
    relation = data.draw(st.sampled_from(RELATIONS[:3]))
    got = weighted_sensitivity(TreeSums(tree), leaves, weights[None, :], relation)[0]
    assert got == brute_force(Linear(np.diag(weights.astype(float)) @ tree.matrix()), relation, leaves)
    upper = weighted_sensitivity(TreeSums(tree), leaves, weights[None, :], Neighbours.replace_one())[0]
    assert upper >= brute_force(
        Linear(np.diag(weights.astype(float)) @ tree.matrix()), Neighbours.replace_one(), leaves
    )


def _ledger(d: int, runs: int = 1, **kwargs: object) -> tuple[WindowLedger, list[object]]:
    stream = GuardedStream(np.arange(3 * d, dtype=float).reshape(3, d) % 5, **kwargs)  # type: ignore[arg-type]
    ledger = WindowLedger(epsilon=1.0, w=3, runs=runs, seed=7, keep_records=True, sampler="numpy-laplace")
    ledger.bind(stream)
    return ledger, list(stream)


def test_weighted_release_noise_follows_the_derived_sensitivity_and_charges_epsilon() -> None:
    tree = Hierarchy.balanced(8)  # h = 4
    ledger, secrets = _ledger(8, runs=2)
    weights = np.ones((2, tree.nodes), dtype=np.int64)
    weights[1] = 0
    weights[1, tree.root] = 4  # the root pruned: it takes the whole path's weight
    out = ledger.laplace_weighted(secrets[0], TreeSums(tree), weights, 0.5, purpose="perturbation")
    record = ledger.records[-1]
    assert record.amounts.tolist() == [0.5, 0.5]
    assert np.allclose(record.noise_scale[0], 4 / 0.5)  # σ = 4 levels · weight 1
    assert np.allclose(record.noise_scale[1, tree.root], 4 / (0.5 * 4))  # σ = 4, weight 4
    assert np.isnan(out[1, : tree.root]).all() and np.isfinite(out[0]).all()


def test_weighted_release_refuses_bad_weights_and_non_integer_queries_before_charging() -> None:
    tree = Hierarchy.balanced(4)
    ledger, secrets = _ledger(4)
    for bad, message in [
        (np.ones(tree.nodes), "weights must be integers"),
        (np.full(tree.nodes, -1), "weights must be integers >= 0"),
        (np.ones(tree.nodes + 1, dtype=np.int64), r"shape \(7,\)"),
    ]:
        with pytest.raises(InvalidArgument, match=message):
            ledger.laplace_weighted(secrets[0], TreeSums(tree), bad, 0.5)
    with pytest.raises(InvalidArgument, match="integer coefficients"):
        ledger.laplace_weighted(secrets[0], Linear(np.full((1, 4), 0.5)), np.ones(1, dtype=np.int64), 0.5)
    assert ledger.records == () and ledger.window_sum(1) == (0,)


def test_weighted_release_at_remaining_is_accepted_and_one_ulp_more_refused() -> None:
    tree = Hierarchy.balanced(4)
    ledger, secrets = _ledger(4)
    weights = np.ones(tree.nodes, dtype=np.int64)
    over = np.nextafter(1.0, 2.0)
    with pytest.raises(Exception, match="window"):
        ledger.laplace_weighted(secrets[0], TreeSums(tree), weights, over)
    assert ledger.records == ()
    ledger.laplace_weighted(secrets[0], TreeSums(tree), weights, float(ledger.remaining(1)[0]))
    assert ledger.remaining(2)[0] == 0.0


def test_threshold_over_tree_nodes_needs_twice_the_tree_sensitivity() -> None:
    tree = Hierarchy.balanced(4)  # h = 3: deviations over the nodes move by < 2·3
    ledger, secrets = _ledger(4, neighbours=Neighbours.one_bin(2))
    low = ledger.above_threshold(epsilon=0.1, sensitivity=11.9, cells=(tree.nodes,), query=TreeSums(tree))
    with pytest.raises(InvalidArgument, match=r"below 12\.0"):
        low.query(secrets[0], deviation, 1.0)
    assert ledger.records == ()
    test = ledger.above_threshold(epsilon=0.1, sensitivity=12.0, cells=(tree.nodes,), query=TreeSums(tree))
    answer = test.query(secrets[0], deviation, 1.0)
    assert answer.opened.shape == (1, tree.nodes) and answer.opened.all()
    with pytest.raises(InvalidArgument, match="cells=\\(8,\\)"):
        bad = ledger.above_threshold(epsilon=0.1, sensitivity=12.0, cells=(8,), query=TreeSums(tree))
        bad.query(secrets[1], deviation, 1.0)
    with pytest.raises(InvalidArgument, match="linear query with cells"):
        ledger.above_threshold(epsilon=0.1, sensitivity=12.0, cells=(7, 1), query=TreeSums(tree))
