"""The hardware profile: datasheet facts, empirical cost-model parameters, node layout and provenance.

Datasheet peaks and measured corrections live apart so a reader can see which numbers are facts and which
are fitted. Units are in the field names; `_gbps` means 1e9 bytes per second.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np


@dataclass(frozen=True)
class Datasheet:
    """Vendor facts for one accelerator (or, for a CPU, what calibration measured of it)."""

    device_name: str
    memory_bandwidth_gbps: float  # peak HBM/DRAM bandwidth
    memory_capacity_bytes: float
    last_level_cache_bytes: float  # L2 on GPUs (plus infinity cache on MI300X), LLC on CPUs
    peak_dense_tflops: dict[str, float]  # dtype -> dense (non-sparse) peak, e.g. {"bf16": 989, "fp8": 1979}
    compute_units: int = 0  # SMs / CUs / cores
    scale_up_link_gbps: float = 0.0  # per GPU, one direction


@dataclass(frozen=True)
class GemmEfficiency:
    """Achieved fraction of peak FLOP/s against the token count M of a GEMM, interpolated in log M."""

    m_tokens: tuple[float, ...]
    efficiency: tuple[float, ...]

    def at(self, m_tokens: np.ndarray | float) -> np.ndarray:
        log_m = np.log(np.maximum(np.asarray(m_tokens, dtype=float), 1.0))
        return np.interp(log_m, np.log(self.m_tokens), self.efficiency)


@dataclass(frozen=True)
class Empirical:
    """Parameters the cost model needs beyond the datasheet; measured, derived, or documented defaults."""

    memory_bandwidth_fraction: float  # achieved streaming bandwidth / datasheet peak
    cache_bandwidth_gbps: float  # bandwidth of reads that hit the last-level cache
    cache_effective_bytes: float  # usable cache capacity for a streaming working set
    half_bandwidth_transfer_bytes: float  # a single read of this size reaches half the streaming bandwidth
    kernel_fixed_latency_us: float  # device time of an empty / tiny kernel
    launch_eager_us: float  # host time to launch one kernel from an eager framework
    launch_graph_gap_us: float  # per-kernel gap inside graph replay
    graph_launch_us: float  # host time to launch one whole graph
    sync_us: float  # host-device synchronisation at the end of a step
    gemm_efficiency: GemmEfficiency
    elementwise_bandwidth_fraction: float = 1.0  # small fused elementwise kernels vs streaming bandwidth


@dataclass(frozen=True)
class NodeSpec:
    """How GPUs of this kind are joined in a node (used by the parallel model)."""

    gpus_per_node: int = 8
    scale_up_bandwidth_gbps: float = 0.0  # per GPU, one direction
    scale_up_latency_us: float = 0.0
    scale_out_bandwidth_gbps: float = 0.0  # per GPU, one direction
    scale_out_latency_us: float = 0.0


@dataclass(frozen=True)
class Provenance:
    """Where the numbers came from: datasheet, measured on a device, or derived from another profile."""

    kind: Literal["datasheet", "measured", "derived"]
    source: str
    date: str = ""
    software: dict[str, str] = field(default_factory=dict)
    assumptions: tuple[str, ...] = ()


@dataclass(frozen=True)
class HardwareProfile:
    """Everything the cost model knows about one accelerator."""

    name: str
    datasheet: Datasheet
    empirical: Empirical
    provenance: Provenance
    node: NodeSpec = field(default_factory=NodeSpec)
    fit_quality: dict[str, dict[str, float]] = field(default_factory=dict)  # parameter -> {r2, rmse, ...}

    @property
    def memory_bandwidth_bytes_per_s(self) -> float:
        """Achieved streaming bandwidth from device memory."""
        return self.datasheet.memory_bandwidth_gbps * 1e9 * self.empirical.memory_bandwidth_fraction

    def peak_flops_per_s(self, dtype: str) -> float:
        """Dense peak for `dtype`, falling back to bf16 where the device has no faster path for it."""
        peaks = self.datasheet.peak_dense_tflops
        tflops = peaks.get(dtype, peaks.get("bf16", next(iter(peaks.values()))))
        return tflops * 1e12
