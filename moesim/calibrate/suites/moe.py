"""MoE suite: a real expert block with routing forced to hit exactly U distinct experts for M tokens.

Two expert sizes: small experts whose whole block stays in the last-level cache (warm: every read after the
first is a cache hit) and large ones cycled over enough layers that each step reads its experts from
memory. The fit t = fixed + per_expert·U + per_slot·(M·k) gives the per-expert and fixed costs; comparing
the small and large per-expert bandwidths is the evidence of cache reuse.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

from moesim.calibrate.suites.plan import Plan
from moesim.calibrate.suites.timing import DeviceInfo, Timer, torch_dtype

Row = dict[str, Any]


def distinct_grid(m_tokens: int, n_experts: int, top_k: int) -> list[int]:
    """U values from top_k up to the most M tokens can hit, roughly doubling."""
    most = min(n_experts, m_tokens * top_k)
    values = {top_k, most}
    u = top_k
    while u < most:
        values.add(u)
        u *= 2
    return sorted(values)


# Kernels one timed GPU batch may queue behind the spin: the CUDA launch queue holds about a thousand, and
# a host that must wait for a free slot is no longer ahead of the device.
GPU_MAX_KERNELS_PER_BATCH = 600
FIXED_KERNELS = 16  # router GEMM, mask, top-k, softmax, sort, gathers, zero output
KERNELS_PER_EXPERT = 9  # index slice, gather, gate/up/down GEMMs, silu, mul, scale, index_add


def kernels_per_call(distinct: int) -> int:
    """About how many kernels one block forward launches when it hits `distinct` experts."""
    return FIXED_KERNELS + KERNELS_PER_EXPERT * distinct


def batch_calls(seconds_per_call: float, min_timed_s: float, distinct: int, is_gpu: bool) -> int:
    """Calls per timed batch: long enough to time, short enough (on a GPU) to fit in the launch queue."""
    inner = int(min(max(min_timed_s / max(seconds_per_call, 1e-7), 1), 50))
    if is_gpu:
        inner = min(inner, max(1, GPU_MAX_KERNELS_PER_BATCH // kernels_per_call(distinct)))
    return inner


def _rotating_block(
    blocks: list[Any], x: Any, routings: list[Any], counts: list[list[int]]
) -> Callable[[], Any]:
    """One forward of the next layer's block with the next forced routing on every call (no host sync)."""
    cursor = itertools.count()

    def call() -> Any:
        i = next(cursor)
        j = i % len(routings)
        return blocks[i % len(blocks)](x, routings[j], counts[j])

    return call


def run_moe(
    timer: Timer,
    device: DeviceInfo,
    plan: Plan,
    dtype_name: str,
    progress: Callable[[float], None] = lambda f: None,
) -> list[Row]:
    """Rows: size_class, m, distinct, slots, hidden, width, n_experts, top_k, expert_bytes, layers, median_s, iqr_s."""
    torch = timer.torch
    from moesim.calibrate.suites.moe_block import ExpertBlock, forced_routing

    dtype = torch_dtype(dtype_name)
    generator = torch.Generator().manual_seed(1234)
    rows: list[Row] = []
    classes = [("small", plan.moe_small), ("large", plan.moe_large)]
    total = sum(len(distinct_grid(m, spec[2], spec[3])) for _, spec in classes for m in plan.moe_m)
    done = 0
    for size_class, (hidden, width, n_experts, top_k) in classes:
        block_bytes = 3 * hidden * width * n_experts * torch.empty((), dtype=dtype).element_size()
        layers = 1
        if size_class == "large":
            layers = max(1, math.ceil(plan.rotate_bytes / block_bytes))
            layers = max(1, min(layers, plan.memory_budget_bytes // block_bytes))
        blocks = [
            ExpertBlock(
                hidden, width, n_experts, top_k, dtype=dtype, device=device.torch_device, generator=generator
            )
            for _ in range(layers)
        ]
        for m in plan.moe_m:
            x = torch.empty((m, hidden), dtype=torch.float32).uniform_(-1, 1, generator=generator)
            x = x.to(device=device.torch_device, dtype=dtype)
            for distinct in distinct_grid(m, n_experts, top_k):
                host_routings = [forced_routing(m, distinct, n_experts, top_k, generator) for _ in range(8)]
                counts = [torch.bincount(r.reshape(-1), minlength=n_experts).tolist() for r in host_routings]
                routings = [r.to(device.torch_device) for r in host_routings]
                call = _rotating_block(blocks, x, routings, counts)

                call()
                timer.sync()
                one = timer.time_once(call, 1)
                inner = batch_calls(one, plan.min_timed_s, distinct, device.is_gpu)
                if size_class == "large":
                    inner = min(inner, max(1, len(blocks)))  # never return to a layer while it may be cached
                sample = timer.measure(call, inner=inner, repeats=plan.moe_repeats, warmup=1)
                rows.append(
                    {
                        "size_class": size_class,
                        "dtype": dtype_name,
                        "m": m,
                        "distinct": distinct,
                        "slots": m * top_k,
                        "hidden": hidden,
                        "width": width,
                        "n_experts": n_experts,
                        "top_k": top_k,
                        "expert_bytes": blocks[0].expert_bytes,
                        "layers": layers,
                        "median_s": sample.median_s,
                        "iqr_s": sample.iqr_s,
                    }
                )
                done += 1
                progress(done / total)
        del blocks
    progress(1.0)
    return rows
