"""Every recipe in examples/ci runs as written: its commands pass on a correct mechanism, fail on one that
overspends, and budgetcheck is installed from its repository, never by name from the package index."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

import budgetcheck

ROOT = Path(__file__).parents[2]
CI = ROOT / "examples" / "ci"
SRC = Path(budgetcheck.__file__).parents[1]  # the budgetcheck under test, not another checkout's
PLACEHOLDER = "my_package.mechanisms:MyMechanism"
CORRECT = "from plain_mechanisms import EveryKth as MyMechanism  # the README's example\n"
BROKEN = "from broken.mutants import UniformOverWMinusOne as MyMechanism  # eps/(w-1) per timestamp\n"
TIMEOUT = 300


def _workflow() -> dict[str, Any]:
    loaded = yaml.safe_load((CI / "github-workflow.yml").read_text(encoding="utf-8"))
    assert isinstance(loaded, dict)
    return loaded


def _steps() -> list[dict[str, Any]]:
    jobs = _workflow()["jobs"]
    assert list(jobs) == ["verify"]
    steps = jobs["verify"]["steps"]
    assert isinstance(steps, list)
    return steps


def _is_install(command: str) -> bool:
    return "pip install" in command


def _project(tmp_path: Path, mechanism: str) -> Path:
    """A user's repository: my_package/mechanisms.py defines MyMechanism."""
    project = tmp_path / "project"
    (project / "my_package").mkdir(parents=True, exist_ok=True)
    (project / "my_package" / "__init__.py").write_text("", encoding="utf-8")
    (project / "my_package" / "mechanisms.py").write_text(mechanism, encoding="utf-8")
    return project


def _environment(extra: Mapping[str, str] = {}) -> dict[str, str]:
    """The current interpreter's scripts first; budgetcheck and the test mechanisms importable by absolute path."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PYTEST_", "COV_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), str(ROOT / "tests")])
    env.update(_workflow().get("env", {}))
    env["BUDGETCHECK_SOURCE"] = str(ROOT)
    env.update(extra)
    return env


def _run_steps(project: Path, env: Mapping[str, str], *, install: bool) -> list[tuple[str, int, str]]:
    """Run the workflow's `run:` steps in order as the runner does (bash -e), stopping at the first failure."""
    done = []
    for step in _steps():
        command = step.get("run")
        if command is None or (_is_install(command) and not install):
            continue
        result = subprocess.run(
            ["bash", "-e", "-c", command], cwd=project, env=dict(env), capture_output=True, text=True, timeout=TIMEOUT
        )
        done.append((command, result.returncode, result.stdout + result.stderr))
        if result.returncode != 0:
            break
    return done


def _junit_failures(path: Path) -> int:
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    assert suites, f"no testsuite in {path}"
    return sum(int(suite.get("failures", "0")) + int(suite.get("errors", "0")) for suite in suites)


def test_the_workflow_installs_budgetcheck_from_its_repository_never_by_name() -> None:
    """Every pip install names a path or a pinned VCS URL; the bare name could be anyone's package."""
    source = _workflow()["env"]["BUDGETCHECK_SOURCE"]
    # with the verify extra: the core install cannot verify (tests/cli/test_light_install.py)
    assert re.fullmatch(r"budgetcheck\[verify\] @ git\+https://[^\s@]+/budgetcheck(\.git)?@[\w.\-]+", source), source
    installs = [step["run"] for step in _steps() if "run" in step and _is_install(step["run"])]
    assert len(installs) == 1
    for command in installs:
        words = shlex.split(command.replace('"$BUDGETCHECK_SOURCE"', "SOURCE"))
        assert words[:2] == ["pip", "install"]
        requirements = [word for word in words[2:] if word != "-e"]
        assert "SOURCE" in requirements
        assert all(word in {"SOURCE", "."} for word in requirements), requirements
    for recipe in CI.iterdir():
        text = recipe.read_text(encoding="utf-8")
        assert not re.search(r"pip install\s+(-\S+\s+)*['\"]?budgetcheck\b", text), recipe.name


def test_every_recipe_is_run_by_this_file() -> None:
    """A recipe added to examples/ci without a test here fails."""
    assert sorted(p.name for p in CI.iterdir()) == ["github-workflow.yml", "pre-commit-config.yaml", "pytest.ini"]


@pytest.mark.parametrize(("mechanism", "passes"), [(CORRECT, True), (BROKEN, False)], ids=["EveryKth", "overspends"])
def test_the_workflow_steps_pass_a_correct_mechanism_and_fail_a_broken_one(
    tmp_path: Path, mechanism: str, passes: bool
) -> None:
    project = _project(tmp_path, mechanism)
    done = _run_steps(project, _environment(), install=False)
    assert done, "the workflow has no step to run besides the install"
    assert any(PLACEHOLDER in command for command, _, _ in done)
    codes = [code for _, code, _ in done]
    log = "\n".join(output for _, _, output in done)
    report = project / _artifact_path()
    assert report.is_file(), f"the uploaded artifact {report.name} was not written\n{log}"
    if passes:
        assert codes == [0] * len(_run_commands()), log
        assert "verified to a bound" in log
        assert _junit_failures(report) == 0
    else:
        assert codes[-1] == 1, log  # 1 is a violation, not a usage error (2) or a crash (70)
        assert "VIOLATED" in log
        assert _junit_failures(report) >= 1


