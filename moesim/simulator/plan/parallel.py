"""The kernel plan of one step on the slowest rank of a parallel layout, with its communication kernels.

One rank's step is the single-GPU plan of a *rank view* of the model — attention heads, dense FFN width,
shared-expert width (when split) and vocabulary divided by `tp`, each routed expert's width by `expert_tp` —
at the batch of one data-parallel attention group, except the MoE blocks: their routed-expert GEMMs run on
the slowest expert-parallel rank, i.e. over the expected *maximum* over ranks of its distinct experts and of
its token assignments (`parallel.rank_experts`), not the mean.

Communication kernels (category `communication`, stream COMM_STREAM) are inserted where the engines put them:
- after attention's output projection (tp > 1): all-reduce of the group's hidden states;
- after a dense FFN (tp > 1): all-reduce;
- around routed experts (ep > 1): all-to-all dispatch before, all-to-all combine after (DeepEP-style, FP8
  dispatch when the experts compute in FP8); the shared experts run on the main stream while dispatch is in
  flight, as SGLang does with DeepEP — the only overlap of communication with compute in the `fused` style;
- split shared experts (tp > 1, ep > 1): all-reduce of their partial outputs; with ep = 1 (experts
  tensor-parallel over all GPUs) a single all-reduce sums routed and shared partial outputs;
- LM head (tp > 1): all-gather of the vocabulary-parallel logits.
Each is described by a `Collective` (operation, ranks, bytes): what moves, never how long it takes; the
execution room times every collective with one formula (`execution.collectives.collective_time_s`) for the
event timer and the fast path alike. With one GPU the plan is exactly `plan.styles.build_plan`'s.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

import numpy as np

from moesim.errors import MoesimError
from moesim.simulator.models.spec import AttentionLayerKind, FfnLayerKind, ModelSpec
from moesim.simulator.plan import step as pl
from moesim.simulator.plan.blocks import ACT_BYTES, GENERIC_DEVICE, LOGIT_BYTES, PlanContext, PlanDevice
from moesim.simulator.plan.ffn import fused_expert_kernels, router_kernels
from moesim.simulator.plan.head import epilogue_kernels, prologue_kernels
from moesim.simulator.plan.kernels import Collective, Kernel, joined
from moesim.simulator.plan.layout import ParallelLayout, moe_traffic
from moesim.simulator.plan.styles import build_plan
from moesim.simulator.routing.base import RoutingModel
from moesim.simulator.routing.independent import IndependentRouting
from moesim.simulator.routing.per_rank import RankExperts, prepare_rank_experts, rank_experts

COMM_STREAM = 2
COMM_PREFIX = "comm."
FP8_DISPATCH_BYTES = 1.0 + 4.0 / 128  # FP8 values plus one fp32 scale per 128 (DeepEP's FP8 dispatch)


@functools.lru_cache(maxsize=256)
def rank_model(model: ModelSpec, layout: ParallelLayout) -> ModelSpec:
    """The slice of `model` one rank holds: tensor-parallel dimensions divided, replicated parts whole
    (cached: every step of a sweep on one layout asks for the same slice)."""
    if layout.is_single:
        return model
    tp = layout.tp
    att = model.attention
    attention = replace(
        att, num_heads=math.ceil(att.num_heads / tp), num_kv_heads=max(1, math.ceil(att.num_kv_heads / tp))
    )
    linear = model.linear_attention
    if linear is not None:
        linear = replace(
            linear,
            num_key_heads=max(1, math.ceil(linear.num_key_heads / tp)),
            num_value_heads=max(1, math.ceil(linear.num_value_heads / tp)),
        )
    shared = model.shared_expert_width
    if layout.shared_mode == "split" and shared:
        shared = math.ceil(shared / tp)
    return replace(
        model,
        name=f"{model.name} (rank of {layout.gpus})",
        attention=attention,
        linear_attention=linear,
        vocab=math.ceil(model.vocab / tp),
        dense_ffn_width=math.ceil(model.dense_ffn_width / tp) if model.dense_ffn_width else 0,
        expert_width=math.ceil(model.expert_width / layout.expert_tp) if model.expert_width else 0,
        shared_expert_width=shared,
    )


@functools.lru_cache(maxsize=64)
def comm_kernel(name: str, stream: int = COMM_STREAM) -> Kernel:
    """A collective as a kernel of its own: no FLOPs, no HBM traffic; its time is the collective's
    (the same for every step: made once per name)."""
    return Kernel(name=COMM_PREFIX + name, category="communication", flops=0.0, reads=(), stream=stream)


def collective_name(kernel: Kernel) -> str | None:
    """The collective a communication kernel launches (None for every other kernel)."""
    if kernel.category != "communication":
        return None
    return kernel.name.rsplit(COMM_PREFIX, 1)[-1]


@dataclass(frozen=True)
class ParallelStep:
    """A rank's plan plus what the parallel model added: per-layer rank work and the collectives it runs.

    `collectives` maps a collective's name to its description in each MoE layer where the routing differs
    by layer (the step charges their mean time, a close and cheap summary), else to a single description.
    """

    plan: pl.StepPlan
    layout: ParallelLayout
    collectives: dict[str, tuple[Collective, ...]] = field(default_factory=dict)
    rank_work: tuple[RankExperts, ...] = ()  # per MoE layer

    def rank_summary(self) -> dict[str, object]:
        """The layout and the slowest rank's expert work against the mean (averaged over MoE layers)."""
        work = self.rank_work
        out: dict[str, object] = {"layout": self.layout.as_dict()}
        if work:
            out["max_distinct_experts_per_rank"] = float(np.mean([float(w.max_distinct) for w in work]))
            out["mean_distinct_experts_per_rank"] = float(np.mean([float(w.mean_distinct) for w in work]))
            out["max_expert_tokens_per_rank"] = float(np.mean([float(w.max_tokens) for w in work]))
            out["mean_expert_tokens_per_rank"] = float(np.mean([float(w.mean_tokens) for w in work]))
        return out


