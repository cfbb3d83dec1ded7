"""Plots of serving sweeps: output throughput against TPOT across concurrency, and SD speedup against it."""

from __future__ import annotations

import math
import textwrap
from typing import TYPE_CHECKING

from moesim.figures import pyplot, save_figure

if TYPE_CHECKING:
    from moesim.simulator.serving.run import ServeResult

SPEEDUP_LINES = {
    "output_throughput": "output throughput",
    "mean_tpot_ms": "mean TPOT",
    "mean_e2el_ms": "mean E2E latency",
    "mean_ttft_ms": "mean TTFT",
}


def _label(point_concurrency: int | None, rate: float) -> str:
    if point_concurrency is not None:
        return f"C={point_concurrency}"
    return "rate ∞" if math.isinf(rate) else f"{rate:g} req/s"


def plot_serving(result: ServeResult, path: str) -> None:
    """Two panels, written atomically: throughput vs mean TPOT (SD and no SD, each point labelled with its
    concurrency or rate), and each metric's SD speedup across the points."""
    plt = pyplot()

    points = result.points
    labels = [_label(p.max_concurrency, p.request_rate) for p in points]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 5), dpi=120)
    for mode, name, colour in (("baseline", "no SD", "tab:grey"), ("sd", "SD", "tab:blue")):
        runs = [getattr(p, mode) for p in points]
        tpot = [r.values["mean_tpot_ms"] for r in runs]
        throughput = [r.values["output_throughput"] for r in runs]
        left.plot(tpot, throughput, marker="o", color=colour, label=name)
        for x, y, text in zip(tpot, throughput, labels, strict=True):
            left.annotate(text, (x, y), fontsize=6, xytext=(3, 3), textcoords="offset points")
    left.set_xlabel("mean TPOT (ms)")
    left.set_ylabel("output throughput (tokens/s)")
    left.grid(True, alpha=0.3)
    left.legend(fontsize=8)
    by_concurrency = all(p.max_concurrency is not None for p in points)
    xs = [p.max_concurrency if by_concurrency else p.request_rate for p in points]
    for metric, text in SPEEDUP_LINES.items():
        right.plot(xs, [p.speedups.get(metric, math.nan) for p in points], marker="o", label=text)
    right.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
    if by_concurrency and len(set(xs)) > 1:
        right.set_xscale("log", base=2)
    right.set_xlabel("max concurrency" if by_concurrency else "request rate (req/s)")
    right.set_ylabel("SD speedup (> 1: SD better)")
    right.grid(True, which="both", alpha=0.3)
    right.legend(fontsize=8)
    a = result.assumptions
    title = (
        f"{a['model']} on {a['hardware']} ({a['hardware_provenance']} profile): {a['workload']}; "
        f"drafter {a['drafter']}, K={a['draft_len']}, "
        + (f"AL {a['acceptance_length']:g}" if a.get("acceptance_length") else f"α={a['acceptance']:g}")
    )
    fig.suptitle(textwrap.fill(title, 140), fontsize=9)
    fig.tight_layout()
    save_figure(fig, path)
