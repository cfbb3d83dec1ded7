"""Plots of sweep results (matplotlib, Agg backend: files only, no display needed)."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

from moesim.atomic import atomic_path
from moesim.errors import MoesimError

if TYPE_CHECKING:
    from moesim.simulator.speculative.sweep import SweepResult

PLOT_SUFFIXES = (".png", ".pdf", ".svg")


def sweep_title(result: SweepResult) -> str:
    """Hardware and the assumptions behind the curves, in one or two lines."""
    a = result.assumptions
    acceptance = (
        f"acceptance length {a['acceptance_length']:g}"
        if a.get("acceptance_length")
        else f"α = {a.get('acceptance', 0.8):g}"
    )
    layouts = list(dict.fromkeys(r.layout for r in result.rows))
    where = f" × {layouts[0]}" if len(layouts) == 1 and layouts[0] != "1 GPU" else ""
    if len(layouts) > 1:
        where = " (the smallest layout that fits each model and batch)"
    details = (
        f"{acceptance}, drafter {a.get('drafter')}, {a.get('routing')}, {a.get('engine')} kernels, "
        f"{a.get('launch')} launch, context {a.get('context_len')}"
    )
    return (
        f"SD speedup on {a.get('hardware', '?')}{where} ({a.get('hardware_provenance', '?')} profile)\n"
        + textwrap.fill(details, 125)
    )


def plot_suffix(path: str) -> str:
    """The file type of a plot path, refused unless matplotlib writes it here (png, pdf, svg)."""
    suffix = Path(path).suffix.lower()
    if suffix not in PLOT_SUFFIXES:
        raise MoesimError(
            "--plot",
            f"unsupported file type {suffix or '(none)'!r}",
            f"use one of {', '.join(PLOT_SUFFIXES)}",
        )
    return suffix


def plot_sweep(result: SweepResult, path: str) -> None:
    """Speedup against batch size (log axis), one line per model and draft length; written atomically."""
    suffix = plot_suffix(path)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(dict.fromkeys(r.model for r in result.rows))
    draft_lens = sorted({r.draft_len for r in result.rows})
    colours = plt.get_cmap("tab10" if len(models) <= 10 else "tab20")
    fig, ax = plt.subplots(figsize=(10, 6), dpi=120)
    for mi, model in enumerate(models):
        for ki, k in enumerate(draft_lens):
            rows = sorted(
                (r for r in result.rows if r.model == model and r.draft_len == k), key=lambda r: r.batch
            )
            if not rows:
                continue
            shade = 0.35 + 0.65 * (ki + 1) / len(draft_lens)
            ax.plot(
                [r.batch for r in rows],
                [r.speedup for r in rows],
                marker="o",
                markersize=3,
                color=colours(mi % colours.N),
                alpha=shade,
                linewidth=0.8 + 1.2 * ki / max(1, len(draft_lens) - 1),
                label=f"{model} K={k}",
            )
    ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch size B")
    ax.set_ylabel("speedup (tokens/s with SD ÷ without)")
    ax.set_title(sweep_title(result), fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    n_lines = len(ax.get_lines()) - 1
    if n_lines:
        ax.legend(fontsize=6, ncol=max(1, n_lines // 24 + 1), loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format=suffix[1:])
    plt.close(fig)
