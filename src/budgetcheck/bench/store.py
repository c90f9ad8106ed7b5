"""Benchmark results in an embedded SQLite file: one row per cell and run.

A cell's rows and its entry in ``cells`` are written in one transaction (with the other cells of
its batch), so an interrupted benchmark holds whole cells only; a second write of the same cell is
refused by the primary key of ``cells``, and its rows go back with it (never double-counted).
``results`` has no key of its own: an index of five columns over every run would take most of the
parent's time in the grid, competing with the workers for the cores; ``rows`` sorts once when read.
``meta`` holds what makes results comparable (runs, seed, γ, each stream's definition): reopening
the file with a benchmark that disagrees is refused, never mixed.
"""

from __future__ import annotations

import csv
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import attrs
import numpy as np
from attrs import AttrsInstance
from numpy.typing import NDArray

from budgetcheck.bench.config import Cell
from budgetcheck.ledger.errors import DataUnavailable, InvalidArgument

FloatArray = NDArray[np.float64]

SCHEMA_VERSION = "1"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS cells (
    mechanism TEXT NOT NULL, stream TEXT NOT NULL, epsilon REAL NOT NULL, w INTEGER NOT NULL,
    runs INTEGER NOT NULL, seconds REAL NOT NULL, truncated INTEGER NOT NULL,
    PRIMARY KEY (mechanism, stream, epsilon, w));
CREATE TABLE IF NOT EXISTS results (
    mechanism TEXT NOT NULL, stream TEXT NOT NULL, epsilon REAL NOT NULL, w INTEGER NOT NULL,
    run INTEGER NOT NULL, mae REAL NOT NULL, mre REAL NOT NULL);
CREATE TABLE IF NOT EXISTS streams (
    mechanism TEXT NOT NULL, stream TEXT NOT NULL, epsilon REAL NOT NULL, w INTEGER NOT NULL,
    draw INTEGER NOT NULL, runs INTEGER NOT NULL, mae REAL NOT NULL, mre REAL NOT NULL);
