"""Feed-forward blocks as kernels: the dense FFN, and the MoE block's router, top-k and expert alignment,
shared experts, the grouped expert GEMMs over the distinct experts hit (or a naive per-token loop), and
the combine into the residual.
"""

from __future__ import annotations

from moesim.errors import MoesimError
from moesim.simulator.plan.blocks import (
    ACT_BYTES,
    INDEX_BYTES,
    LAYER_PREFIX,
    LOGIT_BYTES,
    PlanContext,
    activation_read,
    elementwise_kernel,
    gemm_kernel,
    make_kernel,
    norm_kernel,
    weight_read,
)
from moesim.simulator.plan.kernels import Kernel, TensorRead
from moesim.simulator.plan.shapes import shared_width

# A per-token plan launches several kernels per (token, expert) pair; beyond this the event timer would take
# minutes, and no serving engine runs that way at such sizes anyway.
MAX_PER_TOKEN_LAUNCHES = 400_000


def dense_ffn_kernels(ctx: PlanContext) -> list[Kernel]:
    """Norm, gate/up GEMM, activation, down GEMM of a dense layer."""
    m, f = ctx.m_tokens, ctx.model.dense_ffn_width
    P = LAYER_PREFIX
    return [
        norm_kernel(ctx, "post_attention_norm", P + "ln2"),
        gemm_kernel(
            ctx, "mlp_gate_up", "dense_weights", P + "mlp.w13", ctx.ffn["dense_w13"], m, "h", "mlp_in"
        ),
        elementwise_kernel("mlp_act", "dense_weights", (("mlp_in", 2 * m * f),), ("mlp_mid", m * f)),
        gemm_kernel(
            ctx, "mlp_down", "dense_weights", P + "mlp.w2", ctx.ffn["dense_w2"], m, "mlp_mid", "resid"
        ),
    ]


def router_kernels(ctx: PlanContext, distinct: float) -> list[Kernel]:
    """Norm, router GEMM, top-k selection and the expert alignment (sort tokens by expert)."""
    model, m = ctx.model, ctx.m_tokens
    n, k = model.n_experts, model.top_k
    P = LAYER_PREFIX
    assignments = m * k
    return [
        norm_kernel(ctx, "post_attention_norm", P + "ln2"),
        gemm_kernel(ctx, "router", "other", P + "router", ctx.ffn["router"], m, "h", "router_logits"),
        make_kernel(
            "topk",
            "other",
            flops=8.0 * m * n,
            reads=(TensorRead("router_logits", m * n * ACT_BYTES),),
            write=("topk", assignments * (INDEX_BYTES + LOGIT_BYTES)),
        ),
        make_kernel(
            "moe_align",
            "other",
            flops=4.0 * assignments,
            reads=(TensorRead("topk", assignments * INDEX_BYTES),),
            write=("sorted_ids", (assignments + distinct * ctx.device.gemm_tile_m_expert) * INDEX_BYTES),
        ),
    ]


def shared_expert_kernels(ctx: PlanContext, stream: int) -> list[Kernel]:
    """The shared experts as one gated MLP over all M tokens."""
    w = shared_width(ctx.model)
    if w == 0:
        return []
    m = ctx.m_tokens
    P = LAYER_PREFIX
    return [
        gemm_kernel(
            ctx,
            "shared_gate_up",
            "shared_experts",
            P + "shared.w13",
            ctx.ffn["shared_w13"],
            m,
            "h",
            "shared_in",
            stream,
        ),
        elementwise_kernel(
            "shared_act", "shared_experts", (("shared_in", 2 * m * w),), ("shared_mid", m * w), stream=stream
        ),
        gemm_kernel(
            ctx,
            "shared_down",
            "shared_experts",
            P + "shared.w2",
            ctx.ffn["shared_w2"],
            m,
            "shared_mid",
            "shared_out",
            stream,
        ),
    ]


