"""The configurations production runs a mechanism in, for the stages that run it (issue 43, item 4).

A mechanism can tell settings apart (the ledger's type, whether a journal keeps it in a file, the
stream's stacked rows) and behave only where verify looks. So besides replay's in-memory ledgers
(what :func:`~budgetcheck.execute` makes), replay runs every mechanism again, on fixed cases of its
notion, in each configuration production uses:

- ``ledger file``: the notion's ledger kept in an SQLite ledger file in a temporary directory, opened
  as ``publish`` opens it (:func:`budgetcheck.durable.ledger_file.replay_ledger`, durability
  ``full``): ``run`` on it, audited; and, for a mechanism with a live path, ``releases`` on one file
  against ``run`` on another (:mod:`budgetcheck.verify.live`: two fresh files of one seed draw the
  same noise), the path ``publish`` drives;
- ``bench`` (w-event): a ledger of one ε per run (``WindowLedger.with_epsilons``) over two stacked
  streams, as the benchmark runs every mechanism (:func:`budgetcheck.bench.runner.batch_releases`),
  each run audited under its ε.

Secret access (stage b) runs its non-interference pairs on ledgers kept in a ledger file too
(:mod:`budgetcheck.verify.interference`). The fixed cases are small (T <= 12, one run): a ledger
file commits every charge, so they cost about a fifth of a second each.

Example:
    >>> from budgetcheck.verify.configurations import CONFIGURATIONS
    >>> [c.name for c in CONFIGURATIONS]
    ['in-memory', 'ledger file', 'bench']
"""

from __future__ import annotations

import contextlib
import tempfile
import traceback
from collections.abc import Iterator
from pathlib import Path

import attrs
import numpy as np

from budgetcheck.durable.ledger_file import replay_ledger
from budgetcheck.ledger.core import LedgerCore
from budgetcheck.ledger.errors import InvalidArgument, LedgerCorrupt
from budgetcheck.ledger.notion import Notion
from budgetcheck.ledger.policies import PolicyCollection, StreamPolicy
from budgetcheck.ledger.requirements import RequirementSet
from budgetcheck.strategies import PersonalizedCase, SwellfishCase, VerificationCase
from budgetcheck.verify.live import Store


@attrs.frozen
class Configuration:
    """Where production runs a mechanism: its name and what it is."""

    name: str
    describe: str


IN_MEMORY = Configuration("in-memory", "an in-memory ledger, as execute() makes")
LEDGER_FILE = Configuration(
    "ledger file", "the ledger kept in an SQLite ledger file (durability=full), as publish opens it"
)
BENCH = Configuration("bench", "one epsilon per run over two stacked streams, as the benchmark runs it")
CONFIGURATIONS = (IN_MEMORY, LEDGER_FILE, BENCH)


@contextlib.contextmanager
def ledger_files() -> Iterator[Store]:
    """A store that keeps each fresh ledger in a new ledger file of a temporary directory (removed, every
    ledger closed, on exit)."""
    opened: list[LedgerCore] = []
    with tempfile.TemporaryDirectory() as folder:  # no telling name: a mechanism may look

        def keep(ledger: LedgerCore) -> LedgerCore:
            opened.append(replay_ledger(Path(folder) / f"ledger-{len(opened)}.sqlite", ledger))
            return ledger

        try:
            yield keep
        finally:
            for ledger in opened:
                ledger.close()


def fixed_cases(notion: Notion) -> tuple[VerificationCase | PersonalizedCase | SwellfishCase, ...]:
    """The cases each production configuration runs: one small case of the notion (a quiet start, a
    jump, a return), one run, a fixed seed."""
    rng = np.random.default_rng(20261127)
    if notion == Notion.PERSONALIZED:
        requirements = RequirementSet([(2, 0.5)] * 2 + [(3, 1.0)] * 2)
        bins = rng.integers(-1, 2, size=(10, requirements.n_users)).astype(np.int64)
        bins[4:7] = 1  # every user moves at once
        return (PersonalizedCase(requirements, bins, dimensions=2, runs=1, seed=3),)
    data = np.concatenate([np.full((4, 2), 5.0), rng.poisson(40.0, size=(4, 2)), np.full((4, 2), 5.0)])
    if notion == Notion.SWELLFISH:
        policies = PolicyCollection([StreamPolicy(4, 8, (2.0, 1.0)), StreamPolicy(2, 3, (1.0,))])
        return (SwellfishCase(policies, data, epsilon=1.0, runs=1, seed=3),)
    return (VerificationCase("fixed", data, epsilon=1.0, w=3, runs=1, seed=3),)


def refused_there(exc: BaseException) -> bool:
    """Whether ``exc``, raised in a production configuration, is the library declining to run the mechanism
    there (an InvalidArgument or LedgerCorrupt raised by budgetcheck's own code, e.g. pan-private accounting
    on a ledger file), which production meets too; never a refused spend or a read of a Secret."""
    return isinstance(exc, (InvalidArgument, LedgerCorrupt)) and raised_by_library(exc)


def raised_by_library(exc: BaseException) -> bool:
    """Whether the innermost frame that raised ``exc`` is budgetcheck's own (a ledger refusing an operation
    in a configuration, e.g. pan-private accounting on a ledger file), not the mechanism's."""
    frames = traceback.extract_tb(exc.__traceback__)
    return bool(frames) and "/budgetcheck/" in frames[-1].filename.replace("\\", "/")