def _join(kernel: Kernel) -> Kernel:
    return kernel if kernel.join else joined(kernel)


def _wait_for_collectives(kernels: list[Kernel]) -> list[Kernel]:
    """The first main-stream kernel after a collective waits for it (an event wait); shared experts issued
    right after dispatch do not, so they overlap it."""
    out: list[Kernel] = []
    pending = False
    for kernel in kernels:
        if kernel.category == "communication":
            pending = True
        elif pending and kernel.stream == 0 and kernel.category != "shared_experts":
            kernel, pending = _join(kernel), False
        out.append(kernel)
    return out


def _moe_kernels(parts: pl.WorkFreeKernels, layout: ParallelLayout, work: RankExperts) -> list[Kernel]:
    """Router, dispatch, shared experts, the slowest rank's expert GEMMs, combine."""
    ctx = parts.ctx
    if layout.ep == 1:
        # Experts tensor-parallel over every rank: all tokens, every hit expert's slice, outputs summed by
        # one all-reduce; shared experts beside the routed ones on a side stream, as on one GPU.
        distinct = float(work.total_distinct)
        shared = parts.shared(1)
        return [
            *router_kernels(ctx, distinct),
            *shared,
            *fused_expert_kernels(ctx, distinct),
            parts.combine(bool(shared)),
            comm_kernel("moe_all_reduce"),
        ]
    distinct, assignments = float(work.max_distinct), float(work.max_tokens)
    shared = parts.shared(0)
    kernels = [
        *router_kernels(ctx, distinct),
        comm_kernel("dispatch"),
        *shared,  # on the main stream while dispatch is in flight
        *fused_expert_kernels(ctx, distinct, assignments, ("dispatch_recv", assignments * ctx.model.hidden)),
        comm_kernel("combine"),
        parts.combine(False),
    ]
    if shared and layout.shared_mode == "split" and layout.tp > 1:
        kernels.append(comm_kernel("shared_all_reduce"))
    return kernels


def _layer(
    parts: pl.WorkFreeKernels,
    layout: ParallelLayout,
    attention: AttentionLayerKind,
    ffn: FfnLayerKind,
    work: RankExperts | None,
) -> list[Kernel]:
    kernels = list(parts.attention(attention))
    kernels[0] = _join(kernels[0])  # waits for the previous layer's last collective
    if layout.tp > 1:
        kernels.append(comm_kernel("attn_all_reduce"))
    if ffn == "dense":
        kernels += parts.dense_ffn
        if layout.tp > 1:
            kernels.append(comm_kernel("mlp_all_reduce"))
    else:
        assert work is not None
        kernels += _moe_kernels(parts, layout, work)
    return _wait_for_collectives(kernels)


def _epilogue(ctx: PlanContext, layout: ParallelLayout) -> list[Kernel]:
    kernels = epilogue_kernels(ctx)
    kernels[0] = _join(kernels[0])
    if layout.tp > 1:
        head = next(i for i, k in enumerate(kernels) if k.name == "lm_head")
        kernels.insert(head + 1, comm_kernel("logits_all_gather"))
    return _wait_for_collectives(kernels)


