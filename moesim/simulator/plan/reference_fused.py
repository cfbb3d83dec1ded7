"""The `torch-fused` kernel style: the validation reference with its experts as grouped GEMMs.

The closest plain-torch equivalent of a serving engine's fused MoE block (the `fused` style): tokens are
sorted by expert as in `torch-reference`, then each projection is ONE `torch._grouped_mm` launch over
all experts (empty groups are skipped, so only the distinct experts' weights are read): gate GEMM, up
GEMM, SiLU on the gate in place, multiply, down GEMM, then gate scaling and the index_add combine. The
gate and up weights are separate stacked tensors because a [gate | up] output would need a view inside
the step. Everything else is the `torch-reference` plan, kernel for kernel. On a GPU the same step is
what a Triton fused-MoE kernel replaces (scripts/device_validate.sh).

Like the fused style, a grouped GEMM is one kernel whose efficiency is looked up at the mean rows per
distinct expert, reading each distinct expert's weights once (re-read per M-tile).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from moesim.simulator.models.spec import AttentionLayerKind, FfnLayerKind, ModelSpec
from moesim.simulator.plan.blocks import GENERIC_DEVICE, PlanContext
from moesim.simulator.plan.kernels import Kernel, TensorRead
from moesim.simulator.plan.reference import (
    REFERENCE_STYLE,
    P,
    _Kernels,
    check_reference_model,
    even_loads,
    layer_kernels,
    reference_step_plan,
)
from moesim.simulator.plan.step import PlanBuilder, StepPlan

STYLE_NAME = "torch-fused"


def grouped_expert_kernels(k: _Kernels, model: ModelSpec, loads: np.ndarray) -> None:
    """Three grouped GEMMs over the distinct experts (gate, up, down) with SiLU and multiply between."""
    e, h, width = k.elem, model.hidden, model.expert_width
    hit = np.flatnonzero(loads)
    rows = int(loads.sum())
    per_expert = rows / max(len(hit), 1)

    def grouped(name: str, x: str, weight: str, k_dim: int, n_dim: int, out: str) -> None:
        reads: list[TensorRead] = [
            TensorRead(
                f"{P}e{expert}.{weight}",
                k_dim * n_dim * e,
                max(1.0, math.ceil(loads[expert] / GENERIC_DEVICE.gemm_tile_m_dense)),
            )
            for expert in hit
        ]
        reads.append(TensorRead(x, rows * k_dim * e))
        k.add(name, "routed_experts", reads, (out, rows * n_dim * e), 2.0 * rows * k_dim * n_dim, per_expert)

    half = rows * width * e
    grouped("grouped_gate", "x_sorted", "w1", h, width, "gate")
    grouped("grouped_up", "x_sorted", "w3", h, width, "up")
    k.add(
        "experts.silu_",
        "routed_experts",
        [("gate", half)],
        ("gate", half),
        4.0 * rows * width,
        transcendental=("silu", rows * width),
    )
    k.add("experts.mul", "routed_experts", [("gate", half), ("up", half)], ("act", half), rows * width)
    grouped("grouped_down", "act", "w2", width, h, "y_sorted")


def fused_reference_step_plan(
    model: ModelSpec, batch: int, tokens_per_seq: int, context_len: int, expert_loads: Sequence[np.ndarray]
) -> StepPlan:
    """The exact plan of one `torch-fused` reference step with these per-layer expert loads."""
    return reference_step_plan(
        model, batch, tokens_per_seq, context_len, expert_loads, grouped_expert_kernels, STYLE_NAME
    )


def _registry_layer(
    ctx: PlanContext, attention: AttentionLayerKind, ffn: FfnLayerKind, distinct: float
) -> list[Kernel]:
    check_reference_model(ctx.model)
    loads = even_loads(ctx.model, ctx.m_tokens, distinct) if ffn == "moe" else None
    return layer_kernels(
        ctx.model, ctx.batch, ctx.tokens_per_seq, ctx.context_len, ffn, loads, grouped_expert_kernels
    )


FUSED_REFERENCE_STYLE = PlanBuilder(
    STYLE_NAME,
    "plain torch with grouped expert GEMMs (torch._grouped_mm, one launch per projection), as moesim "
    "validation's fused reference runs it",
    _registry_layer,
    prologue=REFERENCE_STYLE.prologue,
    epilogue=REFERENCE_STYLE.epilogue,
)


__all__ = ["FUSED_REFERENCE_STYLE", "STYLE_NAME", "fused_reference_step_plan", "grouped_expert_kernels"]
