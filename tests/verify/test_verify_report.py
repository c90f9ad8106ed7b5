"""`verify --report` draws a run long enough to show the mechanism (T >= 3w), window sums as a line against ε,
the refused attempt marked, integer timestamps, plain-word labels and nothing cut off."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from budgetcheck import verify_mechanism
from budgetcheck.cli import main
from budgetcheck.strategies import VerificationCase
from budgetcheck.verify.report import _replay, draw_report

PASSING = "plain_mechanisms:EveryKth"  # the README's example
OVERSPENDS = "broken.mutants:UniformOverWMinusOne"


def _figure(reference: str) -> tuple[Figure, VerificationCase, Fraction | None]:
    result = verify_mechanism(reference, stages="a", examples=30)
    case = result.counterexample.case if result.counterexample else result.worst_case
    assert case is not None
    figure, shown = draw_report(result, case)
    assert isinstance(shown, VerificationCase)
    _, refusal, _ = _replay(result, shown)
    figure.canvas.draw()
    return figure, shown, None if refusal is None else Fraction(refusal.window_sum)


def _axes(figure: Figure) -> Axes:
    (axes,) = figure.axes
    return axes


def _line(axes: Axes, label_part: str) -> Line2D:
    (line,) = [line for line in axes.get_lines() if label_part in str(line.get_label())]
    return line


def _window_sums(axes: Axes, w: int) -> np.ndarray:
    """The sums over the last w bars (privacy spent at each t), recomputed from the bars drawn."""
    (bars,) = axes.containers
    centres = [bar.get_x() + bar.get_width() / 2 for bar in bars]
    assert centres == pytest.approx(list(range(1, len(centres) + 1)))
    spent = np.array([bar.get_height() for bar in bars])
    return np.convolve(spent, np.ones(w))[: len(spent)]


@pytest.mark.parametrize("reference", [PASSING, OVERSPENDS])
def test_the_run_drawn_spans_three_windows_and_its_line_is_the_window_sums(reference: str) -> None:
    figure, shown, refused = _figure(reference)
    axes = _axes(figure)
    length = shown.data.shape[0]
    assert shown.w >= 2 and length >= 3 * shown.w
    assert axes.get_xlim() == (0.5, length + 0.5)  # the axis covers the whole run, not the refusal only
    line = _line(axes, f"privacy spent in the last w = {shown.w} timestamps")
    times, sums = np.asarray(line.get_xdata()), np.asarray(line.get_ydata())
    assert list(times) == list(range(1, len(times) + 1))
    np.testing.assert_allclose(sums, _window_sums(axes, shown.w)[: len(sums)], rtol=1e-12, atol=1e-15)
    assert np.all(sums <= shown.epsilon * (1 + 1e-12)) and np.any(sums > 0)
    (limit,) = [line for line in axes.get_lines() if str(line.get_label()).startswith(f"ε = {shown.epsilon:g}")]
    assert set(np.asarray(limit.get_ydata(), dtype=float)) == {shown.epsilon}
    if refused is None:
        assert len(times) >= 3 * shown.w  # a correct mechanism runs to the end
        assert not [line for line in axes.get_lines() if line.get_marker() == "X"]


def test_an_overspend_is_marked_at_the_attempted_sum_above_epsilon() -> None:
    figure, shown, refused = _figure(OVERSPENDS)
    axes = _axes(figure)
    assert refused is not None and refused > Fraction(shown.epsilon)
    marker = _line(axes, "refused by the ledger")
    assert marker.get_marker() == "X" and marker.get_color() == "red"
    (t,), (y,) = marker.get_xdata(), marker.get_ydata()
    assert y == pytest.approx(float(refused), rel=1e-12) and y > shown.epsilon
    assert t == len(_line(axes, "privacy spent in the last").get_xdata()) + 1  # the step after the last spend
    notes = [text.get_text() for text in axes.texts]
    assert any(f"refused at t = {t}" in note and f"> ε = {shown.epsilon:g}" in note for note in notes)


@pytest.mark.parametrize("reference", [PASSING, OVERSPENDS])
def test_timestamps_are_integers_labels_plain_and_nothing_is_cut_off(reference: str) -> None:
    figure, _, _ = _figure(reference)
    axes = _axes(figure)
    low, high = axes.get_xlim()
    ticks = [label for label in axes.get_xticklabels() if label.get_text() and low <= label.get_position()[0] <= high]
    assert ticks
    for label in ticks:
        assert float(label.get_text().replace("−", "-")).is_integer()
    texts = [axes.title, axes.xaxis.label, axes.yaxis.label, *ticks, *axes.texts]
    legend = axes.get_legend()
    assert legend is not None
    texts += legend.get_texts()
    assert figure._suptitle is not None
    texts.append(figure._suptitle)
    words = " ".join(text.get_text() for text in texts)
    assert "t−" not in words and "[t" not in words and "/ ε" not in words  # no formulas for labels
    renderer = figure.canvas.get_renderer()  # type: ignore[attr-defined]  # an Agg canvas
    page = figure.bbox
    for text in texts:
        box = text.get_window_extent(renderer)
        assert page.x0 - 1 <= box.x0 and box.x1 <= page.x1 + 1 and page.y0 - 1 <= box.y0 and box.y1 <= page.y1 + 1, (
            text.get_text()
        )


@pytest.mark.parametrize(("reference", "code"), [(PASSING, 0), (OVERSPENDS, 1)])
def test_the_command_writes_the_picture(tmp_path: Path, reference: str, code: int) -> None:
    png = tmp_path / "report.png"
    result = CliRunner().invoke(main, ["verify", reference, "--stages", "a", "--examples", "30", "--report", str(png)])
    assert result.exit_code == code, result.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000


def test_the_html_page_says_what_the_cli_says_with_the_reproduction(tmp_path: Path) -> None:
    """The page's verdict is the CLI's word (VIOLATED, not "fail"), its details carry the `reproduce:` call,
    and a detail's markup is text, not HTML."""
    page = tmp_path / "report.html"
    result = CliRunner().invoke(
        main, ["verify", OVERSPENDS, "--stages", "a", "--examples", "30", "--report", str(page)]
    )
    assert result.exit_code == 1, result.output
    text = page.read_text(encoding="utf-8")
    assert result.output.splitlines()[2].endswith("VIOLATED") and "VIOLATED</h1>" in text
    assert "reproduce: budgetcheck.execute(" in text and ": fail</h1>" not in text
    assert "<meta charset='utf-8'>" in text and "alt=" in text
