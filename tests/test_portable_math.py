"""Released values do not depend on the CPU (issue: portability).

numpy picks SIMD kernels for its transcendental ufuncs by the CPU's features when it starts; on a
CPU with AVX-512 their last bits differ from the C library's. Three checks keep every value that
feeds a release, a charge, a report or a figure off those kernels:

* :mod:`budgetcheck.libm` is the C library's scalar routine, bit for bit (the routine Python's
  :mod:`math` calls);
* no module of the library or of the built-in mechanisms calls a dispatched transcendental ufunc;
* a child process with numpy's dispatch lowered to its baseline and numba compiling for a generic
  CPU computes the same doubles as this process (CI also runs every pin under that setting:
  ``-m bitwise`` in ``.ci/run``).
"""

from __future__ import annotations

import ast
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from budgetcheck import libm
from budgetcheck.bench.streams import seasonal_stream
from budgetcheck.cli import main

pytestmark = pytest.mark.bitwise
ROOT = Path(__file__).resolve().parents[1]
# numpy's float64 ufuncs with CPU-dispatched kernels whose results are not correctly rounded
DISPATCHED = {
    "arccos", "arccosh", "arcsin", "arcsinh", "arctan", "arctan2", "arctanh", "cbrt", "cos", "cosh", "exp",
    "exp2", "expm1", "float_power", "log", "log10", "log1p", "log2", "logaddexp", "logaddexp2", "power",
    "sin", "sinh", "tan", "tanh",
}  # fmt: skip
SPECIAL = [0.0, -0.0, 1.0, -1.0, 0.5, 1e-300, 5e-324, 709.78, -745.2, 1e-9]


def _same_doubles(got: np.ndarray, expected: list[float]) -> bool:
    return bool(got.tobytes() == np.array(expected, dtype=np.float64).tobytes())