def _dispatch_bytes_per_value(model: ModelSpec) -> float:
    return FP8_DISPATCH_BYTES if model.expert_format.compute_dtype == "fp8" else float(ACT_BYTES)


def step_collectives(
    model: ModelSpec,
    layout: ParallelLayout,
    batch: int,
    tokens_per_seq: int,
    work: RankExperts | None,
) -> dict[str, Collective]:
    """The collectives of the step (one launch each) and the bytes each moves."""
    if layout.is_single:
        return {}
    h = model.hidden
    group_tokens = layout.sequences_per_group(batch) * tokens_per_seq
    step_tokens = batch * tokens_per_seq
    out: dict[str, Collective] = {}
    if layout.tp > 1:
        hidden = Collective("all_reduce", layout.tp, group_tokens * h * ACT_BYTES)
        out["attn_all_reduce"] = out["mlp_all_reduce"] = out["shared_all_reduce"] = hidden
        logits = group_tokens * math.ceil(model.vocab / layout.tp) * layout.tp * LOGIT_BYTES
        out["logits_all_gather"] = Collective("all_gather", layout.tp, logits)
    if work is not None and model.is_moe:
        if layout.ep > 1:
            traffic = moe_traffic(
                layout, h, step_tokens, work, _dispatch_bytes_per_value(model), float(ACT_BYTES)
            )
            kernel = layout.expert_tp == 1  # an expert-parallel all-to-all kernel (see Collective.phase)
            out["dispatch"] = Collective(
                "all_to_all",
                layout.gpus,
                float(traffic.dispatch_send_bytes),
                float(traffic.dispatch_recv_bytes),
                "dispatch" if kernel else "",
            )
            out["combine"] = Collective(
                "all_to_all",
                layout.gpus,
                float(traffic.combine_send_bytes),
                float(traffic.combine_recv_bytes),
                "combine" if kernel else "",
            )
        else:
            out["moe_all_reduce"] = Collective("all_reduce", layout.gpus, step_tokens * h * ACT_BYTES)
    return out


def prepare_parallel_plans(
    model: ModelSpec,
    layout: ParallelLayout,
    routing: RoutingModel | None,
    shapes: Iterable[tuple[int, int]],
) -> None:
    """Work out the per-rank expert work of every (batch, tokens per sequence) step in `shapes` in one
    vectorised pass, so that `build_parallel_plan` of any of them only looks it up (same figures)."""
    if layout.is_single or not model.is_moe:
        return
    moe_layers = [layer for layer, ffn in enumerate(model.layer_ffn) if ffn == "moe"]
    prepare_rank_experts(
        routing or IndependentRouting(),
        model.n_experts,
        model.top_k,
        shapes,
        layout.ep,
        layout.placement,
        moe_layers,
    )


