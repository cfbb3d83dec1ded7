"""`moe_perf` → the grouped expert GEMM terms (fixed + per distinct expert + per (token, expert)) per dtype.

Each row is one fused-MoE call on one rank: `num_tokens` tokens, each routed to `topk` of `num_experts`
experts of `hidden_size` × `inter_size`, split `moe_tp_size` ways in width and `moe_ep_size` ways in
experts. moesim prices it with its own plan and cost model: the expert alignment, the two grouped GEMMs
with the activation between them, and the combine (`plan.ffn`, `execution.cost`), cache warm as in a
repeated microbenchmark, in graph replay.

Tokens → distinct experts. The database routes tokens `balanced` or by a power law (`power_law_1.01`,
`power_law_1.2`). aiconfigurator-core's wheel does not ship its collector, so only the balanced rows are
used, with the distinct count the balanced rule implies: the T·k assignments spread evenly over the E
experts, so one rank holding E/ep of them sees T·k/ep assignments on min(E/ep, ⌈T·k/ep⌉) distinct experts.
The tables bear this out: a balanced row's time rises with tokens while T·k < E and plateaus at T·k = E
(e.g. h200_sxm/trtllm 1.3.0rc20, 7168 × 2048, 256 experts top-8: 1.36 ms at 16 tokens, 2.64 ms at 32, then
flat, 2.66 ms at 64). Power-law rows are left out (their distinct count cannot be recovered without the
collector's sampler), and so are rows faster than reading their distinct experts' weights at the
datasheet's peak bandwidth (no routing could make them so; seen in sglang's 7168 × 2048 fp8 rows).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import cache

import numpy as np
from scipy.optimize import least_squares

from moesim.calibrate.fits.silicon.holdout import FitQuality, held_out_mask
from moesim.simulator.execution import fastpath
from moesim.simulator.execution.cost import CostParams, GroupedTerms, kernel_times_s
from moesim.simulator.execution.launch import LaunchParams
from moesim.simulator.hardware.profile import (
    EXPERT_GEMM_MAX_FIXED_US,
    EXPERT_GEMM_MAX_PER_EXPERT_US,
    HardwareProfile,
)
from moesim.simulator.hardware.sections import ExpertGemmTerms
from moesim.simulator.models.catalogue import load_model
from moesim.simulator.models.layers import with_layer_count
from moesim.simulator.models.spec import ModelSpec
from moesim.simulator.plan import ffn
from moesim.simulator.plan.blocks import PlanContext
from moesim.simulator.plan.step import Segment, StepPlan

# The database's MoE dtypes that moesim's weight formats express, and the compute dtype each is fitted as.
MOE_DTYPES = {"bfloat16": ("bf16", "bf16"), "fp8_block": ("fp8", "fp8")}
BALANCED = "balanced"
MAX_ROWS_PER_DTYPE = 1200  # a seeded sample: the fit's cost is linear in rows, its answer barely moves
SAMPLE_SEED = 21


@cache
def _base_spec() -> ModelSpec:
    return with_layer_count(load_model("qwen3-30b-a3b"), 1)


def row_shape(hidden: int, inter: int, experts: int, top_k: int, tp: int, ep: int, fmt: str) -> ModelSpec:
    """A one-layer MoE of the row's per-rank shape (width inter / tp, every expert; EP picks the rank's share)."""
    return replace(
        _base_spec(),
        name=f"silicon-moe-{hidden}x{inter // tp}-{experts}e-top{top_k}",
        hidden=hidden,
        expert_width=inter // tp,
        n_experts=experts,
        top_k=top_k,
        n_shared_experts=0,
        shared_expert_width=0,
        expert_weight_format=fmt,
    )


def balanced_rank_work(tokens: int, experts: int, top_k: int, ep: int) -> tuple[float, float]:
    """(distinct experts, token-expert assignments) on one rank under the balanced rule (module docstring)."""
    assignments = tokens * top_k / ep
    distinct = min(experts // ep, max(1, math.ceil(assignments)))
    return float(distinct), max(assignments, float(distinct))


@dataclass(frozen=True)
class Components:
    """Every row's fused-MoE kernels as flat arrays (the grouped GEMMs' terms left open), so a fit prices all
    rows through `execution.cost.kernel_times_s` at once for each candidate set of terms."""

    params: CostParams
    row: np.ndarray  # the row each kernel belongs to
    flops: np.ndarray
    m_tokens: np.ndarray
    peaks: np.ndarray
    hbm_bytes: np.ndarray
    cache_bytes: np.ndarray
    experts: np.ndarray  # per kernel: distinct experts of a grouped GEMM, else 0
    gemm_curve: np.ndarray  # per kernel: its GEMM efficiency curve (`CostParams.gemm_curve_index`; 0 shared)
    gaps_s: np.ndarray  # per row: the graph-replay gaps between its kernels
    weight_floor_s: np.ndarray  # per row: the distinct experts' weights at the datasheet peak bandwidth

    def predict_s(self, terms: ExpertGemmTerms) -> np.ndarray:
        grouped = GroupedTerms.of(
            self.experts, self.peaks, terms.fixed_us, terms.per_expert_us, terms.pair_flops_fraction
        )
        total, _, _ = kernel_times_s(
            self.flops,
            self.m_tokens,
            self.peaks,
            self.hbm_bytes,
            self.cache_bytes,
            self.params,
            grouped,
            gemm_curve=self.gemm_curve,
        )
        return np.bincount(self.row, weights=total, minlength=self.gaps_s.size) + self.gaps_s

    def subset(self, keep: np.ndarray) -> Components:
        rows = np.nonzero(keep)[0]
        renumber = np.full(keep.size, -1)
        renumber[rows] = np.arange(rows.size)
        kernels = keep[self.row]
        return Components(
            self.params,
            renumber[self.row[kernels]],
            self.flops[kernels],
            self.m_tokens[kernels],
            self.peaks[kernels],
            self.hbm_bytes[kernels],
            self.cache_bytes[kernels],
            self.experts[kernels],
            self.gemm_curve[kernels],
            self.gaps_s[keep],
            self.weight_floor_s[keep],
        )


def row_components(
    hw: HardwareProfile,
    hidden: np.ndarray,
    inter: np.ndarray,
    experts: np.ndarray,
    top_k: np.ndarray,
    tp: np.ndarray,
    ep: np.ndarray,
    tokens: np.ndarray,
    fmt: str,
) -> Components:
    """Every row's fused MoE as moesim plans it (alignment, grouped GEMMs, activation, combine), its cache
    traffic from the fast path's LRU pass, warm as in a repeated microbenchmark."""
    params = CostParams.from_hardware(hw)
    gap_s = LaunchParams.from_hardware(hw, "graph").gap_s
    parts: dict[str, list[np.ndarray]] = {
        k: [] for k in ("row", "flops", "m", "peaks", "hbm", "cache", "experts", "curve")
    }
    gaps = np.zeros(tokens.size)
    floor = np.zeros(tokens.size)
    peak_bytes_per_s = hw.datasheet.memory_bandwidth_gbps * 1e9
    for i in range(tokens.size):
        spec = row_shape(
            int(hidden[i]), int(inter[i]), int(experts[i]), int(top_k[i]), int(tp[i]), int(ep[i]), fmt
        )
        ctx = PlanContext(spec, int(tokens[i]), 1, 0, hw)
        distinct, assignments = balanced_rank_work(int(tokens[i]), int(experts[i]), int(top_k[i]), int(ep[i]))
        align = ffn.router_kernels(ctx, distinct)[-1]
        kernels = (
            align,
            *ffn.fused_expert_kernels(ctx, distinct, assignments),
            ffn.combine_kernel(ctx, False),
        )
        plan = StepPlan(
            spec.name, "fused", int(tokens[i]), 1, 0, (Segment(kernels, 0),), (distinct,), BALANCED
        )
        arrays = fastpath.plan_arrays(plan)
        cache_bytes, hbm_bytes = fastpath.kernel_traffic(arrays, params.cache_capacity_bytes)
        parts["row"].append(np.full(arrays.n_kernels, i))
        parts["flops"].append(arrays.flops)
        parts["m"].append(arrays.m_tokens)
        parts["peaks"].append(np.array([params.peak(d) for d in arrays.dtypes])[arrays.dtype_index])
        parts["hbm"].append(hbm_bytes)
        parts["cache"].append(cache_bytes)
        parts["experts"].append(arrays.experts)
        curve = params.gemm_curve_index(arrays.dtypes, arrays.dtype_index)
        parts["curve"].append(np.zeros(arrays.n_kernels) if curve is None else curve)
        gaps[i] = gap_s * arrays.n_kernels
        floor[i] = (
            distinct * spec.expert_format.matrix_bytes(3 * spec.expert_width, spec.hidden) / peak_bytes_per_s
        )
    flat = {k: np.concatenate(v) if v else np.zeros(0) for k, v in parts.items()}
    return Components(
        params,
        flat["row"].astype(np.int64),
        flat["flops"],
        flat["m"],
        flat["peaks"],
        flat["hbm"],
        flat["cache"],
        flat["experts"],
        flat["curve"].astype(np.int64),
        gaps,
        floor,
    )


