"""Privacy parameters as a validated value (Kellaris et al. 2014, Definition 4: w-event ε-privacy)."""

from __future__ import annotations

import attrs

from budgetcheck.ledger.validation import check_epsilon, check_positive_int


def _epsilon(value: object) -> float:
    return check_epsilon(value, "epsilon")


def _w(value: object) -> int:
    return check_positive_int(value, "w")


@attrs.frozen
class WEventParams:
    """(ε, w): every window of w consecutive timestamps may spend at most ε in total.

    ``epsilon`` must be finite and > 0, ``w`` an integer >= 1; anything else raises
    :class:`InvalidArgument` naming the argument and the value.
    """

    epsilon: float = attrs.field(converter=_epsilon)
    w: int = attrs.field(converter=_w)
