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

from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

from budgetcheck.ledger.errors import DataUnavailable, InvalidArgument

T = TypeVar("T")
R = TypeVar("R")


def on_dask(function: Callable[[T], R], units: Sequence[T], scheduler: str) -> Iterator[R]:
    """``function(unit)`` for every unit on the cluster at ``scheduler``, each result as it finishes.

    A missing ``distributed`` is :class:`DataUnavailable` (install ``budgetcheck[dask]``); an address
    no scheduler answers on is :class:`InvalidArgument` naming it. Units not yet finished when the
    caller stops iterating are cancelled."""
    try:
        from distributed import Client
        from distributed import as_completed as dask_completed
    except ImportError as error:
        raise DataUnavailable("--executor dask needs dask.distributed: pip install 'budgetcheck[dask]'") from error
    if not units:
        return
    try:
        client = Client(scheduler, timeout=30)  # type: ignore[no-untyped-call]
    except (OSError, TimeoutError, ValueError) as error:
        raise InvalidArgument(f"scheduler={scheduler!r}: cannot connect to the Dask scheduler: {error}") from error
    futures = client.map(function, list(units), pure=False)
    try:
        for future in dask_completed(futures):  # type: ignore[no-untyped-call]
            yield future.result()
    finally:
        client.cancel(futures)  # type: ignore[no-untyped-call]
        client.close()  # type: ignore[no-untyped-call]
