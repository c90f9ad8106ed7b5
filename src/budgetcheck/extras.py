"""The optional extras and what needs them: the core install runs the ledgers, the publisher and the
durable stores (``publish``, ``audit``, ``keygen``, ``sign``, ``mechanisms``); ``verify``, ``prove`` and
the pytest plugin need the ``verify`` extra, ``bench`` the ``bench`` extra (``pip install
'budgetcheck[verify,bench]'``, or ``[dev]``, which brings everything).

A command that needs an extra calls :func:`require_extra` before any work, so a core install gets one
line naming the extra to install (the CLI exits 2) instead of an ``ImportError`` traceback halfway.
"""

from __future__ import annotations

import importlib.util

from budgetcheck.ledger.errors import InvalidArgument, MissingExtra

# the modules each extra brings (import names; pyproject.toml's [project.optional-dependencies] lists the
# distributions): hypothesis generates cases, z3 proves rules, scipy's beta quantiles bound the statistical
# audit, matplotlib draws --report and the benchmark's figures, tqdm is the benchmark's progress bar
EXTRAS = {
    "verify": ("hypothesis", "z3", "scipy", "matplotlib"),
    "bench": ("matplotlib", "tqdm"),
}


def require_extra(extra: str, what: str = "this") -> None:
    """Raise :class:`~budgetcheck.ledger.errors.MissingExtra` naming ``extra`` if one of its modules does
    not import; ``what`` needs it (the message's subject, e.g. ``"budgetcheck verify"``).

    >>> require_extra("verify")  # installed here (the dev install brings every extra)
    >>> require_extra("gpu")
    Traceback (most recent call last):
    ...
    budgetcheck.ledger.errors.InvalidArgument: extra='gpu' must be one of ['bench', 'verify']
    """
    if extra not in EXTRAS:
        raise InvalidArgument(f"extra={extra!r} must be one of {sorted(EXTRAS)}")
    for module in EXTRAS[extra]:  # found, not imported: asking loads none of them (z3 loads when a proof runs)
        try:
            found = importlib.util.find_spec(module) is not None
        except ImportError:
            found = False
        if not found:
            raise MissingExtra(
                f"{what} needs the {extra} extra, which is not installed (No module named {module!r}): "
                f"pip install 'budgetcheck[{extra}]'"
            )
