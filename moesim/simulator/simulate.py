"""The public API: simulate a decode or verification step, a speculative-decoding step, or one MoE block.

    simulate_step(model, hardware, batch, tokens_per_seq, context_len=2048, engine="fused", launch="graph",
                  routing=None) -> StepResult
    simulate_speculative(model, hardware, batch, draft_len, *, context_len=2048, engine="fused",
                         launch="graph", routing=None, drafter="eagle", acceptance=0.8,
                         acceptance_length=None) -> SpeculativeResult
    simulate_expert_block(model, hardware, tokens, distinct_experts, launch="graph") -> seconds

`model` and `hardware` may be objects or names (catalogue model / bundled profile or a file path).
A model that does not fit the device memory (weights + KV cache + reserve) raises MoesimError saying how
much is missing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from moesim.errors import MoesimError
from moesim.simulator.execution.engine import StepResult, run_engine
from moesim.simulator.execution.fastpath import LaunchParams, check_launch
from moesim.simulator.hardware.profile import HardwareProfile, load_profile
from moesim.simulator.models import spec as ms
from moesim.simulator.models.spec import ModelSpec
from moesim.simulator.plan.layout import LayoutRequest, ParallelLayout
from moesim.simulator.plan.memory import MemoryUse, drafter_memory_bytes, fit_layout
from moesim.simulator.plan.parallel import ParallelStep, build_parallel_plan, engine_parallel_step
from moesim.simulator.plan.step import StepPlan, build_plan, check_step_inputs, engine_style
from moesim.simulator.routing.base import DistinctExperts, RoutingModel
from moesim.simulator.routing.independent import IndependentRouting
from moesim.simulator.speculative.drafters import (
    DEFAULT_ACCEPTANCE,
    DEFAULT_DRAFTER,
    Drafter,
    check_acceptance,
    drafter_model,
    expected_tokens,
    parse_drafter,
)
from moesim.simulator.speculative.parallel_draft import parallel_draft_time_s

DEFAULT_CONTEXT_LEN = 2048
# Sampled routing draws (steps × tokens × experts) for the distinct-expert distribution of one layer.
DISTRIBUTION_DRAWS = 2_000_000
DISTRIBUTION_SEED = 0


def resolve_model(model: ModelSpec | str) -> ModelSpec:
    if isinstance(model, ModelSpec):
        return model
    from moesim.simulator.models.catalogue import load_model

    return load_model(model)


def resolve_hardware(hardware: HardwareProfile | str) -> HardwareProfile:
    if isinstance(hardware, HardwareProfile):
        return hardware
    return load_profile(hardware)


def drafter_bytes(drafter: Drafter, target: ModelSpec, batch: int, context_len: int) -> float:
    """Device memory a drafter adds beside the target (weights and its own KV cache)."""
    if drafter.kind == "model":
        draft = drafter_model(drafter, target)
        assert draft is not None
        return drafter_memory_bytes(draft, batch, context_len)
    if drafter.kind == "eagle":
        head = drafter_model(drafter, target)
        assert head is not None
        layer = ms.attention_weight_bytes(head, "full") + ms.dense_ffn_weight_bytes(head)
        fusion = head.dense_format.matrix_bytes(head.hidden, 2 * head.hidden)
        return layer + fusion + batch * ms.sequence_state_bytes(head, context_len)
    if drafter.kind == "mtp":
        return target.mtp_layers * ms.mtp_weight_bytes(target) + batch * ms.kv_cache_bytes(
            drafter_model(drafter, target) or target, context_len
        )
    return 0.0


def check_memory(
    model: ModelSpec,
    hardware: HardwareProfile,
    batch: int,
    context_len: int,
    extra_bytes: float = 0.0,
    parallel: ParallelLayout | LayoutRequest | None = None,
) -> MemoryUse:
    """Memory use on the busiest GPU of `parallel` (one GPU when None; a `LayoutRequest` without a fixed
    layout picks the smallest that fits, and `use.layout` is the layout chosen); raises MoesimError with
    the missing bytes and the smallest layout that would fit when it does not fit."""
    return fit_layout(
        model,
        hardware,
        batch,
        max(1, context_len),
        layout=parallel if parallel is not None else ParallelLayout(),
        drafter_bytes=extra_bytes,
    )


def resolve_layout(
    parallel: ParallelLayout | LayoutRequest | None,
    model: ModelSpec,
    hardware: HardwareProfile,
    batch: int,
    context_len: int,
) -> ParallelLayout:
    """The layout to simulate: the one given, one GPU for None, the smallest that fits for an open request."""
    if parallel is None:
        return ParallelLayout()
    if isinstance(parallel, ParallelLayout):
        return parallel
    fixed = parallel.fixed()
    if fixed is not None:
        return fixed
    return check_memory(model, hardware, batch, context_len, parallel=parallel).layout


def run_step(
    spec: ModelSpec,
    hardware: HardwareProfile,
    batch: int,
    tokens_per_seq: int,
    context_len: int,
    engine: str,
    launch: str,
    routing: RoutingModel,
    layout: ParallelLayout,
) -> tuple[StepResult, ParallelStep | None]:
    """One step on the engine: the single-GPU plan, or the slowest rank's plan with its collectives."""
    if layout.is_single:
        plan = build_plan(spec, batch, tokens_per_seq, context_len, engine, routing, hardware)
        return run_engine(plan, hardware, launch), None
    step = build_parallel_plan(spec, batch, tokens_per_seq, layout, hardware, context_len, engine, routing)
    result = engine_parallel_step(step, hardware, launch)
    result.notes.append(f"layout: {layout.describe()} (times are the slowest rank's)")
    return result, step


