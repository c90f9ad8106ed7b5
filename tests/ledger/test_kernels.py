"""budgetcheck.kernels.compiled: numba kernels, cached where a cache directory can be written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from budgetcheck.kernels import compiled

_MODULE = """
import numba
from budgetcheck.kernels import compiled

def _twice(x):
    return 2.0 * x

twice = compiled(_twice)
try:
    numba.njit(cache=True)(_twice)
    plain = "cached"
except RuntimeError as error:
    plain = str(error)
"""


@compiled
def _running_total(values: np.ndarray) -> np.ndarray:
    out = np.empty_like(values)
    total = 0.0
    for i in range(values.size):
        total += values[i]
        out[i] = total
    return out


def test_a_compiled_kernel_gives_the_loop_s_doubles() -> None:
    values = np.random.default_rng(0).normal(size=1000)
    expected = np.array([sum(values[: i + 1].tolist()) for i in range(values.size)])  # Python's left-to-right sum
    assert _running_total(values).tolist() == expected.tolist()


def test_a_kernel_compiles_where_numba_cannot_write_a_cache(tmp_path: Path) -> None:
    """Beside a module whose __pycache__ cannot be a directory, with no writable home or
    NUMBA_CACHE_DIR, numba's own cache=True fails at import; compiled() still gives a kernel."""
    (tmp_path / "__pycache__").write_text("not a directory")
    (tmp_path / "kernel_module.py").write_text(_MODULE)
    env = {**os.environ, "HOME": "/dev/null", "NUMBA_CACHE_DIR": "/dev/null/numba", "XDG_CACHE_HOME": "/dev/null/cache"}
    script = "import kernel_module as m; print(m.twice(21.0)); print(m.plain)"
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, check=True
    )
    result, plain = done.stdout.splitlines()
    assert result == "42.0"
    assert "no locator available" in plain  # the failure compiled() falls back from


def test_compiled_falls_back_only_for_a_missing_cache_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any other error numba raises while setting a kernel up is not swallowed."""
    import numba

    def failing(**options: object) -> object:
        raise RuntimeError("something else went wrong")

    monkeypatch.setattr(numba, "njit", failing)
    kernel = compiled(lambda x: x)
    with pytest.raises(RuntimeError, match="something else"):
        kernel(1.0)  # set up on its first call