def _run_commands() -> list[str]:
    return [step["run"] for step in _steps() if "run" in step and not _is_install(step["run"])]


def _artifact_path() -> str:
    uploads = [step for step in _steps() if str(step.get("uses", "")).startswith("actions/upload-artifact")]
    assert len(uploads) == 1 and uploads[0]["if"] == "always()"  # uploaded on failure too
    path = uploads[0]["with"]["path"]
    assert isinstance(path, str)
    return path


@pytest.mark.parametrize(("mechanism", "code"), [(CORRECT, 0), (BROKEN, 1)], ids=["EveryKth", "overspends"])
def test_the_pre_commit_hook_passes_a_correct_mechanism_and_fails_a_broken_one(
    tmp_path: Path, mechanism: str, code: int
) -> None:
    config = yaml.safe_load((CI / "pre-commit-config.yaml").read_text(encoding="utf-8"))
    hooks = [hook for repo in config["repos"] for hook in repo["hooks"]]
    assert len(hooks) == 1
    hook = hooks[0]
    assert hook["language"] == "system" and hook["pass_filenames"] is False  # the entry runs as written
    assert re.search(hook["files"], "my_package/mechanisms/every_kth.py")  # the hook runs when mechanisms change
    project = _project(tmp_path, mechanism)
    result = subprocess.run(
        shlex.split(hook["entry"]), cwd=project, env=_environment(), capture_output=True, text=True, timeout=TIMEOUT
    )
    assert result.returncode == code, result.stdout + result.stderr
    assert ("verified to a bound" if code == 0 else "VIOLATED") in result.stdout


@pytest.mark.parametrize(
    ("mechanism", "verdict"), [(CORRECT, "PASSED"), (BROKEN, "FAILED")], ids=["EveryKth", "overspends"]
)
def test_the_pytest_recipe_adds_a_verify_test_that_fails_on_an_overspend(
    tmp_path: Path, mechanism: str, verdict: str
) -> None:
    project = _project(tmp_path, mechanism)
    shutil.copy(CI / "pytest.ini", project / "pytest.ini")
    (project / "tests").mkdir()
    (project / "tests" / "test_counts.py").write_text(
        "def test_the_users_own_test():\n    assert sum([1, 2]) == 3\n", encoding="utf-8"
    )
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", "tests"],
        cwd=project,
        env=_environment(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    log = result.stdout + result.stderr
    assert result.returncode == (0 if verdict == "PASSED" else 1), log
    assert re.search(rf"^{verdict} budgetcheck::{re.escape(PLACEHOLDER)}\b", result.stdout, re.MULTILINE), log
    assert re.search(r"^PASSED tests/test_counts.py::test_the_users_own_test", result.stdout, re.MULTILINE), log


def _copy_of_the_repository(destination: Path) -> Path:
    ignore = shutil.ignore_patterns(
        ".git", ".venv", "*.sqlite", "__pycache__", ".mypy_cache", ".pytest_cache", ".hypothesis", "build", "dist"
    )
    shutil.copytree(ROOT, destination, ignore=ignore)
    return destination


@pytest.mark.slow
def test_the_workflow_installs_and_passes_in_a_fresh_venv(tmp_path: Path) -> None:
    """The install step itself, from a copy of this repository into an empty venv (downloads the dependencies)."""
    source = _copy_of_the_repository(tmp_path / "budgetcheck")
    project = _project(tmp_path, CORRECT.replace("from plain_mechanisms", "from my_package.every_kth"))
    shutil.copy(ROOT / "tests" / "plain_mechanisms.py", project / "my_package" / "every_kth.py")
    (project / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n\n'
        '[project]\nname = "my-package"\nversion = "0.0.1"\n\n'
        '[tool.hatch.build.targets.wheel]\npackages = ["my_package"]\n',
        encoding="utf-8",
    )
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=TIMEOUT)
    env = {key: value for key, value in os.environ.items() if key not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    env.update(_workflow().get("env", {}))
    env.update(
        PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        VIRTUAL_ENV=str(venv),
        BUDGETCHECK_SOURCE=f"budgetcheck[verify] @ {source.as_uri()}",
    )
    done = _run_steps(project, env, install=True)
    log = "\n".join(output for _, _, output in done)
    assert [code for _, code, _ in done] == [0] * (1 + len(_run_commands())), log
    assert "verified to a bound" in log
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import budgetcheck; print(budgetcheck.__file__)"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        cwd=project,
        timeout=TIMEOUT,
    )
    assert where.stdout.startswith(str(venv)), where.stdout  # installed into the fresh venv, not borrowed
    shutil.copy(ROOT / "tests" / "broken" / "mutants.py", project / "my_package" / "mutants.py")
    broken = BROKEN.replace("from broken.mutants", "from my_package.mutants")
    (project / "my_package" / "mechanisms.py").write_text(broken, encoding="utf-8")
    failed = _run_steps(project, env, install=False)
    assert failed[-1][1] == 1, "\n".join(output for _, _, output in failed)
