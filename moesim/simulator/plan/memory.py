"""Does a model fit its GPUs? Per-rank bytes of weights, KV cache and a stated reserve, for a parallel layout.

The busiest rank is the one that matters: it holds the most routed experts (ceil(N/ep)) and the KV cache of
the largest data-parallel attention group. Sharding follows the engines (vLLM, SGLang):

- attention projections are split over the `tp` ranks of an attention group, except MLA's small down
  projections (q_a, kv_a), which are replicated; GQA key/value heads are replicated once tp exceeds them;
- dense FFN layers, the embedding table and the LM head are split over `tp` (vocab-parallel);
- routed experts: ceil(N/ep) experts per rank, each split over the `expert_tp` ranks of its group;
- shared experts: whole on every rank when replicated, split over `tp` when split;
- router, norms: replicated;
- KV cache: MLA's latent cache is not split by heads, so every rank of a group holds it whole; GQA's is
  split by KV head (at least one head per rank); linear-attention states are split by head.

Reserve: RESERVE_FRACTION of each GPU's capacity is kept for what is not weights or KV cache (CUDA context,
NCCL / all-to-all buffers, CUDA-graph pools, activations and workspace, allocator fragmentation).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Protocol

from moesim.errors import MoesimError
from moesim.simulator.models.sequence_state import (
    cached_tokens,
    index_key_bytes_per_token,
    indexed_tokens,
    kv_cache_bytes_per_token,
    linear_state_bytes,
    sequence_state_bytes,
)
from moesim.simulator.models.spec import ModelSpec, attention_for, high_precision_format
from moesim.simulator.models.weights import (
    attention_projections,
    attention_vector_params,
    dense_ffn_weight_bytes,
    embedding_bytes,
    expert_weight_bytes,
    layer_norm_bytes,
    lm_head_bytes,
    router_weight_bytes,
    shared_expert_weight_bytes,
    total_weight_bytes,
)
from moesim.simulator.plan.layout import LayoutRequest, ParallelLayout

# Serving engines leave 5–10% of each GPU outside weights and KV cache (vLLM's gpu_memory_utilization
# defaults to 0.9 and is raised to about 0.95 for the largest models; SGLang's mem_fraction_static likewise).
# We take the tight end, because the question here is whether a layout can serve at all.
RESERVE_FRACTION = 0.05
# Largest layout the smallest-fit search tries (8 nodes of 8 GPUs).
MAX_SEARCH_GPUS = 64
GB = 1e9

# MLA down projections that engines keep whole on every tensor-parallel rank.
_REPLICATED_MLA = ("q_a", "kv_a")


class DeviceMemory(Protocol):
    """What the memory fit needs of a device (a `HardwareProfile` provides it; plan never imports hardware)."""

    @property
    def name(self) -> str: ...
    @property
    def memory_capacity_bytes(self) -> float: ...


@dataclass(frozen=True)
class MemoryUse:
    """Bytes on the busiest rank of a layout, against that GPU's capacity."""

    layout: ParallelLayout
    capacity_bytes: float
    weights_bytes: float
    kv_cache_bytes: float
    drafter_bytes: float
    reserve_bytes: float
    weights_breakdown: dict[str, float] = field(default_factory=dict)

    @property
    def total_bytes(self) -> float:
        return self.weights_bytes + self.kv_cache_bytes + self.drafter_bytes + self.reserve_bytes

    @property
    def missing_bytes(self) -> float:
        """How much more memory the busiest rank needs (0 when the layout fits)."""
        return max(0.0, self.total_bytes - self.capacity_bytes)

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.capacity_bytes

    def as_dict(self) -> dict[str, object]:
        return {
            "layout": self.layout.as_dict(),
            "capacity_bytes": self.capacity_bytes,
            "per_rank_bytes": self.total_bytes,
            "weights_bytes": self.weights_bytes,
            "kv_cache_bytes": self.kv_cache_bytes,
            "drafter_bytes": self.drafter_bytes,
            "reserve_bytes": self.reserve_bytes,
            "reserve_fraction": self.reserve_bytes / self.capacity_bytes if self.capacity_bytes else 0.0,
            "weights_breakdown_bytes": dict(self.weights_breakdown),
            "fits": self.fits,
        }

    def summary(self) -> str:
        return (
            f"{self.total_bytes / GB:.1f} GB per GPU of {self.capacity_bytes / GB:.1f} GB "
            f"(weights {self.weights_bytes / GB:.1f}, KV cache {self.kv_cache_bytes / GB:.2f}"
            + (f", drafter {self.drafter_bytes / GB:.2f}" if self.drafter_bytes else "")
            + f", reserve {self.reserve_bytes / GB:.1f})"
        )


