"""`generation_attention_perf`, `generation_mla_perf`, `context_attention_perf` and `context_mla_perf` → the
attention kernel terms (fixed + per work unit) of grouped-query decode (`gqa`), MLA decode (`mla`),
grouped-query prefill (`gqa_prefill`) and MLA prefill (`mla_prefill`).

A generation row is one decode attention call on one rank: `batch_size` sequences, each with one new query
(`isl` = 1) over `isl + step` cached tokens, `num_heads` query heads sharing `num_key_value_heads` KV heads of
`head_dim` (MLA: `num_heads` heads on the rank over DeepSeek's 512-wide latent plus 64 rope dimensions).
moesim prices it as its plan does: the attention kernel over each sequence's cache
(`plan.attention.attention_core_kernel`) through the cost model, cache warm as in a repeated microbenchmark.
The fit finds the `hardware.sections.AttentionTerms` that, added to that roofline, reproduce the rows:

    time = roofline(kernel) + fixed_us + work units × per_unit_us,    units = sequences × KV heads × tiles

and for prefill, whose rows of long prompts are compute-bound, the share of the dense peak the kernel's
arithmetic reaches (`flops_fraction`, in place of the GEMM curve at its rows): SGLang's MLA prefill op on
h200_sxm runs at about a sixth of the bf16 peak (3.9 ms for 128 heads × 4,096 tokens, where TensorRT-LLM's
takes 1.3 ms), which no floor or per-unit time can express.

A context row is one causal prefill of `batch_size` prompts of `isl` tokens, priced as moesim's prefill
attention kernel (`plan.mixed.prefill_attention_kernel`, one chunk per prompt, no prefix). An MLA context
row (`num_heads` heads on the rank) is the multi-head attention over decompressed keys and values that
dense MLA prefill runs (`plan.attention.mla_prefill_runs_mha`); its kv_b_proj decompression is not in the
row — aiconfigurator-core 0.12.0 prices it as a GEMM of its own beside the op (`sdk/models/deepseek.py`,
`context_kv_b_proj_gemm` before `ContextMLA`) — so it is not in the priced kernel either.

Rows used: full attention (`window_size` 0), bf16 queries and bf16 KV cache (the cache moesim's plans hold),
from the table's most-measured kernel source (the framework's default path). Sliding-window and fp8-cache
rows are left out. Every fourth shape (heads, KV heads, head dim) is held out.

Rows used: bf16 queries and KV (the MLA context table has no cache dtype: its keys and values are the
decompressed bf16 ones).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from functools import cache

import numpy as np
from scipy.optimize import least_squares

from moesim.calibrate.fits.silicon.holdout import FitQuality, held_out_mask
from moesim.simulator.execution import fastpath
from moesim.simulator.execution.cost import CostParams, kernel_times_s
from moesim.simulator.hardware.profile import (
    ATTENTION_MAX_FIXED_US,
    ATTENTION_MAX_PER_UNIT_US,
    HardwareProfile,
)
from moesim.simulator.hardware.sections import AttentionTerms
from moesim.simulator.models.catalogue import load_model
from moesim.simulator.models.layers import with_layer_count
from moesim.simulator.models.spec import ModelSpec
from moesim.simulator.plan.attention import attention_core_kernel
from moesim.simulator.plan.blocks import PlanContext
from moesim.simulator.plan.mixed import PrefillChunks, prefill_attention_kernel
from moesim.simulator.plan.step import Segment, StepPlan

# The kinds whose arithmetic rate (`AttentionTerms.flops_fraction`) is fitted: prefill, compute-bound at long
# prompts. Decode rows are memory-bound (one query per sequence and head), so they do not identify it.
RATE_FITTED_KINDS = ("gqa_prefill", "mla_prefill")
MIN_FLOPS_FRACTION = 0.01
MAX_ROWS = 800  # a seeded sample: the fit is two numbers (1500 rows move it by under 0.3 points)
SAMPLE_SEED = 21
BF16 = "bfloat16"
# The catalogue model whose attention a row's shape replaces: a grouped-query one and an MLA one.
GQA_BASE, MLA_BASE = "qwen3-30b-a3b", "deepseek-v3"


@cache
def _base(name: str) -> ModelSpec:
    return with_layer_count(load_model(name), 1)


def row_spec(kind: str, heads: int, kv_heads: int, head_dim: int) -> ModelSpec:
    """A one-layer model whose attention has the row's per-rank shape."""
    base = _base(MLA_BASE if kind.startswith("mla") else GQA_BASE)
    if kind.startswith("mla"):
        attention = replace(base.attention, num_heads=heads)
    else:
        attention = replace(base.attention, num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim)
    return replace(base, attention=attention, full_attention=None)