@pytest.mark.parametrize(
    ("name", "low", "high"),
    [("exp", -50.0, 50.0), ("expm1", -2.0, 2.0), ("log", 1e-9, 1e3), ("sin", -100.0, 100.0), ("cos", -100.0, 100.0)],
)
def test_each_function_is_the_c_librarys_scalar_routine_bit_for_bit(name: str, low: float, high: float) -> None:
    rng = np.random.default_rng(41)
    values = np.concatenate([rng.uniform(low, high, 20_000), [x for x in SPECIAL if name != "log" or x > 0]])
    got = getattr(libm, name)(values.reshape(-1, 2))  # any shape, elementwise
    assert got.shape == (values.size // 2, 2)
    assert _same_doubles(got.reshape(-1), [getattr(math, name)(float(x)) for x in values])


def test_where_python_raises_the_results_are_cs() -> None:
    """Overflow, a pole and a domain error give inf, −inf and NaN, as in numpy, never an exception."""
    assert libm.exp([710.0, -math.inf]).tolist() == [math.inf, 0.0]
    assert libm.expm1([1e308]).tolist() == [math.inf]
    assert libm.log([0.0, math.inf]).tolist() == [-math.inf, math.inf]
    assert np.isnan(libm.log([-1.0, math.nan])).all() and np.isnan(libm.sin([math.inf])).all()


def test_powers_are_the_c_librarys_pow_of_each_exponent() -> None:
    for base in (1.3, 1.5, 2.0, 0.7, 1.0 + 2**-40):
        assert _same_doubles(libm.powers(base, 60), [math.pow(base, k) for k in range(60)])
    assert libm.powers(1.5, 0).shape == (0,)


def dispatched_calls(source: str, name: str) -> list[str]:
    """Uses of a CPU-dispatched numpy transcendental (``np.exp``, …) in ``source``, as 'name:line np.exp'."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Attribute)
            and node.attr in DISPATCHED
            and isinstance(node.value, ast.Name)
            and node.value.id in {"np", "numpy"}
        ):
            found.append((node.lineno, f"{name}:{node.lineno} np.{node.attr}"))
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow) and _numpy_power(node):
            found.append((node.lineno, f"{name}:{node.lineno} ** on a numpy array"))
    return [hit for _, hit in sorted(found)]


def _numpy_power(node: ast.BinOp) -> bool:
    """``a ** b`` with a numpy expression in it and an exponent that is not a constant numpy computes
    exactly (2: a square; 0.5: a square root; 1, 0, −1)."""
    exact = isinstance(node.right, ast.Constant) and node.right.value in {2, 0.5, 1, 0, -1}
    names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    return not exact and not isinstance(node.right, ast.UnaryOp | ast.Constant) and bool(names & {"np", "numpy"})


def test_the_scan_finds_a_dispatched_call_and_passes_an_exact_one() -> None:
    source = (
        "import numpy as np\ny = np.sqrt(np.exp(np.arange(3)))\nz = np.power(2.0, y) ** 2\nu = 1.5 ** np.arange(4)\n"
    )
    assert dispatched_calls(source, "x.py") == ["x.py:2 np.exp", "x.py:3 np.power", "x.py:4 ** on a numpy array"]


def test_no_library_or_builtin_code_calls_a_cpu_dispatched_transcendental() -> None:
    """Use budgetcheck.libm instead: its doubles do not depend on the CPU's vector width."""
    sources = sorted((ROOT / "src").rglob("*.py"))
    assert len(sources) > 100
    found = [hit for path in sources for hit in dispatched_calls(path.read_text(encoding="utf-8"), path.name)]
    assert not found, "CPU-dependent doubles (use budgetcheck.libm): " + ", ".join(found)


_CHILD = """
import json, sys
import numpy as np
from budgetcheck import libm
from budgetcheck.bench.streams import seasonal_stream
x = np.linspace(-20.0, 20.0, 4001)
out = {name: getattr(libm, name)(x).tobytes().hex() for name in ("exp", "expm1", "sin", "cos")}
out["log"] = libm.log(np.abs(x) + 1e-3).tobytes().hex()
out["stream"] = seasonal_stream(500, 40, 10.0, growth=1.3, rng=np.random.default_rng(7)).tobytes().hex()
json.dump(out, sys.stdout)
"""


def lowered_dispatch_environment() -> dict[str, str]:
    """This environment with every numpy dispatch target this CPU has switched off (numpy runs its
    baseline kernels) and numba compiling for a generic CPU of the architecture."""
    umath = np._core._multiarray_umath if hasattr(np, "_core") else np.core._multiarray_umath
    targets, found = umath.__cpu_dispatch__, umath.__cpu_features__
    disabled = [name for name in targets if found.get(name)]
    return {**os.environ, "NPY_DISABLE_CPU_FEATURES": " ".join(disabled), "NUMBA_CPU_NAME": "generic"}


def test_a_process_on_numpys_baseline_kernels_computes_the_same_doubles() -> None:
    child = subprocess.run(
        [sys.executable, "-c", _CHILD], env=lowered_dispatch_environment(), capture_output=True, text=True, timeout=300
    )
    assert child.returncode == 0, child.stderr
    there = json.loads(child.stdout)
    x = np.linspace(-20.0, 20.0, 4001)
    for name in ("exp", "expm1", "sin", "cos"):
        assert there[name] == getattr(libm, name)(x).tobytes().hex(), name
    assert there["log"] == libm.log(np.abs(x) + 1e-3).tobytes().hex()
    stream = seasonal_stream(500, 40, 10.0, growth=1.3, rng=np.random.default_rng(7))
    assert there["stream"] == stream.tobytes().hex()


def test_a_verify_report_is_the_same_on_numpys_baseline_kernels() -> None:
    """``a report depends only on the mechanism and --seed``, on this CPU's kernels and on the baseline's."""
    args = ["verify", "BA", "--examples", "10", "--seed", "3", "--json", "--stages", "abde"]
    here = CliRunner().invoke(main, args)
    child = subprocess.run(
        [sys.executable, "-m", "budgetcheck", *args],
        env=lowered_dispatch_environment(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert here.exit_code == child.returncode == 0, here.output + child.stderr
    assert json.loads(child.stdout) == json.loads(here.output)
