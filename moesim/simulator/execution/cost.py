"""Time of one kernel on one device: a fixed latency plus a roofline with achieved efficiencies.

    time = fixed latency + max(compute, memory)
    compute = FLOPs / (peak[dtype] × gemm_efficiency[dtype](M)) for GEMM-like kernels (m_tokens > 0)
              (a one-row GEMM, M ≤ 1, is a matrix–vector product: see `GEMV_EFFICIENCY`; the curve is the
              dtype's own where the profile has one, `Empirical.gemm_efficiency_by_dtype`, else the shared one)
            = FLOPs / (peak[bf16] × vector_flops_fraction)      for everything else (the profile's fact)
    memory  = (HBM bytes + ramp) / achieved bandwidth + cache bytes / cache bandwidth

A grouped expert GEMM (a fused-MoE projection over U distinct experts, `Kernel.experts` = U) also pays a
fixed part, a part per distinct expert and a part per (token, expert) pair (`hardware.profile.ExpertGemmTerms`),
and computes whole M-tiles: its compute is at least its rows padded to `gemm_tile_m_expert` per expert at
the curve's plateau (`tile_compute_s`), however few tokens an expert has:

    time = fixed latency + expert fixed + U × per-expert
           + max(compute, memory bytes' time + max(cache bytes' time, pair FLOPs / pair rate))

The pair work (gathering each pair's activation row for every output tile, scaling and scattering its
output) runs in series with the weight stream from memory, so the kernel keeps growing with tokens once
every expert is loaded; it is never faster than its roofline compute. Both timers take this split from
`kernel_parts_s`.

An attention kernel over the KV cache (`Kernel.attention_units` work units of kind `attention_kind`) pays
the profile's attention terms in its fixed part, where it has them (`hardware.sections.AttentionTerms`):

    time = fixed latency + attention fixed + units × per-unit + max(compute, memory)

An element-wise kernel evaluating a transcendental function (`Kernel.transcendental_op`, e.g. SiLU, exp)
computes for at least its elements / the profile's element rate of that function
(`Empirical.transcendental_elements_per_s`; measured on a CPU, unbounded elsewhere):

    compute = max(FLOPs / vector rate, elements / element rate)

The ramp charges small transfers: a kernel moving x bytes from memory reaches x / (x + h) of the streaming
bandwidth, h = half_bandwidth_transfer_bytes, which is the same as adding h bytes (h / bandwidth = one
memory latency) to every kernel that reads memory; calibration fits h with exactly this formula.
Element-wise kernels stream at `elementwise_bandwidth_fraction` of the achieved bandwidth.
Everything here is pure and works on numpy arrays so the fast path can cost a whole plan at once.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from moesim.simulator.hardware.profile import HardwareProfile
from moesim.simulator.hardware.sections import ATTENTION_KERNEL_KINDS, TRANSCENDENTAL_OPS, expert_gemm_terms
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
    # dtype -> (fixed s, per-expert s, pair FLOP/s) of grouped expert GEMMs; empty: none in this pricing
    expert_gemm: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    # attention kind -> (fixed s, per-unit s) of attention kernels; empty: the roofline alone
    attention: dict[str, tuple[float, float]] = field(default_factory=dict)
    # attention kind -> share of the dense peak its arithmetic reaches; a kind left out: the GEMM curve
    attention_flops_fraction: dict[str, float] = field(default_factory=dict)
    # dtype -> (log M grid, efficiency) of GEMMs with a curve of their own; empty: the shared curve for all
    gemm_curves: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    # transcendental op -> elements/s its element-wise kernels evaluate; an op left out: unbounded
    transcendental: dict[str, float] = field(default_factory=dict)
    # rows of one M-tile a grouped expert GEMM pads each expert's tokens to; 0: no tiles (a CPU's BLAS)
    expert_tile_rows: float = 0.0

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
            expert_gemm=_expert_gemm_rates(hw, peaks),
            attention={
                kind: (terms.fixed_us * 1e-6, terms.per_unit_us * 1e-6)
                for kind, terms in (em.attention or {}).items()
            },
            attention_flops_fraction={
                kind: terms.flops_fraction
                for kind, terms in (em.attention or {}).items()
                if terms.flops_fraction > 0
            },
            gemm_curves={
                dtype: (
                    np.log(np.asarray(curve.m_tokens, dtype=float)),
                    np.asarray(curve.efficiency, dtype=float),
                )
                for dtype, curve in (em.gemm_efficiency_by_dtype or {}).items()
            },
            transcendental=dict(em.transcendental_elements_per_s or {}),
            expert_tile_rows=0.0 if hw.is_cpu else float(em.gemm_tile_m_expert or 0),
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

    def grouped_terms(
        self, experts: np.ndarray, dtypes: Sequence[str], dtype_index: np.ndarray | None = None
    ) -> GroupedTerms | None:
        """The grouped expert GEMM terms of kernels with `experts` distinct experts (0: not one), kernel i
        computing in dtypes[dtype_index[i]] (in dtypes[i] without an index); None when no kernel is one. A
        pricing without such terms gives neutral ones (no extra time, no pair bound), which still mark the
        kernels grouped, for their tiles (`tile_compute_s`)."""
        experts = np.asarray(experts, dtype=float)
        if not np.any(experts > 0):
            return None
        table = np.array(
            [self.expert_gemm.get(d) or self.expert_gemm.get("bf16") or (0.0, 0.0, math.inf) for d in dtypes],
            dtype=float,
        ).reshape(-1, 3)
        rows = table if dtype_index is None else table[np.asarray(dtype_index, dtype=np.int64)]
        grouped = experts > 0
        return GroupedTerms(
            is_grouped=grouped,
            extra_s=np.where(grouped, rows[:, 0] + experts * rows[:, 1], 0.0),
            pair_flops_per_s=np.where(grouped, rows[:, 2], np.inf),
        )

    def attention_extra_s(self, units: dict[str, np.ndarray]) -> np.ndarray | None:
        """Seconds the attention terms add to each kernel, given each kind's work units per kernel (0: not
        an attention kernel of that kind); None when this pricing has no attention terms."""
        if not self.attention:
            return None
        extra: np.ndarray | None = None
        for kind, kernel_units in units.items():
            u = np.asarray(kernel_units, dtype=float)
            fixed_s, per_unit_s = self.attention.get(kind, (0.0, 0.0))
            part = np.where(u > 0, fixed_s + u * per_unit_s, 0.0)
            extra = part if extra is None else extra + part
        return extra

    def attention_fractions(self, units: dict[str, np.ndarray]) -> np.ndarray | None:
        """Each kernel's attention arithmetic rate as a share of its peak (0: the GEMM efficiency curve),
        given each kind's work units per kernel; None when no kind here has a rate of its own."""
        if not self.attention_flops_fraction:
            return None
        fraction: np.ndarray | None = None
        for kind, kernel_units in units.items():
            share = np.where(np.asarray(kernel_units) > 0, self.attention_flops_fraction.get(kind, 0.0), 0.0)
            fraction = share if fraction is None else fraction + share
        return fraction

    def transcendental_s(self, elements: dict[str, np.ndarray]) -> np.ndarray | None:
        """Seconds each kernel's transcendental evaluation takes at the profile's element rates, given each
        op's elements per kernel (0: not a kernel of that op); None when this pricing has no such rate."""
        if not self.transcendental:
            return None
        seconds: np.ndarray | None = None
        for op, kernel_elements in elements.items():
            rate = self.transcendental.get(op)
            if rate is None:
                continue
            part = np.asarray(kernel_elements, dtype=float) / rate
            seconds = part if seconds is None else seconds + part
        return seconds

    def gemm_curve_index(
        self, dtypes: Sequence[str], dtype_index: np.ndarray | None = None
    ) -> np.ndarray | None:
        """Which efficiency curve each kernel's GEMM runs at — 0 the shared one, i + 1 the i-th of
        `gemm_curves` — kernel i computing in dtypes[dtype_index[i]] (in dtypes[i] without an index); None when
        no kernel's dtype has a curve of its own (every kernel on the shared curve)."""
        if not self.gemm_curves or not any(d in self.gemm_curves for d in dtypes):
            return None
        order = {dtype: i + 1 for i, dtype in enumerate(self.gemm_curves)}
        per_dtype = np.array([order.get(d, 0) for d in dtypes], dtype=np.int64)
        return per_dtype if dtype_index is None else per_dtype[np.asarray(dtype_index, dtype=np.int64)]

    def plateau_efficiency(self, curve_index: np.ndarray | None = None) -> np.ndarray | float:
        """The highest efficiency of each kernel's curve (`gemm_curve_index`; None: the shared curve's):
        what a full tile of a large GEMM reaches."""
        shared = float(np.max(self.gemm_eff))
        if curve_index is None:
            return shared
        plateaus = np.array([shared, *(float(np.max(eff)) for _, eff in self.gemm_curves.values())])
        return plateaus[np.asarray(curve_index, dtype=np.int64)]

    def gemm_efficiency(
        self, m_tokens: np.ndarray | float, curve_index: np.ndarray | None = None
    ) -> np.ndarray:
        """Achieved fraction of peak of a GEMM with M rows (M ≤ 1: a weight stream, see GEMV_EFFICIENCY), on
        the curve `curve_index` names per kernel (`gemm_curve_index`; None: the shared curve)."""
        log_m = np.log(np.maximum(np.asarray(m_tokens, dtype=float), GEMV_M_TOKENS))
        efficiency = _interpolated(log_m, self.gemm_m, self.gemm_eff)
        if curve_index is None:
            return efficiency
        for i, (grid_m, grid_eff) in enumerate(self.gemm_curves.values()):
            own = curve_index == i + 1
            if np.any(own):
                efficiency = np.where(own, _interpolated(log_m, grid_m, grid_eff), efficiency)
        return efficiency