def build_parallel_plan(
    model: ModelSpec,
    batch: int,
    tokens_per_seq: int,
    layout: ParallelLayout,
    device: PlanDevice = GENERIC_DEVICE,
    context_len: int = 2048,
    kernel_style: str = "fused",
    routing: RoutingModel | None = None,
) -> ParallelStep:
    """The slowest rank's plan of one step of B sequences × T tokens under `layout`, with its collectives."""
    routing = routing or IndependentRouting()
    if layout.is_single:
        return ParallelStep(
            build_plan(model, batch, tokens_per_seq, context_len, kernel_style, routing, device), layout
        )
    if kernel_style != "fused":
        raise MoesimError(
            "kernel_style",
            f"multi-GPU layouts are modelled for the fused kernel style, not {kernel_style!r}",
            "use --kernel-style fused, or --gpus 1",
        )
    layout.check_model(model)
    pl.check_step_inputs(model, batch, tokens_per_seq, context_len)
    rank = rank_model(model, layout)
    group_batch = layout.sequences_per_group(batch)
    ctx = PlanContext(rank, group_batch, tokens_per_seq, context_len, device)
    per_layer = not isinstance(routing, IndependentRouting)
    shared_work: RankExperts | None = None
    if model.is_moe and not per_layer:
        shared_work = rank_experts(
            routing, model.n_experts, model.top_k, batch, tokens_per_seq, layout.ep, layout.placement
        )
    templates: dict[tuple[str, str, float, float], tuple[Kernel, ...]] = {}
    parts = pl.work_free_kernels(ctx)
    segments = [pl.Segment(tuple(prologue_kernels(ctx)))]
    # Layers whose routing parameters are equal do the same per-rank work: compute it once per parameter set.
    kinds, first_layers = _layer_groups(model, routing, per_layer)
    works: list[RankExperts] = []
    work_keys: list[tuple[float, float]] = []  # each work's template key (rounded once)
    for layer in first_layers:
        work = shared_work
        if work is None:
            work = rank_experts(
                routing,
                model.n_experts,
                model.top_k,
                batch,
                tokens_per_seq,
                layout.ep,
                layout.placement,
                layer,
            )
        works.append(work)
        work_keys.append((round(float(work.max_distinct), 6), round(float(work.max_tokens), 6)))
    by_kind: dict[tuple[str, str, int], tuple[Kernel, ...]] = {}  # (attention, FFN, group) → template
    for layer, kind in enumerate(kinds):
        template = by_kind.get(kind)
        if template is None:
            attn, ffn, group = kind
            work = works[group] if group >= 0 else None
            key = (attn, ffn, *(work_keys[group] if work is not None else (0.0, 0.0)))
            if key not in templates:
                templates[key] = tuple(_layer(parts, layout, attn, ffn, work))
            template = by_kind[kind] = templates[key]
        segments.append(pl.new_segment(template, layer))
    work_by_layer = [works[group] for _, _, group in kinds if group >= 0]
    totals = [float(work.total_distinct) for work in works]
    distinct_total = [totals[group] for _, _, group in kinds if group >= 0]
    segments.append(pl.Segment(tuple(_epilogue(ctx, layout))))
    plan = pl.StepPlan(
        model_name=model.name,
        kernel_style=kernel_style,
        batch=batch,
        tokens_per_seq=tokens_per_seq,
        context_len=context_len,
        segments=tuple(segments),
        distinct_experts_by_layer=tuple(distinct_total),
        routing_description=routing.description,
        n_experts=model.n_experts,
        top_k=model.top_k,
    )
    first = work_by_layer[0] if work_by_layer else None
    collectives: dict[str, tuple[Collective, ...]] = {
        name: (c,) for name, c in step_collectives(model, layout, batch, tokens_per_seq, first).items()
    }
    if per_layer and work_by_layer:
        collectives.update(_per_layer_all_to_all(model, layout, batch, tokens_per_seq, work_by_layer))
    return ParallelStep(plan, layout, collectives, tuple(work_by_layer))


def _layer_groups(
    model: ModelSpec, routing: RoutingModel, per_layer: bool
) -> tuple[list[tuple[AttentionLayerKind, FfnLayerKind, int]], tuple[int, ...]]:
    """Each layer's (attention, FFN, group): −1 for a dense layer, else its MoE layer's routing parameter
    set (`step.moe_layer_groups`; one set when the routing is not per layer), and each set's first layer."""
    kinds = pl.layer_kinds(model)
    if not per_layer:
        first = tuple(layer for layer, (_, ffn, _) in enumerate(kinds) if ffn == "moe")[:1]
        return [(attn, ffn, 0 if index >= 0 else -1) for attn, ffn, index in kinds], first
    first_layers, group_of_moe = pl.moe_layer_groups(routing, model.layer_ffn)
    return [
        (attn, ffn, group_of_moe[index] if index >= 0 else -1) for attn, ffn, index in kinds
    ], first_layers


def _per_layer_all_to_all(
    model: ModelSpec,
    layout: ParallelLayout,
    batch: int,
    tokens_per_seq: int,
    work: list[RankExperts],
) -> dict[str, tuple[Collective, ...]]:
    """The MoE collectives of every MoE layer, when the routing differs by layer."""
    by_work: dict[int, dict[str, Collective]] = {}
    for w in work:  # layers sharing routing parameters share one RankExperts object
        if id(w) not in by_work:
            by_work[id(w)] = step_collectives(model, layout, batch, tokens_per_seq, w)
    per_layer = [by_work[id(w)] for w in work]
    keys = {"dispatch", "combine", "moe_all_reduce"} & set(per_layer[0])
    return {key: tuple(layer[key] for layer in per_layer) for key in sorted(keys)}


__all__ = [
    "COMM_STREAM",
    "ParallelStep",
    "build_parallel_plan",
    "collective_name",
    "comm_kernel",
    "prepare_parallel_plans",
    "rank_model",
    "step_collectives",
]
