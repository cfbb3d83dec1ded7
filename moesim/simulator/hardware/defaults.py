"""The documented empirical defaults for profiles nobody has calibrated: the ONE place these numbers live.

A datasheet gives peaks; the cost model also needs achieved fractions, cache behaviour, launch costs and a
GEMM efficiency curve. Until `moesim calibrate` measures them, each comes from a default below, stated with
the sentence that justifies it. The shipped datasheet profiles are generated from these defaults
(`datasheet_profiles.render_datasheet_profile`), and a test checks every shipped file still equals `default_empirical` of its
datasheet, so the files and this module cannot drift apart. After editing a default or a [datasheet] table,
run `python -m moesim.simulator.hardware.defaults` to regenerate the bundled files.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from moesim.simulator.hardware.sections import Datasheet, Empirical, ExpertGemmTerms, GemmEfficiency, NodeSpec


@dataclass(frozen=True)
class Defaults:
    """The knobs behind `default_empirical`; one instance per vendor (see `defaults_for`)."""

    memory_bandwidth_fraction: float
    cache_to_memory_bandwidth_ratio: float  # cache bandwidth / datasheet peak memory bandwidth
    cache_effective_fraction_unified: float  # usable share of a monolithic last-level cache
    cache_effective_fraction_split: float  # usable share when the cache is split into halves / dies
    bandwidth_ramp_us: float  # half-bandwidth transfer = achieved bandwidth × this time
    kernel_fixed_latency_us: float
    launch_eager_us: float
    launch_graph_gap_us: float
    graph_launch_us: float
    sync_us: float
    elementwise_bandwidth_fraction: float
    gemm_peak_efficiency: float  # large-M plateau of achieved / peak FLOP/s
    gemm_half_efficiency_m: float  # M at which a GEMM reaches half the plateau
    vector_flops_fraction: float  # non-GEMM arithmetic rate / dense bf16 peak
    eager_gap_over_graph_gap: float  # device gap between eager kernels / gap inside graph replay
    gemm_tile_m_expert: int  # rows of one M-tile of a grouped expert GEMM
    gemm_tile_m_dense: int  # rows of one M-tile of a dense GEMM
    expert_gemm: tuple[tuple[str, ExpertGemmTerms], ...]  # grouped expert GEMM terms per compute dtype


# The grouped expert GEMM terms (see JUSTIFICATIONS["expert_gemm"] for where each number comes from).
DEFAULT_EXPERT_GEMM: tuple[tuple[str, ExpertGemmTerms], ...] = (
    ("bf16", ExpertGemmTerms(fixed_us=1.0, per_expert_us=0.0, pair_flops_fraction=0.55)),
    ("fp8", ExpertGemmTerms(fixed_us=3.0, per_expert_us=0.0, pair_flops_fraction=0.6)),
)


# Each default with the sentence that justifies it; these sentences are copied into every datasheet profile.
NVIDIA = Defaults(
    memory_bandwidth_fraction=0.89,
    cache_to_memory_bandwidth_ratio=2.5,
    cache_effective_fraction_unified=0.80,
    cache_effective_fraction_split=0.55,
    bandwidth_ramp_us=1.0,
    kernel_fixed_latency_us=1.8,
    launch_eager_us=7.0,
    launch_graph_gap_us=1.5,
    graph_launch_us=10.0,
    sync_us=8.0,
    elementwise_bandwidth_fraction=1.0,
    gemm_peak_efficiency=0.75,
    gemm_half_efficiency_m=64.0,
    vector_flops_fraction=1.0 / 16.0,
    eager_gap_over_graph_gap=2.0,
    gemm_tile_m_expert=64,
    gemm_tile_m_dense=128,
    expert_gemm=DEFAULT_EXPERT_GEMM,
)
# A tiled GEMM rasterises its output tiles so the M-tiles sharing a weight panel run close together: about
# compute_units / 8 swizzle groups of 256 columns each, rounded to a power of two as swizzle widths are.
PANEL_COLUMNS_PER_GROUP = 256
PANEL_SWIZZLE_UNITS = 8
CPU_GEMM_PANEL_ROWS = 4096

JUSTIFICATIONS: dict[str, str] = {
    "memory_bandwidth_fraction": (
        "0.89 on NVIDIA parts: the median achieved share of the datasheet peak over the public STREAM-like "
        "measurements (one harness, Azure VMs: A100 0.79-0.86, H100 0.87-0.95, H200 0.83-0.93 for copy, "
        "triad and read-only; RTX 4090 read 0.91) and moesim's own H200 calibration (4282 of 4800 GB/s = 0.89)"
    ),
    "cache_bandwidth_gbps": (
        "reads that hit L2 run at roughly 2-3x the memory bandwidth on these parts, so 2.5x the datasheet "
        "peak memory bandwidth"
    ),
    "cache_effective_bytes": (
        "a streaming working set cannot use the whole nominal cache; where the L2 is split into two halves or "
        "dies (A100, H100, H200, B200) far-half data is slower and the usable capacity is about 0.55 of "
        "nominal, for a monolithic or memory-side cache about 0.8"
    ),
    "half_bandwidth_transfer_bytes": (
        "by Little's law a read needs bandwidth x latency bytes in flight to saturate; DRAM load latency on "
        "these GPUs is 0.5-1 us, so a single read reaches half the achieved bandwidth at about 1 us of "
        "streaming (achieved bandwidth x 1 us)"
    ),
    "kernel_fixed_latency_us": (
        "a tiny kernel that waits on its predecessor occupies the device about 1.8 us: moesim's H200 "
        "calibration replays a dependent chain of mixed tiny kernels in a CUDA graph at 1.80 us per kernel "
        "(one isolated tiny kernel between CUDA events: 1.10 us)"
    ),
    "launch_eager_us": (
        "launching one kernel from PyTorch eager mode costs the host 6-8 us (Python and ATen dispatch plus "
        "the driver call)"
    ),
    "launch_eager_gemm_us": (
        "not set (None): a GEMM launch is charged launch_eager_us like any kernel unless calibration measured "
        "it; on an H200 with torch 2.11 an eager aten::mm costs the host about 30 us (cuBLAS/cuBLASLt "
        "heuristics and sometimes a split-K plus reduce pair of kernels) against 8-15 us for elementwise ops, "
        "so `moesim calibrate` measures it (small x @ W queued behind a busy device) rather than assume it"
    ),
    "launch_graph_gap_us": (
        "inside CUDA-graph replay back-to-back kernels keep a gap of 1-2 us, about half the eager gap (moesim's "
        "H200 calibration found identical tiny kernels replayed with no gap beyond their fixed latency; the "
        "default keeps 1.5 us because the eager gap is tied to it, see launch_eager_gap_us)"
    ),
    "graph_launch_us": "launching a whole captured graph costs the host about 10 us",
    "sync_us": "a host-device synchronisation at the end of a step costs 5-10 us",
    "elementwise_bandwidth_fraction": (
        "1.0: small kernels' slower ramp-up is already charged by half_bandwidth_transfer_bytes and the "
        "fixed latency, so no extra penalty"
    ),
    "vector_flops_fraction": (
        "non-GEMM arithmetic (norms, softmax, top-k, recurrences) runs on the vector units, not the tensor "
        "cores: FP32 CUDA-core throughput is about 1/15 of the dense BF16 tensor peak on A100/H100/H200 "
        "(67 of 989 TF), taken as 1/16"
    ),
    "launch_eager_gap_us": (
        "between back-to-back eager kernels the device keeps about twice the graph-replay gap (the graph "
        "gap is about half the eager one, see launch_graph_gap_us)"
    ),
    "gemm_panel_rows": (
        "a tiled GEMM (cuBLAS / CUTLASS / Triton grouped ordering) re-reads a panel of its weight, not the "
        "whole matrix, between M-tiles: about compute_units / 8 swizzle groups x 256 columns, rounded to a "
        "power of two (4096 rows on 108-148 SM parts)"
    ),
    "gemm_tile_m_expert": (
        "grouped MoE kernels (vLLM / SGLang fused_moe) use 64-row M-tiles for batched tokens, so an expert's "
        "weights are re-read once per 64 tokens routed to it"
    ),
    "gemm_tile_m_dense": "dense cuBLAS-class GEMMs use 128-row M-tiles",
    "expert_gemm": (
        "a grouped expert GEMM (fused MoE) costs kernel_fixed_latency + fixed_us + U x per_expert_us + "
        "max(compute, its memory bytes' time + max(its cache re-reads' time, its (token, expert) FLOPs / "
        "(dense peak x pair_flops_fraction))); bf16: fixed_us 1.0, per_expert_us 0, pair_flops_fraction "
        "0.55; fp8: 3.0, 0, 0.6 (other dtypes use bf16's): the medians, rounded, of this cost model fitted "
        "to NVIDIA aiconfigurator-core 0.12.0's measured sglang 0.5.14 fused_moe_triton tables (balanced "
        "routing, moe_tp = moe_ep = 1, 160-490 rows each) on h100_sxm, h200_sxm and b200_sxm (bf16 fixed "
        "0.9 / 0.9 / 10.3 us, fraction 0.54 / 0.63 / 0.31; fp8 3.0 / 2.9 / 10.9 us, 1.0 / 0.64 / 0.27); "
        "per-expert overheads beyond the weights' bytes fitted at 0.00-0.03 us; the Triton kernel is the one "
        "moesim's fused style stands for. With it a fused MoE keeps growing with tokens after every expert "
        "is loaded (Qwen3-30B-A3B's shape on H200, bf16: +12% from M = 16 to 256 tokens and +50% to 1024, "
        "measured +12% and +33%; at 16,384 tokens 3.11 ms against 2.38 ms measured)"
    ),
    "gemm_efficiency": (
        "fraction of peak FLOP/s a GEMM reaches when compute-bound, e(M) = 0.75 M / (M + 64): tensor cores "
        "work on 64-row tiles, so a GEMM with few rows wastes most of each tile (about 1% of peak at M=1), "
        "half the plateau at one full tile (M=64), and cuBLAS-class kernels plateau near 70-75% of the dense "
        "peak (0.71 at M=1024); at small M the memory term dominates anyway"
    ),
}

# MLA attention's query tile (rows of new tokens × heads per latent KV head one kernel tile computes):
# FlashMLA's 64-row tiles (vLLM 0.33.0 v1/attention/backends/mla/flashmla.py packs max_query_len ×
# num_q_heads rows per KV head), and SGLang 0.5.23's default MLA backend on Hopper, FlashAttention-3, runs its
# 512-wide latent in 64-row tiles too (arg_groups/model_override_base.py get_default_attn_backend). A profile
# may set `mla_query_tile_rows` (0: not modelled, the MLA kernel's useful rows at the GEMM efficiency curve,
# as moesim priced it before the term; the ideal-reference profiles predate it).
MLA_QUERY_TILE_ROWS = 64

# Per-vendor overrides, each with its reason. Unknown vendors get the NVIDIA defaults.
_AMD_LAUNCH_SCALE = 1.5
VENDOR_DEFAULTS: dict[str, Defaults] = {
    "nvidia": NVIDIA,
    "amd": replace(
        NVIDIA,
        kernel_fixed_latency_us=NVIDIA.kernel_fixed_latency_us * _AMD_LAUNCH_SCALE,
        launch_eager_us=NVIDIA.launch_eager_us * _AMD_LAUNCH_SCALE,
        launch_graph_gap_us=NVIDIA.launch_graph_gap_us * _AMD_LAUNCH_SCALE,
        graph_launch_us=NVIDIA.graph_launch_us * _AMD_LAUNCH_SCALE,
        sync_us=NVIDIA.sync_us * _AMD_LAUNCH_SCALE,
        memory_bandwidth_fraction=0.775,
        gemm_peak_efficiency=0.55,
        vector_flops_fraction=0.125,
    ),
}
# A CPU profile comes from calibration; what calibration does not measure comes from these.
CPU = replace(NVIDIA, vector_flops_fraction=1.0)
VENDOR_JUSTIFICATIONS: dict[str, str] = {
    "amd": (
        "AMD override: the HIP/ROCm launch path, hipGraph replay and synchronisation are reported slower than "
        "CUDA's, so every launch and fixed-latency default is 1.5x the NVIDIA one; the same STREAM-like "
        "harness measured MI300X at 0.73-0.80 of its 5.3 TB/s peak (copy, mul, add, triad, read-only), so "
        "memory_bandwidth_fraction is their median, 0.775; published MI300X BF16 "
        "GEMM benchmarks reach roughly half of the datasheet peak, so the GEMM plateau is 0.55 instead of 0.75; "
        "MI300X vector FP32 is 163.4 of 1307.4 dense BF16 TF, so vector_flops_fraction is 1/8"
    ),
    "cpu": (
        "CPU: GEMMs and element-wise maths run on the same SIMD units, so vector_flops_fraction is 1; "
        "gemm_panel_rows is not measured on CPUs and stays 4096 (CPU BLAS blocks weights into cache-sized "
        "panels of comparable size)"
    ),
}

# The M grid on which the default GEMM curve is tabulated (interpolated in log M between points).
GEMM_CURVE_M_TOKENS: tuple[float, ...] = tuple(float(2**i) for i in range(14))  # 1 .. 8192

# Node defaults for a bare datasheet (bundled profiles state their own [node] values).
SCALE_UP_LATENCY_US = {"nvlink": 3.0, "xgmi": 4.0, "pcie": 5.0}
SCALE_OUT_LATENCY_US = 6.0
DEFAULT_SCALE_OUT_GBPS = 50.0  # one 400 Gb/s NIC per GPU
DEFAULT_GPUS_PER_NODE = 8
PCIE_LINK_MAX_GBPS = 64.0  # a scale-up link this slow is PCIe (Gen5 x16 = 64 GB/s one direction)
NODE_JUSTIFICATIONS: dict[str, str] = {
    "scale_up_latency_us": (
        "one small-message hop: about 3 us over NVLink (NCCL), 4 us over Infinity Fabric (RCCL), 5 us over "
        "PCIe peer-to-peer"
    ),
    "scale_out_latency_us": "one small-message hop over InfiniBand / RoCE through NCCL: about 6 us",
    "scale_out_bandwidth_gbps": "one 400 Gb/s NIC per GPU = 50 GB/s per GPU, one direction",
}


def defaults_for(vendor: str) -> Defaults:
    """The default knobs for a vendor ("nvidia", "amd", ...); unknown vendors get NVIDIA's."""
    return VENDOR_DEFAULTS.get(vendor.strip().lower(), NVIDIA)