def _attention_rank_bytes(spec: ModelSpec, kind: str, tp: int) -> float:
    """One attention layer's weight bytes on one tensor-parallel rank."""
    fmt = spec.dense_format
    total = 0.0
    att = attention_for(spec, kind)  # type: ignore[arg-type]
    for name, rows, cols in attention_projections(spec, kind):  # type: ignore[arg-type]
        if att.is_mla and kind != "linear" and name in _REPLICATED_MLA:
            total += fmt.matrix_bytes(rows, cols)
        elif kind != "linear" and not att.is_mla and name in ("k", "v"):
            heads = max(1, math.ceil(att.num_kv_heads / tp))
            total += fmt.matrix_bytes(heads * att.head_dim, cols)
        elif name == "o":
            total += fmt.matrix_bytes(rows, math.ceil(cols / tp))
        else:
            total += fmt.matrix_bytes(math.ceil(rows / tp), cols)
    vector_bits = high_precision_format(spec).value_bits
    return total + attention_vector_params(spec, kind) * vector_bits / 8  # type: ignore[arg-type]


def weight_bytes_per_rank(spec: ModelSpec, layout: ParallelLayout) -> dict[str, float]:
    """Weight bytes on the busiest rank, by component."""
    tp = layout.tp
    per_kind = {kind: _attention_rank_bytes(spec, kind, tp) for kind in set(spec.layer_attention)}
    attention = sum(per_kind[kind] for kind in spec.layer_attention)
    parts = {
        "attention": attention,
        "dense_ffn": spec.n_dense_layers * dense_ffn_weight_bytes(spec) / tp,
        "embedding_lm_head": (embedding_bytes(spec) + lm_head_bytes(spec)) / tp,
        "norms_router": spec.n_layers * layer_norm_bytes(spec)
        + spec.n_moe_layers * router_weight_bytes(spec),
        "routed_experts": 0.0,
        "shared_experts": 0.0,
    }
    if spec.is_moe:
        experts_here = math.ceil(spec.n_experts / layout.ep)
        parts["routed_experts"] = (
            spec.n_moe_layers * experts_here * expert_weight_bytes(spec) / layout.expert_tp
        )
        shared = spec.n_moe_layers * shared_expert_weight_bytes(spec)
        parts["shared_experts"] = shared if layout.shared_mode == "replicated" else shared / tp
    return parts


def kv_cache_bytes_per_rank(
    spec: ModelSpec, layout: ParallelLayout, batch: int, context_len: int, kv_dtype_bytes: float = 2
) -> float:
    """KV cache (and linear-attention state) on the busiest rank for `batch` sequences of `context_len` tokens."""
    sequences = layout.sequences_per_group(batch)
    return sequences * _sequence_bytes_per_rank(spec, layout.tp, context_len, kv_dtype_bytes)


# Per (model, TP, context, KV bytes): a sweep checks the memory of every (model, batch) at one context.
_SEQUENCE_BYTES: dict[tuple[int, int, int, float], tuple[ModelSpec, float]] = {}


def _sequence_bytes_per_rank(spec: ModelSpec, tp: int, context_len: int, kv_dtype_bytes: float) -> float:
    """One sequence's KV cache and linear-attention state on one rank of a TP group, remembered."""
    key = (id(spec), tp, context_len, kv_dtype_bytes)
    held = _SEQUENCE_BYTES.get(key)
    if held is not None and held[0] is spec:
        return held[1]
    per_sequence = 0.0
    for kind in spec.layer_attention:
        if kind == "linear":
            per_sequence += linear_state_bytes(spec, kv_dtype_bytes) / tp
            continue
        att = attention_for(spec, kind)
        per_token = kv_cache_bytes_per_token(spec, kind, kv_dtype_bytes)
        if not att.is_mla:  # KV heads split over tensor-parallel ranks (replicated below one per rank)
            per_token *= max(1, math.ceil(att.num_kv_heads / tp)) / att.num_kv_heads
        per_sequence += cached_tokens(spec, kind, context_len) * per_token
        per_sequence += indexed_tokens(spec, kind, context_len) * index_key_bytes_per_token(spec, kind)
    if len(_SEQUENCE_BYTES) >= 4096:
        _SEQUENCE_BYTES.clear()
    _SEQUENCE_BYTES[key] = (spec, per_sequence)
    return per_sequence


def drafter_memory_bytes(draft: ModelSpec, batch: int, context_len: int, kv_dtype_bytes: float = 2) -> float:
    """A separate draft model's weights plus its KV cache for `batch` sequences (it runs unsplit)."""
    return total_weight_bytes(draft) + batch * sequence_state_bytes(draft, context_len, kv_dtype_bytes)


def rank_memory(
    spec: ModelSpec,
    layout: ParallelLayout,
    capacity_bytes: float,
    batch: int,
    context_len: int,
    drafter_bytes: float = 0.0,
    kv_dtype_bytes: float = 2,
    reserve_fraction: float = RESERVE_FRACTION,
) -> MemoryUse:
    """Memory on the busiest rank of `layout`; a drafter sharing the target's GPUs adds its bytes to each rank."""
    if batch < 1 or context_len < 1:
        raise MoesimError("batch", f"batch and context length must be ≥ 1, got {batch} and {context_len}")
    if not 0 <= reserve_fraction < 1:
        raise MoesimError("reserve_fraction", f"must be in [0, 1), got {reserve_fraction}")
    parts = weight_bytes_per_rank(spec, layout)
    return MemoryUse(
        layout=layout,
        capacity_bytes=capacity_bytes,
        weights_bytes=sum(parts.values()),
        kv_cache_bytes=kv_cache_bytes_per_rank(spec, layout, batch, context_len, kv_dtype_bytes),
        drafter_bytes=drafter_bytes if layout.draft_on == "shared" else 0.0,
        reserve_bytes=reserve_fraction * capacity_bytes,
        weights_breakdown=parts,
    )


