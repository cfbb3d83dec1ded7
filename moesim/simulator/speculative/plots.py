"""The sweep's plot: small multiples, one panel per model, one line per draft length (matplotlib, Agg backend).

One panel per model keeps 20 models readable (a single axes would hold 160 lines); the draft lengths share one
sequential colour scale and one legend, the panels share both axes so heights compare across models, and the
assumptions behind every curve go in a caption under the panels instead of a title that runs off the figure.
"""

from __future__ import annotations

import math
import textwrap
from typing import TYPE_CHECKING, Any

from moesim.figures import pyplot, save_figure

if TYPE_CHECKING:
    from moesim.simulator.speculative.sweep import SweepResult

PANEL_COLUMNS_MAX = 5
PANEL_SIZE_IN = (3.0, 2.4)
FIGURE_MIN_WIDTH_IN = 8.0
CAPTION_CHARS_PER_IN = 15
"""Characters of 8-point caption text per inch of figure width (about 0.55 em per character, with a margin)."""


def sweep_title(result: SweepResult) -> str:
    """One line: what is plotted, on which hardware and profile kind."""
    a = result.assumptions
    return (
        f"SD speedup vs batch size on {a.get('hardware', '?')} ({a.get('hardware_provenance', '?')} profile)"
    )


def sweep_caption(result: SweepResult, width_chars: int = 120) -> str:
    """The assumptions behind every curve, wrapped to `width_chars`."""
    a = result.assumptions
    acceptance = (
        f"acceptance length {a['acceptance_length']:g}"
        if a.get("acceptance_length")
        else f"per-token acceptance α = {a.get('acceptance', 0.8):g}"
    )
    layouts = list(dict.fromkeys(r.layout for r in result.rows))
    by_model = a.get("routing_by_model") or {}
    routing = "; ".join(dict.fromkeys(text.split(":")[0] for text in by_model.values())) or a.get("routing")
    layout = layouts[0] if len(layouts) == 1 else "the smallest that fits each model and batch"
    text = (
        f"Speedup = tokens/s with SD ÷ without; {acceptance}; drafter {a.get('drafter')}; layout: {layout}; "
        f"{a.get('kernel_style')} kernels, {a.get('launch')} launch, context {a.get('context_len')} tokens; "
        f"{routing} (details: --json)."
    )
    if result.skipped:
        text += " Missing points: the model does not fit in memory there (listed in the output)."
    return textwrap.fill(text, width_chars)


def _grid(n_panels: int) -> tuple[int, int]:
    columns = min(PANEL_COLUMNS_MAX, max(1, math.ceil(math.sqrt(n_panels))))
    return math.ceil(n_panels / columns), columns


def plot_sweep(result: SweepResult, path: str) -> Any:
    """Draw and write the sweep plot to `path`; returns the (closed) figure so tests can inspect it."""
    plt = pyplot()
    models = list(dict.fromkeys(r.model for r in result.rows))
    draft_lens = sorted({r.draft_len for r in result.rows})
    rows_n, columns = _grid(len(models))
    width_in = max(FIGURE_MIN_WIDTH_IN, PANEL_SIZE_IN[0] * columns + 1.6)
    caption = sweep_caption(result, int(width_in * CAPTION_CHARS_PER_IN))
    caption_lines = caption.count("\n") + 1
    fig = plt.figure(
        figsize=(width_in, PANEL_SIZE_IN[1] * rows_n + 1.0 + 0.17 * caption_lines), layout="constrained"
    )
    panels = fig.subplots(rows_n, columns, sharex=True, sharey=True, squeeze=False)
    colours = plt.get_cmap("viridis")
    for index, model in enumerate(models):
        ax = panels[index // columns][index % columns]
        for ki, k in enumerate(draft_lens):
            rows = sorted(
                (r for r in result.rows if r.model == model and r.draft_len == k), key=lambda r: r.batch
            )
            if rows:
                ax.plot(
                    [r.batch for r in rows],
                    [r.speedup for r in rows],
                    marker="o",
                    markersize=2.5,
                    linewidth=1.3,
                    color=colours(0.9 * ki / max(1, len(draft_lens) - 1)),
                    label=f"K = {k}",
                )
        ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--", label="_no speedup")
        ax.set_title(model, fontsize=9)
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda value, _: f"{value:g}"))
        ax.grid(True, which="major", alpha=0.3)
        ax.tick_params(labelsize=7)
    for index in range(len(models), rows_n * columns):
        panels[index // columns][index % columns].set_visible(False)
        if index >= columns:  # the panel above an empty slot is the bottom of its column: give it tick labels
            panels[index // columns - 1][index % columns].xaxis.set_tick_params(labelbottom=True)
    handles: dict[str, Any] = {}
    for ax in fig.axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, handle)
    ordered = sorted(handles, key=lambda label: int(label.split("=")[1]))
    fig.legend(
        [handles[label] for label in ordered],
        ordered,
        loc="outside right upper",
        title="draft length",
        fontsize=8,
        title_fontsize=8,
    )
    fig.suptitle(sweep_title(result), fontsize=12)
    fig.supylabel("SD speedup (×)", fontsize=10)
    fig.supxlabel(f"batch size B (log scale)\n\n{caption}", fontsize=8)
    save_figure(fig, path)
    return fig