def defaults_for_datasheet(datasheet: Datasheet) -> Defaults:
    """The default knobs for a device: CPU defaults for a CPU, else its vendor's."""
    return CPU if datasheet.device_kind == "cpu" else defaults_for(datasheet.vendor)


def gemm_panel_rows(datasheet: Datasheet) -> int:
    """Weight rows one tiled GEMM re-reads between M-tiles (see JUSTIFICATIONS["gemm_panel_rows"])."""
    if datasheet.device_kind == "cpu" or datasheet.compute_units < 1:
        return CPU_GEMM_PANEL_ROWS
    rows = datasheet.compute_units / PANEL_SWIZZLE_UNITS * PANEL_COLUMNS_PER_GROUP
    return int(2 ** round(math.log2(rows)))


def _facts(d: Defaults, datasheet: Datasheet, eager_gap_us: float) -> dict[str, Any]:
    return {
        "vector_flops_fraction": d.vector_flops_fraction,
        "launch_eager_gap_us": eager_gap_us,
        "gemm_panel_rows": gemm_panel_rows(datasheet),
        "gemm_tile_m_expert": d.gemm_tile_m_expert,
        "gemm_tile_m_dense": d.gemm_tile_m_dense,
        "expert_gemm": dict(d.expert_gemm),
    }