def smallest_fitting_layout(
    spec: ModelSpec,
    profile: DeviceMemory,
    batch: int,
    context_len: int,
    drafter_bytes: float = 0.0,
    request: LayoutRequest | None = None,
    max_gpus: int = MAX_SEARCH_GPUS,
    kv_dtype_bytes: float = 2,
    reserve_fraction: float = RESERVE_FRACTION,
) -> MemoryUse | None:
    """The first of `request.candidates` (fewest GPUs, then widest TP) whose busiest rank fits; None if none does."""
    request = request or LayoutRequest()
    for layout in request.candidates(max_gpus):
        try:
            layout.check_model(spec)
        except MoesimError:
            continue
        use = rank_memory(
            spec,
            layout,
            profile.memory_capacity_bytes,
            batch,
            context_len,
            drafter_bytes,
            kv_dtype_bytes,
            reserve_fraction,
        )
        if use.fits:
            return use
    return None


def fit_layout(
    spec: ModelSpec,
    profile: DeviceMemory,
    batch: int,
    context_len: int,
    layout: ParallelLayout | LayoutRequest | None = None,
    drafter_bytes: float = 0.0,
    kv_dtype_bytes: float = 2,
    reserve_fraction: float = RESERVE_FRACTION,
) -> MemoryUse:
    """The layout to simulate and its memory use: the fixed layout asked for if it fits, else (when none is
    fixed) the smallest that fits.

    Raises MoesimError saying how much memory is missing and which layout would fit.
    """
    if isinstance(layout, ParallelLayout):
        request = LayoutRequest(
            layout.gpus, layout.tp, layout.ep, layout.placement, layout.shared_experts, layout.draft_on
        )
    else:
        request = layout or LayoutRequest()
    fixed = request.fixed()
    capacity = profile.memory_capacity_bytes
    if request.draft_on == "separate" and drafter_bytes > capacity * (1 - reserve_fraction):
        raise MoesimError(
            "draft_on",
            f"the drafter needs {drafter_bytes / GB:.1f} GB but one {profile.name} offers "
            f"{capacity * (1 - reserve_fraction) / GB:.1f} GB after the reserve",
            "use --draft-on shared, a smaller drafter or a smaller batch",
        )
    search = functools.partial(
        smallest_fitting_layout,
        spec,
        profile,
        batch,
        context_len,
        drafter_bytes,
        request,
        kv_dtype_bytes=kv_dtype_bytes,
        reserve_fraction=reserve_fraction,
    )
    if fixed is None:
        smallest = search()
        if smallest is not None:
            return smallest
        fixed = request.candidates(1)[0]
    fixed.check_model(spec)
    use = rank_memory(
        spec, fixed, capacity, batch, context_len, drafter_bytes, kv_dtype_bytes, reserve_fraction
    )
    if use.fits:
        return use
    smallest = search()
    where = f"{fixed.gpus} × {profile.name}" if fixed.gpus > 1 else f"one {profile.name}"
    if smallest is not None:
        best = smallest.layout
        fix = (
            f"the smallest layout that fits is --gpus {best.gpus} --tp {best.tp} --ep {best.ep}: "
            f"{smallest.summary()}"
        )
    else:
        fix = (
            f"no layout up to {MAX_SEARCH_GPUS} GPUs fits; lower --batch or --context-len, "
            "or choose a smaller weight format"
        )
    raise MoesimError(
        "memory",
        f"{spec.name} does not fit {where} ({fixed.describe()}): the busiest GPU needs "
        f"{use.total_bytes / GB:.1f} GB but has {capacity / GB:.1f} GB, {use.missing_bytes / GB:.1f} GB missing "
        f"(weights {use.weights_bytes / GB:.1f} GB, KV cache {use.kv_cache_bytes / GB:.2f} GB for {batch} "
        f"sequence(s) × {context_len} tokens"
        + (f", drafter {use.drafter_bytes / GB:.1f} GB" if use.drafter_bytes else "")
        + f", reserve {use.reserve_bytes / GB:.1f} GB = {reserve_fraction:.0%})",
        fix,
    )


__all__ = [
    "MAX_SEARCH_GPUS",
    "RESERVE_FRACTION",
    "MemoryUse",
    "drafter_memory_bytes",
    "fit_layout",
    "kv_cache_bytes_per_rank",
    "rank_memory",
    "smallest_fitting_layout",
    "weight_bytes_per_rank",
]
