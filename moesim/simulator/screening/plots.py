"""The Pareto plot of a screen: small-batch SD speedup against large-batch tokens/s, the front marked."""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING

from moesim.figures import pyplot, save_figure
from moesim.simulator.screening.pareto import front_axes, objective_value

if TYPE_CHECKING:
    from moesim.simulator.screening.screen import ScreenResult

# Designs on the front are labelled when there are at most this many (more would overlap).
MAX_FRONT_LABELS = 12


def plot_front(result: ScreenResult, path: str) -> None:
    """Every design as a point, the Pareto front as a line with its designs labelled; written atomically."""
    plt = pyplot()

    x_name, y_name = front_axes(result.settings.batches)
    points = {}
    for r in result.results:
        x, y = objective_value(r, x_name), objective_value(r, y_name)
        if x is not None and y is not None:
            points[r.index] = (x, y)
    by_index = result.by_index()
    fig, ax = plt.subplots(figsize=(9, 6), dpi=120)
    ax.scatter(
        [p[0] for p in points.values()], [p[1] for p in points.values()], s=10, alpha=0.4, label="designs"
    )
    front = sorted((points[i] + (i,) for i in result.front if i in points), key=lambda p: p[0])
    ax.plot([p[0] for p in front], [p[1] for p in front], "o-", color="crimson", label="Pareto front")
    if len(front) <= MAX_FRONT_LABELS:
        for x, y, index in front:
            ax.annotate(by_index[index].label, (x, y), fontsize=6, xytext=(4, 4), textcoords="offset points")
    small, large = min(result.settings.batches), max(result.settings.batches)
    ax.set_xlabel(f"SD speedup at batch {small} (best draft length)")
    ax.set_ylabel(f"tokens/s with SD at batch {large}")
    constraint = textwrap.fill("; ".join(result.constraints) or "no constraint", 120)
    ax.set_title(
        f"{result.base} designs on {result.settings.hardware.name}: {len(points)} designs\n{constraint}",
        fontsize=8,
    )
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)


__all__ = ["plot_front"]
