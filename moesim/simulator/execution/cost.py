"""Time of one kernel on one device: a fixed latency plus a roofline with achieved efficiencies.

    time = fixed latency + max(compute, memory)
    compute = FLOPs / (peak[dtype] × gemm_efficiency(M))        for GEMM-like kernels (m_tokens > 0)
              (a one-row GEMM, M ≤ 1, is a matrix–vector product: see `stream_efficiency`)
            = FLOPs / (peak[bf16] × vector_flops_fraction)      for everything else (the profile's fact)
    memory  = (HBM bytes + ramp) / achieved bandwidth + cache bytes / cache bandwidth

The ramp charges small transfers: a kernel moving x bytes from memory reaches x / (x + h) of the streaming
bandwidth, h = half_bandwidth_transfer_bytes, which is the same as adding h bytes (h / bandwidth = one
memory latency) to every kernel that reads memory; calibration fits h with exactly this formula.
Element-wise kernels stream at `elementwise_bandwidth_fraction` of the achieved bandwidth.
Everything here is pure and works on numpy arrays so the fast path can cost a whole plan at once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from moesim.simulator.hardware.profile import HardwareProfile
from moesim.simulator.plan.kernels import Kernel

# A GEMM with one row uses each weight once (0.5 FLOP per fp32 byte, 1 per bf16 byte: far below any
# device's ridge point), so it is a weight stream whose arithmetic never binds. The calibrated efficiency
# at M = 1 is the calibration GEMM's own weight stream (plus its per-call overheads) expressed in FLOP/s;
# charging it again as compute made every M = 1 GEMM cost max(its bytes at the calibration shape's
# streaming rate, its bytes at the memory term's rate) instead of the memory term alone. Between M = 1 and
# the next calibrated M the efficiency is interpolated (log e against log M) from this stream value.
GEMV_EFFICIENCY = 1.0
GEMV_M_TOKENS = 1.0


@dataclass(frozen=True)
class CostParams:
    """The profile's numbers in the units the formulas use (seconds, bytes, bytes per second)."""

    fixed_s: float
    memory_bytes_per_s: float
    half_bandwidth_bytes: float
    cache_bytes_per_s: float
    cache_capacity_bytes: float
    elementwise_fraction: float
    gemm_m: np.ndarray
    gemm_eff: np.ndarray
    peak_flops: dict[str, float]
    non_gemm_flops_per_s: float

    @classmethod
    def from_hardware(cls, hw: HardwareProfile) -> CostParams:
        em = hw.empirical
        peaks = {
            dtype: hw.peak_flops_per_s(dtype)
            for dtype in ("bf16", "fp16", "fp8", "fp32", *hw.datasheet.peak_dense_tflops)
        }
        return cls(
            fixed_s=em.kernel_fixed_latency_us * 1e-6,
            memory_bytes_per_s=hw.memory_bandwidth_bytes_per_s,
            half_bandwidth_bytes=em.half_bandwidth_transfer_bytes,
            cache_bytes_per_s=em.cache_bandwidth_gbps * 1e9,
            cache_capacity_bytes=em.cache_effective_bytes,
            elementwise_fraction=em.elementwise_bandwidth_fraction,
            gemm_m=np.log(np.asarray(em.gemm_efficiency.m_tokens, dtype=float)),
            gemm_eff=np.asarray(em.gemm_efficiency.efficiency, dtype=float),
            peak_flops=peaks,
            non_gemm_flops_per_s=hw.peak_flops_per_s("bf16") * float(em.vector_flops_fraction or 0.0),
        )

    @classmethod
    def for_gemms(
        cls,
        fixed_s: float,
        memory_bytes_per_s: float,
        half_bandwidth_bytes: float,
        gemm_m_tokens: np.ndarray,
        gemm_efficiency: np.ndarray,
        peak_flops_per_s: float,
    ) -> CostParams:
        """Parameters that price GEMMs (m_tokens > 0, no cache reads) exactly as a profile with this
        efficiency curve would: what calibration fits the curve through. Cache and vector-unit fields unused."""
        return cls(
            fixed_s=fixed_s,
            memory_bytes_per_s=memory_bytes_per_s,
            half_bandwidth_bytes=half_bandwidth_bytes,
            cache_bytes_per_s=math.inf,
            cache_capacity_bytes=0.0,
            elementwise_fraction=1.0,
            gemm_m=np.log(np.asarray(gemm_m_tokens, dtype=float)),
            gemm_eff=np.asarray(gemm_efficiency, dtype=float),
            peak_flops={"bf16": peak_flops_per_s},
            non_gemm_flops_per_s=peak_flops_per_s,  # unused: these parameters price GEMMs only
        )

    def peak(self, dtype: str) -> float:
        return self.peak_flops.get(dtype, self.peak_flops["bf16"])

    def gemm_efficiency(self, m_tokens: np.ndarray | float) -> np.ndarray:
        """Achieved fraction of peak of a GEMM with M rows (M ≤ 1: a weight stream, see GEMV_EFFICIENCY)."""
        log_m = np.log(np.maximum(np.asarray(m_tokens, dtype=float), GEMV_M_TOKENS))
        grid_m, grid_eff = self.gemm_m, self.gemm_eff
        above = grid_m > math.log(GEMV_M_TOKENS)
        grid_m = np.concatenate([[math.log(GEMV_M_TOKENS)], grid_m[above]])
        grid_eff = np.concatenate([[GEMV_EFFICIENCY], grid_eff[above]])
        return np.exp(np.interp(log_m, grid_m, np.log(grid_eff)))