def distinct_distribution(
    model: ModelSpec, batch: int, tokens_per_seq: int, routing: RoutingModel
) -> DistinctExperts | None:
    """Distribution of distinct experts in the middle MoE layer, from seeded routing samples."""
    if not model.is_moe:
        return None
    moe_layers = [i for i, kind in enumerate(model.layer_ffn) if kind == "moe"]
    layer = moe_layers[len(moe_layers) // 2]
    tokens = batch * tokens_per_seq
    n_samples = int(np.clip(DISTRIBUTION_DRAWS // max(1, tokens * model.n_experts), 8, 256))
    rng = np.random.default_rng(DISTRIBUTION_SEED)
    loads = routing.sample_expert_loads(
        model.n_experts, model.top_k, batch, tokens_per_seq, n_samples, rng, layer
    )
    return DistinctExperts.from_samples((np.asarray(loads) > 0).sum(axis=1))


def simulate_step(
    model: ModelSpec | str,
    hardware: HardwareProfile | str,
    batch: int,
    tokens_per_seq: int,
    context_len: int = DEFAULT_CONTEXT_LEN,
    engine: str = "fused",
    launch: str = "graph",
    routing: RoutingModel | None = None,
    *,
    check_fit: bool = True,
    distribution: bool = True,
    parallel: ParallelLayout | LayoutRequest | None = None,
) -> StepResult:
    """One forward step of `batch` sequences × `tokens_per_seq` tokens (1: decode; K+1: verification).

    `parallel`: None runs on one GPU; a `ParallelLayout` (or a `LayoutRequest`, whose open form picks the
    smallest layout that fits) spreads the model over a node, and the step time is the slowest rank's.
    """
    spec, hw = resolve_model(model), resolve_hardware(hardware)
    check_launch(launch)
    engine_style(engine)
    check_step_inputs(spec, batch, tokens_per_seq, context_len)
    if check_fit:
        layout = check_memory(spec, hw, batch, context_len + tokens_per_seq, parallel=parallel).layout
    else:
        layout = resolve_layout(parallel, spec, hw, batch, context_len + tokens_per_seq)
    routing = routing or IndependentRouting()
    result, _ = run_step(spec, hw, batch, tokens_per_seq, context_len, engine, launch, routing, layout)
    if distribution:
        result.distinct_experts = distinct_distribution(spec, batch, tokens_per_seq, routing)
    return result


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
    assumptions: dict[str, Any] = field(default_factory=dict)
    # The layout simulated and its memory use; "decode"/"verify" hold the parallel steps' summaries.
    parallel: dict[str, Any] = field(default_factory=dict)

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
            "accept_s": self.accept_s,
            "tokens_per_step": self.tokens_per_step,
            "verify_over_decode": self.verify_over_decode,
            "speedup": self.speedup,
            "assumptions": dict(self.assumptions),
            "parallel": dict(self.parallel),
        }


def simulate_speculative(
    model: ModelSpec | str,
    hardware: HardwareProfile | str,
    batch: int,
    draft_len: int,
    *,
    context_len: int = DEFAULT_CONTEXT_LEN,
    engine: str = "fused",
    launch: str = "graph",
    routing: RoutingModel | None = None,
    drafter: str = DEFAULT_DRAFTER,
    acceptance: float = DEFAULT_ACCEPTANCE,
    acceptance_length: float | None = None,
    parallel: ParallelLayout | LayoutRequest | None = None,
) -> SpeculativeResult:
    """Decode vs verification of K drafted tokens at batch B, with the drafter's cost and the SD speedup.

    `parallel` as for `simulate_step`; the drafter shares the target's GPUs or has its own (`draft_on`),
    and drafting and verification run one after the other either way (see `parallel_draft`).
    """
    spec, hw = resolve_model(model), resolve_hardware(hardware)
    if not isinstance(draft_len, int) or draft_len < 1:
        raise MoesimError("draft_len", f"must be a positive integer, got {draft_len!r}")
    check_acceptance(acceptance)
    parsed = parse_drafter(drafter)
    routing = routing or IndependentRouting()
    check_launch(launch)
    check_step_inputs(spec, batch, draft_len + 1, context_len)
    use = check_memory(
        spec,
        hw,
        batch,
        context_len + draft_len + 1,
        drafter_bytes(parsed, spec, batch, context_len),
        parallel=parallel,
    )
    layout = use.layout
    decode, decode_step = run_step(spec, hw, batch, 1, context_len, engine, launch, routing, layout)
    verify, verify_step = run_step(
        spec, hw, batch, draft_len + 1, context_len, engine, launch, routing, layout
    )
    decode.distinct_experts = distinct_distribution(spec, batch, 1, routing)
    verify.distinct_experts = distinct_distribution(spec, batch, draft_len + 1, routing)
    launch_params = LaunchParams.from_hardware(hw, launch)

    def step_time(plan: StepPlan, with_launch: bool) -> float:
        return run_engine(plan, hw, launch, include_launch_and_sync=with_launch).step_s

    def parallel_step_time(step: ParallelStep, with_launch: bool) -> float:
        return engine_parallel_step(step, hw, launch, include_launch_and_sync=with_launch).step_s

    draft_s = parallel_draft_time_s(
        parsed,
        spec,
        hw,
        layout,
        batch,
        draft_len,
        context_len,
        engine,
        routing,
        decode.step_s,
        step_time,
        parallel_step_time,
        launch_params.overhead_s,
    )
    tokens = expected_tokens(draft_len, acceptance, acceptance_length)
    accept_s = sum(
        float(t)
        for (name, *_), t in zip(verify.timeline, verify.kernel_times_s, strict=True)
        if name == "accept"
    )
    speedup = tokens * decode.step_s / (draft_s + verify.step_s)
    return SpeculativeResult(
        model=spec.name,
        hardware=hw.name,
        batch=batch,
        draft_len=draft_len,
        context_len=context_len,
        decode=decode,
        verify=verify,
        draft_s=draft_s,
        accept_s=accept_s,
        tokens_per_step=tokens,
        speedup=speedup,
        assumptions=assumptions(
            routing, parsed, engine, launch, acceptance, acceptance_length, context_len, hw
        ),
        parallel=parallel_summary(use, decode_step, verify_step),
    )


def parallel_summary(
    use: MemoryUse, decode: ParallelStep | None, verify: ParallelStep | None
) -> dict[str, Any]:
    """The layout, its memory use on the busiest GPU and (multi-GPU) the collectives and per-rank experts."""
    out: dict[str, Any] = {"layout": use.layout.as_dict(), "memory": use.as_dict()}
    if decode is not None and verify is not None:
        out["decode"] = decode.summary()
        out["verify"] = verify.summary()
    return out


def assumptions(
    routing: RoutingModel,
    drafter: Drafter,
    engine: str,
    launch: str,
    acceptance: float,
    acceptance_length: float | None,
    context_len: int,
    hardware: HardwareProfile,
) -> dict[str, Any]:
    """What a result rests on, printed beside it."""
    return {
        "routing": routing.description,
        "acceptance": None if acceptance_length is not None else acceptance,
        "acceptance_length": acceptance_length,
        "drafter": drafter.label,
        "engine": engine,
        "launch": launch,
        "context_len": context_len,
        "hardware_provenance": hardware.provenance.kind,
        "accept_in_verify": "the acceptance kernel is part of the verification step (accept_s is its share)",
    }


def simulate_expert_block(
    model: ModelSpec | str,
    hardware: HardwareProfile | str,
    tokens: int,
    distinct_experts: int,
    launch: str = "graph",
    engine: str = "fused",
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
        spec, tokens, 1, 0, engine, IndependentRouting(), hw, distinct_override=distinct_experts
    )
    segment = next(s for s in plan.segments if s.layer == layer)
    names = [k.name for k in segment.kernels]
    if "router" not in names:
        raise MoesimError("engine", f"the {engine} style has no kernel named 'router' to start the block at")
    block = segment.kernels[names.index("router") :]
    block_plan = plan.with_segments((type(segment)(block, layer),))
    return run_engine(block_plan, hw, launch, warm_cache=False, include_launch_and_sync=False).step_s
