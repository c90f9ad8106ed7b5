"""The benchmark paper's four weekly or monthly streams (Schäler et al. 2022, Table 6), read from the
files the statistics agencies hand out, exactly as downloaded (no line removed by hand):

- Unemployment: FRED's CSV of series LNU03000000 (``observation_date`` or ``DATE``, ``LNU03000000``),
  BLS's flat file ``ln.data.1.AllData`` (tab-separated ``series_id year period value``), or any CSV
  with ``date,value``;
- Flu Outpatient and State Flu: CDC FluView's ``ILINet.csv`` (a title line, then the header; "X"
  where a value is not reported);
- Flu Death: CDC FluView's pneumonia and influenza mortality export (``NUM INFLUENZA DEATHS`` and
  ``NUM PNEUMONIA DEATHS``, numbers with thousands separators), or any CSV with a ``deaths`` column.

Every reader returns the first ``length`` timestamps in file order (the agencies' files are in time
order) as a (T, d) table; :func:`budgetcheck.bench.real.load_paper_stream` then applies max(0, round(·)).
"""

from __future__ import annotations

import csv
import itertools
import math
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from budgetcheck.ledger.errors import InvalidArgument

FloatArray = NDArray[np.float64]

MISSING = frozenset({"", "X", "NA", "N/A", ".", "INSUFFICIENT DATA"})  # how the exports mark a value not reported
_GROUPED = re.compile(r"[+-]?\d{1,3}(,\d{3})+(\.\d*)?")
_TITLE_LINES = 3  # lines a header may follow (ILINet.csv has one title line)


def number(text: str) -> float | None:
    """A reported value: a finite plain number or one with thousands separators ("1,234"); None where
    the export marks it missing (see ``MISSING``); ValueError for anything else (NaN, inf included)."""
    value = text.strip()
    if value.upper() in MISSING:
        return None
    if _GROUPED.fullmatch(value):
        value = value.replace(",", "")
    result = float(value)
    if not math.isfinite(result):
        raise ValueError(text)
    return result


