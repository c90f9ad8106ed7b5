"""Run a benchmark's cells, store each as it finishes, resume where a run stopped.

Cells run in batches (:meth:`Benchmark.batch`): one mechanism and setting over the stacked
artificial streams of one length, ``runs`` runs per stream, through one ``WindowLedger`` (the same
accounting ``verify`` checks), seeded by the benchmark seed and the batch: any cell re-run alone
(its batch runs again) gives the same numbers, on any executor. Executors: in process
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

from budgetcheck.bench.config import Batch, Benchmark, Cell, StreamSpec
from budgetcheck.bench.memory import keep_freed_memory
from budgetcheck.bench.metrics import errors, truncate
from budgetcheck.bench.store import CellResult, ResultStore
from budgetcheck.bench.worker import start_worker
from budgetcheck.ledger.errors import DataUnavailable, InvalidArgument
from budgetcheck.ledger.grid import grid_sessions
from budgetcheck.mechanism.execute import execute
from budgetcheck.mechanism.loading import load_mechanism
from budgetcheck.stream.guarded import GuardedStream

FloatArray = NDArray[np.float64]


@functools.lru_cache(maxsize=64)
def stream_data(stream: StreamSpec, seed: int, draw: int = 0) -> FloatArray:
    """The ``draw``-th true stream of a spec (cached per process; read-only)."""
    data = np.array(stream.data(seed, draw), dtype=np.float64)
    data.setflags(write=False)
    return data


def batch_truths(benchmark: Benchmark, batch: Batch) -> list[list[FloatArray]]:
    """The true streams of a batch: per stream of ``batch.streams``, its ``benchmark.draws`` draws."""
    specs = [benchmark.stream(name) for name in batch.streams]
    return [[stream_data(spec, benchmark.seed, k) for k in range(benchmark.draws(spec))] for spec in specs]


def batch_releases(benchmark: Benchmark, batch: Batch) -> list[FloatArray]:
    """The releases of every cell of a batch (in ``batch.cells()`` order), each (N·runs, T, d) for N
    draws of the cell's stream (draw-major: draw k owns runs [k·runs, (k+1)·runs)), truncated on
    real streams.

    The batch's S·N streams run stacked through one ``WindowLedger`` of S × N × E × runs runs, E the
    batch's ε: stream s, draw k owns the (s·N + k)-th block of E·runs runs, and within it ε_e the
    block [e·runs, (e+1)·runs) (``WindowLedger.with_epsilons``), so Python's per-timestamp cost is
    paid once per batch.
    """
    specs = [benchmark.stream(name) for name in batch.streams]
    truths = batch_truths(benchmark, batch)
    data = [truth for per_spec in truths for truth in per_spec]
    draws = len(truths[0])  # the streams of a batch are all artificial or one real stream
    stream = GuardedStream(data[0]) if len(data) == 1 else GuardedStream.stacked(data)
    epsilons = np.tile(np.repeat(batch.epsilons, benchmark.runs), len(data))
    with grid_sessions():  # the built-ins' passes as compiled steps (ledger.grid): the same charges and releases
        execution = execute(
            load_mechanism(batch.mechanism),
            stream,
            epsilon=epsilons,
            w=batch.w,
            runs=epsilons.size,
            seed=batch.seed,
            trusted_code=benchmark.trusted_code,
            allow_vouched=benchmark.allow_vouched,
        )
    shape = execution.releases.shape[1:]
    blocks = execution.releases.reshape(len(specs), draws, len(batch.epsilons), benchmark.runs, *shape)
    out = []
    for spec, per_stream in zip(specs, blocks, strict=True):
        for e in range(len(batch.epsilons)):
            block = per_stream[:, e].reshape(draws * benchmark.runs, *shape)
            out.append(truncate(block) if spec.truncated else block)
    return out


def run_releases(benchmark: Benchmark, cell: Cell) -> FloatArray:
    """The releases of one cell on its first stream (draw 0), shape (runs, T, d) (its batch runs;
    the others' are dropped)."""
    batch = benchmark.batch(cell)
    return batch_releases(benchmark, batch)[batch.cells().index(cell)][: benchmark.runs]


def run_batch(benchmark: Benchmark, batch: Batch) -> list[CellResult]:
    """Run a batch and measure every cell's per-run MAE and MRE (a top-level function: picklable).

    Each cell is charged the batch's time divided by its number of cells.
    """
    keep_freed_memory()
    start = time.perf_counter()
    releases = batch_releases(benchmark, batch)
    seconds = (time.perf_counter() - start) / len(releases)
    truths = dict(zip(batch.streams, batch_truths(benchmark, batch), strict=True))
    results = []
    for cell, block in zip(batch.cells(), releases, strict=True):
        stream = benchmark.stream(cell.stream)
        per_draw = [
            errors(truth, block[k * benchmark.runs : (k + 1) * benchmark.runs], benchmark.mre_bound)
            for k, truth in enumerate(truths[cell.stream])
        ]
        mae = np.concatenate([m for m, _ in per_draw])
        mre = np.concatenate([r for _, r in per_draw])
        results.append(CellResult(cell, mae, mre, seconds, stream.truncated, draws=len(per_draw)))
    return results


def run_cell(benchmark: Benchmark, cell: Cell) -> CellResult:
    """One cell's result: its batch runs, the cell's share is returned (the same numbers as in any grid)."""
    batch = benchmark.batch(cell)
    return run_batch(benchmark, batch)[batch.cells().index(cell)]


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
        wanted = set(todo)
        batches = largest_first(benchmark, list(dict.fromkeys(benchmark.batch(cell) for cell in todo)))
        bar = _bar(len(todo), len(done), progress)
        try:
            for finished in _execute(benchmark, batches, jobs, scheduler):
                mine = [result for result in finished if result.cell in wanted]  # a batch may hold unselected cells
                store.add_all(mine)
                bar.update(len(mine))
        finally:
            bar.close()
    return len(todo), len(benchmark.cells()) - len(todo)


def largest_first(benchmark: Benchmark, batches: list[Batch]) -> list[Batch]:
    """The batches by their number of run-timestamp-values, largest first (ties keep their order):
    workers that take the long passes first finish together instead of one waiting on the last
    long pass. The streams are in the process's cache (:func:`check_data`)."""

    def work(batch: Batch) -> int:
        specs = [benchmark.stream(name) for name in batch.streams]
        values = sum(benchmark.draws(s) * stream_data(s, benchmark.seed).size for s in specs)
        return len(batch.epsilons) * benchmark.runs * values

    return sorted(batches, key=work, reverse=True)


def _execute(
    benchmark: Benchmark, batches: list[Batch], jobs: int, scheduler: str | None
) -> Iterable[list[CellResult]]:
    if not batches:
        return
    if scheduler is not None:
        yield from _on_dask(benchmark, batches, scheduler)
    elif jobs == 1:
        for batch in batches:
            yield run_batch(benchmark, batch)
    else:
        with ProcessPoolExecutor(max_workers=jobs, initializer=start_worker) as pool:
            futures = [pool.submit(run_batch, benchmark, batch) for batch in batches]
            try:
                for future in as_completed(futures):
                    yield future.result()
            finally:
                for future in futures:
                    future.cancel()


def _on_dask(benchmark: Benchmark, batches: list[Batch], scheduler: str) -> Iterable[list[CellResult]]:
    from budgetcheck.bench.dask_pool import connect

    try:
        from distributed import as_completed as dask_completed
    except ImportError as error:
        raise DataUnavailable("--executor dask needs dask.distributed: pip install 'budgetcheck[dask]'") from error
    client = connect(scheduler)
    try:
        futures = client.map(run_batch, [benchmark] * len(batches), batches, pure=False)
        for future in dask_completed(futures):  # type: ignore[no-untyped-call]
            yield future.result()
    finally:
        client.close()


class _Bar(Protocol):
    """The progress bar's interface (tqdm, or nothing when progress is off)."""

    def update(self, n: int = 1) -> object: ...

    def close(self) -> None: ...


class _NoBar:
    def update(self, n: int = 1) -> object:
        return None

    def close(self) -> None:
        return None


class _LineBar:
    """Progress for a log (stderr not a terminal): a plain line at every tenth of the cells, no ``\\r``."""

    def __init__(self, total: int, already: int) -> None:
        self._total, self._done, self._next, self._start = total, 0, 1, time.perf_counter()
        print(
            f"cells: {total} to run" + (f" ({already} stored before)" if already else ""), file=sys.stderr, flush=True
        )

    def update(self, n: int = 1) -> object:
        self._done += n
        if self._total and self._done * 10 >= self._next * self._total:
            self._next = self._done * 10 // self._total + 1
            print(
                f"cells: {self._done}/{self._total} ({100 * self._done // self._total}%) after "
                f"{time.perf_counter() - self._start:.0f} s",
                file=sys.stderr,
                flush=True,
            )
        return None

    def close(self) -> None:
        return None


def _bar(total: int, already: int, progress: bool) -> _Bar:
    if not progress:
        return _NoBar()
    if not sys.stderr.isatty():
        return _LineBar(total, already)
    from tqdm import tqdm

    bar: _Bar = tqdm(
        total=total,
        unit="cell",
        file=sys.stderr,
        dynamic_ncols=True,
        desc=f"cells ({already} stored before)" if already else "cells",
    )
    return bar
