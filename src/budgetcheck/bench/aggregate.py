"""Raw event data → count streams for four of the benchmark paper's real streams (Schäler et al.
2022, Table 6): WorldCup, Taxi Porto, TDrive and Retail. Each reader takes the file or folder a
user downloads from the original source and returns a (T, d) table of counts; every step is
written down in :data:`budgetcheck.bench.real.PAPER_STREAMS` and tested on small files.

Shared steps: events are binned by time (hours or days) from the first bin of the data; the d
dimensions kept are the d keys (URLs, grid cells, products) with the largest total, ties broken
by the smaller key; the stream keeps the first T bins (bins without events count 0).
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from budgetcheck.bench.exports import number, table_rows
from budgetcheck.ledger.errors import DataUnavailable, InvalidArgument

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

HOUR, DAY = 3600, 86400


def count_table(
    bins: IntArray, keys: IntArray, weights: FloatArray | None, *, length: int, dimensions: int
) -> FloatArray:
    """Σ weight (or the number of events) per (time bin, key), shape (length, dimensions): the
    ``dimensions`` keys with the largest totals over the kept bins (ties: the smaller key first),
    in that order; bins from 0, events at bins >= ``length`` dropped."""
    bins, keys = np.asarray(bins, dtype=np.int64), np.asarray(keys, dtype=np.int64)
    values = np.ones(bins.size) if weights is None else np.asarray(weights, dtype=np.float64)
    kept = (bins >= 0) & (bins < length)
    bins, keys, values = bins[kept], keys[kept], values[kept]
    if bins.size == 0:
        raise InvalidArgument(f"no events fall into the first {length} time bins")
    unique, index = np.unique(keys, return_inverse=True)
    totals = np.bincount(index, weights=values, minlength=unique.size)
    order = np.lexsort((unique, -totals))[:dimensions]  # largest total first, then the smaller key
    column = np.full(unique.size, -1)
    column[order] = np.arange(order.size)
    chosen = column[index] >= 0
    table = np.zeros((length, dimensions))
    np.add.at(table, (bins[chosen], column[index][chosen]), values[chosen])
    return table


# -- WorldCup: the 1998 World Cup web site access logs (ita.ee.lbl.gov, wc_day*_*.gz) ----------

# One 20-byte big-endian record per request: timestamp, clientID, objectID, size, method, status, type, server.
_WORLDCUP_RECORD = np.dtype(
    [
        ("timestamp", ">u4"),
        ("client", ">u4"),
        ("object", ">u4"),
        ("size", ">u4"),
        ("method", "u1"),
        ("status", "u1"),
        ("type", "u1"),
        ("server", "u1"),
    ]
)


def worldcup(path: Path, *, length: int = 1320, dimensions: int = 1289) -> FloatArray:
    """Hourly requests of the most requested URLs (objectID), from the binary logs: ``path`` is a
    folder of wc_day*_*(.gz) files or one such file. Each file is reduced to (hour, URL) counts as
    it is read: the 1.35 billion records never sit in memory together."""
    files = sorted(p for p in path.glob("wc_day*") if p.is_file()) if path.is_dir() else [path]
    if not files:
        raise DataUnavailable(f"{path}: no wc_day*_* log files")
    keys, counts = [], []
    for file in files:
        raw = gzip.decompress(file.read_bytes()) if file.suffix == ".gz" else file.read_bytes()
        if len(raw) % _WORLDCUP_RECORD.itemsize:
            raise InvalidArgument(f"{file}: {len(raw)} bytes is not a whole number of 20-byte log records")
        records = np.frombuffer(raw, dtype=_WORLDCUP_RECORD)
        hour_url = (records["timestamp"].astype(np.int64) // HOUR) << 32 | records["object"].astype(np.int64)
        unique, count = np.unique(hour_url, return_counts=True)
        keys.append(unique)
        counts.append(count)
    unique, index = np.unique(np.concatenate(keys), return_inverse=True)
    totals = np.bincount(index, weights=np.concatenate(counts)).astype(np.float64)
    hours = unique >> 32
    return count_table(hours - hours.min(), unique & 0xFFFFFFFF, totals, length=length, dimensions=dimensions)


# -- Taxi Porto: ECML/PKDD 2015 challenge, train.csv --------------------------------------------


def grid_cells(
    lon: FloatArray, lat: FloatArray, box: tuple[float, float, float, float], shape: tuple[int, int]
) -> IntArray:
    """Row-major cell of each point on a grid of shape (columns, rows) over box = (lon_min, lon_max,
    lat_min, lat_max); −1 for points outside the box."""
    lon_min, lon_max, lat_min, lat_max = box
    columns, rows = shape
    fx = (np.asarray(lon, dtype=np.float64) - lon_min) / (lon_max - lon_min) * columns
    fy = (np.asarray(lat, dtype=np.float64) - lat_min) / (lat_max - lat_min) * rows
    inside = (fx >= 0) & (fx < columns) & (fy >= 0) & (fy < rows)  # False for NaN
    x, y = (np.floor(np.where(inside, f, 0.0)).astype(np.int64) for f in (fx, fy))
    return np.where(inside, y * columns + x, -1)


PORTO_BOX = (-8.73, -8.5, 41.08, 41.24)  # Porto and its surroundings: 75 × 50 = 3,750 cells
PORTO_GRID = (75, 50)


def taxi_porto(path: Path, *, length: int = 672, dimensions: int = 1289) -> FloatArray:
    """Hourly trip starts (first POLYLINE point) per grid cell, for the busiest cells; trips with
    MISSING_DATA = True, an empty POLYLINE or a start outside the box are dropped."""
    stamps, lon, lat = [], [], []
    for line, row in table_rows(path, ("TIMESTAMP", "MISSING_DATA", "POLYLINE")):
        if row["MISSING_DATA"].strip().lower() == "true":
            continue
        try:
            points = json.loads(row["POLYLINE"])
            stamp = int(row["TIMESTAMP"])
            start = (float(points[0][0]), float(points[0][1])) if points else None
        except (ValueError, TypeError, IndexError, KeyError):
            raise InvalidArgument(
                f"{path}: row {line}: TIMESTAMP={row['TIMESTAMP']!r} or POLYLINE is not "
                "seconds and a list of [lon, lat] points"
            ) from None
        if not 0 <= stamp < 2**40:
            raise InvalidArgument(f"{path}: row {line}: TIMESTAMP={stamp} is not a time in seconds since 1970")
        if start is not None:
            stamps.append(stamp)
            lon.append(start[0])
            lat.append(start[1])
    if not stamps:
        raise InvalidArgument(f"{path}: no trip with a start point")
    cells = grid_cells(np.array(lon), np.array(lat), PORTO_BOX, PORTO_GRID)
    times = np.array(stamps, dtype=np.int64)
    bins = (times - times.min() // HOUR * HOUR) // HOUR
    return count_table(np.where(cells >= 0, bins, -1), cells, None, length=length, dimensions=dimensions)


# -- TDrive: Microsoft T-Drive, one text file per taxi: id,YYYY-MM-DD HH:MM:SS,longitude,latitude --

BEIJING_BOX = (116.25, 116.55, 39.8, 40.05)  # inside the 5th ring road: a 10 × 10 grid
TDRIVE_GRID = (10, 10)


def tdrive(path: Path, *, week: int = 168, repeats: int = 4) -> FloatArray:
    """Hourly visits per cell of a 10 × 10 grid (a taxi counts once per cell and hour), over the
    first ``week`` hours from the first record's hour, tiled ``repeats`` times (168 × 4 = 672).
    Every cell is a dimension (100), in row-major order."""
    files = sorted(p for p in path.glob("*.txt") if p.is_file()) if path.is_dir() else [path]
    if not files:
        raise DataUnavailable(f"{path}: no *.txt taxi files")
    visits, first_hours = [], []
    for file in files:
        rows = list(_text_rows(file, 4))
        if not rows:
            continue
        taxi, when, lon, lat = _tdrive_columns(file, rows)
        hours = when // HOUR
        first_hours.append(int(hours.min()))
        cells = grid_cells(lon, lat, BEIJING_BOX, TDRIVE_GRID)
        visits.append(np.unique(np.stack([hours, cells, taxi])[:, cells >= 0], axis=1))  # once per hour, cell, taxi
    if not first_hours:
        raise InvalidArgument(f"{path}: no GPS records")
    hour, cell, _ = np.unique(np.concatenate(visits, axis=1), axis=1)
    bins = hour - min(first_hours)
    table = np.zeros((week, TDRIVE_GRID[0] * TDRIVE_GRID[1]))
    np.add.at(table, (bins[bins < week], cell[bins < week]), 1.0)
    return np.tile(table, (repeats, 1))


def _tdrive_columns(file: Path, rows: list[tuple[int, list[str]]]) -> tuple[IntArray, IntArray, FloatArray, FloatArray]:
    """(taxi id, seconds since 1970, longitude, latitude) of one file's (line, fields) rows, parsed
    by numpy; a bad row is named by its line."""
    columns = list(zip(*(fields for _, fields in rows), strict=True))
    try:
        return (
            np.array(columns[0], dtype=np.int64),
            np.array(columns[1], dtype="datetime64[s]").astype(np.int64),
            np.array(columns[2], dtype=np.float64),
            np.array(columns[3], dtype=np.float64),
        )
    except (ValueError, OverflowError):
        for line, fields in rows:
            try:
                if not -(2**63) <= int(fields[0]) < 2**63:
                    raise ValueError(fields[0])
                np.datetime64(fields[1], "s"), float(fields[2]), float(fields[3])
            except ValueError:
                raise InvalidArgument(
                    f"{file}: line {line}: {','.join(fields)!r} is not id,YYYY-MM-DD HH:MM:SS,lon,lat"
                ) from None
        raise


# -- Retail: UCI Online Retail (Online Retail.xlsx, or the same sheet saved as CSV) -------------


def retail(path: Path, *, length: int = 374, dimensions: int = 1289) -> FloatArray:
    """Daily units sold (Σ Quantity; returns are negative) per StockCode for the most sold
    products, days counted from the first invoice's day; max(0, round(·)) comes after."""
    if path.suffix.lower() in (".xlsx", ".xls"):
        rows: Iterable[tuple[int, dict[str, str]]] = _excel_rows(path)
    else:
        rows = table_rows(path, ("StockCode", "Quantity", "InvoiceDate"))
    codes: dict[str, int] = {}
    dates, keys, quantities = [], [], []
    for line, row in rows:
        try:
            quantity = number(row["Quantity"])
            if quantity is None:
                raise ValueError(row["Quantity"])
            dates.append((line, str(row["InvoiceDate"]).strip()))
        except (ValueError, KeyError):
            raise InvalidArgument(f"{path}: row {line}: Quantity={row.get('Quantity')!r} is malformed") from None
        keys.append(codes.setdefault(str(row["StockCode"]).strip().upper(), len(codes)))
        quantities.append(quantity)
    if not dates:
        raise InvalidArgument(f"{path}: no invoice lines")
    days = invoice_days(path, dates)
    return count_table(days - days.min(), np.array(keys), np.array(quantities), length=length, dimensions=dimensions)


