"""Predicted SD speedup against batch for the measured runs, beside the measured points.

Rows that differ only in their batch (and the acceptance length measured at each) form one curve: the
speedup the step model predicts over `CURVE_BATCHES` at the rows' mean acceptance length, under each row's
own engine preset (`per-run`) and under `ideal`, drawn with the measured points of the rows. Where the rows
give the benchmark's prompt count, each batch is priced as that benchmark runs it: a closed-loop run of
those prompts with the batch in flight (`predict.closed_loop_waves`). The shape is
the point: a curve must fall where the measured points fall and rise where they rise.

    python -m moesim.validation.runs.curves docs/runs-vs-batch.png [R1,R3,R4,R8]
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from moesim.validation.runs.predict import PER_RUN, RunPredictor, prepare, profile_for_run
from moesim.validation.runs.schema import MeasuredRun, read_runs, unrepresentable_reason

CURVE_BATCHES = (1, 2, 4, 8, 16, 32, 64)
DEFAULT_SOURCES = ("R1", "R3", "R4", "R8")
# What makes rows one curve: everything but the batch and the acceptance length measured at it.
CURVE_KEY = (
    "source",
    "model",
    "hardware",
    "gpus",
    "tp",
    "ep",
    "expert_weight_format",
    "serving_engine",
    "drafter",
    "draft_shape",
    "draft_len",
    "draft_tokens",
    "tree_topk",
    "drafter_launch",
    "max_running_requests",
    "num_prompts",
    "temperature",
)


@dataclass(frozen=True)
class RunCurve:
    """One configuration's predicted speedup over batch and its measured points."""

    label: str
    source: str
    batches: tuple[int, ...]
    predicted: tuple[float, ...]  # under each row's own engine preset
    ideal: tuple[float, ...]  # under the ideal engine (the kernel stream alone)
    measured_batches: tuple[int, ...]
    measured: tuple[float, ...]


def _label(run: MeasuredRun) -> str:
    shape = (
        f"tree ({run.draft_len}, {run.tree_topk}, {run.draft_tokens})"
        if run.draft_shape == "tree"
        else "chain"
    )
    return f"{run.model} {run.drafter} {shape} K={run.draft_len} ({run.gpus}×{run.hardware}, {run.serving_engine})"


def _speedups(predictor: RunPredictor, engine: str, acceptance_length: float) -> tuple[float, ...]:
    profile = profile_for_run(predictor.run, engine)
    return tuple(predictor.benchmark(profile, b, acceptance_length)[0] for b in CURVE_BATCHES)


def run_curves(runs: Sequence[MeasuredRun], sources: Sequence[str] = DEFAULT_SOURCES) -> list[RunCurve]:
    """The curves of the representable single-batch rows of `sources` (peak-over-batch rows have no batch
    of their own and are left out)."""
    chosen = [r for r in runs if r.source in sources and len(r.batches) == 1]
    predictors, _ = prepare(chosen)
    groups: dict[tuple[object, ...], list[RunPredictor]] = {}
    for p in predictors:
        groups.setdefault(tuple(p.run.values.get(k) for k in CURVE_KEY), []).append(p)
    curves = []
    for members in groups.values():
        first = members[0]
        acceptance = float(np.mean([m.run.acceptance_length for m in members]))
        order = sorted(members, key=lambda m: m.run.batches[0])
        curves.append(
            RunCurve(
                label=_label(first.run),
                source=first.run.source,
                batches=CURVE_BATCHES,
                predicted=_speedups(first, PER_RUN, acceptance),
                ideal=_speedups(first, "ideal", acceptance),
                measured_batches=tuple(m.run.batches[0] for m in order),
                measured=tuple(float(m.run.speedup) for m in order),
            )
        )
    return sorted(curves, key=lambda c: (c.source, c.label))


def unpredicted_points(
    runs: Sequence[MeasuredRun], sources: Sequence[str] = DEFAULT_SOURCES
) -> list[MeasuredRun]:
    """Single-batch rows of `sources` the step model cannot price (K or AL not published): shown as
    measured points without a curve."""
    return [
        r
        for r in runs
        if r.source in sources and len(r.batches) == 1 and unrepresentable_reason(r) is not None
    ]


def plot_run_curves(curves: Sequence[RunCurve], path: str, extra: Sequence[MeasuredRun] = ()) -> None:
    """One panel per source: each curve under its preset (solid) and ideal (dotted), its measured points
    (filled), and the source's rows without a curve (`extra`, hollow)."""
    from moesim.figures import pyplot, save_figure

    plt = pyplot()
    sources = sorted({c.source for c in curves})
    columns = 2 if len(sources) > 2 else len(sources)
    rows = -(-len(sources) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(7.0 * columns, 4.8 * rows), squeeze=False)
    for ax, source in zip(axes.flat, sources, strict=False):
        mine = [c for c in curves if c.source == source]
        colours = plt.cm.viridis(np.linspace(0.0, 0.85, max(2, len(mine))))
        for curve, colour in zip(mine, colours, strict=False):
            ax.plot(curve.batches, curve.predicted, "-", color=colour, label=curve.label)
            ax.plot(curve.batches, curve.ideal, ":", color=colour)
            ax.plot(
                curve.measured_batches, curve.measured, "o", color=colour, markersize=7, markeredgecolor="k"
            )
        loose = [r for r in extra if r.source == source]
        if loose:
            ax.plot(
                [r.batches[0] for r in loose],
                [float(r.speedup) for r in loose],
                "o",
                markerfacecolor="none",
                markeredgecolor="k",
                markersize=8,
                label="measured, K or AL not published (no curve)",
            )
        ax.set_xscale("log", base=2)
        ax.set_xticks(CURVE_BATCHES, [str(b) for b in CURVE_BATCHES])
        ax.axhline(1.0, color="grey", lw=0.8, ls="--")
        ax.set_title(source)
        ax.set_xlabel("batch size B")
        ax.set_ylabel("SD speedup (×)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    for ax in list(axes.flat)[len(sources) :]:
        ax.set_visible(False)
    fig.suptitle(
        "Measured SD speedup (dots) and moesim's prediction over batch: under the run's engine preset (solid), "
        "the ideal engine (dotted)",
        fontsize=10,
    )
    fig.tight_layout()
    save_figure(fig, path)


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "docs/runs-vs-batch.png"
    wanted = tuple(sys.argv[2].split(",")) if len(sys.argv) > 2 else DEFAULT_SOURCES
    runs = read_runs()
    curves = run_curves(runs, wanted)
    plot_run_curves(curves, out, unpredicted_points(runs, wanted))
    for c in curves:
        cells = " ".join(f"{b}:{s:.2f}" for b, s in zip(c.batches, c.predicted, strict=True))
        meas = " ".join(f"{b}:{s:.2f}" for b, s in zip(c.measured_batches, c.measured, strict=True))
        print(f"{c.label}\n  predicted {cells}\n  measured  {meas}")
