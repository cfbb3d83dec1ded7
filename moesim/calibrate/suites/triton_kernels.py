"""Triton kernels for GPU measurements torch's own ops cannot make: an L2 read and a fused grouped MoE GEMM.

- `l2_read(buffer, passes)`: ONE launch that reads a buffer `passes` times (each program strides over
  its share of blocks), so a cache-sized working set is re-read from L2 without a kernel's fixed latency
  per pass: the plateau `torch.sum` hides on a GPU (its one pass per launch is latency-bound at L2 sizes).
- `grouped_mm_triton(x_sorted, weights, *moe_block_table(offsets))`: the routed experts of a fused MoE block as one launch:
  rows sorted by expert (`offsets[e]` = end row of expert e's group, as `torch._grouped_mm` takes them),
  M-blocks that never straddle two experts (each group padded to BLOCK_M rows in a block table), each
  program multiplying one block of rows by one N-tile of its expert's [K, N] weight. Only experts with
  rows are read. Registered as the torch op `moesim::grouped_mm`, so the torch dispatcher (and the
  validation's op-by-op plan check) sees one op per projection, as it sees `aten::_grouped_mm` on a CPU.

triton is imported lazily: it ships with CUDA builds of torch; on a CPU the kernels run only under
Triton's interpreter (TRITON_INTERPRET=1), which the tests use where triton is installed.
"""

from __future__ import annotations

import functools
from typing import Any

from moesim.errors import MoesimError

L2_BLOCK = 4096  # float32 elements per program per step (16 KiB)
MOE_BLOCK_M = 16
MOE_BLOCK_N = 64
MOE_BLOCK_K = 32


