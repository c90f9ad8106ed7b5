"""Run independent units of a study on a Dask cluster, yielding each result as it finishes.

The engine behind ``--executor dask --scheduler ADDRESS``: the same call runs on a local cluster
(``dask scheduler`` and ``dask worker --nworkers 2`` on one machine, or a ``LocalCluster``) and on a
real one. The caller stores every finished unit (so a rerun resumes) and reports progress.

Example:
    >>> from distributed import LocalCluster
    >>> with LocalCluster(n_workers=1, processes=False, dashboard_address=":0") as cluster:
    ...     sorted(on_dask(abs, [-2, 1, -3], cluster.scheduler_address))
    [1, 2, 3]
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from budgetcheck.ledger.errors import DataUnavailable, InvalidArgument

T = TypeVar("T")
R = TypeVar("R")


def on_dask(function: Callable[[T], R], units: Sequence[T], scheduler: str) -> Iterator[R]:
    """``function(unit)`` for every unit on the cluster at ``scheduler``, each result as it finishes.

    A missing ``distributed`` is :class:`DataUnavailable` (install ``budgetcheck[dask]``); an address
    no scheduler answers on is :class:`InvalidArgument` naming it. Units not yet finished when the
    caller stops iterating are cancelled."""
    try:
        from distributed import as_completed as dask_completed
    except ImportError as error:
        raise DataUnavailable("--executor dask needs dask.distributed: pip install 'budgetcheck[dask]'") from error
    if not units:
        return
    client = connect(scheduler)
    futures = client.map(function, list(units), pure=False)
    try:
        for future in dask_completed(futures):  # type: ignore[no-untyped-call]
            yield future.result()
    finally:
        client.cancel(futures)
        client.close()


def connect(scheduler: str) -> Any:
    """A ``distributed.Client`` of the scheduler at ``scheduler``. An address no scheduler answers on (or
    that dask cannot parse) is :class:`InvalidArgument` naming it; a scheduler with no worker yet is said
    on stderr, since the run then waits, silent, until one connects (``dask worker ADDRESS``)."""
    try:
        from distributed import Client
    except ImportError as error:
        raise DataUnavailable("--executor dask needs dask.distributed: pip install 'budgetcheck[dask]'") from error
    try:
        client = Client(scheduler, timeout=30)  # type: ignore[no-untyped-call]
    except (OSError, TimeoutError, ValueError) as error:  # ValueError: an address dask cannot parse
        raise InvalidArgument(f"scheduler={scheduler!r}: cannot connect to the Dask scheduler: {error}") from error
    if not client.scheduler_info().get("workers"):
        print(
            f"waiting for a worker: the Dask scheduler at {scheduler} has none yet "
            f"(start one: dask worker {scheduler})",
            file=sys.stderr,
            flush=True,
        )
    return client
