"""The house's layering (issue: layout): each layer imports only the layers below it, and the
runtime never loads the verifier's heavy dependencies.

Layers, bottom up: the core (``ledger``, ``stream`` and the public ``kernels``, ``libm``, ``rounding``,
``ops``, with ``extras``, which names what each optional extra brings: the ledgers read secrets and
streams carry the ledger's errors, so the two are one layer); ``mechanism``; ``durable``; ``bench``;
verification (``verify``, ``proving``, ``strategies``, ``pytest_plugin``); the ``cli`` on top.
Imports under ``if TYPE_CHECKING`` are annotations only and do not count.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "budgetcheck"
CORE = {"ledger", "stream", "kernels", "libm", "rounding", "ops", "extras"}
VERIFY = {"verify", "proving", "strategies", "pytest_plugin"}
ALLOWED = {  # layer -> the budgetcheck layers it may import
    **{layer: CORE for layer in CORE},
    "mechanism": CORE | {"mechanism"},
    "durable": CORE | {"mechanism", "durable"},
    "bench": CORE | {"mechanism", "durable", "bench"},
    **{layer: CORE | {"mechanism", "durable"} | VERIFY for layer in VERIFY},
}
HEAVY = ("z3", "hypothesis", "matplotlib", "scipy")  # verification, proofs, audits and figures only
RUNTIME = CORE | {"mechanism", "durable", "bench"}


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "init"


def _modules() -> list[tuple[str, Path]]:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        parts = path.relative_to(SRC.parent).with_suffix("").parts
        found.append((".".join(p for p in parts if p != "__init__"), path))
    return found


def _type_checking_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def _imports(path: Path) -> list[tuple[str, bool, int]]:
    """(imported module, at module level, line) for every runtime import in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only = _type_checking_lines(tree)
    top = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        if node.lineno in typing_only if isinstance(node, (ast.Import, ast.ImportFrom)) else True:
            continue
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [f"{node.module}.{a.name}" if node.module == "budgetcheck" else node.module for a in node.names]
        else:
            names = [a.name for a in node.names]  # type: ignore[union-attr]
        found += [(name, id(node) in top, node.lineno) for name in names]
    return found


def test_every_layer_imports_only_the_layers_below_it() -> None:
    broken = []
    for module, path in _modules():
        layer = _layer(module)
        if layer not in ALLOWED:
            continue
        for imported, _, line in _imports(path):
            if imported.startswith("budgetcheck.") and _layer(imported) not in ALLOWED[layer]:
                broken.append(f"{module}:{line} imports {imported}")
    assert not broken, "\n".join(broken)


def test_the_runtime_imports_no_heavy_dependency_at_module_level() -> None:
    """A publisher or a benchmark worker never loads the prover, the test generator or scipy: the
    runtime layers import them only inside the function that needs them."""
    broken = []
    for module, path in _modules():
        if _layer(module) not in RUNTIME:
            continue
        for imported, at_top, line in _imports(path):
            if at_top and imported.split(".")[0] in HEAVY:
                broken.append(f"{module}:{line} imports {imported}")
    assert not broken, "\n".join(broken)


def test_import_budgetcheck_loads_no_heavy_dependency() -> None:
    """numba checks scipy's version when it is imported, so numba is loaded first and only what
    ``import budgetcheck`` adds is judged."""
    code = (
        "import sys, numba; before = set(sys.modules); import budgetcheck; "
        "print(' '.join(sorted({m.split('.')[0] for m in set(sys.modules) - before})))"
    )
    added = set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split())
    assert "budgetcheck" in added
    assert not added & set(HEAVY), added & set(HEAVY)


def test_loading_and_running_every_builtin_loads_neither_the_prover_nor_the_test_generator() -> None:
    """A benchmark worker or a publisher loads built-in mechanisms (whose allocation rules are written
    over ``budgetcheck.proving``'s vocabulary) and runs them: z3 and hypothesis stay unloaded (scipy
    comes with numba, which the first compiled kernel loads)."""
    code = (
        "import sys, numpy as np; from budgetcheck import execute; from budgetcheck.mechanism.loading import "
        "load_mechanism; import budgetcheck.durable.publish; from mechanisms import BUILTIN; "
        "[load_mechanism(n) for n in BUILTIN]; "
        "execute(load_mechanism('BD'), np.ones((30, 2)), epsilon=1.0, w=4, runs=2, seed=1); "
        "print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    loaded = set(
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    )
    assert "mechanisms" in loaded and not loaded & {"z3", "hypothesis", "matplotlib"}, loaded & set(HEAVY)


@pytest.mark.parametrize("name", ["verify_mechanism", "VerifyResult", "Counterexample"])
def test_verification_names_load_when_first_used(name: str) -> None:
    code = (
        f"import sys, budgetcheck; assert 'hypothesis' not in sys.modules; budgetcheck.{name}; print('hypothesis' "
        "in sys.modules or 'z3' in sys.modules)"
    )
    assert (
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
        == "True"
    )


def test_the_prover_loads_z3_when_a_proof_runs_not_before() -> None:
    """``budgetcheck.proving`` is the vocabulary of the built-ins' allocation rules (loaded with them) and
    the prover: it is loaded on first use, and z3 only when a proof runs."""
    code = (
        "import sys, budgetcheck; assert 'budgetcheck.proving' not in sys.modules; p = budgetcheck.proving; "
        "before = 'z3' in sys.modules; from mechanisms.rules import BDRule; "
        "p.prove_rule(BDRule(), 2); print(before, 'z3' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "True"]


def test_every_package_says_what_it_owns_and_may_import() -> None:
    for package in ("ledger", "stream", "mechanism", "durable", "verify", "cli", "bench"):
        doc = ast.get_docstring(ast.parse((SRC / package / "__init__.py").read_text(encoding="utf-8")))
        assert doc and "import" in doc.lower(), package
