"""Where the fixed cost per timestep of a grid pass goes (issue 32, item 4), in one run.

For each mechanism, a pass over the benchmark's 20 artificial streams stacked with one run each
(ε = 1, w = 120, T = 1000: at 20 runs a pass is almost all fixed cost), prints:

- its CPU microseconds per timestep (least of a few passes, unprofiled);
- Python-level calls and numpy calls (C functions and methods of numpy) per timestep, from cProfile;
- the profiled time split by layer: the ledger's window check (``ledger/windows.py``, ``exact.py``),
  its noise (``ledger/noise.py``), the rest of the ledger's charged operation (validation, the
  sensitivity, the record, the secret, the per-run layout: ``ledger/``, ``stream/``), and the
  mechanism with its budget rule (``mechanisms/``, ``ops.py``, ``rounding.py``). A C function's time
  goes to the layers of its callers, in proportion to what each caller spent in it; numpy's Python
  wrappers belong to their costliest caller's layer.

Then the cost of one charged operation at 20 runs against the plain numpy work it does (one
Laplace draw per run, scaled and added). cProfile inflates Python calls more than numpy's: read
the split as where the calls are, the unprofiled figures as what they cost.

    python benchmarks/grid_profile.py              # BD, BA, PeGaSus, AdaPub
    python benchmarks/grid_profile.py DSATw FASTw  # others
"""

from __future__ import annotations

import cProfile
import pstats
import sys
import time
from collections import defaultdict

import numpy as np

from budgetcheck import GuardedStream, WEventParams, WindowLedger
from budgetcheck.bench import Benchmark
from budgetcheck.bench.runner import stream_data
from budgetcheck.mechanism.loading import load_mechanism

LAYERS = (
    ("check", ("budgetcheck/ledger/windows.py", "budgetcheck/ledger/exact.py")),
    ("noise", ("budgetcheck/ledger/noise.py",)),
    ("operation", ("budgetcheck/ledger/", "budgetcheck/stream/")),
    ("mechanism", ("mechanisms/", "budgetcheck/ops.py", "budgetcheck/rounding.py")),
)


def _layer(filename: str) -> str | None:
    for name, paths in LAYERS:
        if any(path in filename for path in paths):
            return name
    return None


def _pass(mechanism: str, data: list[np.ndarray]) -> None:
    stream = GuardedStream.stacked(data)
    ledger = WindowLedger(WEventParams(1.0, 120), runs=len(data), seed=1, sampler="numpy-laplace")
    ledger.bind(stream)
    load_mechanism(mechanism).run(stream, ledger)


def _split(stats: pstats.Stats) -> tuple[dict[str, float], float, float]:
    """Profiled seconds per layer, Python calls and numpy calls (totals over the pass)."""
    table = stats.stats  # type: ignore[attr-defined]
    own: dict[object, str | None] = {func: _layer(func[0]) for func in table}

    def resolved(func: object, depth: int = 0) -> str:
        """A function outside the layers (numpy's Python wrappers) belongs to its costliest caller's layer."""
        layer = own.get(func)
        if layer is not None or depth > 20 or func not in table or not table[func][4]:
            return layer or "other"
        callers = table[func][4]
        return resolved(max(callers, key=lambda caller: callers[caller][2]), depth + 1)

    seconds: dict[str, float] = defaultdict(float)
    python_calls = numpy_calls = 0.0
    for func, (_, calls, tottime, _, callers) in table.items():
        if func[0] != "~":
            python_calls += calls
        elif "numpy" in func[2]:
            numpy_calls += calls
        if own[func] is not None or not callers:
            seconds[resolved(func)] += tottime
            continue
        spent = {caller: entry[2] for caller, entry in callers.items()}
        total = sum(spent.values())
        for caller, caller_time in spent.items():
            seconds[resolved(caller)] += tottime * (caller_time / total if total else 1 / len(spent))
    return seconds, python_calls, numpy_calls


def main() -> None:
    names = sys.argv[1:] or ["BD", "BA", "PeGaSus", "AdaPub"]
    grid = Benchmark.paper(real=())
    data = [stream_data(spec, grid.seed) for spec in grid.streams]
    steps = data[0].shape[0]
    print(f"one pass of {len(data)} runs (the 20 streams, one run each), ε = 1, w = 120, T = {steps}:")
    print(
        f"  {'mechanism':<9} {'us/step':>8} {'py calls':>9} {'np calls':>9}   profiled time: "
        + " ".join(f"{name:>10}" for name, _ in LAYERS)
        + f" {'other':>7}"
    )
    for name in names:
        _pass(name, data)  # compile and warm up
        cpu = []
        for _ in range(3):
            start = time.process_time()
            _pass(name, data)
            cpu.append(time.process_time() - start)
        profile = cProfile.Profile()
        profile.enable()
        _pass(name, data)
        profile.disable()
        seconds, python_calls, numpy_calls = _split(pstats.Stats(profile))
        total = sum(seconds.values())
        print(
            f"  {name:<9} {min(cpu) / steps * 1e6:>8.0f} {python_calls / steps:>9.0f} {numpy_calls / steps:>9.0f}"
            + "   "
            + " ".join(f"{seconds.get(layer, 0.0) / total:>10.0%}" for layer, _ in LAYERS)
            + f" {seconds.get('other', 0.0) / total:>7.0%}"
        )

    stream = GuardedStream.stacked(data)
    runs = len(data)
    budgets = np.full(runs, 1e-4)
    last = np.zeros((runs, data[0].shape[1]))
    operations = {
        "spend (check and record only)": lambda ledger, secret: ledger.spend(secret.t, budgets, purpose="p"),
        "laplace": lambda ledger, secret: ledger.laplace(secret, budgets, purpose="publication"),
        "dissimilarity": lambda ledger, secret: ledger.dissimilarity(secret, last, budgets),
    }
    print(f"one charged operation per timestep at {runs} runs (CPU, least of 5 passes of T = {steps}):")
    for label, operation in operations.items():
        best = np.inf
        for _ in range(5):
            stream = GuardedStream.stacked(data)
            ledger = WindowLedger(WEventParams(1.0, 120), runs=runs, seed=1, sampler="numpy-laplace")
            ledger.bind(stream)
            start = time.process_time()
            for secret in stream:
                operation(ledger, secret)
            best = min(best, time.process_time() - start)
        print(f"  {label:<30} {best / steps * 1e6:6.1f} us")
    rng = np.random.default_rng(1)
    values, scale = np.ones((runs, data[0].shape[1])), np.full((runs, 1), 3.0)
    start = time.process_time()
    for _ in range(10 * steps):
        rng.laplace(0.0, 1.0, size=values.shape) * scale + values
    plain = (time.process_time() - start) / (10 * steps)
    print(f"  {'the plain numpy work of laplace':<30} {plain * 1e6:6.1f} us")


if __name__ == "__main__":
    main()
