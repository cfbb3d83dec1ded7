"""The public API: the SD point of a scenario, sweeps, one step, one MoE block.

    simulate(Scenario(...)) or simulate(model=..., hardware=..., ...) -> SpeculativeResult (event timer)
    sweep(models, batches=..., draft_lens=..., **scenario fields)     -> SweepResult (fast path)
    simulate_step(model, hardware, batch, tokens_per_seq, ...)        -> StepResult (one decode or verify step)
    simulate_expert_block(model, hardware, tokens, distinct_experts)  -> seconds (one MoE layer, forced routing)

Every default is the `Scenario`'s, so `moesim.simulate(...)` and `moesim simulate` give the same number.
A model that does not fit the device memory (weights + KV cache + reserve) raises MoesimError saying how
much is missing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from moesim.errors import MoesimError
from moesim.simulator.engines.overheads import draft_sequences, overlap_fraction
from moesim.simulator.execution.collectives import parallel_step_summary
from moesim.simulator.execution.events import StepResult, run_events
from moesim.simulator.execution.launch import check_launch
from moesim.simulator.execution.timer import EventTimer
from moesim.simulator.hardware.profile import HardwareProfile
from moesim.simulator.models.spec import ModelSpec
from moesim.simulator.models.summary import model_summary
from moesim.simulator.plan.layout import LayoutRequest, ParallelLayout
from moesim.simulator.plan.styles import build_plan
from moesim.simulator.routing.base import DistinctExperts, RoutingModel
from moesim.simulator.routing.independent import IndependentRouting
from moesim.simulator.scenario import (
    DEFAULT_CONTEXT_LEN,
    DEFAULT_KERNEL_STYLE,
    DEFAULT_SWEEP_BATCHES,
    DEFAULT_SWEEP_DRAFT_LENS,
    ResolvedScenario,
    Scenario,
    resolve_hardware,
    resolve_model,
)
from moesim.simulator.speculative.point import EngineStep, SpeculativePoint, speculative_point, time_step

if TYPE_CHECKING:  # sweeps load with the first `sweep`: `simulate` needs neither them nor the fast path
    from moesim.simulator.speculative.sweep import SweepResult

# Sampled routing draws (steps × tokens × experts) for the distinct-expert distribution of one layer.
DISTRIBUTION_DRAWS = 2_000_000
DISTRIBUTION_MIN_SAMPLES = 8
DISTRIBUTION_MAX_DRAWS = 64_000_000
"""Most draws (steps × tokens × experts) the distribution may sample (about 0.5 GB of float64 noise).
A step beyond it (qwen3-30b-a3b at batch 4096 × 1,001 tokens asked for 31 GB) gets no distribution; its mean
distinct experts per layer still comes from the plan."""
DISTRIBUTION_SEED = 0


def _scenario(scenario: Scenario | None, fields: dict[str, Any]) -> Scenario:
    if scenario is None:
        return Scenario(**fields)
    return scenario.replace(**fields) if fields else scenario


def distinct_distribution(
    model: ModelSpec, batch: int, tokens_per_seq: int, routing: RoutingModel
) -> DistinctExperts | None:
    """Distribution of distinct experts in the middle MoE layer, from seeded routing samples (None for a dense
    model, or a step too large to sample: `DISTRIBUTION_MAX_DRAWS`)."""
    if not model.is_moe:
        return None
    moe_layers = [i for i, kind in enumerate(model.layer_ffn) if kind == "moe"]
    layer = moe_layers[len(moe_layers) // 2]
    tokens = batch * tokens_per_seq
    if DISTRIBUTION_MIN_SAMPLES * tokens * model.n_experts > DISTRIBUTION_MAX_DRAWS:
        return None
    n_samples = int(
        np.clip(DISTRIBUTION_DRAWS // max(1, tokens * model.n_experts), DISTRIBUTION_MIN_SAMPLES, 256)
    )
    rng = np.random.default_rng(DISTRIBUTION_SEED)
    loads = routing.sample_expert_loads(
        model.n_experts, model.top_k, batch, tokens_per_seq, n_samples, rng, layer
    )
    return DistinctExperts.from_samples((np.asarray(loads) > 0).sum(axis=1))


@dataclass
class SpeculativeResult:
    """A decode step, a verification step, the drafter's time and the speedup they imply."""

    model: str
    hardware: str
    batch: int
    draft_len: int
    context_len: int
    decode: StepResult
    verify: StepResult
    draft_s: float
    accept_s: float
    tokens_per_step: float
    speedup: float
    draft_first_pass_s: float = 0.0  # of draft_s: the drafter's pass over the verified positions
    assumptions: dict[str, Any] = field(default_factory=dict)
    # The layout simulated and its memory use; "decode"/"verify" hold the parallel steps' summaries.
    parallel: dict[str, Any] = field(default_factory=dict)
    # What the serving engine added: rows run, launch mode and host time of each step, drafter host, sync.
    serving_engine: dict[str, Any] = field(default_factory=dict)
    # What the model is (models.summary.model_summary): layer pattern, experts, counts, import assumptions.
    model_summary: dict[str, Any] = field(default_factory=dict)

    @property
    def verify_over_decode(self) -> float:
        return self.verify.step_s / self.decode.step_s

    def to_json(self, timeline: bool = False) -> dict[str, Any]:
        return {
            "model": self.model,
            "hardware": self.hardware,
            "batch": self.batch,
            "draft_len": self.draft_len,
            "context_len": self.context_len,
            "decode": self.decode.to_json(timeline),
            "verify": self.verify.to_json(timeline),
            "draft_s": self.draft_s,
            "draft_first_pass_s": self.draft_first_pass_s,
            "accept_s": self.accept_s,
            "tokens_per_step": self.tokens_per_step,
            "verify_over_decode": self.verify_over_decode,
            "speedup": self.speedup,
            "assumptions": dict(self.assumptions),
            "parallel": dict(self.parallel),
            "serving_engine": dict(self.serving_engine),
            "model_summary": dict(self.model_summary),
        }