@dataclass(frozen=True)
class Rows:
    """Every row's attention kernel as moesim plans it (one kernel per row, its cache traffic warm as in a
    repeated microbenchmark), priced through `execution.cost.kernel_times_s` for each candidate set of
    attention terms: the floor and units in the fixed part, the arithmetic at peak × `flops_fraction`
    where the terms give one (else on the GEMM curve)."""

    params: CostParams  # the profile's, without attention terms
    flops: np.ndarray
    m_tokens: np.ndarray
    peaks: np.ndarray
    hbm_bytes: np.ndarray
    cache_bytes: np.ndarray
    units: np.ndarray

    def predict_s(self, terms: AttentionTerms) -> np.ndarray:
        rate = None if terms.flops_fraction <= 0 else np.full(self.flops.shape, terms.flops_fraction)
        total, _, _ = kernel_times_s(
            self.flops,
            self.m_tokens,
            self.peaks,
            self.hbm_bytes,
            self.cache_bytes,
            self.params,
            attention_s=(terms.fixed_us + self.units * terms.per_unit_us) * 1e-6,
            attention_fraction=rate,
        )
        return total

    @property
    def without_terms_s(self) -> np.ndarray:
        return self.predict_s(AttentionTerms(0.0, 0.0))

    def subset(self, rows: np.ndarray) -> Rows:
        arrays = {f.name: getattr(self, f.name)[rows] for f in fields(self) if f.name != "params"}
        return Rows(self.params, **arrays)


def row_kernels(
    hw: HardwareProfile,
    kind: str,
    heads: np.ndarray,
    kv_heads: np.ndarray,
    head_dim: np.ndarray,
    batch: np.ndarray,
    cached: np.ndarray,
) -> Rows:
    """Each row's attention kernel without attention terms, and its work units: decode (one new token per
    sequence over `cached` tokens) or, for `gqa_prefill` and `mla_prefill`, the causal prefill of `cached`
    prompt tokens per sequence."""
    params = replace(CostParams.from_hardware(hw), attention={}, attention_flops_fraction={})
    parts = np.zeros((6, batch.size))
    for i in range(batch.size):
        spec = row_spec(kind, int(heads[i]), int(kv_heads[i]), int(head_dim[i]))
        if kind.endswith("_prefill"):
            kernel = prefill_attention_kernel(
                spec, "full", PrefillChunks.of([(int(cached[i]), 0)] * int(batch[i]))
            )
        else:
            ctx = PlanContext(spec, int(batch[i]), 1, max(0, int(cached[i]) - 1), hw)
            a = spec.attention
            width = (a.kv_lora_rank or 0) + (a.qk_rope_head_dim or 0) if kind == "mla" else a.head_dim
            q_elems = ctx.m_tokens * a.num_heads * width
            out_elems = ctx.m_tokens * a.num_heads * ((a.kv_lora_rank or 0) if kind == "mla" else a.head_dim)
            kernel = attention_core_kernel(ctx, "full", "q", q_elems, ("attn_out", float(out_elems)))
        plan = StepPlan(spec.name, "fused", 1, 1, 0, (Segment((kernel,), 0),), (), "")
        cache_bytes, hbm_bytes = fastpath.kernel_traffic(
            fastpath.plan_arrays(plan), params.cache_capacity_bytes
        )
        parts[:, i] = (
            kernel.flops,
            kernel.m_tokens,
            params.peak(kernel.dtype),
            hbm_bytes[0],
            cache_bytes[0],
            kernel.attention_units,
        )
    return Rows(params, *parts)