@dataclass(frozen=True)
class MoeFit:
    dtype: str  # moesim compute dtype
    terms: ExpertGemmTerms
    quality: FitQuality
    default_quality: FitQuality  # the documented defaults on the same rows, for comparison


def _pick(columns: dict[str, np.ndarray], moe_dtype: str) -> tuple[np.ndarray, str]:
    """Balanced rows of `moe_dtype` from its most-measured kernel source (the framework's default path)."""
    rows = (columns["moe_dtype"] == moe_dtype) & (columns["distribution"] == BALANCED)
    rows &= (columns["inter_size"] % columns["moe_tp_size"] == 0) & (
        columns["num_experts"] % columns["moe_ep_size"] == 0
    )
    if not rows.any():
        return rows, ""
    sources, counts = np.unique(columns["kernel_source"][rows], return_counts=True)
    source = str(sources[int(np.argmax(counts))])
    return rows & (columns["kernel_source"] == source), source


def fit_moe(
    columns: dict[str, np.ndarray], hw: HardwareProfile, table: str, defaults: dict[str, ExpertGemmTerms]
) -> list[MoeFit]:
    """One fit per database dtype moesim expresses: bounded least squares on relative error, shapes held out."""
    out = []
    for moe_dtype, (fmt, compute_dtype) in MOE_DTYPES.items():
        rows, source = _pick(columns, moe_dtype)
        index = np.nonzero(rows)[0]
        if index.size < 20:
            continue
        if index.size > MAX_ROWS_PER_DTYPE:
            index = np.sort(
                np.random.default_rng(SAMPLE_SEED).choice(index, MAX_ROWS_PER_DTYPE, replace=False)
            )
        col = {k: v[index] for k, v in columns.items()}
        measured = col["latency"] * 1e-3
        comp = row_components(
            hw,
            col["hidden_size"],
            col["inter_size"],
            col["num_experts"],
            col["topk"],
            col["moe_tp_size"],
            col["moe_ep_size"],
            col["num_tokens"],
            fmt,
        )
        possible = measured >= comp.weight_floor_s
        dropped = int((~possible).sum())
        measured, comp = measured[possible], comp.subset(possible)
        col = {k: v[possible] for k, v in col.items()}
        held = held_out_mask(
            col["hidden_size"],
            col["inter_size"],
            col["num_experts"],
            col["topk"],
            col["moe_tp_size"],
            col["moe_ep_size"],
        )
        train = comp.subset(~held)

        def residual(x: np.ndarray, c: Components = train, y: np.ndarray = measured[~held]) -> np.ndarray:
            terms = ExpertGemmTerms(fixed_us=x[0], per_expert_us=x[1], pair_flops_fraction=x[2])
            return c.predict_s(terms) / y - 1.0

        solution = least_squares(
            residual,
            np.array([1.0, 0.0, 0.5]),
            bounds=([0.0, 0.0, 0.02], [EXPERT_GEMM_MAX_FIXED_US, EXPERT_GEMM_MAX_PER_EXPERT_US, 1.0]),
            loss="soft_l1",
            f_scale=0.1,
        )
        terms = ExpertGemmTerms(
            fixed_us=round(float(solution.x[0]), 3),
            per_expert_us=round(float(solution.x[1]), 4),
            pair_flops_fraction=round(float(solution.x[2]), 4),
        )
        note = (
            f"{moe_dtype} via {source}, balanced routing, {dropped} rows faster than their weights at peak "
            "bandwidth left out"
        )
        default = defaults.get(compute_dtype) or defaults["bf16"]
        out.append(
            MoeFit(
                compute_dtype,
                terms,
                FitQuality.of(table, comp.predict_s(terms), measured, held, note),
                FitQuality.of(table, comp.predict_s(default), measured, held, "documented defaults"),
            )
        )
    return out