def simulate(scenario: Scenario | None = None, /, **fields: Any) -> SpeculativeResult:
    """The SD point of a scenario on the event timer: decode, verification, drafter, speedup.

    >>> result = simulate(model="qwen3-30b-a3b", hardware="h200", batch=1, draft_len=3)
    >>> round(result.speedup, 2) > 1
    True
    """
    resolved = _scenario(scenario, fields).resolve()
    point = speculative_point(resolved, EventTimer(resolved.hardware))
    return _result(resolved, point)


def _engine_step(resolved: ResolvedScenario, engine_step: EngineStep) -> StepResult:
    """The engine's result for the step as the serving engine runs it: its time and breakdown include the
    engine's padding and host time (for `ideal`, exactly the kernel stream's)."""
    step = engine_step.timed.timing
    assert isinstance(step, StepResult)
    if engine_step.timed.parallel is not None:
        step.notes.append(f"layout: {resolved.layout.describe()} (times are the slowest rank's)")
    step.distinct_experts = distinct_distribution(
        resolved.model, engine_step.rows_run, engine_step.tokens_per_row, resolved.routing
    )
    if engine_step.step_s == step.step_s and engine_step.rows_run == engine_step.rows:
        step.breakdown_s = engine_step.breakdown_s()
        return step
    note = (
        f"serving engine {resolved.serving_engine.name}: {engine_step.rows} rows run as "
        f"{engine_step.rows_run}, {engine_step.launch} launch, host {engine_step.host_s * 1e6:.1f} µs "
        f"({engine_step.engine_host_s * 1e6:.1f} µs not hidden by the device)"
    )
    return dataclasses.replace(
        step,
        step_s=engine_step.step_s,
        breakdown_s=engine_step.breakdown_s(),
        notes=[*step.notes, note],
    )


def _result(resolved: ResolvedScenario, point: SpeculativePoint) -> SpeculativeResult:
    decode = _engine_step(resolved, point.decode)
    verify = _engine_step(resolved, point.verify)
    accept_s = sum(
        float(t)
        for (name, *_), t in zip(verify.timeline, verify.kernel_times_s, strict=True)
        if name == "accept"
    )
    assert resolved.memory is not None
    parallel: dict[str, Any] = {"layout": resolved.layout.as_dict(), "memory": resolved.memory.as_dict()}
    if point.decode.parallel is not None and point.verify.parallel is not None:
        node = resolved.hardware.node
        parallel["decode"] = parallel_step_summary(point.decode.parallel, node)
        parallel["verify"] = parallel_step_summary(point.verify.parallel, node)
    assumptions = resolved.assumptions()
    assumptions["accept_in_verify"] = (
        "the acceptance kernel is part of the verification step (accept_s is its share)"
    )
    return SpeculativeResult(
        model_summary=model_summary(resolved.model),
        model=resolved.model.name,
        hardware=resolved.hardware.name,
        batch=resolved.batch,
        draft_len=point.draft_len,
        context_len=resolved.context_len,
        decode=decode,
        verify=verify,
        draft_s=point.draft_s,
        draft_first_pass_s=point.draft_first_pass_s,
        accept_s=accept_s,
        tokens_per_step=point.tokens_per_step,
        speedup=point.speedup,
        assumptions=assumptions,
        parallel=parallel,
        serving_engine={
            "name": resolved.serving_engine.name,
            "provenance": resolved.serving_engine.provenance.kind,
            "decode": point.decode.engine_json(),
            "verify": point.verify.engine_json(),
            "draft_host_s": point.draft_host_s,
            "drafter": {
                "rows": point.draft_rows,
                "candidates_per_sequence": draft_sequences(resolved.serving_engine.drafter, 1),
                "tp": point.draft_tp,
                "host_prepared_passes": point.host_prepared_passes,
            },
            "accept_sync_s": point.accept_sync_s,
            "overlap_fraction": overlap_fraction(resolved.serving_engine),
            "sd_overlap_fraction": overlap_fraction(resolved.serving_engine, speculative=True),
            "step_ratio": point.step_ratio,
            "sd_sequences": point.sd_sequences,
            "sd_max_running_requests": resolved.serving_engine.scheduler.sd_max_running_requests,
        },
    )


