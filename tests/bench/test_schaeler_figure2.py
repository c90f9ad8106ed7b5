"""benchmarks/schaeler_figure2.py sets a results file beside Schäler et al.'s Figure 2 numbers.

A tiny results file is written through the public ResultStore with MAEs chosen so that the answer is
known: which cells agree with the paper's best mechanism, that Hybrid (not in the paper's M) never
counts, and that streams of other periods are compared separately.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from benchmarks import schaeler_figure2 as fig2

from budgetcheck.bench.config import Cell
from budgetcheck.bench.store import CellResult, ResultStore

RUNS = 3


def _stream(season: int, amplitude: float) -> tuple[str, str]:
    spec = {"amplitude": amplitude, "growth": 1.5, "kind": "artificial", "length": 1000, "season": season}
    return f"stream:s{season}-a{amplitude:g}", json.dumps(spec, sort_keys=True)


def _results(path: Path, maes: dict[tuple[str, str, float, int], float]) -> Path:
    streams = {name.split(":", 1)[1]: name for name in (_stream(s, a)[0] for s in (40, 80) for a in (10.0, 10000.0))}
    identity = dict(_stream(s, a) for s in (40, 80) for a in (10.0, 10000.0))
    with ResultStore(path, {"runs": str(RUNS), "seed": "0", "mre_bound": "0.001", **identity}) as store:
        for (mechanism, stream, epsilon, w), mae in maes.items():
            assert stream in streams
            # three runs around the mean: the mean MAE is exactly ``mae``
            runs = np.array([mae - 1.0, mae, mae + 1.0])
            store.add(CellResult(Cell(mechanism, stream, epsilon, w), runs, np.full(RUNS, 0.1), 0.01, False))
    return path


# Our MAEs. Paper's best (results/schaeler2022/paper_figure2.csv): a = 10 -> Sample in every cell;
# (ε = 0.1, w = 120, a = 10,000) -> FASTw (δ 1; Uniform 2.02, Sample 2.59); (ε = 1, w = 40, a = 10,000) -> Uniform.
TINY = {
    ("Sample", "s80-a10", 0.1, 120): 10.0,
    ("Uniform", "s80-a10", 0.1, 120): 1200.0,
    ("FASTw", "s80-a10", 0.1, 120): 100.0,
    ("Hybrid", "s80-a10", 0.1, 120): 1.0,  # best of all, but not one of the paper's mechanisms
    ("Sample", "s80-a10000", 0.1, 120): 3000.0,
    ("Uniform", "s80-a10000", 0.1, 120): 1200.0,  # ours best; the paper's is FASTw
    ("FASTw", "s80-a10000", 0.1, 120): 1500.0,
    ("Sample", "s80-a10", 1.0, 40): 4.0,
    ("Uniform", "s80-a10", 1.0, 40): 40.0,
    ("Sample", "s80-a10000", 1.0, 40): 1500.0,
    ("Uniform", "s80-a10000", 1.0, 40): 40.0,
    ("Sample", "s40-a10", 1.0, 40): 50.0,  # period 40: Uniform best, the paper's s = 80 says Sample
    ("Uniform", "s40-a10", 1.0, 40): 40.0,
}


def test_agreement_counts_the_cells_where_our_best_is_the_papers(tmp_path: Path) -> None:
    """Three of the four s = 80 cells agree; Hybrid's smaller MAE does not make it best; the s = 40 cell
    is reported on its own line; the largest difference is the FASTw/Uniform cell's."""
    results = _results(tmp_path / "tiny.sqlite", TINY)
    out = tmp_path / "out"
    assert fig2.main([str(results), "--out", str(out)]) == 0
    text = (out / "figure2_agreement.md").read_text(encoding="utf-8")
    assert "best mechanism agrees: **3 of 4 (75%)** cells" in text
    assert "Ours: growth 1.5, γ = 0.001, 3 runs." in text
    assert "period s = 40 against the paper's s = 80: 0 of 1 (0%)" in text
    # a baseline within 10% of the best: the paper's (0.1, 120, 10,000) has FASTw 1, Uniform 2.02
    assert "within 10% of the best (§5.1.2): paper 3 of 4 (75%), ours 4 of 4 (100%) cells" in text
    assert "| ε = 0.1 | Sample / Sample ✓ | FASTw / Uniform ✗ |" in text
    assert "| w = 40 | Sample / Sample ✓ | Uniform / Uniform ✓ |" in text
    assert "Hybrid" not in text
    rows = (out / "figure2_comparison.csv").read_text(encoding="utf-8").splitlines()
    assert rows[0].startswith("experiment,epsilon,w,amplitude,mechanism,paper_delta_mae,our_delta_mae")
    # (ε = 0.1, w = 120, a = 10): our FASTw is 100 / 10 = 10 times the best (Sample), Hybrid excluded; the
    # paper's FASTw MAE is 7.80 · (120 / 0.1) / 117.56 (Uniform's δ) = 79.62
    assert "vary-epsilon,0.1,120,10,FASTw,7.80,10,79.62,100" in rows
    largest = text.split("largest differences")[1].splitlines()[4]
    assert largest == "| vary-epsilon | ε = 0.1 | 10,000 | Uniform | 2.02 | 1 | 2.02 |"


