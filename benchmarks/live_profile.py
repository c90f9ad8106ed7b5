"""Where a live step's time goes (issue 32, item 2): one run stepped one timestamp at a time.

For BD, BA and Uniform, a ``LiveStream`` of T = 5000 rows (d = 2) stepped through
``mechanism.releases(stream, ledger)`` on a one-run ``WindowLedger`` (ε = 1, w = 120, exact checks on,
``numpy-laplace`` noise), as ``bench_speed.py --live`` measures it, prints:

- its CPU microseconds per step (least of three runs, unprofiled) and steps per second;
- Python-level calls per step, from cProfile;
- the profiled time split by part: the stream (``stream/live.py``: the row's copy and checks), the secret
  (``stream/secret.py``: the vault's put, its finalizer, reading it in a charged operation), the
  window check and commit (``ledger/wevent.py``, ``scalar_windows.py``), the noise
  (``ledger/noise.py``), the rest of the charged operation (``ledger/``: validation, the sensitivity,
  the scale, the result), the budget rule (``mechanisms/rules.py``, ``ops.py``, ``rounding.py``,
  ``ledger/sliding.py``) and the mechanism's loop (``mechanisms/``). A C function's time goes to
  the parts of its callers, in proportion to what each caller spent in it.

cProfile inflates every Python call by about the same amount: read the split as where the calls
are, the unprofiled figure as what a step costs.

    python benchmarks/live_profile.py            # BD, BA, Uniform
    python benchmarks/live_profile.py Sample     # others
"""

from __future__ import annotations

import cProfile
import pstats
import sys
from collections import defaultdict

import numpy as np

from bench_speed import live_step_seconds  # this folder: the live step bench_speed times

PARTS = (
    ("stream", ("budgetcheck/stream/live.py",)),
    ("secret", ("budgetcheck/stream/secret.py",)),
    ("check", ("budgetcheck/ledger/wevent.py", "budgetcheck/ledger/scalar_windows.py")),
    ("noise", ("budgetcheck/ledger/noise.py",)),
    ("rule", ("mechanisms/rules.py", "budgetcheck/ops.py", "budgetcheck/rounding.py", "budgetcheck/ledger/sliding.py")),
    ("operation", ("budgetcheck/ledger/",)),
    ("loop", ("mechanisms/",)),
)
STEPS = 5000


def _part(filename: str) -> str | None:
    for name, paths in PARTS:
        if any(path in filename for path in paths):
            return name
    return None


def _split(stats: pstats.Stats) -> tuple[dict[str, float], float]:
    """Profiled seconds per part and Python-level calls (totals over the run)."""
    table = stats.stats  # type: ignore[attr-defined]
    own = {func: _part(func[0]) for func in table}

    def part_of(func: object, depth: int = 0) -> str:
        part = own.get(func)
        if part is not None or depth > 20 or func not in table or not table[func][4]:
            return part or "other"
        callers = table[func][4]
        return part_of(max(callers, key=lambda caller: callers[caller][2]), depth + 1)

    seconds: dict[str, float] = defaultdict(float)
    calls = 0.0
    for func, (_, count, tottime, _, callers) in table.items():
        calls += count
        if own[func] is not None or not callers:
            seconds[part_of(func)] += tottime
            continue
        total = sum(entry[2] for entry in callers.values()) or 1.0
        for caller, entry in callers.items():
            seconds[part_of(caller)] += tottime * entry[2] / total
    return seconds, calls


def main(mechanisms: list[str]) -> None:
    data = np.random.default_rng(0).integers(0, 100, size=(STEPS, 2)).astype(np.float64)
    names = [name for name, _ in PARTS]
    print(f"live, one run, d = 2, w = 120, ε = 1, T = {STEPS} (profiled split of a step, in % of profiled time):")
    print(f"  {'mechanism':<9} {'us/step':>8} {'steps/s':>8} {'calls':>6} " + " ".join(f"{n:>9}" for n in names))
    for mechanism in mechanisms:
        live_step_seconds(mechanism, data[:200])  # kernels loaded, caches warm
        per_step = min(live_step_seconds(mechanism, data) for _ in range(3))
        profile = cProfile.Profile()
        profile.enable()
        live_step_seconds(mechanism, data)
        profile.disable()
        seconds, calls = _split(pstats.Stats(profile))
        total = sum(seconds.values()) or 1.0
        shares = " ".join(f"{seconds.get(n, 0.0) / total:>9.0%}" for n in names)
        print(f"  {mechanism:<9} {per_step * 1e6:>8.1f} {1 / per_step:>8,.0f} {calls / STEPS:>6.0f} {shares}")


if __name__ == "__main__":
    main(sys.argv[1:] or ["BD", "BA", "Uniform"])