def _interpolated(log_m: np.ndarray, grid_m: np.ndarray, grid_eff: np.ndarray) -> np.ndarray:
    """A curve's efficiency at log M, power-law between points, from the weight stream's at M = 1."""
    above = grid_m > math.log(GEMV_M_TOKENS)
    grid_m = np.concatenate([[math.log(GEMV_M_TOKENS)], grid_m[above]])
    grid_eff = np.concatenate([[GEMV_EFFICIENCY], grid_eff[above]])
    return np.exp(np.interp(log_m, grid_m, np.log(grid_eff)))


def _expert_gemm_rates(hw: HardwareProfile, peaks: dict[str, float]) -> dict[str, tuple[float, float, float]]:
    table = hw.empirical.expert_gemm or {}
    if not table:
        return {}
    out = {}
    for dtype, peak in peaks.items():
        terms = expert_gemm_terms(table, dtype)
        out[dtype] = (terms.fixed_us * 1e-6, terms.per_expert_us * 1e-6, peak * terms.pair_flops_fraction)
    return out


@dataclass(frozen=True)
class GroupedTerms:
    """Per-kernel arrays of the grouped expert GEMM terms; kernels that are not one have no extra cost."""

    is_grouped: np.ndarray
    extra_s: np.ndarray  # expert fixed + U × per-expert seconds
    pair_flops_per_s: np.ndarray  # rate of the (token, expert) arithmetic

    @classmethod
    def of(
        cls,
        experts: np.ndarray,
        peak_flops: np.ndarray,
        fixed_us: float,
        per_expert_us: float,
        pair_flops_fraction: float,
    ) -> GroupedTerms:
        """One set of terms for every grouped kernel (`experts` > 0) of these peaks: what a fit evaluates."""
        experts = np.asarray(experts, dtype=float)
        grouped = experts > 0
        return cls(
            is_grouped=grouped,
            extra_s=np.where(grouped, (fixed_us + experts * per_expert_us) * 1e-6, 0.0),
            pair_flops_per_s=np.where(
                grouped, np.asarray(peak_flops, dtype=float) * pair_flops_fraction, np.inf
            ),
        )


