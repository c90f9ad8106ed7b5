"""Several mechanisms verified at once, one spawned process each, results in the order asked.

Each mechanism's verification is independent and seeded, so a result does not depend on the
process that computed it or on the number of processes: ``verify_in_order(refs, jobs=2)`` yields
what ``jobs=1`` yields, in the same order, each as soon as it and every earlier one are decided.
"""

from __future__ import annotations

import concurrent.futures
import functools
import multiprocessing
from collections.abc import Callable, Iterator, Sequence

from budgetcheck.verify.stages import STAGES, VerifyResult, verify_mechanism


def verify_in_order(
    references: Sequence[str],
    *,
    jobs: int = 1,
    worker_setup: Callable[[], None] | None = None,
    examples: int | None = None,
    seed: int = 0,
    max_length: int = 60,
    profile: str = "quick",
    stages: str = STAGES,
    trusted_code: bool | None = None,
    allow_vouched: bool | None = None,
) -> Iterator[VerifyResult]:
    """:func:`verify_mechanism` of each reference, in order; with ``jobs`` > 1 in that many spawned
    processes (a fresh interpreter each: no state of the caller's is shared, ``worker_setup`` runs
    first in each). An error of one mechanism (e.g. ``InvalidArgument`` for a name that does not
    load) is raised when its turn comes, and the work not yet started is cancelled."""
    verify = functools.partial(
        verify_mechanism,
        examples=examples,
        seed=seed,
        max_length=max_length,
        profile=profile,
        stages=stages,
        trusted_code=trusted_code,
        allow_vouched=allow_vouched,
    )
    if jobs <= 1 or len(references) <= 1:
        yield from map(verify, references)
        return
    pool = concurrent.futures.ProcessPoolExecutor(
        min(jobs, len(references)), mp_context=multiprocessing.get_context("spawn"), initializer=worker_setup
    )
    try:
        futures = [pool.submit(verify, reference) for reference in references]
        for future in futures:
            yield future.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