"""
COLUMNS = ("mechanism", "stream", "epsilon", "w", "run", "mae", "mre")


@attrs.frozen
class CellResult:
    """The per-run errors of one cell and the seconds it took (mechanism and metrics).

    The runs are ``draws`` equal blocks, one per random stream of the cell (draw-major)."""

    cell: Cell
    mae: FloatArray
    mre: FloatArray
    seconds: float
    truncated: bool
    draws: int = 1

    def __attrs_post_init__(self) -> None:
        if self.draws < 1 or len(self.mae) % self.draws:
            raise InvalidArgument(f"draws={self.draws!r} must be >= 1 and divide the {len(self.mae)} runs")

    def per_stream(self) -> tuple[FloatArray, FloatArray]:
        """(MAE, MRE) of each stream of the cell: the mean over its runs, shape (draws,)."""
        return self.mae.reshape(self.draws, -1).mean(axis=1), self.mre.reshape(self.draws, -1).mean(axis=1)


def write_study_tables(rows: Sequence[AttrsInstance], text: str, out: str | Path, stem: str) -> list[Path]:
    """``stem``.csv (one line per attrs row, its fields as the header) and ``stem``.txt (``text``) in ``out``."""
    target = Path(out)
    target.mkdir(parents=True, exist_ok=True)
    table = target / f"{stem}.csv"
    with table.open("w", newline="") as handle:
        writer = csv.writer(handle)
        if rows:
            writer.writerow([field.name for field in attrs.fields(type(rows[0]))])
        writer.writerows(attrs.astuple(row) for row in rows)
    (target / f"{stem}.txt").write_text(text + "\n")
    return [table, target / f"{stem}.txt"]


class ResultStore:
    """An open results file. Use as a context manager, or call ``close``."""

    def __init__(self, path: str | Path, identity: Mapping[str, str] | None = None) -> None:
        self._path = Path(path)
        try:
            self._db = sqlite3.connect(self._path)
            self._db.executescript(_SCHEMA)
            stored = dict(self._db.execute("SELECT key, value FROM meta").fetchall())
        except sqlite3.DatabaseError as error:
            raise InvalidArgument(
                f"results file {str(self._path)!r} is not a budgetcheck results database: {error}"
            ) from error
        if stored.get("schema", SCHEMA_VERSION) != SCHEMA_VERSION:
            raise InvalidArgument(
                f"results file {str(self._path)!r} has schema version {stored['schema']!r}; this version reads "
                f"{SCHEMA_VERSION!r}"
            )
        if identity is not None:
            self._adopt(stored, {"schema": SCHEMA_VERSION, **identity})

    def _adopt(self, stored: dict[str, str], identity: Mapping[str, str]) -> None:
        for key, value in identity.items():
            if stored and stored.get(key) != value:  # a key the file lacks: written by an earlier version
                written = f"{key}={stored[key]}" if key in stored else f"no {key}"
                raise InvalidArgument(
                    f"results file {str(self._path)!r} was written with {written} but this benchmark has "
                    f"{key}={value}; use another results file (results of different grids are never mixed)"
                )
        with self._db:
            self._db.executemany("INSERT OR IGNORE INTO meta VALUES (?, ?)", identity.items())

    def __enter__(self) -> ResultStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._db.close()

    def done(self) -> set[Cell]:
        """The cells already stored."""
        rows = self._db.execute("SELECT mechanism, stream, epsilon, w FROM cells").fetchall()
        return {Cell(*row) for row in rows}

    def meta(self) -> dict[str, str]:
        return dict(self._db.execute("SELECT key, value FROM meta").fetchall())

    def add(self, result: CellResult) -> None:
        """Store one whole cell atomically; a cell stored before is refused."""
        self.add_all([result])

    def add_all(self, results: Sequence[CellResult]) -> None:
        """Store whole cells in one transaction (a finished batch: one commit, not one per cell); a
        cell stored before is refused and none of ``results`` is stored."""
        try:
            with self._db:
                for result in results:
                    c = result.cell
                    self._db.execute(
                        "INSERT INTO cells VALUES (?, ?, ?, ?, ?, ?, ?)",
                        (c.mechanism, c.stream, c.epsilon, c.w, len(result.mae), result.seconds, int(result.truncated)),
                    )
                    self._db.executemany(
                        "INSERT INTO results VALUES (?, ?, ?, ?, ?, ?, ?)",
                        [
                            (c.mechanism, c.stream, c.epsilon, c.w, run, mae, mre)
                            for run, (mae, mre) in enumerate(zip(result.mae.tolist(), result.mre.tolist(), strict=True))
                        ],
                    )
                    stream_mae, stream_mre = result.per_stream()
                    each = len(result.mae) // result.draws
                    pairs = enumerate(zip(stream_mae.tolist(), stream_mre.tolist(), strict=True))
                    self._db.executemany(
                        "INSERT INTO streams VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        [(c.mechanism, c.stream, c.epsilon, c.w, k, each, m, r) for k, (m, r) in pairs],
                    )
        except sqlite3.IntegrityError as error:
            stored = self.done()
            again = next((r.cell for r in results if r.cell in stored), results[0].cell)
            raise InvalidArgument(f"cell {again.key} is already stored in {str(self._path)!r}") from error

    def rows(self) -> Iterator[tuple[str, str, float, int, int, float, float]]:
        """Every result row (mechanism, stream, epsilon, w, run, mae, mre), ordered by cell and run."""
        yield from self._db.execute(
            f"SELECT {', '.join(COLUMNS)} FROM results ORDER BY mechanism, stream, epsilon, w, run"
        )

    def stream_maes(self) -> dict[Cell, FloatArray]:
        """Each stored cell's per-stream mean MAE, in draw order (files from before the ``streams``
        table have none: their cells ran on one stream)."""
        out: dict[Cell, list[float]] = {}
        for *key, mae in self._db.execute(
            "SELECT mechanism, stream, epsilon, w, mae FROM streams ORDER BY mechanism, stream, epsilon, w, draw"
        ):
            out.setdefault(Cell(*key), []).append(float(mae))
        return {cell: np.array(values) for cell, values in out.items()}

    def cell_seconds(self) -> dict[Cell, float]:
        rows = self._db.execute("SELECT mechanism, stream, epsilon, w, seconds FROM cells").fetchall()
        return {Cell(*row[:4]): float(row[4]) for row in rows}

    def export(self, target: str | Path) -> int:
        """Write every result row to a .csv or .parquet file; returns the number of rows."""
        target = Path(target)
        rows = list(self.rows())
        if target.suffix == ".csv":
            with target.open("w", newline="") as handle:
                writer = csv.writer(handle)
                writer.writerow(COLUMNS)
                writer.writerows(rows)
        elif target.suffix == ".parquet":
            try:
                import pyarrow as pa
                import pyarrow.parquet as pq
            except ImportError as error:
                raise DataUnavailable("Parquet export needs pyarrow: pip install 'budgetcheck[parquet]'") from error
            columns: list[tuple[object, ...]] = list(zip(*rows)) if rows else [() for _ in COLUMNS]
            pq.write_table(pa.table(dict(zip(COLUMNS, columns))), target)
        else:
            raise InvalidArgument(f"export target {str(target)!r} must end in .csv or .parquet")
        return len(rows)
