"""Grids of models × batch sizes × draft lengths on the closed-form fast path: rows, peaks, CSV.

Each row: one (model, batch, draft length) with the SD speedup, verify/decode ratio and both step times.
Each peak: for one (model, draft length), the batch size with the highest speedup.
Models that do not fit the device are skipped (and listed); batch sizes whose KV cache does not fit are
skipped likewise, and the sweep goes on.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from moesim.atomic import atomic_write_text
from moesim.errors import MoesimError
from moesim.simulator.execution.cost import CostParams
from moesim.simulator.execution.fastpath import LaunchParams, check_launch, fast_step
from moesim.simulator.hardware.profile import HardwareProfile
from moesim.simulator.models.spec import ModelSpec
from moesim.simulator.plan.layout import LayoutRequest, ParallelLayout
from moesim.simulator.plan.parallel import ParallelStep, build_parallel_plan, fast_parallel_step
from moesim.simulator.plan.step import StepPlan, build_plan, check_step_inputs, engine_style
from moesim.simulator.routing.base import RoutingModel
from moesim.simulator.routing.independent import IndependentRouting
from moesim.simulator.simulate import check_memory, drafter_bytes, resolve_layout
from moesim.simulator.speculative.drafters import (
    DEFAULT_ACCEPTANCE,
    DEFAULT_DRAFTER,
    check_acceptance,
    expected_tokens,
    parse_drafter,
    peak_batch,
)
from moesim.simulator.speculative.parallel_draft import parallel_draft_times_s

ROW_FIELDS = (
    "model",
    "hardware",
    "batch",
    "draft_len",
    "speedup",
    "verify_over_decode",
    "decode_step_s",
    "verify_step_s",
    "draft_s",
    "tokens_per_step",
    "decode_distinct_experts",
    "verify_distinct_experts",
    "gpus",
    "layout",
)


@dataclass(frozen=True)
class SweepRow:
    model: str
    hardware: str
    batch: int
    draft_len: int
    speedup: float
    verify_over_decode: float
    decode_step_s: float
    verify_step_s: float
    draft_s: float
    tokens_per_step: float
    decode_distinct_experts: float
    verify_distinct_experts: float
    gpus: int = 1
    layout: str = "1 GPU"


@dataclass(frozen=True)
class SweepPeak:
    model: str
    hardware: str
    draft_len: int
    peak_batch: int
    peak_speedup: float


@dataclass
class SweepResult:
    rows: list[SweepRow]
    peaks: list[SweepPeak]
    skipped: list[dict[str, Any]]
    assumptions: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "rows": [asdict(r) for r in self.rows],
            "peaks": [asdict(p) for p in self.peaks],
            "best_draft_len": self.best_draft_lens(),
            "skipped": list(self.skipped),
            "assumptions": dict(self.assumptions),
        }

    def to_csv(self) -> str:
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=ROW_FIELDS, lineterminator="\n")
        writer.writeheader()
        for row in self.rows:
            writer.writerow(asdict(row))
        return buffer.getvalue()

    def write_csv(self, path: str) -> None:
        atomic_write_text(path, self.to_csv())

    def best_draft_lens(self) -> list[dict[str, Any]]:
        """For each (model, batch): the draft length with the highest speedup."""
        best: dict[tuple[str, int], SweepRow] = {}
        for row in self.rows:
            key = (row.model, row.batch)
            if key not in best or row.speedup > best[key].speedup:
                best[key] = row
        return [
            {"model": m, "batch": b, "best_draft_len": r.draft_len, "speedup": r.speedup}
            for (m, b), r in best.items()
        ]


def _fits(
    model: ModelSpec,
    hardware: HardwareProfile,
    batch: int,
    context_len: int,
    extra: float,
    parallel: ParallelLayout | LayoutRequest | None = None,
) -> str | ParallelLayout:
    """The layout to run at this batch (one device unless `parallel` says otherwise) when the model fits it,
    else the reason it does not."""
    try:
        return check_memory(model, hardware, batch, context_len, extra, parallel).layout
    except MoesimError as error:
        return error.problem


def run_sweep(
    models: Sequence[ModelSpec],
    hardware: HardwareProfile,
    batches: Sequence[int],
    draft_lens: Sequence[int],
    *,
    context_len: int = 2048,
    engine: str = "fused",
    launch: str = "graph",
    routing: RoutingModel | Callable[[ModelSpec], RoutingModel] | None = None,
    drafter: str = DEFAULT_DRAFTER,
    acceptance: float = DEFAULT_ACCEPTANCE,
    acceptance_length: float | None = None,
    check_fit: bool = True,
    progress: Callable[[int], None] | None = None,
    parallel: ParallelLayout | LayoutRequest | None = None,
) -> SweepResult:
    """Speedup of every (model, batch, draft length) on the fast path; `progress(n)` is called per config.

    `routing` is one routing model for every model, or a function giving each model its own.
    `parallel`: None runs every model on one device; a `ParallelLayout` on that layout; a `LayoutRequest`
    without a fixed layout on the smallest layout that fits each (model, batch) (its `gpus` / `layout`).
    """
    check_launch(launch)
    engine_style(engine)
    check_acceptance(acceptance)
    for k in draft_lens:
        if k < 1:
            raise MoesimError("draft_len", f"values must be ≥ 1, got {k}")
    parsed = parse_drafter(drafter)
    routing_of = _routing_function(routing)
    params = CostParams.from_hardware(hardware)
    launch_params = LaunchParams.from_hardware(hardware, launch)

    def step_time(plan: StepPlan, with_launch: bool) -> float:
        return fast_step(plan, hardware, launch, params, with_launch).step_s

    def parallel_step_time(step: ParallelStep, with_launch: bool) -> float:
        return fast_parallel_step(step, hardware, launch, params, with_launch).step_s

    rows: list[SweepRow] = []
    skipped: list[dict[str, Any]] = []
    max_k = max(draft_lens)
    descriptions: dict[str, str] = {}
    for model in models:
        routing_model = routing_of(model)
        descriptions[model.name] = routing_model.description
        for batch in batches:
            check_step_inputs(model, batch, max_k + 1, context_len)
            if check_fit:
                fit = _fits(
                    model,
                    hardware,
                    batch,
                    context_len + max_k + 1,
                    drafter_bytes(parsed, model, batch, context_len),
                    parallel,
                )
                if isinstance(fit, str):
                    skipped.append({"model": model.name, "batch": batch, "reason": fit})
                    if progress:
                        progress(len(draft_lens))
                    continue
                layout = fit
            else:
                layout = resolve_layout(parallel, model, hardware, batch, context_len + max_k + 1)

            def timed_plan(
                tokens_per_seq: int,
                model: ModelSpec = model,
                batch: int = batch,
                layout: ParallelLayout = layout,
                routing_model: RoutingModel = routing_model,
            ) -> tuple[StepPlan, float]:
                """The (slowest rank's) plan of one step and its time on the fast path."""
                if layout.is_single:
                    plan = build_plan(
                        model, batch, tokens_per_seq, context_len, engine, routing_model, hardware
                    )
                    return plan, step_time(plan, True)
                step = build_parallel_plan(
                    model, batch, tokens_per_seq, layout, hardware, context_len, engine, routing_model
                )
                return step.plan, parallel_step_time(step, True)

            decode_plan, t_decode = timed_plan(1)
            pass_cache: dict[str, float] = {}

            def pass_time(plan: StepPlan, with_launch: bool, cache: dict[str, float] = pass_cache) -> float:
                key = f"{plan.model_name}:{with_launch}"
                if key not in cache:
                    cache[key] = step_time(plan, with_launch)
                return cache[key]

            draft_times = parallel_draft_times_s(
                parsed,
                model,
                hardware,
                layout,
                batch,
                draft_lens,
                context_len,
                engine,
                routing_model,
                t_decode,
                pass_time,
                parallel_step_time,
                launch_params.overhead_s,
            )
            for k, t_draft in zip(draft_lens, draft_times, strict=True):
                verify_plan, t_verify = timed_plan(k + 1)
                tokens = expected_tokens(k, acceptance, acceptance_length)
                rows.append(
                    SweepRow(
                        model=model.name,
                        hardware=hardware.name,
                        batch=batch,
                        draft_len=k,
                        speedup=tokens * t_decode / (t_draft + t_verify),
                        verify_over_decode=t_verify / t_decode,
                        decode_step_s=t_decode,
                        verify_step_s=t_verify,
                        draft_s=t_draft,
                        tokens_per_step=tokens,
                        decode_distinct_experts=decode_plan.mean_distinct_experts,
                        verify_distinct_experts=verify_plan.mean_distinct_experts,
                        gpus=layout.gpus,
                        layout=layout.describe(),
                    )
                )
                if progress:
                    progress(1)
    return SweepResult(
        rows=rows,
        peaks=peaks_of(rows),
        skipped=_merge_skipped(skipped, batches),
        assumptions={
            "routing": "; ".join(sorted(set(descriptions.values()))) or "none",
            "routing_by_model": dict(descriptions),
            "acceptance": None if acceptance_length is not None else acceptance,
            "acceptance_length": acceptance_length,
            "drafter": parsed.label,
            "engine": engine,
            "launch": launch,
            "context_len": context_len,
            "hardware": hardware.name,
            "hardware_provenance": hardware.provenance.kind,
        },
    )


def _routing_function(
    routing: RoutingModel | Callable[[ModelSpec], RoutingModel] | None,
) -> Callable[[ModelSpec], RoutingModel]:
    if routing is None:
        return lambda model: IndependentRouting()
    if isinstance(routing, RoutingModel):
        fixed = routing
        return lambda model: fixed
    return routing


def _merge_skipped(skipped: list[dict[str, Any]], batches: Sequence[int]) -> list[dict[str, Any]]:
    """One entry per model: all its batches, or the batches that did not fit."""
    by_model: dict[str, list[dict[str, Any]]] = {}
    for entry in skipped:
        by_model.setdefault(entry["model"], []).append(entry)
    out = []
    for model, entries in by_model.items():
        skipped_batches = [e["batch"] for e in entries]
        out.append(
            {
                "model": model,
                "batches": skipped_batches,
                "all_batches": len(skipped_batches) == len(batches),
                "reason": entries[0]["reason"],
            }
        )
    return out


def peaks_of(rows: Sequence[SweepRow]) -> list[SweepPeak]:
    """For each (model, hardware, draft length): the batch size with the highest speedup."""
    groups: dict[tuple[str, str, int], list[SweepRow]] = {}
    for row in rows:
        groups.setdefault((row.model, row.hardware, row.draft_len), []).append(row)
    peaks = []
    for (model, hw, k), group in groups.items():
        batch, best = peak_batch([r.batch for r in group], [r.speedup for r in group])
        peaks.append(SweepPeak(model, hw, k, batch, best))
    return peaks
