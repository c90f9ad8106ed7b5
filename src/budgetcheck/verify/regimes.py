"""The regimes the statistical audit runs a w-event mechanism in: budget, bins, relation and window.

The audit's neighbour pairs only judge the releases of the settings they run. A built-in derives
every noise scale from (ε, w, d, the stream's relation) through the ledger, so one regime (ε = 1,
d = 2, one person in one bin, w ∈ {1, 3}) shows what it does in every other. A mechanism that
*vouches* for a sensitivity (``ledger.measure``) is not bound that way: its word can be right at
ε = 1 and wrong at ε = 0.1, right on two bins and wrong from three, right under one relation and
wrong under another (issue 43, item 5). Its audit therefore runs where the word can be wrong:
ε ∈ {0.1, 1, 4}, d ∈ {1, 2, 3, 8}, every kind of relation a stream can carry (one-bin(k),
across-bins(k), replace-one; k = 1 and 3), w ∈ {1, 3, 8}, each value of each axis once around
the base regime (ε = 1, d = 2, one-bin(1), w = 3): eleven audits, each at the significance level
divided by their number (Bonferroni), so the family keeps its 95% confidence.

Example:
    >>> from budgetcheck.verify.regimes import DERIVED, VOUCHED, covered
    >>> len(VOUCHED)
    11
    >>> covered(DERIVED)
    'epsilon in {1}, d in {2}, w in {1, 3}, relations one-bin(1)'
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from budgetcheck.stream.neighbours import DEFAULT, Neighbours


@attrs.frozen
class Regime:
    """One setting of the w-event audit: ε, d bins, the stream's relation and w."""

    epsilon: float = 1.0
    dimensions: int = 2
    neighbours: Neighbours = DEFAULT
    w: int = 3

    def describe(self) -> str:
        return f"epsilon={self.epsilon:g}, d={self.dimensions}, {relation_name(self.neighbours)}, w={self.w}"


def relation_name(relation: Neighbours) -> str:
    """A relation as the verdict prints it: one-bin(1), across-bins(3), replace-one."""
    return "replace-one" if relation.kind == "replace-one" else f"{relation.kind}({relation.bound})"


BASE = Regime()
# what every mechanism gets (before issue 43 the only regimes): the library derives its noise from them
DERIVED: tuple[Regime, ...] = (Regime(w=1), BASE)
# a mechanism that vouches for a sensitivity: each axis's values once around the base regime
VOUCHED: tuple[Regime, ...] = (
    Regime(w=1),
    BASE,
    Regime(w=8),
    Regime(epsilon=0.1),
    Regime(epsilon=4.0),
    Regime(dimensions=1),
    Regime(dimensions=3),
    Regime(dimensions=8),
    Regime(neighbours=Neighbours.one_bin(3)),
    Regime(neighbours=Neighbours.across_bins(3)),
    Regime(neighbours=Neighbours.replace_one()),
)


def covered(regimes: Sequence[Regime]) -> str:
    """The values each axis took over ``regimes`` (what the verdict prints)."""
    epsilons = ", ".join(f"{e:g}" for e in sorted({r.epsilon for r in regimes}))
    ds = ", ".join(str(d) for d in sorted({r.dimensions for r in regimes}))
    ws = ", ".join(str(w) for w in sorted({r.w for r in regimes}))
    relations = ", ".join(dict.fromkeys(relation_name(r.neighbours) for r in regimes))
    return f"epsilon in {{{epsilons}}}, d in {{{ds}}}, w in {{{ws}}}, relations {relations}"


def vouches_in(mechanism: object, regimes: Sequence[Regime]) -> bool:
    """Whether one run of ``mechanism`` on the audit's constant stream charges a vouched sensitivity
    in some regime (cheap: one run of 3w timestamps each). A run that fails proves nothing here:
    stage (a) reports failures."""
    import numpy as np

    from budgetcheck.mechanism.execute import execute
    from budgetcheck.stream.guarded import GuardedStream
    from budgetcheck.verify.owner import ledger_flags

    for regime in regimes:
        stream = GuardedStream(np.full((3 * regime.w, regime.dimensions), 50.0), neighbours=regime.neighbours)
        try:
            ledger = execute(
                mechanism,  # type: ignore[arg-type]
                stream,
                epsilon=regime.epsilon,
                w=regime.w,
                runs=1,
                seed=0,
                **ledger_flags(),
            ).ledger
        except Exception:  # noqa: BLE001 - the mechanism's failure is stage (a)'s to report
            continue
        if ledger.vouched:
            return True
    return False