def compute_time_s(
    flops: np.ndarray | float,
    m_tokens: np.ndarray | float,
    peak_flops: np.ndarray | float,
    params: CostParams,
    gemm_curve: np.ndarray | None = None,
    attention_fraction: np.ndarray | None = None,
    transcendental_s: np.ndarray | None = None,
) -> np.ndarray:
    """Seconds of arithmetic: GEMMs at peak × efficiency(M) on their dtype's curve (`gemm_curve`, from
    `CostParams.gemm_curve_index`; None: the shared curve) — attention kernels with a rate of their own
    (`attention_fraction` > 0, `CostParams.attention_fractions`) at peak × that share — other kernels at
    the vector-unit rate, and never faster than their transcendental evaluation (`transcendental_s`, from
    `CostParams.transcendental_s`; None: none)."""
    flops_a = np.asarray(flops, dtype=float)
    m = np.asarray(m_tokens, dtype=float)
    is_gemm = m > 0
    peak = np.asarray(peak_flops, dtype=float)
    efficiency = params.gemm_efficiency(m, gemm_curve)
    if attention_fraction is not None:
        efficiency = np.where(attention_fraction > 0, attention_fraction, efficiency)
    rate = np.where(is_gemm, peak * efficiency, params.non_gemm_flops_per_s)
    seconds = flops_a / np.maximum(rate, 1.0)
    return seconds if transcendental_s is None else np.maximum(seconds, transcendental_s)