def fused_expert_kernels(
    ctx: PlanContext,
    distinct: float,
    assignments: float | None = None,
    input_tensor: tuple[str, float] | None = None,
) -> list[Kernel]:
    """Grouped GEMMs over the distinct experts: each one's weights read once (repeats per M-tile hit L2).

    `assignments` token-expert pairs (default: every token's top-k) over `distinct` experts, reading the
    tokens from `input_tensor` (name, elements; default: the step's hidden states). An expert-parallel
    rank passes its own share and the tokens dispatch delivered to it.
    """
    model, m = ctx.model, ctx.m_tokens
    k, w, h = model.top_k, model.expert_width, model.hidden
    w13, w2 = ctx.ffn["expert_w13"], ctx.ffn["expert_w2"]
    assignments = m * k if assignments is None else assignments
    source, source_elements = ("h", m * h) if input_tensor is None else input_tensor
    distinct = max(distinct, 1e-9)
    per_expert = assignments / distinct
    tile_m = ctx.device.gemm_tile_m_expert
    dtype = model.expert_format.compute_dtype
    P = LAYER_PREFIX
    return [
        make_kernel(
            "experts_gate_up",
            "routed_experts",
            flops=2.0 * assignments * w13.params,
            reads=(
                weight_read(ctx.device, P + "experts.w13", w13, per_expert, tile_m, distinct),
                activation_read(source, source_elements),
                TensorRead("sorted_ids", assignments * INDEX_BYTES),
            ),
            write=("experts_in", assignments * 2 * w * ACT_BYTES),
            m=per_expert,
            dtype=dtype,
            experts=distinct,
        ),
        elementwise_kernel(
            "experts_act",
            "routed_experts",
            (("experts_in", assignments * 2 * w),),
            ("experts_mid", assignments * w),
        ),
        make_kernel(
            "experts_down",
            "routed_experts",
            flops=2.0 * assignments * w2.params,
            reads=(
                weight_read(ctx.device, P + "experts.w2", w2, per_expert, tile_m, distinct),
                activation_read("experts_mid", assignments * w),
            ),
            write=("experts_out", assignments * h * ACT_BYTES),
            m=per_expert,
            dtype=dtype,
            experts=distinct,
        ),
    ]


def combine_kernel(ctx: PlanContext, join: bool) -> Kernel:
    """Weighted sum of each token's k expert outputs (plus the shared experts' output) into the residual."""
    m, h, k = ctx.m_tokens, ctx.model.hidden, ctx.model.top_k
    inputs: tuple[tuple[str, float], ...] = (("experts_out", m * k * h),)
    if shared_width(ctx.model):
        inputs += (("shared_out", m * h),)
    return elementwise_kernel(
        "moe_combine", "routed_experts", inputs, ("resid", m * h), flops_per_element=2.0, join=join
    )


def per_token_expert_kernels(ctx: PlanContext, distinct: float) -> list[Kernel]:
    """A naive loop: for each token, for each expert it chose, gate/up GEMM, activation, down GEMM.

    Expert e of pair q = t·k + j is (q mod U) over U distinct experts, so every expert is reused every U
    pairs: its weights come back from L2 while U experts' weights fit in it.
    """
    model, m = ctx.model, ctx.m_tokens
    k, w, h = model.top_k, model.expert_width, model.hidden
    w13, w2 = ctx.ffn["expert_w13"], ctx.ffn["expert_w2"]
    launches = 3 * m * k * model.n_moe_layers
    if launches > MAX_PER_TOKEN_LAUNCHES:
        raise MoesimError(
            "kernel_style",
            f"the per-token plan would launch {launches} expert kernels in one step",
            f"use --kernel-style fused, or a smaller batch / draft length (limit {MAX_PER_TOKEN_LAUNCHES})",
        )
    u = max(k, min(round(distinct), m * k))
    dtype = model.expert_format.compute_dtype
    P = LAYER_PREFIX
    out: list[Kernel] = []
    for t in range(m):
        for j in range(k):
            e = (t * k + j) % u
            out += [
                make_kernel(
                    "expert_gate_up",
                    "routed_experts",
                    flops=2.0 * w13.params,
                    reads=(TensorRead(f"{P}expert{e}.w13", w13.bytes), activation_read("h", h)),
                    write=("tok_in", 2 * w * ACT_BYTES),
                    m=1,
                    dtype=dtype,
                ),
                elementwise_kernel("expert_act", "routed_experts", (("tok_in", 2 * w),), ("tok_mid", w)),
                make_kernel(
                    "expert_down",
                    "routed_experts",
                    flops=2.0 * w2.params,
                    reads=(
                        TensorRead(f"{P}expert{e}.w2", w2.bytes),
                        activation_read("tok_mid", w),
                        activation_read("experts_out", h),
                    ),
                    write=("experts_out", h * ACT_BYTES),
                    m=1,
                    dtype=dtype,
                ),
            ]
    return out