def sweep(
    models: Sequence[ModelSpec | str] | str,
    scenario: Scenario | None = None,
    *,
    batches: Sequence[int] = DEFAULT_SWEEP_BATCHES,
    draft_lens: Sequence[int] = DEFAULT_SWEEP_DRAFT_LENS,
    progress: Callable[[int], None] | None = None,
    **fields: Any,
) -> SweepResult:
    """SD speedup of every model × batch × draft length on the fast path, with the scenario's defaults.

    `models`: names, specs, a comma-separated string, or "all" (the whole catalogue).
    """
    specs = [resolve_model(m) for m in model_list(models)]
    if not specs:
        raise MoesimError("model", "needs at least one model name, or all")
    base = _scenario(scenario, {"model": specs[0], **fields})
    from moesim.simulator.speculative.sweep import run_sweep

    return run_sweep(base, specs, list(batches), list(draft_lens), progress=progress)


def model_list(models: Sequence[ModelSpec | str] | str) -> list[ModelSpec | str]:
    """Model names from 'a,b', 'all' or a sequence."""
    if isinstance(models, str):
        names = [part.strip() for part in models.split(",") if part.strip()]
        if names == ["all"]:
            from moesim.simulator.models.catalogue import list_models

            return list(list_models())
        return list(names)
    return list(models)


def simulate_step(
    model: ModelSpec | str,
    hardware: HardwareProfile | str,
    batch: int,
    tokens_per_seq: int,
    context_len: int = DEFAULT_CONTEXT_LEN,
    kernel_style: str = DEFAULT_KERNEL_STYLE,
    launch: str | None = None,
    routing: RoutingModel | str | None = None,
    *,
    check_fit: bool = True,
    distribution: bool = True,
    parallel: ParallelLayout | LayoutRequest | None = None,
) -> StepResult:
    """One forward step of `batch` sequences × `tokens_per_seq` tokens (1: decode; K+1: verification).

    Resolved as a `Scenario` with no drafter (`Scenario.resolve(step_tokens=...)`): routing, launch (None:
    graph on a GPU, eager on a CPU) and the memory check as there. `parallel`: None runs on one device; a
    `ParallelLayout` (or a `LayoutRequest`, whose open form picks the smallest layout that fits) spreads the
    model over a node, and the step time is the slowest rank's.
    """
    scenario = Scenario(
        model, hardware, batch, context_len=context_len, kernel_style=kernel_style, launch=launch,
        routing=routing, layout=ParallelLayout() if parallel is None else parallel,
    )  # fmt: skip
    resolved = scenario.resolve(check_fit=check_fit, step_tokens=tokens_per_seq)
    timed = time_step(resolved, EventTimer(resolved.hardware), tokens_per_seq)
    result = timed.timing
    assert isinstance(result, StepResult)
    if timed.parallel is not None:
        result.notes.append(f"layout: {resolved.layout.describe()} (times are the slowest rank's)")
    if distribution:
        result.distinct_experts = distinct_distribution(
            resolved.model, batch, tokens_per_seq, resolved.routing
        )
    return result


def simulate_expert_block(
    model: ModelSpec | str,
    hardware: HardwareProfile | str,
    tokens: int,
    distinct_experts: int,
    launch: str = "graph",
    kernel_style: str = "fused",
) -> float:
    """Seconds of one MoE layer's expert block (router to combine, shared experts included) for `tokens`
    tokens whose routing is forced to hit exactly `distinct_experts` experts; cold cache, no graph launch
    or sync (what a microbenchmark timing the block with device events sees)."""
    spec, hw = resolve_model(model), resolve_hardware(hardware)
    check_launch(launch)
    if not spec.is_moe:
        raise MoesimError("model", f"{spec.name} has no MoE layer", "choose an MoE model")
    if not isinstance(tokens, int) or tokens < 1:
        raise MoesimError("tokens", f"must be a positive integer, got {tokens!r}")
    upper = min(spec.n_experts, tokens * spec.top_k)
    if not isinstance(distinct_experts, int) or not spec.top_k <= distinct_experts <= upper:
        raise MoesimError(
            "distinct_experts",
            f"{tokens} token(s) with top-{spec.top_k} of {spec.n_experts} experts hit between {spec.top_k} and {upper}, got {distinct_experts}",
            f"choose a value in [{spec.top_k}, {upper}]",
        )
    layer = spec.layer_ffn.index("moe")
    plan = build_plan(
        spec, tokens, 1, 0, kernel_style, IndependentRouting(), hw, distinct_override=distinct_experts
    )
    segment = next(s for s in plan.segments if s.layer == layer)
    names = [k.name for k in segment.kernels]
    if "router" not in names:
        raise MoesimError(
            "kernel_style", f"the {kernel_style} style has no kernel named 'router' to start the block at"
        )
    block = segment.kernels[names.index("router") :]
    block_plan = plan.with_segments((type(segment)(block, layer),))
    return run_events(block_plan, hw, launch, warm_cache=False, include_launch_and_sync=False).step_s