@dataclass(frozen=True)
class AttentionFit:
    kind: str  # "gqa", "mla" or "gqa_prefill"
    terms: AttentionTerms
    quality: FitQuality
    roofline_quality: FitQuality  # the roofline alone (the datasheet default) on the same rows


def _pick(columns: dict[str, np.ndarray], kind: str) -> tuple[np.ndarray, str]:
    n = columns["latency"].size
    rows = columns["kv_cache_dtype"] == BF16 if "kv_cache_dtype" in columns else np.ones(n, dtype=bool)
    rows &= (columns["mla_dtype"] if kind.startswith("mla") else columns["attn_dtype"]) == BF16
    if "window_size" in columns:
        rows &= columns["window_size"] == 0
    if "step" in columns:  # decode: one new token per sequence
        rows &= columns["isl"] == 1
    if not rows.any():
        return np.zeros(n, dtype=bool), ""
    sources, counts = np.unique(columns["kernel_source"][rows], return_counts=True)
    source = str(sources[int(np.argmax(counts))])
    return rows & (columns["kernel_source"] == source), source


def fit_attention(
    columns: dict[str, np.ndarray], hw: HardwareProfile, table: str, kind: str
) -> AttentionFit | None:
    """Bounded robust least squares on relative error of the two terms, shapes held out."""
    rows, source = _pick(columns, kind)
    index = np.nonzero(rows)[0]
    if index.size < 20:
        return None
    if index.size > MAX_ROWS:
        index = np.sort(np.random.default_rng(SAMPLE_SEED).choice(index, MAX_ROWS, replace=False))
    col = {k: v[index] for k, v in columns.items()}
    ones = np.ones(index.size, dtype=np.int64)
    kv_heads = ones if kind.startswith("mla") else col["num_key_value_heads"]
    head_dim = ones if kind.startswith("mla") else col["head_dim"]
    cached = col["isl"] + col["step"] if "step" in col else col["isl"]
    priced = row_kernels(hw, kind, col["num_heads"], kv_heads, head_dim, col["batch_size"], cached)
    measured = col["latency"] * 1e-3
    held = held_out_mask(col["num_heads"], kv_heads, head_dim)
    train = ~held
    training = priced.subset(train)
    # prefill rows of long prompts are compute-bound, so they identify the kernel's arithmetic rate too
    with_rate = kind in RATE_FITTED_KINDS

    def residual(x: np.ndarray) -> np.ndarray:
        terms = AttentionTerms(x[0], x[1], x[2] if with_rate else 0.0)
        return training.predict_s(terms) / measured[train] - 1.0

    low, high = [0.0, 0.0], [ATTENTION_MAX_FIXED_US, ATTENTION_MAX_PER_UNIT_US]
    solution = least_squares(
        residual,
        np.array([1.0, 0.0, 0.5] if with_rate else [1.0, 0.0]),
        bounds=([*low, MIN_FLOPS_FRACTION], [*high, 1.0]) if with_rate else (low, high),
        loss="soft_l1",
        f_scale=0.1,
    )
    terms = AttentionTerms(
        fixed_us=round(float(solution.x[0]), 3),
        per_unit_us=round(float(solution.x[1]), 5),
        flops_fraction=round(float(solution.x[2]), 4) if with_rate else 0.0,
    )
    phase = "prefill" if "step" not in col else "decode"
    note = f"{kind} {phase} via {source}, bf16 KV cache, full attention"
    return AttentionFit(
        kind,
        terms,
        FitQuality.of(table, priced.predict_s(terms), measured, held, note),
        FitQuality.of(table, priced.without_terms_s, measured, held, "roofline alone"),
    )
