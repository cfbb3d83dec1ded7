"""Serving runs from Python: one run, or SD and no-SD side by side across concurrencies and request rates.

    serve(Scenario(model="qwen3-30b-a3b", hardware="h200"), workload, concurrencies=[1, 8, 64]) -> ServeResult

The scenario says what runs (model, hardware, kernel style, launch, routing, layout, drafter, draft length,
acceptance, serving engine: its defaults are the simulator's); `ServeOptions` holds the scheduler's knobs
(`serving.options`: vLLM's defaults). Every point simulates the same workload with the same seed
twice — with speculative decoding (K draft tokens, drafter passes and verification in each step, seeded
acceptance draws) and without — and reports each metric's SD speedup.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from moesim.atomic import atomic_write_text
from moesim.errors import MoesimError
from moesim.simulator.bounds import DEFAULT_MAX_MINUTES, check_serving
from moesim.simulator.plan.layout import ParallelLayout
from moesim.simulator.scenario import ResolvedScenario, Scenario
from moesim.simulator.serving.draws import AcceptanceDraws
from moesim.simulator.serving.kv import KvBlocks, KvCapacity, kv_capacity
from moesim.simulator.serving.loop import run_serving_loop
from moesim.simulator.serving.metrics import METRIC_NAMES, ServingMetrics, serving_metrics, speedups
from moesim.simulator.serving.options import ServeOptions
from moesim.simulator.serving.step_cost import ScenarioStepCost, StepCost
from moesim.simulator.serving.workload import Workload, send_times_s

MAX_SWEEP_POINTS = 64


def simulate_serving(
    workload: Workload,
    step_cost: StepCost,
    capacity: KvCapacity,
    acceptance: AcceptanceDraws | None,
    *,
    max_concurrency: int | None = None,
    request_rate: float = math.inf,
    burstiness: float = 1.0,
    seed: int = 0,
    options: ServeOptions | None = None,
    progress: Callable[[int], None] | None = None,
) -> ServingMetrics:
    """One serving run of `workload`; with `acceptance` draws each step verifies K + 1 tokens per sequence
    (speculative decoding), without them it decodes one."""
    options = options or ServeOptions()
    tokens = options.kv_cache_tokens if options.kv_cache_tokens is not None else capacity.tokens
    kv = KvBlocks(tokens, options.block_size, capacity.state_tokens_per_request)
    sends = send_times_s(len(workload.requests), request_rate, burstiness, seed)
    states, state = run_serving_loop(
        workload.requests, sends, step_cost, kv, options.limits, acceptance, max_concurrency, progress
    )
    return serving_metrics(
        states,
        in_system_area=state.in_system_area,
        steps=state.steps,
        decode_rows=state.decode_rows,
        preemptions=state.preemptions,
        peak_kv_fraction=kv.peak_used_blocks / kv.total_blocks,
    )


@dataclass(frozen=True)
class ServePoint:
    """SD and no-SD at one concurrency limit and request rate."""

    max_concurrency: int | None
    request_rate: float
    sd: ServingMetrics
    baseline: ServingMetrics

    @property
    def speedups(self) -> dict[str, float]:
        return speedups(self.sd.values, self.baseline.values)

    def as_dict(self) -> dict[str, Any]:
        return {
            "max_concurrency": self.max_concurrency,
            "request_rate": "inf" if math.isinf(self.request_rate) else self.request_rate,
            "sd": self.sd.as_dict(),
            "baseline": self.baseline.as_dict(),
            "speedup": self.speedups,
        }


@dataclass
class ServeResult:
    points: list[ServePoint]
    assumptions: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"points": [p.as_dict() for p in self.points], "assumptions": dict(self.assumptions)}

    def to_csv(self) -> str:
        """One row per (point, mode): the benchmark metrics, then the speedups on the SD rows."""
        names = list(METRIC_NAMES)
        extra = ["completed", "duration", "concurrency", "mean_decode_batch", "preemptions"]
        header = ["max_concurrency", "request_rate", "mode", *names, *extra, *[f"speedup_{n}" for n in names]]
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(header)
        for point in self.points:
            for mode, run in (("sd", point.sd), ("baseline", point.baseline)):
                row = run.as_dict()
                ups = point.speedups if mode == "sd" else {}
                writer.writerow(
                    [point.max_concurrency or "", point.as_dict()["request_rate"], mode]
                    + [row[n] for n in names]
                    + [row[n] for n in extra]
                    + [ups.get(n, "") for n in names]
                )
        return buffer.getvalue()

    def write_csv(self, path: str) -> None:
        atomic_write_text(path, self.to_csv())


def capacity_for(resolved: ResolvedScenario, options: ServeOptions, with_drafter: bool) -> KvCapacity:
    """KV capacity of the scenario's target on its layout (and of its drafter when `with_drafter`)."""
    weights = per_token = 0.0
    if with_drafter:
        one, two = (resolved.drafter.memory_bytes(resolved.model, 1, n) for n in (1, 2))
        per_token = two - one
        weights = one - per_token
    return kv_capacity(
        resolved.model,
        resolved.hardware,
        weights,
        per_token,
        options.gpu_memory_utilization,
        resolved.layout,
    )