def tile_compute_s(
    flops: np.ndarray,
    m_tokens: np.ndarray,
    peak_flops: np.ndarray,
    params: CostParams,
    gemm_curve: np.ndarray | None = None,
) -> np.ndarray:
    """Seconds of a grouped expert GEMM's whole M-tiles: each expert's M rows padded to
    ⌈M / tile⌉ × tile rows (`CostParams.expert_tile_rows`), computed at the curve's plateau. A fused MoE
    kernel has no matrix–vector path: an expert with one token still runs a full tile on the tensor cores.
    That binds for 4-bit experts computed in bf16 (a tile's arithmetic outweighs their bytes), never for
    bf16 or fp8 ones: gpt-oss-120b's block on an H200 measures 614 / 617 / 621 µs (TensorRT-LLM) and 661 /
    664 / 665 µs (vLLM) at 1 / 1.5 / 2 tokens per expert (aiconfigurator-core 0.12.0, h200_sxm moe_perf,
    w4a16_mxfp4), flat, where pricing one token per expert as a weight stream made it 26% cheaper than two.
    Zero where there are no tiles (a CPU)."""
    tile = params.expert_tile_rows
    if tile <= 0:
        return np.zeros(np.shape(flops))
    m = np.maximum(np.asarray(m_tokens, dtype=float), 1e-9)
    padded = np.ceil(m / tile) * tile / m
    rate = np.asarray(peak_flops, dtype=float) * params.plateau_efficiency(gemm_curve)
    return np.asarray(flops, dtype=float) * padded / rate


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


