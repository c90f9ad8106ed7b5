"""Run a benchmark's cells, store each as it finishes, resume where a run stopped.

Every cell (mechanism, stream, ε, w) is one batched execution of ``runs`` runs through a
``WindowLedger`` (the same accounting ``verify`` checks), seeded by the benchmark seed and the
cell's key: any cell re-run alone gives the same numbers, on any executor. Executors: in process
(``jobs=1``), local processes (``jobs>1``), or an existing Dask cluster (``scheduler=ADDRESS``).
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from budgetcheck._errors import DataUnavailable, InvalidArgument
from budgetcheck._mechanism import execute
from budgetcheck._verify import load_mechanism
from budgetcheck.bench.config import Benchmark, Cell, StreamSpec, stable_seed
from budgetcheck.bench.metrics import errors, truncate
from budgetcheck.bench.store import CellResult, ResultStore

FloatArray = NDArray[np.float64]


@functools.lru_cache(maxsize=64)
def stream_data(stream: StreamSpec, seed: int) -> FloatArray:
    """The true stream of a spec (cached per process; read-only)."""
    data = np.array(stream.data(seed), dtype=np.float64)
    data.setflags(write=False)
    return data


def cell_seed(benchmark: Benchmark, cell: Cell) -> int:
    """The ledger seed of a cell: a function of the benchmark seed and the cell only."""
    return stable_seed(benchmark.seed, cell.key)


def run_releases(benchmark: Benchmark, cell: Cell) -> FloatArray:
    """The releases of a cell, shape (runs, T, d), truncated on real streams."""
    stream = benchmark.stream(cell.stream)
    execution = execute(load_mechanism(cell.mechanism), stream_data(stream, benchmark.seed), epsilon=cell.epsilon, w=cell.w,
                        runs=benchmark.runs, seed=cell_seed(benchmark, cell))
    return truncate(execution.releases) if stream.truncated else execution.releases


def run_cell(benchmark: Benchmark, cell: Cell) -> CellResult:
    """Run one cell and measure its per-run MAE and MRE (a top-level function: picklable)."""
    stream = benchmark.stream(cell.stream)
    start = time.perf_counter()
    releases = run_releases(benchmark, cell)
    mae, mre = errors(stream_data(stream, benchmark.seed), releases, benchmark.mre_bound)
    return CellResult(cell, mae, mre, time.perf_counter() - start, stream.truncated)


def check_data(benchmark: Benchmark) -> None:
    """Load every stream once, so a missing data file or extra is reported before any cell runs."""
    for stream in benchmark.streams:
        stream_data(stream, benchmark.seed)



def run_benchmark(
    benchmark: Benchmark,
    results: str | Path,
    *,
    jobs: int = 1,
    scheduler: str | None = None,
    progress: bool = True,
) -> tuple[int, int]:
    """Run every cell not yet in ``results``; returns (cells run now, cells already there)."""
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise InvalidArgument(f"jobs={jobs!r} must be an integer >= 1")
    check_data(benchmark)
    with ResultStore(results, benchmark.identity()) as store:
        done = store.done()
        todo = [cell for cell in benchmark.cells() if cell not in done]
        bar = _bar(len(todo), len(done), progress)
        try:
            for result in _execute(benchmark, todo, jobs, scheduler):
                store.add(result)
                bar.update(1)
        finally:
            bar.close()
    return len(todo), len(benchmark.cells()) - len(todo)


def _execute(benchmark: Benchmark, cells: list[Cell], jobs: int, scheduler: str | None) -> Iterable[CellResult]:
    if not cells:
        return
    if scheduler is not None:
        yield from _on_dask(benchmark, cells, scheduler)
    elif jobs == 1:
        for cell in cells:
            yield run_cell(benchmark, cell)
    else:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            futures = [pool.submit(run_cell, benchmark, cell) for cell in cells]
            try:
                for future in as_completed(futures):
                    yield future.result()
            finally:
                for future in futures:
                    future.cancel()


def _on_dask(benchmark: Benchmark, cells: list[Cell], scheduler: str) -> Iterable[CellResult]:
    try:
        from distributed import Client, as_completed as dask_completed
    except ImportError as error:
        raise DataUnavailable("--executor dask needs dask.distributed: pip install 'budgetcheck[dask]'") from error
    try:
        client = Client(scheduler, timeout=30)  # type: ignore[no-untyped-call]
    except (OSError, TimeoutError) as error:
        raise InvalidArgument(f"scheduler={scheduler!r}: cannot connect to the Dask scheduler: {error}") from error
    try:
        futures = client.map(run_cell, [benchmark] * len(cells), cells, pure=False)
        for future in dask_completed(futures):  # type: ignore[no-untyped-call]
            yield future.result()
    finally:
        client.close()  # type: ignore[no-untyped-call]


class _Bar(Protocol):
    """The progress bar's interface (tqdm, or nothing when progress is off)."""

    def update(self, n: int = 1) -> object: ...

    def close(self) -> None: ...


class _NoBar:
    def update(self, n: int = 1) -> object:
        return None

    def close(self) -> None:
        return None


def _bar(total: int, already: int, progress: bool) -> _Bar:
    if not progress:
        return _NoBar()
    from tqdm import tqdm

    bar: _Bar = tqdm(total=total, unit="cell", file=sys.stderr, dynamic_ncols=True,
                     desc=f"cells ({already} stored before)" if already else "cells")
    return bar