def test_agreement_uses_the_paper_ties_and_the_ten_percent_margin() -> None:
    """Where the workbook shows two mechanisms at 1.00 either one agrees; ≈ marks an our-best within 10%."""
    paper = {("vary-w", 1.0, 80, 100): {"Sample": 1.0, "RescueDP": 1.0, "Uniform": 1.08, "BD": 3.0}}
    tied = fig2.agreement(
        paper, {("vary-w", 1.0, 80, 100): {"Sample": 1.5, "RescueDP": 1.0, "Uniform": 2.0, "BD": 9.0}}
    )
    near = fig2.agreement(
        paper, {("vary-w", 1.0, 80, 100): {"Sample": 1.5, "RescueDP": 1.2, "Uniform": 1.0, "BD": 9.0}}
    )
    far = fig2.agreement(paper, {("vary-w", 1.0, 80, 100): {"Sample": 1.5, "RescueDP": 1.2, "Uniform": 2.0, "BD": 1.0}})
    assert [(r.agrees, r.near) for r in tied + near + far] == [(True, True), (False, True), (False, False)]
    assert tied[0].paper_best == ("RescueDP", "Sample")


def test_the_transcribed_numbers_are_a_complete_figure_2() -> None:
    """44 cells × 9 mechanisms; every cell's smallest δ is 1.00 (δ is relative to the best); the MAE
    recovered from Uniform is w/ε; spot values from the workbook cells the CSV names."""
    paper = fig2.load_paper()
    assert len(paper) == 6 * 4 + 5 * 4
    assert all(len(cell) == 9 and min(cell.values()) == 1.0 for cell in paper.values())
    implied = fig2.implied_mae(paper)
    assert all(math.isclose(cell["Uniform"], key[2] / key[1]) for key, cell in implied.items())
    assert paper[("vary-epsilon", 1.0, 120, 10000)]["RescueDP"] == 2300.46  # fig_2a!O24
    assert paper[("vary-w", 1.0, 200, 10000)]["RescueDP"] == 10742545.46  # fig_2b!O21
    assert paper[("vary-epsilon", 0.1, 120, 10)]["Sample"] == 1.0  # §5.1.1: Sample best at a = 10, ε = 0.1


def test_the_figure_draws_both_sides_in_the_papers_panel_order(tmp_path: Path) -> None:
    """Nine panels for the paper's numbers and nine for ours, titled in the workbook's order, as PNG."""
    ours = fig2.deltas(fig2.load_ours_by_season(_results(tmp_path / "tiny.sqlite", TINY), ["Sample", "Uniform"])[80])
    figure = fig2.figure2(fig2.load_paper(), ours, "vary-w")
    titles = [ax.get_title() for ax in figure.axes if ax.get_title()]
    order = ["Uniform", "Sample", "AdaPub", "BA", "BD", "DSATw", "FASTw", "PeGaSus", "RescueDP"]
    assert titles == order + order
    # our Sample panel holds our two w = 40 cells: δ 1 (a = 10) and 1500 / 40 = 37.5 (a = 10,000)
    sample = figure.axes[9 + 1]
    assert sorted(t.get_text() for t in sample.texts) == ["1.00", "38"]
    figure.savefig(tmp_path / "f.png", dpi=40)
    assert (tmp_path / "f.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_missing_results_file_is_named(tmp_path: Path) -> None:
    """No traceback: the error names the argument and the path."""
    with pytest.raises(SystemExit, match=r"results='.*nope\.sqlite': no such file"):
        fig2.main([str(tmp_path / "nope.sqlite"), "--out", str(tmp_path / "out")])
