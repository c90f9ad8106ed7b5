"""PeGaSusHierarchical (Chen et al. 2017, Algorithm 4) attacked from outside: the pruning closure on every
release, pruning at every inner level, the three budget parts summing to ε exactly (one ulp more refused),
deep and wide trees up to w = 64, the flat reductions, and malformed input named."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from budgetcheck import (
    BudgetExceeded,
    GuardedStream,
    Hierarchy,
    InvalidArgument,
    Neighbours,
    WindowLedger,
    audit_windows,
    execute,
)
from mechanisms import BUILTIN, PeGaSus, PeGaSusHierarchical
from mechanisms.pegasus_hierarchical import HierarchicalStep


def _steps(
    mechanism: PeGaSusHierarchical, data: np.ndarray, *, epsilon: float, w: int, runs: int = 2, seed: int = 3
) -> tuple[list[HierarchicalStep], WindowLedger]:
    stream = GuardedStream(data)
    ledger = WindowLedger(epsilon=epsilon, w=w, runs=runs, seed=seed, keep_records=True, sampler="numpy-laplace")
    ledger.bind(stream)
    return list(mechanism.steps(stream, ledger)), ledger


def check_closure(tree: Hierarchy, step: HierarchicalStep) -> None:
    """The consistency Algorithm 4 guarantees, on one release of every run (module docstring)."""
    weights, cut, release = step.weights, step.below, step.release
    pruned = weights == 0
    assert (release[pruned] == 0.0).all()  # a pruned node releases exactly 0
    assert np.isfinite(release).all()
    a = tree.matrix()
    for node in range(tree.nodes):
        parent = int(tree.parents[node])
        if parent < 0:
            assert not pruned[:, node].any()  # the root is never pruned
            continue
        # pruned iff the parent is pruned or cut its subtree
        assert (pruned[:, node] == (pruned[:, parent] | cut[:, parent])).all()
        assert not (cut[:, node] & pruned[:, node]).any()
    level = tree.levels
    expected = np.where(cut, tree.height - level + 1, np.where(pruned, 0, 1))
    assert (weights == expected).all()
    path_sums = weights @ a  # (runs, d): the weights along each root-to-leaf path
    assert (path_sums <= tree.height).all()
    deepest = tree.levels[: tree.leaves] == tree.height
    assert (path_sums[:, deepest] == tree.height).all()


TREES = {
    "binary-64": Hierarchy.balanced(64),  # deep: h = 7
    "wide-40": Hierarchy.balanced(40, 8),  # wide: fanout 8
    "flat-5": Hierarchy.flat(5),
    "caterpillar-5": Hierarchy(5, ((0, 1), (5, 2), (6, 3), (7, 4))),  # leaves on levels 5, 5, 4, 3, 2
    "d2": Hierarchy.flat(2),
}


@pytest.mark.parametrize("name", sorted(TREES))
@pytest.mark.parametrize("w", [1, 7, 64])
def test_every_release_keeps_the_pruning_closure_and_the_window_budget(name: str, w: int) -> None:
    tree = TREES[name]
    rng = np.random.default_rng(w)
    data = rng.poisson(rng.choice([0.0, 3.0, 300.0], size=tree.leaves), size=(80, tree.leaves)).astype(float)
    data[::4] = 0.0  # empty timestamps: the root's noisy count falls below β now and then
    steps, ledger = _steps(PeGaSusHierarchical(hierarchy=tree, pruning_threshold=20.0), data, epsilon=8.0, w=w)
    assert len(steps) == 80
    for step in steps:
        check_closure(tree, step)
    assert audit_windows(ledger.records, epsilon=8.0, w=w, runs=ledger.runs).ok
    assert sum(int((s.weights == 0).sum()) for s in steps) > 0  # something was pruned


def _staircase(tree: Hierarchy) -> tuple[np.ndarray, dict[int, tuple[int, int]]]:
    """A stream whose timestamp k empties the subtree of one node of each inner level (all else large):
    with a large ε that node, and nothing above it, is cut. Returns the data and {t: (node, level)}."""
    inner_levels = range(1, tree.height)
    targets = {}
    rows = []
    a = tree.matrix()
    for k, level in enumerate(inner_levels):
        node = int(np.flatnonzero((tree.levels == level) & (np.arange(tree.nodes) >= tree.leaves))[-1])
        row = np.full(tree.leaves, 5_000.0)
        row[a[node] == 1] = 0.0
        rows.append(row)
        targets[k] = (node, level)
    return np.array(rows * 3), targets


@pytest.mark.parametrize("tree", [Hierarchy.balanced(16), Hierarchy.balanced(27, 3), TREES["caterpillar-5"]])
def test_pruning_triggers_at_every_inner_level(tree: Hierarchy) -> None:
    data, targets = _staircase(tree)
    steps, _ = _steps(PeGaSusHierarchical(hierarchy=tree, pruning_threshold=100.0), data, epsilon=2_000.0, w=4)
    for step in steps:
        check_closure(tree, step)
    for k, (node, level) in targets.items():
        for t in (k, k + len(targets), k + 2 * len(targets)):
            weights = steps[t].weights
            assert (weights[:, node] == tree.height - level + 1).all(), (t, node, level)
            below = np.flatnonzero(tree.matrix()[node])
            assert (weights[:, below] == 0).all() or level == tree.levels[below].max()
            cut_elsewhere = np.delete(steps[t].below, node, axis=1)
            assert not cut_elsewhere[:, tree.leaves :].any()  # only that node cut among the inner ones
    assert {level for _, level in targets.values()} == set(range(1, tree.height))


@pytest.mark.parametrize("w", [1, 3, 64])
@pytest.mark.parametrize("epsilon", [0.1, 1.0, 3.7])
def test_the_three_parts_sum_to_epsilon_exactly_and_one_ulp_more_is_refused(w: int, epsilon: float) -> None:
    tree = Hierarchy.balanced(6)
    data = np.random.default_rng(1).poisson(20, size=(w + 2, 6)).astype(float)
    _, ledger = _steps(PeGaSusHierarchical(hierarchy=tree), data, epsilon=epsilon, w=w)
    assert [r.purpose for r in ledger.records if r.t == 1] == ["pruning", "perturbation", "grouping"]
    parts = {r.purpose: Fraction(float(r.amounts[0])) for r in ledger.records if r.t == 1}
    assert parts["perturbation"] == 4 * parts["pruning"] == 4 * parts["grouping"]
    per_window = sum(parts.values()) * w
    assert per_window <= Fraction(epsilon)  # the three parts over a window never exceed ε
    assert Fraction(epsilon) - per_window <= Fraction(epsilon) * Fraction(1, 2**48)  # and waste at most ulps
    # at the end of the stream the window is full: its remaining is accepted, one ulp more refused
    t_next = len(data)
    left = float(ledger.remaining(t_next)[0])
    over = float(np.nextafter(left, np.inf))
    before = ledger.window_sum(t_next)
    with pytest.raises(BudgetExceeded):
        ledger.spend(t_next, over, purpose="extra")
    assert ledger.window_sum(t_next) == before  # the refusal changed nothing
    ledger.spend(t_next, left, purpose="extra")


def test_a_single_leaf_without_pruning_is_flat_pegasus_bit_for_bit() -> None:
    data = np.random.default_rng(9).poisson(30, size=(60, 1)).astype(float)
    data[20:30] += 300
    outs = []
    for mechanism in (PeGaSusHierarchical(pruning_weight=0), PeGaSus()):
        stream = GuardedStream(data)
        ledger = WindowLedger(epsilon=1.0, w=9, runs=4, seed=5, keep_records=True, sampler="numpy-laplace")
        ledger.bind(stream)
        outs.append((mechanism.run(stream, ledger), [(r.t, r.purpose, r.amounts.tolist()) for r in ledger.records]))
    assert np.array_equal(outs[0][0], outs[1][0])
    assert outs[0][1] == outs[1][1]


def test_a_flat_hierarchy_splits_the_perturbation_between_root_and_leaves() -> None:
    """One level of aggregation, no pruning: each leaf gets half of flat PeGaSus's perturbation budget
    (the root takes the other half: a person sits in one leaf and the root), the same charges per t."""
    data = np.random.default_rng(2).poisson(30, size=(12, 4)).astype(float)
    flat_stream = GuardedStream(data)
    flat = WindowLedger(epsilon=1.0, w=4, runs=2, seed=1, keep_records=True, sampler="numpy-laplace")
    flat.bind(flat_stream)
    PeGaSus().run(flat_stream, flat)
    _, tree_ledger = _steps(
        PeGaSusHierarchical(hierarchy=Hierarchy.flat(4), pruning_weight=0), data, epsilon=1.0, w=4, runs=2, seed=1
    )
    flat_scale = [r.noise_scale for r in flat.records if r.purpose == "perturbation"][0]
    tree_scale = [r.noise_scale for r in tree_ledger.records if r.purpose == "perturbation"][0]
    assert np.array_equal(tree_scale, np.broadcast_to(2 * flat_scale[:, None], tree_scale.shape))
    charges = [[(r.t, r.purpose, r.amounts.tolist()) for r in led.records] for led in (flat, tree_ledger)]
    assert charges[0] == charges[1]


def test_replace_one_and_larger_contributions_get_more_noise_derived_by_the_library() -> None:
    tree = Hierarchy.balanced(8)  # h = 4
    data = np.full((3, 8), 10.0)
    scales = {}
    for relation in (Neighbours.one_bin(), Neighbours.one_bin(3)):
        stream = GuardedStream(data, neighbours=relation)
        ledger = WindowLedger(epsilon=1.0, w=3, runs=1, seed=1, keep_records=True, sampler="numpy-laplace")
        ledger.bind(stream)
        list(PeGaSusHierarchical(hierarchy=tree).steps(stream, ledger))
        scales[relation.bound] = [r.noise_scale for r in ledger.records if r.purpose == "pruning"][0][0]
    assert scales[3] == pytest.approx(3 * scales[1])


def test_run_gives_the_leaves_and_run_nodes_every_node() -> None:
    data = np.random.default_rng(4).poisson(9, size=(10, 5)).astype(float)
    mechanism = BUILTIN["PeGaSusHierarchical"]()
    assert isinstance(mechanism, PeGaSusHierarchical)
    run = execute(mechanism, data, epsilon=1.0, w=5, runs=2, seed=3)
    assert run.releases.shape == (2, 10, 5)
    stream = GuardedStream(data)
    ledger = WindowLedger(epsilon=1.0, w=5, runs=2, seed=3, sampler="numpy-laplace")
    ledger.bind(stream)
    nodes = mechanism.run_nodes(stream, ledger)
    assert nodes.shape == (2, 10, Hierarchy.balanced(5).nodes)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"hierarchy": "tree"}, "hierarchy='tree'"),
        ({"pruning_weight": -1}, "weight=-1"),
        ({"perturbation_weight": 0}, "perturbation_weight=0"),
        ({"grouping_weight": True}, "weight=True"),
        ({"pruning_threshold": float("nan")}, "pruning_threshold=nan"),
        ({"smoother": "mode"}, "smoother='mode'"),
    ],
)
def test_bad_parameters_are_refused_naming_them(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        PeGaSusHierarchical(**kwargs)  # type: ignore[arg-type]


def test_a_hierarchy_over_other_bins_is_refused_before_any_spend() -> None:
    stream = GuardedStream(np.ones((4, 3)))
    ledger = WindowLedger(epsilon=1.0, w=2, keep_records=True)
    ledger.bind(stream)
    with pytest.raises(InvalidArgument, match="hierarchy has 4 leaves; the stream has d=3"):
        list(PeGaSusHierarchical(hierarchy=Hierarchy.balanced(4)).steps(stream, ledger))
    assert ledger.records == ()
