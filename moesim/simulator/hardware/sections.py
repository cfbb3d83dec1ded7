"""The sections of a hardware profile as data: datasheet facts, the GEMM efficiency curve and grouped expert
GEMM terms, the empirical cost-model parameters (with the execution facts), node links and provenance.

Pure data with no reading, writing or defaults: `profile.HardwareProfile` holds one of each, `defaults`
builds the documented ones. Units are in the field names; `_gbps` means 1e9 bytes per second.
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
    vendor: str = ""  # "nvidia", "amd", "intel", ...: selects per-vendor defaults in assumptions.py
    device_kind: Literal["gpu", "cpu"] = "gpu"  # a CPU profile comes from calibration, never a datasheet
    cache_partitions: int = 1  # halves / dies the last-level cache is split into (A100/H100: 2)


@dataclass(frozen=True)
class GemmEfficiency:
    """Achieved fraction of peak FLOP/s against the token count M of a GEMM.

    Interpolated as a power law between points (log e linear in log M), so compute time M / e(M) never falls
    between two points whose compute times do not.
    """

    m_tokens: tuple[float, ...]
    efficiency: tuple[float, ...]

    def at(self, m_tokens: np.ndarray | float) -> np.ndarray:
        log_m = np.log(np.maximum(np.asarray(m_tokens, dtype=float), 1.0))
        return np.exp(np.interp(log_m, np.log(self.m_tokens), np.log(self.efficiency)))


@dataclass(frozen=True)
class ExpertGemmTerms:
    """What one grouped expert GEMM (a fused-MoE projection over U distinct experts) costs, for one dtype.

        time = kernel_fixed_latency + fixed_us + U × per_expert_us + memory time of its bytes
               + its (token, expert) FLOPs / (peak[dtype] × pair_flops_fraction)

    The weights of the U experts are in the memory term (read once, repeats per M-tile from the cache); the
    per-(token, expert) arithmetic is charged in series with them, not hidden under them: a grouped kernel
    with a few rows per expert does not overlap its MMA work with the weight stream, so its time keeps
    growing with tokens after every expert is loaded. Defaults and their sources: `hardware.defaults`.
    """

    fixed_us: float  # device time of one launch beyond kernel_fixed_latency (routing alignment, tactic floor)
    per_expert_us: float  # device time per distinct expert beyond its weight bytes
    pair_flops_fraction: float  # rate of the (token, expert) rows' arithmetic / dense peak of the dtype


@dataclass(frozen=True)
class AttentionTerms:
    """What one attention kernel over the KV cache costs beyond its roofline, for one kind of kernel
    (`gqa`: FlashAttention-style grouped-query decode and verification; `mla`: FlashMLA-style latent
    attention; `gqa_prefill`: causal grouped-query attention of prefill chunks; `mla_prefill`: causal
    multi-head attention of MLA prefill chunks over their decompressed keys and values):

        time = kernel_fixed_latency + fixed_us + work units × per_unit_us + max(compute, memory)
        compute = FLOPs / (peak[dtype] × flops_fraction)    (flops_fraction 0: the GEMM efficiency curve)

    A work unit is one (sequence, KV head, query tile): the block of queries the kernel schedules on its own
    and that streams its sequence's cache (`plan.attention.attention_work_units`). `fixed_us` is the kernel's
    own floor beyond an empty launch (split-KV scheduling metadata and the combine of partial softmaxes, run
    inside the attention op); `per_unit_us` is the device time each unit adds beyond its bytes (its
    prologue, softmax bookkeeping and output write), spread over the SMs. None (the datasheet default):
    neither is modelled, the roofline alone, as moesim priced attention before the term existed.
    `flops_fraction` is the share of the dense peak the kernel's arithmetic reaches (its two GEMMs with the
    softmax, masking and rescaling between them), fitted where compute binds — prefill of long prompts —
    and 0 (the GEMM efficiency curve at the kernel's rows) for decode kinds, whose rows never identify it.
    """

    fixed_us: float
    per_unit_us: float
    flops_fraction: float = 0.0


ATTENTION_KERNEL_KINDS = ("gqa", "mla", "gqa_prefill", "mla_prefill")

# Element-wise functions whose evaluation, not their bytes or a few FLOPs, sets a kernel's time on a CPU
# (`Empirical.transcendental_elements_per_s`): SiLU (x·sigmoid x), exp (softmax's) and rsqrt (RMSNorm's).
TRANSCENDENTAL_OPS = ("silu", "exp", "rsqrt")
# Bounds of a measured element rate (elements/s): above 10^15 no device evaluates a function per element.
MAX_TRANSCENDENTAL_ELEMENTS_PER_S = 1e15


EXPERT_GEMM_FALLBACK_DTYPE = "bf16"


def expert_gemm_terms(table: dict[str, ExpertGemmTerms], dtype: str) -> ExpertGemmTerms:
    """The terms of `dtype`, else of bf16 (the tensor-core path every other dtype borrows), else the first."""
    if dtype in table:
        return table[dtype]
    return table.get(EXPERT_GEMM_FALLBACK_DTYPE) or next(iter(table.values()))


EXECUTION_FACTS = (
    "vector_flops_fraction",
    "launch_eager_gap_us",
    "gemm_panel_rows",
    "gemm_tile_m_expert",
    "gemm_tile_m_dense",
    "expert_gemm",
)


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
    # Host time to launch one GEMM (cuBLAS/cuBLASLt path) from eager torch; None = same as launch_eager_us.
    launch_eager_gemm_us: float | None = None
    # Execution facts of the device (documented per device kind and vendor in hardware.defaults; a profile
    # that leaves one out gets its device's default when the profile is built, see `HardwareProfile`).
    vector_flops_fraction: float | None = None  # non-GEMM arithmetic rate / dense bf16 peak
    launch_eager_gap_us: float | None = None  # device gap between back-to-back eager kernels
    gemm_panel_rows: int | None = None  # weight rows a tiled GEMM's M-tiles re-read close together
    gemm_tile_m_expert: int | None = None  # rows of one M-tile in grouped expert GEMMs
    gemm_tile_m_dense: int | None = None  # rows of one M-tile in dense GEMMs
    # MLA attention's query tile rows; None = hardware.defaults.MLA_QUERY_TILE_ROWS, 0 = not modelled.
    mla_query_tile_rows: int | None = None
    # Grouped expert GEMM terms per compute dtype (see ExpertGemmTerms); None = the documented defaults.
    expert_gemm: dict[str, ExpertGemmTerms] | None = None
    # Attention kernel terms per kind, `gqa` / `mla` (see AttentionTerms); None or a kind left out = the
    # roofline alone (the datasheet default).
    attention: dict[str, AttentionTerms] | None = None
    # GEMM efficiency curves of their own per compute dtype (e.g. fp8, whose kernels reach a different share
    # of their peak than bf16's); a dtype left out, or None (the datasheet default), uses `gemm_efficiency`.
    gemm_efficiency_by_dtype: dict[str, GemmEfficiency] | None = None
    # Elements per second an element-wise kernel of each TRANSCENDENTAL_OPS function evaluates (one core's
    # SIMD evaluation of the function, measured in cache by the memory suite on a CPU); an element-wise
    # kernel takes at least its elements / this rate. None or an op left out (the datasheet default, every
    # GPU): unbounded, the kernel priced by its bytes and vector FLOPs alone.
    transcendental_elements_per_s: dict[str, float] | None = None

    def gemm_curve(self, dtype: str) -> GemmEfficiency:
        """The efficiency curve GEMMs computing in `dtype` run at: their own, else the shared one."""
        return (self.gemm_efficiency_by_dtype or {}).get(dtype, self.gemm_efficiency)


@dataclass(frozen=True)
class AllToAllTerms:
    """What an expert-parallel all-to-all costs in one mode of the engine's kernel (DeepEP's `low_latency` or
    `normal`), per phase: a MoE layer's dispatch (tokens to their experts' ranks) and its combine (the
    experts' outputs back):

        time = <phase>_fixed_us + bytes of the busiest rank / <phase>_bandwidth_gbps

    The bytes are those moesim's plan counts (`plan.layout.moe_traffic`: one copy of a token per distinct
    remote rank its experts live on, the larger of sent and received), so the bandwidth is the kernel's
    achieved rate in those bytes, not the link's. `fixed_us` is the kernel's own time with almost nothing
    to move (its launch, the rank-to-rank signalling and the layout it computes). Fitted to an engine's
    measured dispatch / combine (`calibrate.fits.silicon.a2a_fit`) over the GPUs of one node; across nodes
    the bytes bound off the node take the achieved scale-out link (`execution.collectives`).
    """

    dispatch_fixed_us: float
    dispatch_bandwidth_gbps: float
    combine_fixed_us: float
    combine_bandwidth_gbps: float


# DeepEP's two modes: `low_latency` for graph-replayed decode and verification steps, `normal` for steps that
# carry prefill (SGLang 0.5.23 `layers/moe/utils.DeepEPMode.resolve`: normal when a batch extends; its
# decode CUDA-graph runner captures with is_extend_in_batch False, `decode_cuda_graph_runner.py`).
ALL_TO_ALL_MODES = ("low_latency", "normal")
AllToAllMode = Literal["low_latency", "normal"]


@dataclass(frozen=True)
class NodeSpec:
    """How GPUs of this kind are joined in a node (used by the parallel model)."""

    gpus_per_node: int = 8
    scale_up_bandwidth_gbps: float = 0.0  # per GPU, one direction
    scale_up_latency_us: float = 0.0
    scale_out_bandwidth_gbps: float = 0.0  # per GPU, one direction
    scale_out_latency_us: float = 0.0
    # The expert-parallel all-to-all per mode (see AllToAllTerms); None or a mode left out (the datasheet
    # default): priced as a direct all-to-all on the links, as moesim did before the term existed.
    all_to_all: tuple[tuple[AllToAllMode, AllToAllTerms], ...] | None = None

    def all_to_all_terms(self, mode: AllToAllMode) -> AllToAllTerms | None:
        """The all-to-all terms of `mode`, None when the profile has none for it."""
        return dict(self.all_to_all or ()).get(mode)


@dataclass(frozen=True)
class Provenance:
    """Where the numbers came from: datasheet, measured on a device, or derived from another profile."""

    kind: Literal["datasheet", "measured", "derived", "silicon"]  # silicon: fitted to measured kernel tables
    source: str
    date: str = ""
    software: dict[str, str] = field(default_factory=dict)
    assumptions: tuple[str, ...] = ()
