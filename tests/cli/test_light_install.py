"""The core install runs the ledgers and the publisher without the verify and bench extras (issue 44).

``pip install .`` brought z3, scipy, matplotlib and hypothesis (about 650 MB with numba) to a user who
only publishes. The core now leaves them to the ``verify`` and ``bench`` extras; a command that needs
one says which to install, in one line, exit 2. Tried from outside: a fresh interpreter whose import
system refuses every module of the extras, as a core install would.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from budgetcheck.extras import EXTRAS

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
BLOCKED = sorted({module for modules in EXTRAS.values() for module in modules})  # hypothesis, z3, scipy, ...

# a core install, simulated: a meta path finder refusing the extras' modules, then the named entry point
CORE = f"""
import sys

class RefuseExtras:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {BLOCKED!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, RefuseExtras())
if sys.argv[1] == "-c":
    exec(sys.argv[2])
else:
    sys.argv[0] = "budgetcheck"
    from budgetcheck.cli import main
    main()
"""


def _core(tmp_path: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "core_install.py"
    script.write_text(CORE, encoding="utf-8")
    return subprocess.run(
        [sys.executable, str(script), *args], cwd=tmp_path, capture_output=True, text=True, input=stdin, timeout=600
    )


def test_the_blocker_really_refuses_the_extras(tmp_path: Path) -> None:
    """The simulation is a core install: importing z3 (or any extra's module) fails in it."""
    for module in BLOCKED:
        found = _core(tmp_path, "-c", f"import {module}")
        assert found.returncode == 1 and f"No module named '{module}'" in found.stderr, found.stderr


def test_a_ledger_spend_a_publish_an_audit_and_a_key_on_the_core_install(tmp_path: Path) -> None:
    spend = _core(
        tmp_path,
        "-c",
        "import budgetcheck, numpy as np\n"
        "ledger = budgetcheck.WindowLedger(epsilon=1.0, w=4)\n"
        "ledger.spend(1, 0.25, purpose='publication')\n"
        "print(ledger.remaining(1))\n"
        "print(budgetcheck.Linear([[1.0, 2.0]]).weights.shape)\n"  # a dense query: no scipy
        "import budgetcheck.pytest_plugin\n",  # pytest loads the plugin wherever budgetcheck is installed
    )
    assert spend.returncode == 0 and spend.stdout.split() == ["[0.75]", "(1,", "2)"], spend.stderr
    (tmp_path / "counts.csv").write_text("t,c1,c2\n" + "".join(f"{t},{t % 7},{t % 5}\n" for t in range(1, 13)))
    publish = _core(
        tmp_path, "publish", "BD", "--ledger", "ledger.db", "--epsilon", "1.0", "--w", "6", "-d", "2",
        "--input", "counts.csv", "--out", "released.csv",
    )  # fmt: skip
    assert publish.returncode == 0, publish.stderr
    assert "published 12 timestamps" in publish.stderr, publish.stderr
    assert len((tmp_path / "released.csv").read_text().splitlines()) >= 12
    audit = _core(tmp_path, "audit", "ledger.db")
    assert audit.returncode == 0 and "chain: ok" in audit.stdout, audit.stdout + audit.stderr
    keygen = _core(tmp_path, "keygen", "signing.key")
    assert keygen.returncode == 0 and (tmp_path / "signing.key").is_file(), keygen.stderr


@pytest.mark.parametrize(
    ("command", "extra"),
    [(["verify", "BD"], "verify"), (["prove", "BD"], "verify"), (["bench", "--quick"], "bench")],
)
def test_a_command_that_needs_an_extra_names_it_in_one_line(tmp_path: Path, command: list[str], extra: str) -> None:
    found = _core(tmp_path, *command)
    assert found.returncode == 2, found.stdout + found.stderr
    assert "Traceback" not in found.stderr and found.stdout == ""
    (line,) = found.stderr.strip().splitlines()
    assert re.fullmatch(
        rf"Error: budgetcheck {command[0]} needs the {extra} extra, which is not installed "
        rf"\(No module named '\w+'\): pip install 'budgetcheck\[{extra}\]'",
        line,
    ), line


def test_the_library_names_the_extra_too(tmp_path: Path) -> None:
    found = _core(tmp_path, "-c", "import budgetcheck\nbudgetcheck.verify_mechanism('BD')")
    assert found.returncode == 1
    assert "MissingExtra: budgetcheck.verify_mechanism needs the verify extra" in found.stderr, found.stderr


def test_the_core_dependencies_leave_the_extras_out_and_dev_brings_everything() -> None:
    core = {re.split(r"[<>=;\[ ]", requirement)[0].lower() for requirement in PYPROJECT["project"]["dependencies"]}
    assert not core & {"z3-solver", "hypothesis", "scipy", "matplotlib", "tqdm"}, core
    assert {"numpy", "attrs", "click", "numba", "cryptography"} <= core  # numba: the built-in kernels publish runs
    extras = PYPROJECT["project"]["optional-dependencies"]
    distribution = {"z3": "z3-solver"}  # the other import names are their distributions' names
    for extra, modules in EXTRAS.items():
        listed = {re.split(r"[<>=; ]", requirement)[0].lower() for requirement in extras[extra]}
        assert {distribution.get(module, module) for module in modules} <= listed, (extra, listed)
    dev = " ".join(extras["dev"])
    assert all(name in re.search(r"budgetcheck\[([^\]]*)\]", dev).group(1).split(",") for name in EXTRAS), dev  # type: ignore[union-attr]
    assert set(re.search(r"budgetcheck\[([^\]]*)\]", extras["all"][0]).group(1).split(",")) == set(EXTRAS)  # type: ignore[union-attr]


def test_the_readme_installs_every_extra_in_a_command_no_longer_than_before() -> None:
    """The README's main job needs verify and bench: it installs ``.[all]``; its command was 169 characters."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    (install_and_main,) = re.findall(r"^```sh\n(python3 -m venv .*budgetcheck verify.*)\n```", readme, flags=re.M)
    assert "pip install '.[all]' && " in install_and_main
    assert len(install_and_main) <= 169, len(install_and_main)


def test_no_url_in_pyproject_is_a_placeholder() -> None:
    """``[project.urls]`` pointed at ``github.com/OWNER/...``: a package must not ship a URL nobody owns."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    urls = re.findall(r"[a-z+]+://[^\s\"']+", text)
    placeholder = re.compile(r"OWNER|USER(NAME)?\b|YOUR|<[^>]*>|\{[^}]*\}|example\.(com|org)|TODO|XXX", re.I)
    assert not [url for url in urls if placeholder.search(url)], urls
    for url in PYPROJECT["project"].get("urls", {}).values():
        assert not placeholder.search(url), url
