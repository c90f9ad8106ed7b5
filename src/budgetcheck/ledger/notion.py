"""The three privacy notions a ledger accounts for, one typed name each.

``w-event`` (Kellaris et al. 2014, Def. 5), ``personalized`` w-event (Du et al. 2025, each user
their own w and ε) and ``swellfish`` (Tex et al., TOP_δ(J) over relevance intervals). A ``StrEnum``:
a member equals its string, so files, JSON and mechanisms that write ``notion = "swellfish"`` keep
working, while the library compares and dispatches on members.
"""

from __future__ import annotations

import enum

from budgetcheck.ledger.errors import InvalidArgument


class Notion(enum.StrEnum):
    """A privacy notion: ``W_EVENT``, ``PERSONALIZED`` or ``SWELLFISH``."""

    W_EVENT = "w-event"
    PERSONALIZED = "personalized"
    SWELLFISH = "swellfish"


def check_notion(value: object, what: str = "notion") -> Notion:
    """``value`` as a :class:`Notion`, or :class:`InvalidArgument` naming ``what`` and the value."""
    if isinstance(value, str) and value in tuple(Notion):
        return Notion(value)
    raise InvalidArgument(f"{what}={value!r} must be one of {[n.value for n in Notion]}")
