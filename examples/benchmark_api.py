"""The utility benchmark from Python: a grid from a TOML file, narrowed, run, resumed and reported.

A researcher adds their own mechanism by name ("package.module:Factory") to ``mechanisms``; here
the example file's built-in ones run on its seasonal streams.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from budgetcheck.bench import Benchmark, run_benchmark, text_report

grid = Benchmark.from_toml(Path(__file__).with_name("benchmark.toml")).select(ws=[40], runs=5)
with tempfile.TemporaryDirectory() as folder:
    results = Path(folder) / "results.sqlite"
    ran, before = run_benchmark(grid, results, progress=False)
    again, stored = run_benchmark(grid, results, progress=False)  # resuming a finished grid runs nothing
    assert again == 0 and stored == ran
    text, uniform_ok = text_report(results)
print(f"{ran} cells run, {stored} stored; Uniform matches w/eps: {uniform_ok}")
print(text)
