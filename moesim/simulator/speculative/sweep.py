"""Grids of models × batch sizes × draft lengths on the closed-form fast path: rows, peaks, CSV.

Each row: one (model, batch, draft length) with the SD speedup, verify/decode ratio and both step times.
Each peak: for one (model, draft length), the batch size with the highest speedup.
Models that do not fit the device are skipped (and listed); batch sizes whose KV cache does not fit are
skipped likewise, and the sweep goes on.
"""

from __future__ import annotations

import csv
import functools
import gc
import io
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, ParamSpec, TypeVar

from moesim.atomic import atomic_write_text
from moesim.errors import DoesNotFit, MoesimError
from moesim.simulator.bounds import DEFAULT_MAX_CONFIGS, check_configs, check_workers
from moesim.simulator.engines.profile import load_serving_engine
from moesim.simulator.execution.timer import FastTimer, StepTimer
from moesim.simulator.models.spec import ModelSpec
from moesim.simulator.plan.layout import ParallelLayout
from moesim.simulator.scenario import (
    ResolvedScenario,
    Scenario,
    check_draft_len,
    check_routing_size,
    resolve_hardware,
)
from moesim.simulator.speculative.acceptance import best_draft_len, capped_draft_lens, peak_batch
from moesim.simulator.speculative.drafters import DraftPassMemo, parse_drafter
from moesim.simulator.speculative.point import (
    PlannedStep,
    TimedPlan,
    plan_steps,
    point_step_keys,
    prepare_points,
    scenario_timers,
    speculative_point,
    timed_steps,
)

# Steps planned before they are timed together: enough for a screen chunk's designs of one plan structure to
# share their fast-path passes, few enough that the plans held at once stay small (a whole-catalogue sweep
# holding every model's plans took 4× the memory and 10% more CPU).
PLANS_TIMED_TOGETHER = 256

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
    "round_s",
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
    round_s: float  # one SD round: draft + verify + the acceptance sync; speedup = tokens × decode ÷ round
    tokens_per_step: float
    decode_distinct_experts: float
    verify_distinct_experts: float
    gpus: int = 1
    layout: str = "1 GPU"

    @property
    def tokens_per_s(self) -> float:
        """Tokens per second with SD: the speedup over the run without SD at this batch (its round may
        serve fewer sequences, under an engine's SD cap)."""
        return self.speedup * self.batch / self.decode_step_s


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

    @property
    def speedup(self) -> dict[tuple[str, int, int], float]:
        """The SD speedup of every (model, batch, draft length) swept."""
        return {(r.model, r.batch, r.draft_len): r.speedup for r in self.rows}

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
        best = best_draft_len(self.rows, key=lambda row: (row.model, row.batch))
        return [
            {"model": m, "batch": b, "best_draft_len": r.draft_len, "speedup": r.speedup}
            for (m, b), r in best.items()
        ]


_P = ParamSpec("_P")
_R = TypeVar("_R")


