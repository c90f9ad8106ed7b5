"""Du et al.'s Figures 10-13 in the paper's form and §5.4's percentages beside ours, from ``bench report``."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from budgetcheck.bench import personalized_study as ps
from budgetcheck.bench.study_report import improvement
from budgetcheck.cli import main


def test_the_report_draws_figures_10_to_13_and_the_paper_comparison(tmp_path: Path) -> None:
    points = [p for p in ps.experiments(150) if p.x in (0.2, 1.0, 40.0, 200.0, 0.1, 0.9)]
    rows = ps.run_study(users=150, length=40, runs=2, datasets=("Sin",), points=points, seed=1)
    results = ps.write_results(rows, tmp_path / "personalized.jsonl", {"users": 150, "length": 40, "runs": 2})
    result = CliRunner().invoke(main, ["bench", "report", str(results), "--out", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    for stem in (
        "du_fig10_amre_vs_epsilon",
        "du_fig11_amre_vs_w",
        "du_fig12_amre_vs_ratio_epsilon",
        "du_fig13_amre_vs_ratio_w",
        "du_improvement_vs_paper",
    ):
        png = (tmp_path / "r" / stem).with_suffix(".png").read_bytes()
        assert png.startswith(b"\x89PNG") and len(png) > 10_000, stem
    table = (tmp_path / "r" / "du_improvement.md").read_text()
    ours, count = improvement(rows, "Sin", "vary-epsilon", "PBA", "StrictestBA")
    assert count == 2 and f"| Sin | vary-epsilon | 2 | {ours:.2f} |" in table
    assert "| 27.7 |" in table  # §5.4: PBA's AMRE 27.7% below BA's on Sin, ε varied
