"""Hypothesis runs of verify that depend on their seed and the mechanism only.

Hypothesis mixes constants found in the source of every *local* module in ``sys.modules`` into what
it draws (a comparison with 10**6 in the code makes 10**6 a likely count). Which modules are loaded
and which count as local depend on what the process did before and on how budgetcheck was installed
(editable or not), so the same ``--seed`` gave other streams to a mechanism verified after another
one, or in a worker process, than to the same mechanism on its own. Here the pool of local constants
is the mechanism's own module's, nothing else, for the length of a run: the constants that can
trigger a data-dependent leak stay in reach, and the draws are the same in every process.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from hypothesis import HealthCheck, Phase, Verbosity, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis.strategies import SearchStrategy


def run_seeded(
    check: Callable[[Any], None],
    strategy: SearchStrategy[Any],
    *,
    examples: int,
    seed: int,
    phases: Sequence[Phase],
    mechanism: object,
) -> None:
    """Run ``check`` on ``examples`` draws of ``strategy`` under ``seed``: no example database,
    no deadline or health check, quiet, one bug reported; local constants from ``mechanism``'s
    module only. Exceptions of ``check`` propagate (after shrinking, when ``phases`` has it)."""
    runner: Any = settings(
        max_examples=examples,
        database=None,
        deadline=None,
        verbosity=Verbosity.quiet,
        suppress_health_check=list(HealthCheck),
        phases=list(phases),
        report_multiple_bugs=False,
    )(given(strategy)(check))
    with mechanism_constants(mechanism):
        hypothesis_seed(seed)(runner)()


@contextlib.contextmanager
def mechanism_constants(mechanism: object) -> Iterator[None]:
    """Hypothesis's local constants are those of the module that defines ``mechanism``'s class
    while the block runs (see the module docstring); its caches are emptied on entry and exit so
    that nothing drawn before or after sees this pool or the other."""
    try:
        from hypothesis.internal.conjecture import providers
        from hypothesis.internal.constants_ast import Constants, constants_from_module
        from hypothesis.internal.floats import float_to_int
        from sortedcontainers import SortedSet  # type: ignore[import-untyped]
    except ImportError:  # a Hypothesis without local constants: nothing to pin
        yield
        return
    module = sys.modules.get(type(mechanism).__module__)
    found = constants_from_module(module) if module is not None else Constants()
    pinned = Constants(
        integers=SortedSet(found.integers),
        floats=SortedSet(found.floats, key=float_to_int),
        bytes=SortedSet(found.bytes),
        strings=SortedSet(found.strings),
    )
    original = providers._get_local_constants
    providers.CONSTANTS_CACHE.cache.clear()
    providers._get_local_constants = lambda: pinned
    try:
        yield
    finally:
        providers._get_local_constants = original
        providers.CONSTANTS_CACHE.cache.clear()