def compute_time_s(
    flops: np.ndarray | float,
    m_tokens: np.ndarray | float,
    peak_flops: np.ndarray | float,
    params: CostParams,
) -> np.ndarray:
    """Seconds of arithmetic: GEMMs at peak × efficiency(M), other kernels at the vector-unit rate."""
    flops_a = np.asarray(flops, dtype=float)
    m = np.asarray(m_tokens, dtype=float)
    is_gemm = m > 0
    rate = np.where(
        is_gemm, np.asarray(peak_flops, dtype=float) * params.gemm_efficiency(m), params.non_gemm_flops_per_s
    )
    return flops_a / np.maximum(rate, 1.0)


def memory_time_s(
    hbm_bytes: np.ndarray | float,
    cache_bytes: np.ndarray | float,
    is_gemm: np.ndarray | bool,
    params: CostParams,
) -> np.ndarray:
    """Seconds of data movement: memory bytes (plus the small-transfer ramp) and cache-served bytes."""
    hbm = np.asarray(hbm_bytes, dtype=float)
    bandwidth = np.where(
        is_gemm, params.memory_bytes_per_s, params.memory_bytes_per_s * params.elementwise_fraction
    )
    ramp = np.where(hbm > 0, params.half_bandwidth_bytes, 0.0)
    return (hbm + ramp) / bandwidth + np.asarray(cache_bytes, dtype=float) / params.cache_bytes_per_s


def kernel_times_s(
    flops: np.ndarray,
    m_tokens: np.ndarray,
    peak_flops: np.ndarray,
    hbm_bytes: np.ndarray,
    cache_bytes: np.ndarray,
    params: CostParams,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(total, compute, memory) seconds of many kernels at once; total = fixed + max(compute, memory)."""
    compute = compute_time_s(flops, m_tokens, peak_flops, params)
    memory = memory_time_s(hbm_bytes, cache_bytes, np.asarray(m_tokens) > 0, params)
    return params.fixed_s + np.maximum(compute, memory), compute, memory


def kernel_time_s(
    kernel: Kernel, hw: HardwareProfile | CostParams, hbm_bytes: float, cache_bytes: float = 0.0
) -> float:
    """Seconds one kernel takes when `hbm_bytes` come from memory and `cache_bytes` from the cache."""
    params = hw if isinstance(hw, CostParams) else CostParams.from_hardware(hw)
    total, _, _ = kernel_times_s(
        np.array([kernel.flops]),
        np.array([kernel.m_tokens]),
        np.array([params.peak(kernel.dtype)]),
        np.array([hbm_bytes]),
        np.array([cache_bytes]),
        params,
    )
    return float(total[0])