def execution_facts(datasheet: Datasheet, empirical: Empirical) -> dict[str, Any]:
    """The device's execution facts (`profile.EXECUTION_FACTS`) from its documented defaults."""
    d = defaults_for_datasheet(datasheet)
    return _facts(d, datasheet, d.eager_gap_over_graph_gap * empirical.launch_graph_gap_us)


def default_gemm_efficiency(defaults: Defaults = NVIDIA) -> GemmEfficiency:
    """e(M) = plateau · M / (M + M_half), tabulated on GEMM_CURVE_M_TOKENS and rounded to 4 decimals."""
    m = np.asarray(GEMM_CURVE_M_TOKENS)
    eff = defaults.gemm_peak_efficiency * m / (m + defaults.gemm_half_efficiency_m)
    return GemmEfficiency(m_tokens=GEMM_CURVE_M_TOKENS, efficiency=tuple(round(float(e), 4) for e in eff))


def cache_effective_fraction(datasheet: Datasheet, defaults: Defaults) -> float:
    """Usable share of the nominal last-level cache for a streaming working set."""
    if datasheet.cache_partitions > 1:
        return defaults.cache_effective_fraction_split
    return defaults.cache_effective_fraction_unified


def default_empirical(datasheet: Datasheet, vendor: str | None = None) -> Empirical:
    """The empirical section of an uncalibrated profile, from the datasheet and the documented defaults."""
    d = defaults_for(datasheet.vendor if vendor is None else vendor)
    achieved_gbps = datasheet.memory_bandwidth_gbps * d.memory_bandwidth_fraction
    graph_gap_us = round(d.launch_graph_gap_us, 3)
    return Empirical(
        memory_bandwidth_fraction=d.memory_bandwidth_fraction,
        cache_bandwidth_gbps=round(datasheet.memory_bandwidth_gbps * d.cache_to_memory_bandwidth_ratio, 3),
        cache_effective_bytes=float(
            round(datasheet.last_level_cache_bytes * cache_effective_fraction(datasheet, d))
        ),
        half_bandwidth_transfer_bytes=float(round(achieved_gbps * 1e9 * d.bandwidth_ramp_us * 1e-6)),
        kernel_fixed_latency_us=round(d.kernel_fixed_latency_us, 3),
        launch_eager_us=round(d.launch_eager_us, 3),
        launch_graph_gap_us=graph_gap_us,
        graph_launch_us=round(d.graph_launch_us, 3),
        sync_us=round(d.sync_us, 3),
        gemm_efficiency=default_gemm_efficiency(d),
        elementwise_bandwidth_fraction=d.elementwise_bandwidth_fraction,
        **_facts(d, datasheet, round(d.eager_gap_over_graph_gap * graph_gap_us, 3)),
    )


