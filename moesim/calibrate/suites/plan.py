"""How big and how long each suite runs, by device and --quick; no torch here."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MIB = 2**20
GIB = 2**30


@dataclass(frozen=True)
class Plan:
    """Sizes and repeat counts for one calibration run."""

    quick: bool
    working_set_bytes: tuple[int, ...]  # warm read sweep (cache knee and plateaus)
    transfer_bytes: tuple[int, ...]  # cold single reads (bandwidth ramp)
    rounds: int  # interleaved rounds of the working-set sweep
    min_timed_s: float  # each timed batch lasts at least this long
    launch_counts: tuple[int, ...]  # kernels per batch for the dispatch / graph lines
    launch_repeats: int
    gemm_m: tuple[int, ...]
    gemm_shapes: tuple[tuple[int, int], ...]  # (K, N)
    gemm_repeats: int
    moe_m: tuple[int, ...]
    moe_small: tuple[int, int, int, int]  # hidden, expert width, experts, top-k
    moe_large: tuple[int, int, int, int]
    moe_repeats: int
    rotate_bytes: int  # rotating weight pools exceed this so every call reads from memory
    memory_budget_bytes: int  # largest single allocation a suite may make
    flush_bytes: int  # cold reads are preceded by reading this many bytes (≥ 2× the last-level cache)
    launch_gemm_mkn: tuple[int, int, int] = (1, 64, 64)  # x[M,K] @ W[K,N] whose eager host cost is timed
    # GEMMs per batch (GPU: ≤ 2 kernels each, queue-sized)
    launch_gemm_counts: tuple[int, ...] = (25, 50, 100)


def _geom(lo: float, hi: float, per_octave: float) -> tuple[int, ...]:
    n = max(round(float(np.log2(hi / lo)) * per_octave) + 1, 2)
    sizes = np.geomspace(lo, hi, n)
    return tuple(int(s) // 4096 * 4096 or 4096 for s in sizes)


def make_plan(is_gpu: bool, llc_bytes: float, memory_bytes: float, quick: bool) -> Plan:
    """Size the suites to the device: working sets from well inside the LLC to many times it."""
    llc = llc_bytes or (50 * MIB if is_gpu else 32 * MIB)
    if is_gpu:
        budget = int(min(0.25 * memory_bytes, 8 * GIB)) if memory_bytes else 4 * GIB
        top = min(max(64 * llc, 2 * GIB), budget)
        return Plan(
            quick=quick,
            working_set_bytes=_geom(llc / 32, top, 3 if quick else 5),
            transfer_bytes=_geom(16 * 1024, min(16 * llc, budget), 2 if quick else 3),
            rounds=3 if quick else 5,
            min_timed_s=0.002,
            launch_counts=(16, 64, 256) if quick else (16, 32, 64, 128, 256, 512),
            launch_repeats=7 if quick else 15,
            launch_gemm_mkn=(4, 2048, 768),  # a decode-sized projection: cuBLAS, maybe split-K + reduce
            launch_gemm_counts=(16, 64, 256) if quick else (16, 32, 64, 128, 256),
            gemm_m=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096),
            gemm_shapes=((4096, 4096), (7168, 2048))
            if quick
            else ((4096, 4096), (7168, 2048), (2048, 7168), (8192, 28672)),
            gemm_repeats=5 if quick else 9,
            moe_m=(1, 2, 4, 8, 16, 32, 64) if quick else (1, 2, 4, 8, 16, 32, 64, 128, 256),
            moe_small=(1024, 128, 32, 8),  # 768 KiB bf16 per expert, 24 MiB in all: the block stays in L2
            moe_large=(4096, 1536, 64, 8),  # 36 MiB bf16 per expert: a few experts overflow L2
            moe_repeats=5 if quick else 9,
            rotate_bytes=int(3 * llc),
            memory_budget_bytes=budget,
            flush_bytes=int(max(2 * llc, 32 * MIB)),
        )
    budget = int(min(0.15 * memory_bytes, 3 * GIB)) if memory_bytes else GIB
    top = min(max(4 * llc, 256 * MIB), budget, (1536 if quick else 3072) * MIB)
    return Plan(
        quick=quick,
        working_set_bytes=_geom(512 * 1024, top, 3 if quick else 4),
        transfer_bytes=_geom(64 * 1024, min(top, 256 * MIB), 1 if quick else 2),
        rounds=9 if quick else 11,
        # Short timed batches: on a shared machine most of them then fit between preemptions, and the median
        # is an uncontended one.
        min_timed_s=0.001,
        launch_counts=(25, 50, 100, 200) if quick else (25, 50, 100, 200, 400),
        launch_repeats=31 if quick else 41,
        launch_gemm_mkn=(1, 64, 64),  # tiny, so the time is the matmul's dispatch, not its arithmetic
        launch_gemm_counts=(25, 50, 100, 200) if quick else (25, 50, 100, 200, 400),
        # Every M up to 8 (CPU GEMM kernels step there: M = 4 takes as long as M = 8), then octaves.
        gemm_m=(1, 2, 3, 4, 5, 6, 7, 8, 16, 32, 64, 128, 256, 512)
        if quick
        else (1, 2, 3, 4, 5, 6, 7, 8, 16, 32, 64, 128, 256, 512, 1024, 2048),
        # Wide and narrow weights (N = 256, 512 outputs: an MoE expert's projections), so the one-row
        # stream rate and the per-M efficiencies are medians over both kinds.
        gemm_shapes=((1024, 1024), (1024, 2816), (512, 256), (2048, 512))
        if quick
        else ((1024, 1024), (1024, 2816), (2816, 1024), (2048, 4096), (512, 256), (2048, 512)),
        gemm_repeats=7 if quick else 9,
        moe_m=(1, 2, 4, 8, 16) if quick else (1, 2, 4, 8, 16, 32, 64),
        moe_small=(256, 128, 16, 2),  # 384 KiB fp32 per expert: all of them fit in L2/L3
        moe_large=(1024, 512, 32, 2),  # 6 MiB fp32 per expert: a handful exceed L2
        moe_repeats=5 if quick else 9,
        rotate_bytes=int(2 * llc),
        memory_budget_bytes=budget,
        flush_bytes=int(max(2 * llc, 32 * MIB)),
    )
