"""The utility benchmark of Schäler, Hütter, Schäler 2022 on budgetcheck's checked mechanisms.

``Benchmark`` (the grid as data), ``run_benchmark`` (resumable, stored in SQLite, local processes
or Dask), ``write_report`` (tables, baseline-supremacy check, figures); the personalized and
Swellfish studies live in ``budgetcheck.bench.personalized_study`` and ``.swellfish_study``.
Imports the core, ``mechanism`` and ``durable``; never verification or the CLI.
"""

from __future__ import annotations

from budgetcheck.bench.config import ArtificialStream as ArtificialStream
from budgetcheck.bench.config import Benchmark as Benchmark
from budgetcheck.bench.config import Cell as Cell
from budgetcheck.bench.config import RealStream as RealStream
from budgetcheck.bench.config import Setting as Setting
from budgetcheck.bench.output import Report as Report
from budgetcheck.bench.output import text_report as text_report
from budgetcheck.bench.output import write_report as write_report
from budgetcheck.bench.runner import run_benchmark as run_benchmark
from budgetcheck.bench.runner import run_cell as run_cell
from budgetcheck.bench.store import ResultStore as ResultStore

__all__ = [
    "ArtificialStream",
    "Benchmark",
    "Cell",
    "RealStream",
    "Report",
    "ResultStore",
    "Setting",
    "run_benchmark",
    "run_cell",
    "text_report",
    "write_report",
]
