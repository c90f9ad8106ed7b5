"""Long commands show their progress: rows as soon as they are decided; plain lines in a log."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from budgetcheck.cli import main


def test_prove_prints_each_row_as_it_is_decided(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first row is on stdout before the second proof starts."""
    from budgetcheck import proving

    printed: list[str] = []
    real = proving.prove_range

    def watching(*args: object, **kwargs: object) -> object:
        sys.stdout.flush()
        printed.append(sys.stdout.buffer.getvalue().decode())  # what CliRunner has captured so far
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(proving, "prove_range", watching)
    result = CliRunner().invoke(main, ["prove", "BD", "Uniform", "--w-max", "4"])
    assert result.exit_code == 0, result.output
    assert len(printed) == 2
    assert "BD " not in printed[0].split("verdict", 1)[-1]  # before the first proof: only the header
    assert "BD " in printed[1] and "proved" in printed[1]  # the BD row is out before Uniform's proof starts


def test_prove_refuses_an_unknown_mechanism_before_proving_anything() -> None:
    result = CliRunner().invoke(main, ["prove", "BD", "NoSuchMechanism"])
    assert result.exit_code == 2 and "NoSuchMechanism" in result.output and "proved" not in result.output


def test_bench_in_a_log_writes_plain_progress_lines(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "budgetcheck",
            "bench",
            "--quick",
            "--mechanism",
            "Uniform",
            "--stream",
            "s40-a10-p300",
            "--runs",
            "2",
            "--results",
            str(tmp_path / "r.sqlite"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    assert "\r" not in result.stderr and "\r" not in result.stdout
    lines = [line for line in result.stderr.splitlines() if line.startswith("cells:")]
    assert lines[0].startswith("cells: ") and "to run" in lines[0]
    assert lines[-1].startswith("cells: ") and "(100%)" in lines[-1]


def test_bench_json_gives_every_cell_and_finding(tmp_path: Path) -> None:
    import json

    args = [
        "bench",
        "--quick",
        "--mechanism",
        "Uniform",
        "--mechanism",
        "Sample",
        "--stream",
        "s40-a10-p300",
        "--runs",
        "2",
        "--results",
        str(tmp_path / "r.sqlite"),
        "--no-progress",
        "--json",
    ]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["cells_run_now"] == 6 and len(report["cells"]) == 6
    assert {cell["mechanism"] for cell in report["cells"]} == {"Uniform", "Sample"}
    assert all(cell["mae_mean"] > 0 and cell["runs"] == 4 * 2 and cell["streams"] == 4 for cell in report["cells"])
    for cell in report["cells"]:  # equal runs per stream: the cell's mean is the mean of the stream means
        assert cell["stream_mae_min"] <= cell["mae_mean"] <= cell["stream_mae_max"]
        assert cell["stream_mae_min"] < cell["stream_mae_max"] and cell["stream_mae_std"] > 0
    assert len(report["findings"]) == 3 and all(f["best"] in ("Uniform", "Sample") for f in report["findings"])
