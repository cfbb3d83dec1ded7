"""The kernel-style registry: every built-in kernel style, listed where it is defined, and `build_plan`.

    fused            serving-engine kernels (vLLM / SGLang): grouped GEMMs over the distinct experts
    per-token        a naive loop, one expert MLP per (token, chosen expert)
    torch-reference  exactly the aten ops moesim's validation reference launches (plan/reference.py)
    torch-fused      that reference with one grouped GEMM per expert projection (plan/reference_fused.py)

Third parties add theirs with `register_kernel_style(PlanBuilder(...))`.
"""

from __future__ import annotations

from moesim.errors import MoesimError
from moesim.simulator.models.spec import ModelSpec
from moesim.simulator.plan.blocks import GENERIC_DEVICE, PlanContext, PlanDevice
from moesim.simulator.plan.ffn import MAX_PER_TOKEN_LAUNCHES
from moesim.simulator.plan.kernels import Kernel
from moesim.simulator.plan.reference import REFERENCE_STYLE
from moesim.simulator.plan.reference_fused import FUSED_REFERENCE_STYLE
from moesim.simulator.plan.step import (
    PlanBuilder,
    Segment,
    StepPlan,
    check_step_inputs,
    distinct_experts_by_layer,
    fused_layer,
    layer_kinds,
    new_segment,
    per_token_layer,
)
from moesim.simulator.routing.base import RoutingModel
from moesim.simulator.routing.independent import IndependentRouting

KERNEL_STYLES: dict[str, PlanBuilder] = {
    "fused": PlanBuilder(
        "fused",
        "serving-engine kernels (vLLM/SGLang): grouped GEMMs over distinct experts, shared experts on a side stream",
        fused_layer,
    ),
    "per-token": PlanBuilder(
        "per-token",
        "naive loop: one expert MLP per (token, chosen expert), re-reading that expert's weights",
        per_token_layer,
        max_launches=MAX_PER_TOKEN_LAUNCHES,
    ),
    REFERENCE_STYLE.name: REFERENCE_STYLE,
    FUSED_REFERENCE_STYLE.name: FUSED_REFERENCE_STYLE,
}


def register_kernel_style(builder: PlanBuilder) -> None:
    """Add (or replace) a kernel style so `build_plan(..., kernel_style=builder.name)` and the CLI can use it."""
    KERNEL_STYLES[builder.name] = builder


def kernel_style_builder(name: str) -> PlanBuilder:
    try:
        return KERNEL_STYLES[name]
    except KeyError:
        raise MoesimError(
            "kernel_style", f"unknown kernel style {name!r}", f"choose one of {', '.join(KERNEL_STYLES)}"
        ) from None


def build_plan(
    model: ModelSpec,
    batch: int,
    tokens_per_seq: int,
    context_len: int = 2048,
    kernel_style: str = "fused",
    routing: RoutingModel | None = None,
    device: PlanDevice | None = None,
    distinct_override: float | None = None,
) -> StepPlan:
    """The kernel plan of one step of B sequences × T tokens each, at `context_len` cached tokens.

    `device` gives the plan its device facts (a `HardwareProfile` does); `distinct_override` forces every MoE layer to hit exactly that many distinct experts (forced routing).
    """
    check_step_inputs(model, batch, tokens_per_seq, context_len)
    builder = kernel_style_builder(kernel_style)
    routing = routing or IndependentRouting()
    ctx = PlanContext(model, batch, tokens_per_seq, context_len, device or GENERIC_DEVICE)
    if distinct_override is not None:
        distinct = tuple(float(distinct_override) for kind in model.layer_ffn if kind == "moe")
    else:
        distinct = distinct_experts_by_layer(model, batch, tokens_per_seq, routing) if model.is_moe else ()
    description = "forced routing" if distinct_override is not None else routing.description
    return plan_from_context(ctx, builder, distinct, description)


def plan_from_context(
    ctx: PlanContext,
    builder: PlanBuilder,
    distinct: tuple[float, ...],
    routing_description: str,
    epilogue_ctx: PlanContext | None = None,
) -> StepPlan:
    """The plan of one step of `ctx` in the style of `builder`, given each MoE layer's distinct experts
    (layer templates shared by identical layers); `epilogue_ctx` sizes the head and tail when it differs."""
    model = ctx.model
    templates: dict[tuple[str, str, float], tuple[Kernel, ...]] = {}
    rounded = {u: round(u, 6) for u in {0.0, *distinct}}  # a model's layers share a few values
    segments = [Segment(tuple(builder.prologue(ctx)))]
    for layer, (attn, ffn, moe_index) in enumerate(layer_kinds(model)):
        u = 0.0 if moe_index < 0 else distinct[moe_index]
        key = (attn, ffn, rounded[u])
        template = templates.get(key)
        if template is None:
            template = templates[key] = tuple(builder.layer(ctx, attn, ffn, u))
        segments.append(new_segment(template, layer))
    segments.append(Segment(tuple(builder.epilogue(epilogue_ctx or ctx))))
    plan = StepPlan(
        model_name=model.name,
        kernel_style=builder.name,
        batch=ctx.batch,
        tokens_per_seq=ctx.tokens_per_seq,
        context_len=ctx.context_len,
        segments=tuple(segments),
        distinct_experts_by_layer=distinct,
        routing_description=routing_description,
        n_experts=model.n_experts,
        top_k=model.top_k,
    )
    if builder.max_launches is not None and plan.n_kernels > builder.max_launches:
        raise MoesimError(
            "kernel_style",
            f"the {builder.name} plan would launch {plan.n_kernels} kernels in one step",
            f"use --kernel-style fused, or a smaller batch / draft length (limit {builder.max_launches})",
        )
    return plan