def draws_for(resolved: ResolvedScenario, seed: int) -> AcceptanceDraws:
    """The seeded tokens-per-round stream of the scenario's draft length and acceptance."""
    s = resolved.scenario
    return AcceptanceDraws(s.draft_len, s.acceptance or 0.0, s.acceptance_length, seed)


def sd_serve_options(resolved: ResolvedScenario, options: ServeOptions) -> ServeOptions:
    """The SD run's knobs: at most the serving engine's SD cap on running requests (SGLang's 48 when
    --max-running-requests is not given, `engines.profile.SpeculativeAdmission`), the run without SD
    keeping `max_num_seqs`."""
    seqs = resolved.serving_engine.scheduler.sd_sequences(options.limits.max_num_seqs)
    if seqs == options.limits.max_num_seqs:
        return options
    return replace(options, limits=replace(options.limits, max_num_seqs=seqs))


def resolve_serving(scenario: Scenario) -> ResolvedScenario:
    """The scenario resolved for serving: one GPU unless it names a layout (a tensor-parallel group, or
    expert parallelism with data-parallel attention); the memory check is the KV capacity's (weights must
    leave room for it)."""
    if scenario.layout is None:
        scenario = scenario.replace(layout=ParallelLayout())
    resolved = scenario.resolve(check_fit=False)
    resolved.layout.check_model(resolved.model)
    return resolved


def serve(
    scenario: Scenario,
    workload: Workload,
    *,
    concurrencies: Sequence[int | None] = (None,),
    request_rates: Sequence[float] = (math.inf,),
    burstiness: float = 1.0,
    seed: int = 0,
    options: ServeOptions | None = None,
    step_cost: StepCost | None = None,
    progress: Callable[[int], None] | None = None,
    max_minutes: float = DEFAULT_MAX_MINUTES,
) -> ServeResult:
    """SD and no-SD runs of `workload` at every (concurrency limit, request rate); `progress(n)` counts
    finished requests (2 × requests per point). A run estimated above `max_minutes` is refused first."""
    options = options or ServeOptions()
    if len(concurrencies) * len(request_rates) > MAX_SWEEP_POINTS:
        raise MoesimError("max_concurrency", f"at most {MAX_SWEEP_POINTS} sweep points per call")
    requests = len(workload.requests)
    mean_output = sum(r.output_len for r in workload.requests) / max(1, requests)
    check_serving(requests, mean_output, concurrencies, 2 * len(request_rates), max_minutes)
    resolved = resolve_serving(scenario)
    cost = step_cost or ScenarioStepCost(resolved)
    with_drafter = capacity_for(resolved, options, True)
    without = capacity_for(resolved, options, False)
    sd_options = sd_serve_options(resolved, options)
    points = []
    for concurrency in concurrencies:
        for rate in request_rates:
            runs = [
                simulate_serving(
                    workload,
                    cost,
                    capacity,
                    draws,
                    max_concurrency=concurrency,
                    request_rate=rate,
                    burstiness=burstiness,
                    seed=seed,
                    options=run_options,
                    progress=progress,
                )
                for draws, capacity, run_options in (
                    (draws_for(resolved, seed), with_drafter, sd_options),
                    (None, without, options),
                )
            ]
            points.append(ServePoint(concurrency, rate, runs[0], runs[1]))
    s = resolved.scenario
    return ServeResult(
        points,
        {
            "model": resolved.model.name,
            "hardware": resolved.hardware.name,
            "hardware_provenance": resolved.hardware.provenance.kind,
            "layout": resolved.layout.describe(),
            "serving_engine": resolved.serving_engine.name,
            "serving_engine_provenance": resolved.serving_engine.provenance.kind,
            "workload": workload.description,
            "num_prompts": len(workload.requests),
            "seed": seed,
            "burstiness": burstiness,
            "drafter": resolved.drafter.label,
            "draft_len": s.draft_len,
            "acceptance": None if s.acceptance_length is not None else s.acceptance,
            "acceptance_length": s.acceptance_length,
            "sampling": s.sampling.describe(),
            "max_num_batched_tokens": options.limits.max_num_batched_tokens,
            "max_num_seqs": options.limits.max_num_seqs,
            "kv_cache": (
                f"{options.kv_cache_tokens} tokens (given)"
                if options.kv_cache_tokens is not None
                else f"SD: {with_drafter.description}; no SD: {without.description}"
            ),
            "step_cost": cost.description,
            "not_modelled": (
                "the drafter's pass over prompt tokens; with data-parallel attention one scheduler and one KV "
                "pool for all groups (requests balanced over the groups, limits for all of them as SGLang's "
                "max_running_requests; vLLM's max_num_seqs is per DP rank)"
            ),
        },
    )
