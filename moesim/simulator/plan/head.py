"""The step's head and tail as kernels: the embedding lookup before the first layer; the final norm, the
LM head, sampling and (in a verification step) acceptance after the last.
"""

from __future__ import annotations

from moesim.simulator.models.weights import lm_head_read_bytes
from moesim.simulator.plan.blocks import (
    ACT_BYTES,
    INDEX_BYTES,
    LOGIT_BYTES,
    PlanContext,
    activation_read,
    make_kernel,
    norm_kernel,
    weight_read,
)
from moesim.simulator.plan.kernels import Kernel, TensorRead
from moesim.simulator.plan.shapes import BF16, Matrix


def prologue_kernels(ctx: PlanContext) -> list[Kernel]:
    """Embedding lookup of the step's M tokens."""
    m, h = ctx.m_tokens, ctx.model.hidden
    return [
        make_kernel(
            "embedding",
            "other",
            reads=(TensorRead("embed.rows", m * h * ACT_BYTES),),
            write=("resid", m * h * ACT_BYTES),
        )
    ]


def epilogue_kernels(ctx: PlanContext) -> list[Kernel]:
    """Final norm, LM head, sampling; a verification step also compares draft and target tokens."""
    model, m = ctx.model, ctx.m_tokens
    h, v = model.hidden, model.vocab
    head = Matrix(v, h, BF16, lm_head_read_bytes(model))
    out = [
        norm_kernel(ctx, "final_norm", "final_norm"),
        make_kernel(
            "lm_head",
            "lm_head",
            flops=2.0 * m * head.params,
            reads=(
                weight_read(ctx.device, "lm_head", head, m),
                activation_read("h", m * h),
            ),
            write=("logits", m * v * LOGIT_BYTES),
            m=m,
        ),
        make_kernel(
            "sampling",
            "other",
            flops=5.0 * m * v,
            reads=(TensorRead("logits", m * v * LOGIT_BYTES),),
            write=("next_tokens", m * INDEX_BYTES),
        ),
    ]
    if ctx.is_verify:
        out.append(
            make_kernel(
                "accept",
                "other",
                flops=4.0 * m,
                reads=(
                    TensorRead("next_tokens", m * INDEX_BYTES),
                    TensorRead("draft_tokens", m * INDEX_BYTES),
                ),
                write=("accepted", ctx.batch * INDEX_BYTES),
            )
        )
    return out
