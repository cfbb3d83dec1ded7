"""The plot of `routing inspect`: expert overlap against token distance and distinct experts against tokens."""

from __future__ import annotations

from typing import Any

import numpy as np

from moesim.figures import pyplot


def plot_trace_statistics(
    trace_name: str, stats: list[dict[str, Any]], independent: np.ndarray, chance: float
) -> Any:
    """Two panels, each layer faint and the mean over layers bold, beside the chance and independent lines."""
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.4), layout="constrained")
    distances = np.arange(1, len(stats[0]["overlap"]) + 1)
    for index, s in enumerate(stats):
        label = "each layer" if index == 0 else "_each layer"
        left.plot(distances, s["overlap"], color="tab:blue", alpha=0.25, lw=1, label=label)
        right.plot(distances, s["distinct_vs_tokens"], color="tab:blue", alpha=0.25, lw=1, label=label)
    left.plot(
        distances,
        np.nanmean([s["overlap"] for s in stats], axis=0),
        color="tab:blue",
        lw=2.5,
        label="mean over layers",
    )
    left.axhline(
        np.nanmean([s["baseline_overlap"] for s in stats]),
        color="tab:orange",
        ls="--",
        label="between sequences",
    )
    left.axhline(chance, color="grey", ls=":", label="chance k/N")
    left.set(
        xlabel="token distance d", ylabel="overlap |S_t ∩ S_t+d| / k", title="expert overlap vs distance"
    )
    left.legend(fontsize=8)
    right.plot(
        distances,
        np.nanmean([s["distinct_vs_tokens"] for s in stats], axis=0),
        color="tab:blue",
        lw=2.5,
        label="mean over layers",
    )
    right.plot(distances, independent, color="grey", ls=":", label="independent uniform")
    right.set(
        xlabel="consecutive tokens T", ylabel="distinct experts", title="distinct experts, one sequence"
    )
    right.legend(fontsize=8)
    fig.suptitle(f"Routing of {trace_name}: {len(stats)} layers", fontsize=11)
    return fig