def collector_paused(function: Callable[_P, _R]) -> Callable[_P, _R]:
    """Run `function` with Python's cyclic garbage collector paused (reference counting still frees
    everything as usual), then restore it as it was. A sweep allocates ~10^5 short-lived, acyclic plan
    objects (kernels, tensor reads, segments), and the collector's passes over them took about an eighth of
    its CPU; the few hundred objects in cycles it leaves are collected once the collector runs again."""

    @functools.wraps(function)
    def paused(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        if not gc.isenabled():
            return function(*args, **kwargs)
        gc.disable()
        try:
            return function(*args, **kwargs)
        finally:
            gc.enable()

    return paused


@collector_paused
def run_sweep(
    base: Scenario,
    models: Sequence[ModelSpec],
    batches: Sequence[int],
    draft_lens: Sequence[int],
    *,
    check_fit: bool = True,
    progress: Callable[[int], None] | None = None,
    timer: StepTimer | None = None,
    workers: int = 1,
    max_configs: int = DEFAULT_MAX_CONFIGS,
) -> SweepResult:
    """The SD point of every (model, batch, draft length) of `base` on the fast path (or `timer`).

    `base` gives everything but the model, batch and draft length. Its routing applies to every model
    (`None`: each model's typical routing). A (model, batch) whose memory does not fit is skipped and
    listed; `progress(n)` is called as configurations finish. `workers` > 1 sweeps the models in that many
    processes (the fast path only); every figure is the same as in one process. More than `max_configs`
    configurations, or routing sampling above the scenario's memory limit, are refused before any work.
    """
    check_configs(len(models) * len(batches) * len(draft_lens), max_configs)
    check_workers(workers, "workers")
    for k in draft_lens:
        check_draft_len(k)
    for model in models:  # every model's routing sampling bounded before the first is swept
        check_routing_size(
            model, base.routing, base.overlap, base.baseline_overlap, max(draft_lens) + 1, base.max_memory_gb,
            f"{model.name} with draft length {max(draft_lens)}",
        )  # fmt: skip
    if workers > 1 and len(models) > 1:
        if timer is not None:
            raise MoesimError("workers", "a custom step timer runs in this process only", "use workers=1")
        return _sweep_in_processes(base, models, batches, draft_lens, check_fit, progress, workers)
    if workers < 1:
        raise MoesimError("workers", f"must be ≥ 1, got {workers}")
    hardware = resolve_hardware(base.hardware)
    timer = timer or FastTimer(hardware)
    max_k = max(draft_lens)
    # the device's defaults filled in, the serving engine read once; each point is checked by Scenario.resolve
    serving = load_serving_engine(base.serving_engine)
    base = base.for_device(hardware).replace(draft_len=max_k, serving_engine=serving)
    rows: list[SweepRow] = []
    skipped: list[dict[str, Any]] = []
    descriptions: dict[str, str] = {}
    passes = DraftPassMemo()  # designs whose drafter models differ only in name share their passes
    pending: list[_PlannedModel] = []  # models planned, not yet timed
    for index, model in enumerate(models):
        routing = base.routing_for(model, max_k + 1)  # built once per model, shared by its batch sizes
        descriptions[model.name] = routing.description
        resolved_batches = []
        for batch in batches:
            scenario = base.replace(model=model, batch=batch, routing=routing)
            try:
                resolved_batches.append(scenario.resolve(check_fit=check_fit))
            except DoesNotFit as error:
                if not check_fit:
                    raise
                skipped.append({"model": model.name, "batch": batch, "reason": error.problem})
                if progress:
                    progress(len(draft_lens))
        prepare_points(resolved_batches, draft_lens)
        pending.append((model, resolved_batches, _plan_model_steps(resolved_batches, draft_lens, timer)))
        planned_steps = sum(len(steps) for _, _, by_layout in pending for _, steps in by_layout)
        if planned_steps >= PLANS_TIMED_TOGETHER or index == len(models) - 1:
            for (model_done, resolved_done, _), timed in zip(
                pending, _time_together([by_layout for _, _, by_layout in pending], timer), strict=True
            ):
                rows += _model_rows(
                    model_done, resolved_done, timed, draft_lens, timer, passes, hardware.name, progress
                )
            pending = []
    return SweepResult(
        rows=rows,
        peaks=peaks_of(rows),
        skipped=_merge_skipped(skipped, batches),
        assumptions={
            "routing": "; ".join(sorted(set(descriptions.values()))) or "none",
            "routing_by_model": dict(descriptions),
            "acceptance": None if base.acceptance_length is not None else base.acceptance,
            "acceptance_length": base.acceptance_length,
            "acceptance_length_capped_at": capped_draft_lens(base.acceptance_length, draft_lens),
            "drafter": parse_drafter(base.drafter).label,
            "kernel_style": base.kernel_style,
            "launch": base.launch,
            "context_len": base.context_len,
            "hardware": hardware.name,
            "hardware_provenance": hardware.provenance.kind,
            "serving_engine": serving.name,
            "serving_engine_provenance": serving.provenance.kind,
            "sampling": base.sampling.describe(),
        },
    )


_ModelSteps = list[tuple[ParallelLayout, list[PlannedStep]]]
_PlannedModel = tuple[ModelSpec, list[ResolvedScenario], _ModelSteps]


def _model_rows(
    model: ModelSpec,
    resolved_batches: Sequence[ResolvedScenario],
    timed: dict[ParallelLayout, dict[tuple[int, int, str], TimedPlan]],
    draft_lens: Sequence[int],
    timer: StepTimer,
    passes: DraftPassMemo,
    hardware_name: str,
    progress: Callable[[int], None] | None,
) -> list[SweepRow]:
    """The rows of one model's points (its batch sizes × `draft_lens`) from its steps timed already."""
    rows = []
    for resolved in resolved_batches:
        batch = resolved.batch
        timers = scenario_timers(resolved, timer, timed[resolved.layout], passes)
        layout = resolved.layout
        for k in draft_lens:
            point = speculative_point(resolved, timer, k, timers=timers)
            rows.append(
                SweepRow(
                    model=model.name,
                    hardware=hardware_name,
                    batch=batch,
                    draft_len=k,
                    speedup=point.speedup,
                    verify_over_decode=point.verify_over_decode,
                    decode_step_s=point.decode.step_s,
                    verify_step_s=point.verify.step_s,
                    draft_s=point.draft_s,
                    round_s=point.round_s,
                    tokens_per_step=point.tokens_per_step,
                    decode_distinct_experts=point.decode.plan.mean_distinct_experts,
                    verify_distinct_experts=point.verify.plan.mean_distinct_experts,
                    gpus=layout.gpus,
                    layout=layout.describe(),
                )
            )
            if progress:
                progress(1)
    return rows


def _plan_model_steps(
    resolved: Sequence[ResolvedScenario], draft_lens: Sequence[int], timer: StepTimer
) -> _ModelSteps:
    """The plans of every decode and verification step of one model's points (its batch sizes ×
    `draft_lens`), per layout."""
    by_layout: dict[ParallelLayout, tuple[ResolvedScenario, list[tuple[int, int, str]]]] = {}
    for r in resolved:
        _, keys = by_layout.setdefault(r.layout, (r, []))
        keys += point_step_keys(r.serving_engine, r.batch, draft_lens, r.launch)
    return [(layout, plan_steps(r, timer, keys)) for layout, (r, keys) in by_layout.items()]


def _time_together(
    planned: Sequence[_ModelSteps], timer: StepTimer
) -> list[dict[ParallelLayout, dict[tuple[int, int, str], TimedPlan]]]:
    """The planned steps of every model timed in one `timer.steps` call, per model and layout: the fast path
    costs the steps that share a structure together — one model's across batch sizes and draft lengths,
    and the models' (a screen's designs of one layer pattern) with each other —, each row exactly as alone."""
    timings = iter(timer.steps([step.call for model in planned for _, steps in model for step in steps]))
    return [
        {layout: timed_steps(steps, [next(timings) for _ in steps]) for layout, steps in model}
        for model in planned
    ]


def _sweep_in_processes(
    base: Scenario,
    models: Sequence[ModelSpec],
    batches: Sequence[int],
    draft_lens: Sequence[int],
    check_fit: bool,
    progress: Callable[[int], None] | None,
    workers: int,
) -> SweepResult:
    """`run_sweep` with one task per model on a process pool, merged back in model order."""
    from concurrent.futures import ProcessPoolExecutor, as_completed

    base = base.replace(hardware=resolve_hardware(base.hardware))  # load the profile once, not per task
    parts: dict[int, SweepResult] = {}
    with ProcessPoolExecutor(max_workers=min(workers, len(models))) as pool:
        futures = {
            pool.submit(run_sweep, base, [model], batches, draft_lens, check_fit=check_fit): index
            for index, model in enumerate(models)
        }
        for future in as_completed(futures):
            parts[futures[future]] = future.result()
            if progress:
                progress(len(batches) * len(draft_lens))
    ordered = [parts[index] for index in range(len(models))]
    rows = [row for part in ordered for row in part.rows]
    descriptions = {
        name: text for part in ordered for name, text in part.assumptions["routing_by_model"].items()
    }
    assumptions = {
        **ordered[0].assumptions,
        "routing": "; ".join(sorted(set(descriptions.values()))) or "none",
        "routing_by_model": descriptions,
    }
    return SweepResult(
        rows=rows,
        peaks=peaks_of(rows),
        skipped=[entry for part in ordered for entry in part.skipped],
        assumptions=assumptions,
    )


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
