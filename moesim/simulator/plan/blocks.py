"""What every kernel builder shares: the device as a plan sees it, the step's context, and the kernel
building blocks (a GEMM through a weight matrix, an element-wise kernel over activations, the fused norm).

Tensor names: per-layer tensors start with "L*." (`LAYER_PREFIX`) in a layer template and become "L<i>."
when the plan is expanded; activations have global names, as serving engines reuse the same workspace
buffers in every layer, so a layer's input can still be in L2 from the previous kernel.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Protocol

from moesim.simulator.models.spec import ModelSpec
from moesim.simulator.plan.kernels import Category, Kernel, TensorRead, new_kernel, new_read
from moesim.simulator.plan.shapes import Matrix, ffn_matrices

ACT_BYTES = 2  # activations in bf16
LOGIT_BYTES = 4  # logits in fp32 for sampling
INDEX_BYTES = 4
LAYER_PREFIX = "L*."


# --- The device, as a plan sees it -------------------------------------------------------------------------------


class PlanDevice(Protocol):
    """What a plan needs to know of the device, as plain numbers. A `HardwareProfile` provides them (its
    documented execution facts); plan never imports the hardware room.

    A GEMM re-reads its weights once per M-tile of `gemm_tile_m_*` rows, the repeats' working set one
    panel of `gemm_panel_rows` weight rows; attention above `ridge_flops_per_byte` counts as compute; MLA
    attention computes whole tiles of `mla_query_tile_rows` query rows (0: its useful rows only).
    """

    @property
    def ridge_flops_per_byte(self) -> float: ...
    @property
    def gemm_panel_rows(self) -> int: ...
    @property
    def gemm_tile_m_expert(self) -> int: ...
    @property
    def gemm_tile_m_dense(self) -> int: ...
    @property
    def mla_query_tile_rows(self) -> int: ...


@dataclass(frozen=True)
class GenericDevice:
    """The device facts of a plan built for no particular device (the torch reference's replayed plan, which
    is costed later): the documented NVIDIA datacenter defaults (hardware.defaults) and an H100-class ridge."""

    ridge_flops_per_byte: float = 300.0
    gemm_panel_rows: int = 4096
    gemm_tile_m_expert: int = 64
    gemm_tile_m_dense: int = 128
    mla_query_tile_rows: int = 64


GENERIC_DEVICE = GenericDevice()


@dataclass(frozen=True)
class PlanContext:
    """What a plan builder needs to know about one step."""

    model: ModelSpec
    batch: int
    tokens_per_seq: int
    context_len: int
    device: PlanDevice = GENERIC_DEVICE

    @property
    def m_tokens(self) -> int:
        return self.batch * self.tokens_per_seq

    @property
    def is_verify(self) -> bool:
        return self.tokens_per_seq > 1

    @functools.cached_property
    def ffn(self) -> dict[str, Matrix]:
        return ffn_matrices(self.model)


# --- Kernel building blocks (usable by other kernel styles) -----------------------------------------------------


def make_kernel(
    name: str,
    category: Category,
    *,
    flops: float = 0.0,
    reads: tuple[TensorRead, ...] = (),
    write: tuple[str, float] = ("", 0.0),
    m: float = 0.0,
    dtype: str = "bf16",
    stream: int = 0,
    join: bool = False,
    experts: float = 0.0,
    attention_units: float = 0.0,
    attention_kind: str = "",
) -> Kernel:
    return new_kernel(
        name,
        category,
        float(flops),
        reads,
        write_bytes=float(write[1]),
        write_tensor=write[0],
        m_tokens=m,
        dtype=dtype,
        stream=stream,
        join=join,
        experts=float(experts),
        attention_units=float(attention_units),
        attention_kind=attention_kind,
    )


def activation_read(name: str, elements: float) -> TensorRead:
    return new_read(name, elements * ACT_BYTES)


def weight_read(
    device: PlanDevice,
    tensor: str,
    matrix: Matrix,
    m_tokens: float,
    tile_m: int | None = None,
    copies: float = 1.0,
) -> TensorRead:
    """A GEMM's weight read: once per M-tile (dense tiles unless `tile_m` says otherwise), the repeats'
    working set one panel of one copy (expert)."""
    tiles = max(1.0, math.ceil(m_tokens / (tile_m or device.gemm_tile_m_dense)))
    panel = matrix.bytes * min(1.0, device.gemm_panel_rows / max(1, matrix.rows))
    return new_read(tensor, copies * matrix.bytes, tiles, panel)


def gemm_kernel(
    ctx: PlanContext,
    name: str,
    category: Category,
    weight_tensor: str,
    matrix: Matrix,
    m_tokens: int,
    input_tensor: str,
    output_tensor: str,
    stream: int = 0,
) -> Kernel:
    """A dense GEMM of M tokens through one weight matrix (re-read once per M-tile)."""
    return make_kernel(
        name,
        category,
        flops=2.0 * m_tokens * matrix.params,
        reads=(
            weight_read(ctx.device, weight_tensor, matrix, m_tokens),
            activation_read(input_tensor, m_tokens * matrix.cols),
        ),
        write=(output_tensor, m_tokens * matrix.rows * ACT_BYTES),
        m=m_tokens,
        dtype=matrix.fmt.compute_dtype,
        stream=stream,
    )


def elementwise_kernel(
    name: str,
    category: Category,
    inputs: tuple[tuple[str, float], ...],
    output: tuple[str, float],
    flops_per_element: float = 4.0,
    weights: tuple[TensorRead, ...] = (),
    stream: int = 0,
    join: bool = False,
) -> Kernel:
    """A memory-bound kernel over activations: (name, elements) in, (name, elements) out."""
    elements = sum(n for _, n in inputs)
    return make_kernel(
        name,
        category,
        flops=flops_per_element * elements,
        reads=(*weights, *(activation_read(t, n) for t, n in inputs)),
        write=(output[0], output[1] * ACT_BYTES),
        stream=stream,
        join=join,
    )


def norm_kernel(ctx: PlanContext, name: str, weight: str) -> Kernel:
    """Fused residual add + RMSNorm over M tokens."""
    m, h = ctx.m_tokens, ctx.model.hidden
    return elementwise_kernel(
        name, "other", (("resid", m * h),), ("h", m * h), weights=(TensorRead(weight, h * ACT_BYTES),)
    )