def kernel_parts_s(
    flops: np.ndarray,
    m_tokens: np.ndarray,
    peak_flops: np.ndarray,
    hbm_bytes: np.ndarray,
    cache_bytes: np.ndarray,
    params: CostParams,
    grouped: GroupedTerms | None = None,
    attention_s: np.ndarray | None = None,
    gemm_curve: np.ndarray | None = None,
    attention_fraction: np.ndarray | None = None,
    transcendental_s: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(total, fixed, compute, memory-side) seconds of many kernels: total = fixed + max(compute,
    memory-side).

    The fixed part is the fixed latency, plus for a grouped expert GEMM its expert fixed and per-expert parts
    and for an attention kernel its attention terms (`attention_s`, `CostParams.attention_extra_s`). The
    memory side is the bytes' time; for a grouped expert GEMM it is the memory bytes' time plus the larger
    of the cache-served re-reads and the (token, expert) rows' work: both run on the SMs' load path per
    output tile, beside each other, but in series with the weights streaming from memory
    (`hardware.profile.ExpertGemmTerms`). `gemm_curve` names each GEMM's efficiency curve
    (`CostParams.gemm_curve_index`; None: the shared curve), `attention_fraction` the attention kernels'
    own arithmetic rates (`CostParams.attention_fractions`), `transcendental_s` the element-wise kernels'
    function evaluation (`CostParams.transcendental_s`)."""
    compute = compute_time_s(
        flops, m_tokens, peak_flops, params, gemm_curve, attention_fraction, transcendental_s
    )
    is_gemm = np.asarray(m_tokens) > 0
    memory = memory_time_s(hbm_bytes, cache_bytes, is_gemm, params)
    fixed = np.full(compute.shape, params.fixed_s)
    if grouped is not None:
        tiles = tile_compute_s(flops, m_tokens, peak_flops, params, gemm_curve)
        compute = np.where(grouped.is_grouped, np.maximum(compute, tiles), compute)
        from_memory = memory_time_s(hbm_bytes, 0.0, is_gemm, params)
        pair_s = np.asarray(flops, dtype=float) / grouped.pair_flops_per_s
        memory = np.where(grouped.is_grouped, from_memory + np.maximum(memory - from_memory, pair_s), memory)
        fixed = fixed + grouped.extra_s
    if attention_s is not None:
        fixed = fixed + attention_s
    return fixed + np.maximum(compute, memory), fixed, compute, memory


def kernel_times_s(
    flops: np.ndarray,
    m_tokens: np.ndarray,
    peak_flops: np.ndarray,
    hbm_bytes: np.ndarray,
    cache_bytes: np.ndarray,
    params: CostParams,
    grouped: GroupedTerms | None = None,
    attention_s: np.ndarray | None = None,
    gemm_curve: np.ndarray | None = None,
    attention_fraction: np.ndarray | None = None,
    transcendental_s: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(total, compute, memory-side) seconds of many kernels at once: total = serial + max(compute,
    memory-side), which is fixed + max(compute, memory) for every kernel but a grouped expert GEMM
    (`kernel_parts_s`)."""
    total, _, compute, memory = kernel_parts_s(
        flops,
        m_tokens,
        peak_flops,
        hbm_bytes,
        cache_bytes,
        params,
        grouped,
        attention_s,
        gemm_curve,
        attention_fraction,
        transcendental_s,
    )
    return total, compute, memory


def attention_units_by_kind(kernels: Sequence[Kernel]) -> dict[str, np.ndarray]:
    """Each attention kind's work units per kernel (0 where a kernel is not an attention kernel of it)."""
    return {
        kind: np.array([k.attention_units if k.attention_kind == kind else 0.0 for k in kernels], dtype=float)
        for kind in ATTENTION_KERNEL_KINDS
    }


def transcendental_elements_by_op(kernels: Sequence[Kernel]) -> dict[str, np.ndarray]:
    """Each transcendental op's elements per kernel (0 where a kernel does not evaluate it)."""
    return {
        op: np.array(
            [k.transcendental_elements if k.transcendental_op == op else 0.0 for k in kernels], dtype=float
        )
        for op in TRANSCENDENTAL_OPS
    }


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
        params.grouped_terms(np.array([kernel.experts]), [kernel.dtype]),
        params.attention_extra_s(attention_units_by_kind([kernel])),
        params.gemm_curve_index([kernel.dtype]),
        params.attention_fractions(attention_units_by_kind([kernel])),
        params.transcendental_s(transcendental_elements_by_op([kernel])),
    )
    return float(total[0])
