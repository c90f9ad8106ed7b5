"""A newcomer's first day without dead ends (issue 44): each message a new user met, tried from outside.

Each test runs the command line as a user would (in a fresh working directory) and checks that the
message says what to do: a suggestion for a misspelt name, the `module:attr` form for a file or a
dotted name, the file and line of an import error, where modules are looked for, where a report was
written, how many violations were not listed; and the shipped recipes and set-up leave no dead end.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from budgetcheck import InvalidArgument, WindowLedger, load_mechanism, rounding
from budgetcheck.cli import main
from budgetcheck.ledger.audit import WindowFinding

ROOT = Path(__file__).resolve().parents[2]
EVERY_KTH = (ROOT / "tests" / "plain_mechanisms.py").read_text(encoding="utf-8")


def _verify(args: list[str]) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["verify", *args])
    return result.exit_code, result.output


@pytest.mark.parametrize(
    ("typed", "meant"), [("Bd", "'BD'"), ("uniform", "'Uniform'"), ("Pegasus", "'PeGaSus'"), ("FASTW", "'FASTw'")]
)
def test_a_misspelt_built_in_is_a_usage_error_that_suggests_the_name(typed: str, meant: str) -> None:
    code, output = _verify([typed])
    assert code == 2, output
    assert f"mechanism={typed!r} is not built in; did you mean {meant}" in output
    assert "Traceback" not in output


@pytest.mark.parametrize(
    ("typed", "advice"),
    [
        ("every_kth.py", "name its module and the mechanism in it as 'every_kth:ClassName'"),
        ("every_kth.EveryKth", "did you mean 'every_kth:EveryKth'?"),
        ("every_kth.py:EveryKth", "name its module and the mechanism in it as 'every_kth:EveryKth'"),
        ("src/every_kth.py:EveryKth", "as 'every_kth:EveryKth' from the directory 'src'"),
        ("every_kth:EveryKht", "has no attribute 'EveryKht'; did you mean 'EveryKth'?"),
    ],
)
def test_a_file_or_dotted_name_gets_the_module_colon_attr_form(
    typed: str, advice: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "every_kth.py").write_text(EVERY_KTH, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(InvalidArgument, match=re.escape(advice)):
        load_mechanism(typed)
    code, output = _verify([typed])
    assert code == 2 and advice in output.replace("\n", " ")


def test_an_import_error_inside_the_users_module_names_its_file_and_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "mine_imports.py").write_text("import numpy\n\nimport numpyy  # a typo\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidArgument) as caught:
        load_mechanism("mine_imports:Mine")
    message = str(caught.value)
    assert f"{tmp_path / 'mine_imports.py'}, line 3: No module named 'numpyy'" in message
    assert "working directory" not in message  # the module itself was found: the error is inside it


def test_a_module_not_found_says_where_modules_are_looked_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, output = _verify(["not_here:Mine"])
    assert code == 2, output
    text = " ".join(output.split())
    assert f"no module named 'not_here' in the working directory {tmp_path}" in text
    assert "run from the directory that holds not_here.py, or add that directory to PYTHONPATH" in text


def test_report_says_where_it_wrote(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["verify", "Uniform", "--stages", "a", "--report", "window.html"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "window.html").is_file()
    assert f"wrote the report of Uniform to {tmp_path / 'window.html'}" in result.output


def _overspent_log(path: Path) -> None:
    """A ledger that spends ε/w (rounded down) at t = 1..30: fine at ε = 1, every window of 8 or more over 0.7."""
    ledger = WindowLedger(epsilon=1.0, w=10, keep_records=True)
    for t in range(1, 31):
        ledger.spend(t, rounding.share(1.0, 10), purpose="publication")
    ledger.export(path)


def test_audit_says_how_many_violations_it_did_not_list_and_prints_sums_rounded_up(tmp_path: Path) -> None:
    log = tmp_path / "ledger.jsonl"
    _overspent_log(log)
    result = CliRunner().invoke(main, ["audit", str(log), "--epsilon", "0.7"])
    assert result.exit_code == 1, result.output
    listed = [line for line in result.output.splitlines() if line.startswith("VIOLATION")]
    assert len(listed) == 10
    assert "... and 13 more windows over epsilon (the first 10 are listed)" in result.output  # ends 8..30: 23
    assert "VIOLATION run 0: window [1, 8] sums to 0.8 (" in result.output
    assert "0.7999999999999999" not in result.output and "0.8999999999999999" not in result.output
    as_json = CliRunner().invoke(main, ["audit", str(log), "--epsilon", "0.7", "--json"])
    assert '"violating_windows": 23' in as_json.output


def test_a_printed_sum_is_never_below_the_exact_sum() -> None:
    for total in (Fraction(0.1) + Fraction(0.2), Fraction(1, 3), Fraction(0.09999999999999999) * 7):
        shown = re.search(r"sums to (\S+) ", WindowFinding(run=0, start=1, end=2, total=total).describe(1.0))
        assert shown is not None and Fraction(float(shown.group(1))) >= total


def _hook() -> dict[str, object]:
    config = yaml.safe_load((ROOT / "examples" / "ci" / "pre-commit-config.yaml").read_text(encoding="utf-8"))
    (hook,) = [hook for repo in config["repos"] for hook in repo["hooks"]]
    assert isinstance(hook, dict)
    return hook


@pytest.mark.parametrize(
    ("changed", "runs"),
    [
        ("my_package/mechanisms.py", True),  # a module file: the hook used to skip it silently
        ("my_package/mechanisms/every_kth.py", True),  # a package
        ("my_package/mechanisms/__init__.py", True),
        ("my_package/mechanisms_old.py", False),
        ("docs/my_package/mechanisms.py", False),
    ],
)
def test_the_pre_commit_hook_runs_for_both_layouts(changed: str, runs: bool) -> None:
    """pre-commit runs a hook when ``re.search(files, path)`` matches a staged path."""
    assert bool(re.search(str(_hook()["files"]), changed)) is runs


def test_the_pre_commit_entry_verifies_a_module_file_layout(tmp_path: Path) -> None:
    package = tmp_path / "my_package"
    package.mkdir()
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / "mechanisms.py").write_text(EVERY_KTH + "\nMyMechanism = EveryKth\n", encoding="utf-8")
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.pop("PYTHONPATH", None)
    done = subprocess.run(
        shlex.split(str(_hook()["entry"])), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "verified to a bound" in done.stdout


def test_the_main_job_leaves_no_untracked_file_in_the_repository() -> None:
    """`budgetcheck bench --quick` keeps bench-quick.sqlite in the working directory (to resume): git ignores it."""
    for name in ("bench-quick.sqlite", "bench-quick.sqlite-wal", "bench-quick.sqlite-shm"):
        done = subprocess.run(["git", "check-ignore", "-q", name], cwd=ROOT, capture_output=True, check=False)
        assert done.returncode == 0, f"{name} would be left untracked in the repository root"


def test_the_project_metadata_names_no_url_nobody_owns() -> None:
    """``[project.urls]`` pointed at ``github.com/OWNER/...``; no public address is known, so the package ships
    none (the docs are in the sdist); ``tests/cli/test_light_install.py`` checks every URL of the file."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert "OWNER" not in text


def test_output_piped_into_a_reader_that_stops_is_not_an_internal_error() -> None:
    """`budgetcheck mechanisms | head` used to print a traceback and "internal error (exit 70)"."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first line: every write meets a closed pipe
    child = subprocess.Popen(
        [sys.executable, "-m", "budgetcheck", "mechanisms"], stdout=write_end, stderr=subprocess.PIPE
    )
    os.close(write_end)
    _, err = child.communicate(timeout=120)
    assert child.returncode == 141, err  # as a shell reports a tool stopped by SIGPIPE; never 0
    assert err == b"", err
