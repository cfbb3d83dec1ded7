"""Every plot a command draws is readable: a one-line title, labelled axes, a legend with one entry per
labelled series and nothing missing, and no text outside the canvas. Each is rendered and inspected."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from matplotlib.collections import Collection
from matplotlib.lines import Line2D

from moesim import sweep
from moesim.cli import cli
from moesim.simulator.routing.independent import expected_distinct_uniform
from moesim.simulator.speculative.plots import plot_sweep
from moesim.validation.reference.report import plot_predicted_vs_measured

TITLE_MAX_CHARS = 90


def legends(fig: Any) -> list[list[str]]:
    found = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend())]
    return [[text.get_text() for text in legend.get_texts()] for legend in found]


def legend_labels(fig: Any) -> list[str]:
    return [label for legend in legends(fig) for label in legend]


def series_labels(fig: Any) -> set[str]:
    """Labels of the plotted series (lines and scatters) that ask for a legend entry."""
    labels = set()
    for ax in fig.axes:
        for artist in [*ax.get_lines(), *ax.collections]:
            if isinstance(artist, Line2D | Collection) and not artist.get_label().startswith("_"):
                labels.add(artist.get_label())
    return labels


def titles(fig: Any) -> list[str]:
    found = [fig._suptitle.get_text()] if fig._suptitle else []
    return found + [ax.get_title() for ax in fig.axes if ax.get_visible() and ax.get_title()]


def extent_outside_canvas(fig: Any) -> tuple[float, float, float, float]:
    """How far (inches: left, bottom, right, top) what is drawn reaches beyond the canvas; zeros when inside."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)  # the figure was closed after saving: give it a renderer again
    canvas.draw()
    drawn = fig.get_tightbbox(canvas.get_renderer())
    width, height = fig.get_size_inches()
    return (max(0.0, -drawn.x0), max(0.0, -drawn.y0), max(0.0, drawn.x1 - width), max(0.0, drawn.y1 - height))


def assert_readable(fig: Any, expect_series: int | None = None) -> None:
    for title in titles(fig):
        assert "\n" not in title and len(title) <= TITLE_MAX_CHARS, title
    visible = [ax for ax in fig.axes if ax.get_visible()]
    assert visible
    has_x = fig._supxlabel is not None or all(ax.get_xlabel() for ax in visible)
    has_y = fig._supylabel is not None or all(ax.get_ylabel() for ax in visible)
    assert has_x and has_y
    for legend in legends(fig):
        assert len(legend) == len(set(legend)), f"a legend entry is repeated: {legend}"
    entries = set(legend_labels(fig))
    assert entries == series_labels(fig), "legend entries differ from the labelled series"
    if expect_series is not None:
        assert len(entries) == expect_series
    assert max(extent_outside_canvas(fig)) < 0.02


def test_the_main_jobs_plot_is_one_panel_per_model_with_a_complete_legend(tmp_path: Path) -> None:
    names = ["olmoe-1b-7b", "qwen3-30b-a3b", "mixtral-8x7b", "gpt-oss-20b", "qwen3-0.6b"]
    result = sweep(names, batches=[1, 4, 16, 64], draft_lens=[1, 2, 3, 4, 5, 6, 7, 8])
    fig = plot_sweep(result, str(tmp_path / "speedup.png"))
    assert_readable(fig, expect_series=8)  # one entry per draft length, shared by the panels
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert sorted(ax.get_title() for ax in panels) == sorted(names)
    for ax in panels:
        assert len([line for line in ax.get_lines() if not line.get_label().startswith("_")]) == 8
    caption = fig._supxlabel.get_text()
    for assumption in ("acceptance", "drafter", "launch", "context", "routing"):
        assert assumption in caption
    assert (tmp_path / "speedup.png").read_bytes().startswith(b"\x89PNG")


def test_every_bundled_model_still_fits_on_the_canvas(tmp_path: Path) -> None:
    from moesim.simulator.models.catalogue import list_models

    result = sweep("all", batches=[1, 8, 64], draft_lens=[1, 4, 8])
    fig = plot_sweep(result, str(tmp_path / "all.svg"))
    assert_readable(fig, expect_series=3)
    assert len([ax for ax in fig.axes if ax.get_visible()]) == len(list_models())


@pytest.mark.parametrize("names", [["olmoe-1b-7b"], ["olmoe-1b-7b", "qwen3-30b-a3b", "mixtral-8x7b"]])
def test_small_sweeps_fit_on_the_canvas_and_every_column_has_batch_labels(
    tmp_path: Path, names: list[str]
) -> None:
    result = sweep(names, batches=[1, 4, 16], draft_lens=[1, 2])
    fig = plot_sweep(result, str(tmp_path / "few.png"))
    assert_readable(fig, expect_series=2)
    for ax in fig.axes:
        if ax.get_visible():
            below = [other for other in fig.axes if other.get_visible() and other is not ax]
            is_bottom = not any(
                abs(other.get_position().x0 - ax.get_position().x0) < 1e-6
                and other.get_position().y0 < ax.get_position().y0
                for other in below
            )
            if is_bottom:
                assert any(label.get_visible() and label.get_text() for label in ax.get_xticklabels())


def test_validation_plot_is_readable(tmp_path: Path) -> None:
    rows = [
        {"model": m, "draft_len": k, "measured_s": 1e-3 * (1 + k + i), "predicted_s": 1.1e-3 * (1 + k + i)}
        for i, m in enumerate(["tiny-a", "tiny-b"])
        for k in (0, 1, 3)
    ]
    fig = plot_predicted_vs_measured(rows, tmp_path / "v.png", "Predicted vs measured: MAPE 10%", "a caption")
    assert_readable(fig, expect_series=6 + 2)  # 2 models × 3 draft lengths, the y = x line and the ±10% band


def test_routing_inspect_plot_is_readable(tmp_path: Path) -> None:
    from moesim.simulator.routing.plots import plot_trace_statistics

    distances = 8
    stats = [
        {
            "overlap": np.linspace(0.5, 0.2, distances),
            "distinct_vs_tokens": np.linspace(2, 9, distances),
            "baseline_overlap": 0.1,
        }
        for _ in range(3)
    ]
    fig = plot_trace_statistics(
        "t.npz", stats, expected_distinct_uniform(16, 2, np.arange(1, distances + 1)), 2 / 16
    )
    assert_readable(fig)
    assert set(legend_labels(fig)) >= {"each layer", "mean over layers", "chance k/N", "independent uniform"}


@pytest.mark.parametrize("suffix", [".png", ".svg", ".pdf"])
def test_routing_inspect_writes_each_plot_type(tmp_path: Path, suffix: str) -> None:
    from moesim.simulator.routing import save_trace
    from moesim.simulator.routing.synthetic import gating_trace

    trace, plot = tmp_path / "t.npz", tmp_path / f"overlap{suffix}"
    save_trace(gating_trace(16, 2, 6, 24, seed=1), trace)
    result = CliRunner().invoke(cli, ["routing", "inspect", str(trace), "--plot", str(plot)])
    assert result.exit_code == 0, result.output
    head = plot.read_bytes()[:5]
    assert head == {".png": b"\x89PNG\r", ".pdf": b"%PDF-", ".svg": b"<?xml"}[suffix]
