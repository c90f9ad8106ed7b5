"""The ledger owner's consent for the ledgers verify builds (issue 43, item 2).

Every ledger a stage builds to run a mechanism (replay, the live path, non-interference, exploration,
the statistical audit, the report) is built with :func:`ledger_flags`: by default it allows neither
the mechanism's in-process code (``isolation='trusted'``) nor a vouched sensitivity (``measure``),
as the ledgers of ``publish`` and ``bench`` do, so a mechanism that asks for either is refused there
as it would be in production. ``budgetcheck verify --trusted-code --allow-vouched`` verifies it on
ledgers that allow them, and reports it as such (in-process code: inconclusive; a vouched
sensitivity: never proved, only the statistical audit bounds it).

>>> with allowing(trusted_code=False, allow_vouched=True):
...     ledger_flags()
{'trusted_code': False, 'allow_vouched': True}
>>> ledger_flags()
{'trusted_code': False, 'allow_vouched': False}
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import TypedDict

from budgetcheck.ledger.errors import InvalidArgument


class OwnerFlags(TypedDict):
    """The owner's keyword arguments of a ledger's constructor."""

    trusted_code: bool
    allow_vouched: bool


_FLAGS: contextvars.ContextVar[tuple[bool, bool]] = contextvars.ContextVar("verify_owner", default=(False, False))


@contextlib.contextmanager
def allowing(*, trusted_code: bool, allow_vouched: bool) -> Iterator[None]:
    """Within the block, the ledgers verify builds carry these owner flags."""
    for name, value in (("trusted_code", trusted_code), ("allow_vouched", allow_vouched)):
        if not isinstance(value, bool):
            raise InvalidArgument(f"{name}={value!r} must be True or False")
    token = _FLAGS.set((trusted_code, allow_vouched))
    try:
        yield
    finally:
        _FLAGS.reset(token)


def ledger_flags() -> OwnerFlags:
    """The owner flags for a ledger verify builds now: keyword arguments of every ledger's constructor."""
    trusted_code, allow_vouched = _FLAGS.get()
    return {"trusted_code": trusted_code, "allow_vouched": allow_vouched}