# The date forms of the sheet and of the CSV copies people make of it (US month first; 2-digit years).
INVOICE_FORMS = (
    "%Y-%m-%d %H:%M:%S",
    "%m/%d/%Y %H:%M",
    "%m/%d/%y %H:%M",
    "%d/%m/%Y %H:%M",
    "%d/%m/%y %H:%M",
    "%Y-%m-%d %H:%M",
    "%Y-%m-%dT%H:%M:%S",
    "%Y-%m-%d",
)


def invoice_days(path: Path, dates: list[tuple[int, str]]) -> IntArray:
    """The day (proleptic ordinal) of every (line, InvoiceDate): in the first of ``INVOICE_FORMS``
    that reads every date of the file, so that 1/2/2011 is one day throughout, never a mix."""
    distinct = sorted({text for _, text in dates})
    read: set[str] = set()  # the dates some form reads
    for form in INVOICE_FORMS:
        day = {text: _day(text, form) for text in distinct}
        if None not in day.values():
            return np.array([day[text] for _, text in dates], dtype=np.int64)
        read |= {text for text, ordinal in day.items() if ordinal is not None}
    for line, text in dates:  # no single form reads them all: name a date that no form reads
        if text not in read:
            raise InvalidArgument(f"{path}: row {line}: InvoiceDate={text!r} is not a date and time")
    raise InvalidArgument(f"{path}: the InvoiceDate values mix date forms; expected one of {INVOICE_FORMS}")


def _day(text: str, form: str) -> int | None:
    """The day (proleptic ordinal) of ``text`` read in ``form``; None if it does not read."""
    try:
        return dt.datetime.strptime(text, form).date().toordinal()
    except ValueError:
        return None


def _excel_rows(path: Path) -> Iterator[tuple[int, dict[str, str]]]:
    try:
        import pandas as pd

        frame = pd.read_excel(path, dtype=str)
    except ImportError as error:
        raise DataUnavailable(
            f"{path}: reading .xlsx needs pandas and openpyxl (pip install openpyxl), or save the sheet as CSV"
        ) from error
    for line, record in enumerate(frame.to_dict("records"), start=2):
        yield line, {str(k): str(v) for k, v in record.items()}


def _text_rows(path: Path, fields: int) -> Iterator[tuple[int, list[str]]]:
    with path.open(encoding="utf-8", errors="replace") as handle:
        for line, text in enumerate(handle, start=1):
            if text.strip():
                parts = [part.strip() for part in text.split(",")]
                if len(parts) != fields:
                    raise InvalidArgument(
                        f"{path}: line {line} has {len(parts)} fields, expected {fields}: {text.strip()!r}"
                    )
                yield line, parts
