"""The dissimilarity framework's timestep as compiled kernels, around the proved rule compiled from its own source.

On the benchmark's path (a grid session of the ledger, :mod:`budgetcheck.ledger.grid`) a BD timestep is
then: the rule's charges for every run (one kernel: ``BDRule.charges`` compiled with
:func:`budgetcheck.kernel_ops.kernel_ops`), the session's dissimilarity (one kernel and one draw), the test
(one kernel), the session's publication where any run publishes (one kernel and one draw, one kernel to
keep the last release), the rule's advance (one kernel: ``BDRule.advance`` compiled). The same charges
and releases, bit for bit, as :func:`mechanisms._common._dissimilarity_runs` on ``FLOAT``
(``tests/bench/test_grid_session.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
from numpy.typing import NDArray

from budgetcheck import rounding
from budgetcheck.kernel_ops import RuleEnv, Window, compile_function, kernel_ops, usable_epsilon
from budgetcheck.kernels import compiled, off_main
from budgetcheck.ops import FLOAT, per_run
from mechanisms.rules import BDRule

FloatArray = NDArray[np.float64]

COMPILED_RULES = (BDRule,)  # rules whose state is one window of budgets (kernel_ops.Window)
# Up to this many runs the compiled rule is the cheaper (one run after another, ~38 ns per run and timestep
# for charges and advance at 12,000 runs); above it FLOAT's whole-array passes are (~12 ns per run there;
# a BD batch measured faster compiled at 1,200 runs, slower at 2,400: benchmarks/grid-fixed-cost.md, "Sessions
# at 12,000 runs"). Both run the same proved rule, with the same doubles.
MOST_RUNS = 1024


def compiled_runs(
    rule: Any, env: Any, stream: Any, session: Any, runs: int, dimensions: int, filtering: bool
) -> Iterator[FloatArray] | None:
    """The framework's releases with the rule compiled, or None where it does not apply (another rule,
    filtering, more than MOST_RUNS runs, a budget outside the compiled ``share``'s range)."""
    if type(rule) not in COMPILED_RULES or filtering or runs > MOST_RUNS or not usable_epsilon(env.epsilon):
        return None
    initial = rule.initial(FLOAT, env)
    if not isinstance(initial, tuple) or not all(type(value) is float for value in initial):
        return None
    return _releases(rule, env, stream, session, runs, dimensions)


def _releases(rule: Any, env: Any, stream: Any, session: Any, runs: int, dimensions: int) -> Iterator[FloatArray]:
    charge_all, decide, merge, advance_all = _kernels(type(rule))
    epsilon = np.ascontiguousarray(np.broadcast_to(np.asarray(env.epsilon, dtype=np.float64), (runs,)))
    items = per_run(rule.initial(FLOAT, env), runs)
    width = len(items)
    ring = np.stack(items, axis=0) if width else np.zeros((0, runs))  # slot-major: (w − 1, runs)
    totals = np.array(np.broadcast_to(rounding.sum_up_terms(items), (runs,)), dtype=np.float64)
    ops = kernel_ops(ring)
    start, fresh = 0, width - 1  # the first slide takes the bound afresh, as FLOAT's first slide of a tuple does
    dissimilarity_budget, candidate = np.empty(runs), np.empty(runs)
    publish, spent = np.zeros(runs, dtype=np.bool_), np.empty(runs)
    last = np.zeros((runs, dimensions))
    w = env.w
    for secret in stream:
        any_paid = charge_all(ops, epsilon, w, start, fresh, totals, dissimilarity_budget, candidate)
        if any_paid:
            dis = session.dissimilarity(secret, last, dissimilarity_budget)
        else:
            dis = np.full(runs, np.nan)
        if decide(dis, candidate, publish, spent):
            noisy = session.laplace(secret, spent, purpose="publication")
            following = np.empty((runs, dimensions))
            merge(noisy.reshape(runs, dimensions), last, publish, following)
            last = following
        start, fresh = advance_all(ops, epsilon, w, start, fresh, totals, publish, dissimilarity_budget, spent)
        yield last


_BUILT: dict[type, tuple[Any, Any, Any, Any]] = {}


def _kernels(rule_class: type) -> tuple[Any, Any, Any, Any]:
    """The step's kernels around ``rule_class``'s compiled rule, compiled once per process."""
    built = _BUILT.get(rule_class)
    if built is None:
        built = _BUILT[rule_class] = off_main(_build, rule_class)
    return built


@compiled
def decide(dis: FloatArray, candidate: FloatArray, publish: NDArray[np.bool_], spent: FloatArray) -> bool:
    """Publish iff ε_{t,2} > 0 and the noisy dissimilarity exceeds 1/ε_{t,2} (a NaN never does)."""
    any_published = False
    for r in range(dis.size):
        taken = (candidate[r] > 0.0) & (dis[r] > 1.0 / candidate[r])
        publish[r] = taken
        spent[r] = candidate[r] if taken else 0.0
        any_published |= taken
    return any_published


@compiled
def merge(noisy: FloatArray, last: FloatArray, publish: NDArray[np.bool_], out: FloatArray) -> None:
    """The last release: the new one where published, the previous one elsewhere."""
    for r in range(out.shape[0]):
        source = noisy if publish[r] else last
        for j in range(out.shape[1]):
            out[r, j] = source[r, j]


def _build(rule_class: type) -> tuple[Any, Any, Any, Any]:
    from budgetcheck.kernels import _numba

    numba = _numba()
    charges = compile_function(rule_class.charges, numba)  # type: ignore[attr-defined]
    advance = compile_function(rule_class.advance, numba)  # type: ignore[attr-defined]
    njit = numba.njit(nogil=True, error_model="numpy")

    @njit  # type: ignore[untyped-decorator]
    def charge_all(
        ops: Any,
        epsilon: FloatArray,
        w: int,
        start: int,
        fresh: int,
        totals: FloatArray,
        dissimilarity_budget: FloatArray,
        candidate: FloatArray,
    ) -> bool:
        """The rule's charges at this timestamp for every run (decision: wants to publish)."""
        any_paid = False
        for r in range(epsilon.size):
            state = Window(r, start, totals[r], fresh)
            charged = charges(None, ops, RuleEnv(epsilon[r], w), state, True)
            dissimilarity_budget[r] = charged[0]
            candidate[r] = charged[1]
            any_paid |= charged[0] > 0.0
        return any_paid

    @njit  # type: ignore[untyped-decorator]
    def advance_all(
        ops: Any,
        epsilon: FloatArray,
        w: int,
        start: int,
        fresh: int,
        totals: FloatArray,
        publish: NDArray[np.bool_],
        dissimilarity_budget: FloatArray,
        spent: FloatArray,
    ) -> tuple[int, int]:
        """The rule's advance for every run; the window's new (start, fresh), the same in every run."""
        following, slid = start, fresh
        for r in range(epsilon.size):
            state = Window(r, start, totals[r], fresh)
            moved = advance(None, ops, RuleEnv(epsilon[r], w), state, publish[r], (dissimilarity_budget[r], spent[r]))
            totals[r] = moved.total
            following, slid = moved.start, moved.fresh
        return following, slid

    return charge_all, decide, merge, advance_all
