"""`bench report`'s δ_MAE figure is laid out as Schäler et al. 2022, Figure 2 and readable: one panel per
mechanism, amplitude against ε or w, nothing cut off, no cell label over another, a colour scale on which
cells do not saturate."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from matplotlib.text import Text

from budgetcheck.bench.config import ArtificialStream, Benchmark, StreamSpec
from budgetcheck.bench.figures import DELTA_CAP, delta_mae_figure, delta_scale
from budgetcheck.bench.report import deteriorations, summarize
from budgetcheck.bench.runner import run_benchmark
from budgetcheck.bench.store import ResultStore

Deltas = dict[tuple[str, float, int], dict[str, float]]


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> tuple[Deltas, dict[str, StreamSpec]]:
    """The quick grid's results, as `budgetcheck bench --quick --jobs 1` stores them (about 12 s)."""
    benchmark = Benchmark.quick()
    results = tmp_path_factory.mktemp("quick") / "quick.sqlite"
    run_benchmark(benchmark, results, progress=False)
    with ResultStore(results) as store:
        deltas = deteriorations(summarize(store))
    return deltas, {s.name: s for s in benchmark.streams}


def _texts(figure: Any) -> list[Text]:
    return [t for t in figure.findobj(Text) if t.get_visible() and t.get_text().strip()]


def _check_layout(figure: Any) -> None:
    """Every text inside the figure; cell labels inside their panel and apart from each other."""
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    page = figure.bbox
    for text in _texts(figure):
        box = text.get_window_extent(renderer)
        assert page.x0 - 0.5 <= box.x0 and box.x1 <= page.x1 + 0.5, f"cut off left/right: {text.get_text()!r}"
        assert page.y0 - 0.5 <= box.y0 and box.y1 <= page.y1 + 0.5, f"cut off top/bottom: {text.get_text()!r}"
    labels = [(ax, text) for ax in figure.axes for text in ax.texts]
    for ax, text in labels:
        box, panel = text.get_window_extent(renderer), ax.get_window_extent(renderer)
        assert panel.x0 <= box.x0 and box.x1 <= panel.x1 and panel.y0 <= box.y0 and box.y1 <= panel.y1, text.get_text()
    boxes = [text.get_window_extent(renderer) for _, text in labels]
    for a, b in itertools.combinations(boxes, 2):
        assert not a.overlaps(b), (a, b)
    tick_texts = [t for ax in figure.axes for t in (*ax.get_xticklabels(), *ax.get_yticklabels()) if t.get_text()]
    for ax in figure.axes:  # tick labels of one panel do not run into each other
        ticks = [t.get_window_extent(renderer) for t in ax.get_xticklabels() if t.get_text()]
        for a, b in itertools.combinations(ticks, 2):
            assert not a.overlaps(b)
    assert tick_texts


def _panels(figure: Any) -> list[Any]:
    return [ax for ax in figure.axes if ax.images]


def test_one_panel_per_mechanism_and_experiment_amplitude_across(quick: tuple[Deltas, dict[str, StreamSpec]]) -> None:
    deltas, streams = quick
    figure = delta_mae_figure(deltas, streams)
    panels = _panels(figure)
    mechanisms = sorted({m for values in deltas.values() for m in values})
    assert len(mechanisms) >= 10 and len(panels) == 2 * len(mechanisms)  # (a) vary ε at w = 40, (b) vary w at ε = 1
    assert [ax.get_title() for ax in panels] == mechanisms * 2
    for ax in panels:
        assert [t.get_text() for t in ax.get_xticklabels()] == ["10", "1,000"]
    rows = [tuple(t.get_text() for t in ax.get_yticklabels()) for ax in panels]
    assert set(rows) - {()} == {("0.5", "1"), ("40", "80")}  # ε up in (a), w up in (b)
    n = len(mechanisms)  # five panels a row in each part: labels on the first panel of each row
    assert [k for k, row in enumerate(rows) if row] == [*range(0, n, 5), *range(n, 2 * n, 5)]
    (a, b) = [f.get_suptitle() for f in figure.subfigs[:2]]
    assert a == "(a) vary ε at w = 40" and b == "(b) vary w at ε = 1"
    first = panels[0].images[0].get_array()  # AdaPub, vary ε: rows ε = 0.5, 1; columns a = 10, 1000 at s = 80
    expected = [[deltas[(f"s80-a{a:g}-p300", e, 40)]["AdaPub"] for a in (10.0, 1000.0)] for e in (0.5, 1.0)]
    np.testing.assert_allclose(np.ma.getdata(first), expected)


def test_the_quick_results_are_readable_and_do_not_saturate(
    quick: tuple[Deltas, dict[str, StreamSpec]], tmp_path: Path
) -> None:
    deltas, streams = quick
    figure = delta_mae_figure(deltas, streams)
    _check_layout(figure)
    values = np.concatenate([np.ma.getdata(ax.images[0].get_array()).ravel() for ax in _panels(figure)])
    (norm,) = {ax.images[0].norm.vmax for ax in _panels(figure)}  # one shared colour scale
    assert np.all(np.isfinite(values)) and values.min() == 1.0
    assert np.mean(values >= norm) < 0.5 and np.all(values < norm)  # nothing at the top of the scale
    assert norm <= 2.5 * values.max()  # and the scale is not stretched far beyond the data
    figure.savefig(tmp_path / "delta_mae.png")
    assert (tmp_path / "delta_mae.png").stat().st_size > 50_000


def test_the_colour_scale_is_the_first_1_2_5_step_above_the_largest_value() -> None:
    assert [delta_scale(v) for v in (1.0, 1.9, 2.0, 4.99, 5.0, 9.0, 208.0, 499.0, 500.0, 5e4)] == [
        2.0,
        2.0,
        5.0,
        5.0,
        10.0,
        10.0,
        500.0,
        500.0,
        DELTA_CAP,
        DELTA_CAP,
    ]


@settings(max_examples=6, deadline=None)
@given(
    mechanisms=st.integers(1, 12),
    amplitudes=st.integers(1, 4),
    epsilons=st.integers(1, 6),
    ws=st.integers(1, 5),
    seed=st.integers(0, 2**16),
)
def test_any_grid_up_to_the_papers_is_laid_out_without_clipping_or_overlap(
    mechanisms: int, amplitudes: int, epsilons: int, ws: int, seed: int
) -> None:
    """Paper-sized grids (10+ mechanisms, 4 amplitudes, 6 ε, 5 w) and tiny ones, with δ up to 10⁴."""
    rng = np.random.default_rng(seed)
    names = [f"Mechanism{k}" for k in range(mechanisms)]
    streams: dict[str, StreamSpec] = {}
    for a in (10.0, 100.0, 1000.0, 10000.0)[:amplitudes]:
        for s in (40, 80):
            stream = ArtificialStream(s, a, 1000)
            streams[stream.name] = stream
    grid = [(e, 120) for e in (0.1, 0.3, 0.5, 0.7, 0.9, 1.0)[:epsilons]]
    grid += [(1.0, w) for w in (40, 80, 120, 160, 200)[:ws]]
    deltas: Deltas = {}
    for name in streams:
        for epsilon, w in grid:
            values = 10 ** rng.uniform(0, 4, size=mechanisms)
            values[rng.integers(mechanisms)] = 1.0
            deltas[(name, epsilon, w)] = dict(zip(names, map(float, values)))
    figure = delta_mae_figure(deltas, streams)
    _check_layout(figure)
    assert len(_panels(figure)) % mechanisms == 0
