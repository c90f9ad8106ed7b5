"""Independent tasks on an existing Dask cluster, results handed back as each finishes.

The studies' executor for ``--executor dask --scheduler ADDRESS``: one task per unit of work (a
Swellfish household in a zone), each a picklable top-level function whose result depends only on
its arguments, so the caller stores a unit as it finishes and a rerun skips what is stored.

    >>> from budgetcheck.bench.dask_tasks import on_dask
    >>> import distributed
    >>> with distributed.LocalCluster(n_workers=1, processes=False, dashboard_address=":0") as cluster:
    ...     sorted(on_dask(pow, [(2, 3), (3, 2)], cluster.scheduler_address))
    [8, 9]
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from budgetcheck.ledger.errors import DataUnavailable, InvalidArgument

R = TypeVar("R")


def on_dask(function: Callable[..., R], arguments: Sequence[tuple[Any, ...]], scheduler: str) -> Iterator[R]:
    """``function(*args)`` for every tuple of ``arguments``, one Dask task each on the cluster at
    ``scheduler``; yields the results in the order they finish. A task's error is raised here; the
    tasks not yet finished are released when the iteration stops (error, interrupt or the end)."""
    try:
        from distributed import Client
        from distributed import as_completed as dask_completed
    except ImportError as error:
        raise DataUnavailable("--executor dask needs dask.distributed: pip install 'budgetcheck[dask]'") from error
    if not arguments:
        return
    try:
        client = Client(scheduler, timeout=30)  # type: ignore[no-untyped-call]
    except (OSError, TimeoutError, ValueError) as error:
        raise InvalidArgument(f"scheduler={scheduler!r}: cannot connect to the Dask scheduler: {error}") from error
    try:
        futures = client.map(function, *zip(*arguments, strict=True), pure=False)
        for future in dask_completed(futures):  # type: ignore[no-untyped-call]
            yield future.result()
    finally:
        client.close()  # type: ignore[no-untyped-call]