def default_assumption_notes(datasheet: Datasheet, vendor: str | None = None) -> tuple[str, ...]:
    """One line per defaulted parameter, `empirical.<param>: documented default — why`, for provenance."""
    vendor_key = (datasheet.vendor if vendor is None else vendor).strip().lower()
    notes = [
        f"empirical.{param}: documented default (moesim.simulator.hardware.defaults) - {why}"
        for param, why in JUSTIFICATIONS.items()
    ]
    if vendor_key in VENDOR_JUSTIFICATIONS:
        notes.append(f"empirical.*: {VENDOR_JUSTIFICATIONS[vendor_key]}")
    return tuple(notes)


def scale_up_link_kind(datasheet: Datasheet) -> str:
    """'pcie', 'xgmi' or 'nvlink', judged from the vendor and the link speed."""
    if datasheet.scale_up_link_gbps <= PCIE_LINK_MAX_GBPS:
        return "pcie"
    return "xgmi" if datasheet.vendor.strip().lower() == "amd" else "nvlink"


def default_node(datasheet: Datasheet) -> NodeSpec:
    """A node of 8 such GPUs joined by their datasheet scale-up link, one 400 Gb/s NIC per GPU."""
    return NodeSpec(
        gpus_per_node=DEFAULT_GPUS_PER_NODE,
        scale_up_bandwidth_gbps=datasheet.scale_up_link_gbps,
        scale_up_latency_us=SCALE_UP_LATENCY_US[scale_up_link_kind(datasheet)],
        scale_out_bandwidth_gbps=DEFAULT_SCALE_OUT_GBPS,
        scale_out_latency_us=SCALE_OUT_LATENCY_US,
    )


if __name__ == "__main__":  # pragma: no cover
    from moesim.simulator.hardware.datasheet_profiles import regenerate_bundled_profiles

    for written_path in regenerate_bundled_profiles():
        print(f"regenerated {written_path}", file=sys.stdout)