def table_rows(path: Path, needed: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    """(line, row) of a CSV file whose header names every column in ``needed`` and comes within the
    first lines (title lines before it are skipped); names and values are stripped of spaces, blank
    lines skipped, and a row shorter than the header refused."""
    with path.open(newline="", encoding="utf-8-sig", errors="replace") as handle:
        reader = csv.reader(handle)
        read = _head(reader)
        at = next((index for index, names in enumerate(read) if all(name in names for name in needed)), None)
        if at is None:
            missing = [name for name in needed if name not in read[0]]
            raise InvalidArgument(
                f"{path}: expected a CSV header with {list(needed)} within its first "
                f"{_TITLE_LINES + 1} lines; the first line {read[0]} is missing {missing}"
            )
        header = read[at]
        ahead = ((index + 1, fields) for index, fields in enumerate(read) if index > at)
        rest = ((reader.line_num, _stripped(fields)) for fields in reader)
        for line, fields in itertools.chain(ahead, rest):
            if not any(fields):
                continue
            if len(fields) < len(header):
                raise InvalidArgument(f"{path}: row {line} has {len(fields)} fields, the header {len(header)}")
            yield line, dict(zip(header, fields))


def _stripped(fields: list[str]) -> list[str]:
    return [field.strip() for field in fields]


def _head(reader: Iterator[list[str]]) -> list[list[str]]:
    """The fields of the lines a header may be on (title lines, then the header), one list per line
    (no export quotes a newline there); [] for lines past the end."""
    return [_stripped(next(reader, [])) for _ in range(_TITLE_LINES + 1)]


def _names(path: Path) -> set[str]:
    """Every name in the lines a header may be on (to tell which export a file is)."""
    with path.open(newline="", encoding="utf-8-sig", errors="replace") as handle:
        return {name for fields in _head(csv.reader(handle)) for name in fields}


def _value(path: Path, line: int, row: dict[str, str], column: str) -> float | None:
    try:
        return number(row.get(column, ""))
    except ValueError:
        raise InvalidArgument(f"{path}: row {line}: {column}={row[column]!r} is not a number") from None


def _required(path: Path, line: int, row: dict[str, str], column: str) -> float:
    value = _value(path, line, row, column)
    if value is None:
        raise InvalidArgument(
            f"{path}: row {line}: {column}={row.get(column, '')!r} is not reported; this stream needs every timestamp"
        )
    return value


def _first(path: Path, values: list[list[float]], length: int) -> FloatArray:
    if not values:
        raise InvalidArgument(f"{path}: a header but no rows")
    return np.array(values[:length], dtype=np.float64)


def _single(path: Path, rows: list[tuple[int, dict[str, str]]], columns: tuple[str, ...], hint: str) -> None:
    """Refuse an export that holds several areas or age groups in one file (the stream is one series)."""
    for column in columns:
        seen = list(dict.fromkeys(row[column] for _, row in rows if column in row))
        if len(seen) > 1:
            raise InvalidArgument(f"{path}: {column} takes {len(seen)} values ({', '.join(seen[:4])}, …); {hint}")


# -- Unemployment ----------------------------------------------------------------------------------

SERIES = "LNU03000000"  # unemployed persons (thousands), 16 years and over, not seasonally adjusted


def unemployment(path: Path, *, length: int = 478) -> FloatArray:
    """Monthly unemployed persons (thousands) of series LNU03000000, the first ``length`` months."""
    with path.open(encoding="utf-8-sig", errors="replace") as handle:
        first = handle.readline().split()
    if first and first[0] == "series_id":
        return _bls_flat(path, length)
    names = _names(path)
    for date, value in (("observation_date", SERIES), ("DATE", SERIES), ("date", "value")):
        if date in names and value in names:
            rows = table_rows(path, (date, value))
            return _first(path, [[_required(path, line, row, value)] for line, row in rows], length)
    raise InvalidArgument(
        f"{path}: not FRED's CSV of {SERIES} (observation_date or DATE, {SERIES}), BLS's "
        "ln.data flat file (series_id year period value), nor a CSV with date,value"
    )


def _bls_flat(path: Path, length: int) -> FloatArray:
    """BLS's tab-separated flat file: the rows of series LNU03000000 for months M01-M12 (M13, the
    annual average, is not a month)."""
    values: list[list[float]] = []
    with path.open(encoding="utf-8-sig", errors="replace") as handle:
        next(handle)
        for line, text in enumerate(handle, start=2):
            fields = text.split()
            if len(fields) < 4 or fields[0] != SERIES or not re.fullmatch(r"M(0[1-9]|1[0-2])", fields[2]):
                continue
            values.append([_required(path, line, {"value": fields[3]}, "value")])
    return _first(path, values, length)


# -- CDC FluView: ILINet ---------------------------------------------------------------------------


def flu_outpatient(path: Path, *, length: int = 1250) -> FloatArray:
    """Weekly patient visits for influenza-like illness (ILITOTAL) of the national ILINet export."""
    rows = list(table_rows(path, ("ILITOTAL",)))
    _single(path, rows, ("REGION TYPE", "REGION"), "download the national ILINet data only")
    return _first(path, [[_required(path, line, row, "ILITOTAL")] for line, row in rows], length)


def state_flu(path: Path, *, length: int = 492) -> FloatArray:
    """Weekly ILITOTAL per state of the state ILINet export: one dimension per REGION (in order of
    first appearance) that reports a number in every week of the file; a state with a week not
    reported ("X": Florida reports none) is left out. Weeks are (YEAR, WEEK), in file order."""
    weeks: dict[tuple[str, str], int] = {}
    regions: dict[str, int] = {}
    cells = [
        (
            weeks.setdefault((row["YEAR"], row["WEEK"]), len(weeks)),
            regions.setdefault(row["REGION"], len(regions)),
            _value(path, line, row, "ILITOTAL"),
        )
        for line, row in table_rows(path, ("REGION", "YEAR", "WEEK", "ILITOTAL"))
    ]
    table = np.full((len(weeks), len(regions)), np.nan)  # NaN: not reported (number() reads no NaN)
    for week, region, value in cells:
        table[week, region] = np.nan if value is None else value
    complete = table[:, ~np.isnan(table).any(axis=0)]
    if complete.shape[1] == 0:
        raise InvalidArgument(f"{path}: no region reports ILITOTAL in every one of its {len(weeks)} weeks")
    return complete[:length]


# -- CDC FluView: pneumonia and influenza mortality ---------------------------------------------------


def flu_death(path: Path, *, length: int = 374) -> FloatArray:
    """Weekly pneumonia and influenza deaths: NUM INFLUENZA DEATHS + NUM PNEUMONIA DEATHS of the
    national mortality export (or a ``deaths`` column)."""
    if "NUM INFLUENZA DEATHS" not in _names(path):
        rows = table_rows(path, ("deaths",))
        return _first(path, [[_required(path, line, row, "deaths")] for line, row in rows], length)
    parts = ("NUM INFLUENZA DEATHS", "NUM PNEUMONIA DEATHS")
    found = list(table_rows(path, parts))
    _single(path, found, ("AREA", "SUB AREA", "AGE GROUP"), "download the national data for all ages only")
    return _first(path, [[sum(_required(path, line, row, part) for part in parts)] for line, row in found], length)