def triton_available() -> bool:
    """Whether triton imports here (it does wherever a CUDA build of torch is installed)."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


@functools.cache
def _kernels() -> dict[str, Any]:
    try:
        import triton
        import triton.language as tl
    except ImportError:
        raise MoesimError(
            "triton", "triton is not installed", "use a CUDA build of torch (it ships triton)"
        ) from None

    @triton.jit
    def l2_read_kernel(x_ptr, out_ptr, n_elements, n_blocks, passes, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
        pid = tl.program_id(0)
        n_programs = tl.num_programs(0)
        acc = tl.zeros((BLOCK,), dtype=tl.float32)
        for _ in range(passes):
            for block in range(pid, n_blocks, n_programs):
                offs = block * BLOCK + tl.arange(0, BLOCK)
                acc += tl.load(x_ptr + offs, mask=offs < n_elements, other=0.0)
        tl.store(out_ptr + pid, tl.sum(acc, axis=0))

    @triton.jit
    def grouped_mm_kernel(  # type: ignore[no-untyped-def]
        x_ptr,
        w_ptr,
        out_ptr,
        block_rows_ptr,
        block_expert_ptr,
        n_cols,
        k_dim,
        stride_we,
        BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr,
        BLOCK_K: tl.constexpr,
    ):
        pid_m = tl.program_id(0)
        pid_n = tl.program_id(1)
        expert = tl.load(block_expert_ptr + pid_m)
        rows = tl.load(block_rows_ptr + pid_m * BLOCK_M + tl.arange(0, BLOCK_M))  # -1: padding
        valid = rows >= 0
        safe_rows = tl.where(valid, rows, 0)
        cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, k_dim, BLOCK_K):
            ks = k0 + tl.arange(0, BLOCK_K)
            x = tl.load(
                x_ptr + safe_rows[:, None] * k_dim + ks[None, :],
                mask=valid[:, None] & (ks[None, :] < k_dim),
                other=0.0,
            )
            w = tl.load(
                w_ptr + expert * stride_we + ks[:, None] * n_cols + cols[None, :],
                mask=(ks[:, None] < k_dim) & (cols[None, :] < n_cols),
                other=0.0,
            )
            acc += tl.dot(x, w)
        tl.store(
            out_ptr + safe_rows[:, None] * n_cols + cols[None, :],
            acc.to(out_ptr.dtype.element_ty),
            mask=valid[:, None] & (cols[None, :] < n_cols),
        )

    return {"triton": triton, "l2_read": l2_read_kernel, "grouped_mm": grouped_mm_kernel}


def l2_read(buffer: Any, passes: int, programs: int = 0) -> Any:
    """Read the float32 `buffer` `passes` times in one launch; returns the per-program partial sums."""
    import torch

    if buffer.dtype != torch.float32 or not buffer.is_contiguous():
        raise MoesimError("l2_read", "the buffer must be a contiguous float32 tensor")
    kernels = _kernels()
    n = buffer.numel()
    n_blocks = kernels["triton"].cdiv(n, L2_BLOCK)
    programs = programs or min(n_blocks, 4 * _multiprocessors(buffer.device))
    out = torch.empty(programs, dtype=torch.float32, device=buffer.device)
    kernels["l2_read"][(programs,)](buffer, out, n, n_blocks, passes, BLOCK=L2_BLOCK)
    return out


def _multiprocessors(device: Any) -> int:
    import torch

    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).multi_processor_count)
    return 4  # the interpreter: a few programs are enough to exercise the striding


def moe_block_table(offsets: Any, block_m: int = MOE_BLOCK_M) -> tuple[Any, Any]:
    """(block rows [n_blocks, block_m] with -1 padding, expert of each block [n_blocks]): each expert's
    rows split into blocks of `block_m`, no block shared by two experts, experts without rows skipped."""
    import torch

    ends = [int(v) for v in offsets.tolist()]
    rows: list[list[int]] = []
    experts: list[int] = []
    start = 0
    for expert, end in enumerate(ends):
        for lo in range(start, end, block_m):
            block = list(range(lo, min(lo + block_m, end)))
            rows.append(block + [-1] * (block_m - len(block)))
            experts.append(expert)
        start = end
    device = offsets.device
    return (
        torch.tensor(rows or [[-1] * block_m], dtype=torch.int32, device=device),
        torch.tensor(experts or [0], dtype=torch.int32, device=device),
    )


def grouped_mm_triton(x_sorted: Any, weights: Any, block_rows: Any, block_expert: Any) -> Any:
    """out[rows of expert e] = x_sorted[rows of e] @ weights[e], one launch over every non-empty expert;
    the block table (`moe_block_table`) is made beforehand, as it reads the offsets on the host, which a
    CUDA-graph capture forbids."""
    import torch

    p_rows, k_dim = x_sorted.shape
    _, k_w, n_cols = weights.shape
    if k_w != k_dim or block_rows.shape[1] != MOE_BLOCK_M:
        raise MoesimError("grouped_mm", f"shapes x {tuple(x_sorted.shape)}, weights {tuple(weights.shape)}")
    kernels = _kernels()
    out = torch.zeros(p_rows, n_cols, dtype=x_sorted.dtype, device=x_sorted.device)
    grid = (block_rows.shape[0], kernels["triton"].cdiv(n_cols, MOE_BLOCK_N))
    kernels["grouped_mm"][grid](
        x_sorted.contiguous(),
        weights.contiguous(),
        out,
        block_rows,
        block_expert,
        n_cols,
        k_dim,
        k_dim * n_cols,
        BLOCK_M=MOE_BLOCK_M,
        BLOCK_N=MOE_BLOCK_N,
        BLOCK_K=MOE_BLOCK_K,
    )
    return out


@functools.cache
def grouped_mm_op() -> Any:
    """`torch.ops.moesim.grouped_mm`: the Triton grouped GEMM as one torch op (registered on first use)."""
    import torch

    @torch.library.custom_op(
        "moesim::grouped_mm",
        mutates_args=(),
        schema="(Tensor x_sorted, Tensor weights, Tensor block_rows, Tensor block_expert) -> Tensor",
    )
    def grouped_mm(x_sorted: Any, weights: Any, block_rows: Any, block_expert: Any) -> Any:
        return grouped_mm_triton(x_sorted, weights, block_rows, block_expert)

    @grouped_mm.register_fake
    def _(x_sorted: Any, weights: Any, block_rows: Any, block_expert: Any) -> Any:
        return x_sorted.new_empty(x_sorted.shape[0], weights.shape[2])

    return grouped_mm


__all__ = [
    "grouped_mm_op",
    "grouped_mm_triton",
    "l2_read",
    "moe_block_table",
    "triton_available",
]
