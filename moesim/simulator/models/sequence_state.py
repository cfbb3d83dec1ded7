"""What a sequence keeps between steps: KV-cache bytes per token and per context, indexer keys, the
recurrent state of linear-attention layers, and how many cached tokens a layer attends to."""

from __future__ import annotations

import math

from moesim.simulator.models.spec import AttentionLayerKind, ModelSpec, attention_for

# An indexer key is cached in fp8 with one fp32 scale per key (DeepSeek-V3.2's lightning indexer).
INDEX_KEY_SCALE_BYTES = 4


def kv_cache_bytes_per_token(spec: ModelSpec, kind: AttentionLayerKind, dtype_bytes: float = 2) -> float:
    """KV-cache bytes one cached entry adds to one layer of `kind` (the attention core reads these).

    GQA/MHA: K and V for each KV head (one tensor when `shared_kv`). MLA caches the compressed latent
    plus the shared rope key (kv_lora_rank + qk_rope_head_dim). Linear-attention layers have no
    per-token cache (see `linear_state_bytes`); indexer keys are apart (`index_key_bytes_per_token`).
    """
    if kind == "linear":
        return 0.0
    att = attention_for(spec, kind)
    if att.is_mla:
        return ((att.kv_lora_rank or 0) + (att.qk_rope_head_dim or 0)) * dtype_bytes
    if att.shared_kv:
        return att.num_kv_heads * att.head_dim * dtype_bytes
    return att.num_kv_heads * (att.head_dim + att.value_head_dim) * dtype_bytes


def index_key_bytes_per_token(spec: ModelSpec, kind: AttentionLayerKind) -> float:
    """Bytes of the indexer key one cached entry adds to a sparse-attention layer (0 without an indexer)."""
    att = attention_for(spec, kind)
    if kind != "full" or att.index_topk is None:
        return 0.0
    return att.index_head_dim + INDEX_KEY_SCALE_BYTES


def cached_tokens(spec: ModelSpec, kind: AttentionLayerKind, context_len: int) -> int:
    """Entries one sequence keeps in a layer of `kind`: a window for sliding layers; for compressed caches
    one entry per `ratio` tokens plus the uncompressed local window; otherwise every token."""
    if kind == "linear":
        return 0
    att = attention_for(spec, kind)
    if kind == "sliding" and att.sliding_window:
        return min(context_len, att.sliding_window)
    ratio = att.compressed_ratio if kind == "compressed" else att.kv_compress_ratio
    if ratio > 1:
        return math.ceil(context_len / ratio) + min(context_len, att.sliding_window or 0)
    return context_len


def attended_tokens(spec: ModelSpec, kind: AttentionLayerKind, context_len: int) -> int:
    """Cached entries one query attends to in a layer of `kind`: the window caps sliding layers, the
    indexer's top-k caps sparse layers (plus their local window), compression divides the context."""
    cached = cached_tokens(spec, kind, context_len)
    att = attention_for(spec, kind)
    if kind != "full" or att.index_topk is None:
        return cached
    local = min(context_len, att.sliding_window or 0) if att.kv_compress_ratio > 1 else 0
    return min(cached - local, att.index_topk) + local


def indexed_tokens(spec: ModelSpec, kind: AttentionLayerKind, context_len: int) -> int:
    """Cached entries the sparse-attention indexer scores for one query (0 without an indexer)."""
    if not index_key_bytes_per_token(spec, kind):
        return 0
    att = attention_for(spec, kind)
    return math.ceil(context_len / att.kv_compress_ratio)


def kv_cache_bytes(spec: ModelSpec, context_len: int, dtype_bytes: float = 2) -> float:
    """KV-cache bytes of one sequence of `context_len` tokens across all layers (linear layers excluded),
    indexer keys included."""
    return sum(
        cached_tokens(spec, kind, context_len) * kv_cache_bytes_per_token(spec, kind, dtype_bytes)
        + indexed_tokens(spec, kind, context_len) * index_key_bytes_per_token(spec, kind)
        for kind in spec.layer_attention
    )


def linear_state_bytes(spec: ModelSpec, dtype_bytes: float = 2) -> float:
    """Fixed state of ONE linear-attention layer for one sequence: the recurrent matrix per value head
    (key_head_dim × value_head_dim) plus the causal-conv tail (conv_dim × (kernel − 1))."""
    lin = spec.linear_attention
    if lin is None:
        return 0.0
    recurrent = lin.num_value_heads * lin.key_head_dim * lin.value_head_dim
    conv_dim = 2 * lin.num_key_heads * lin.key_head_dim + lin.num_value_heads * lin.value_head_dim
    return (recurrent + conv_dim * (lin.conv_kernel - 1)) * dtype_bytes


def sequence_state_bytes(spec: ModelSpec, context_len: int, dtype_bytes: float = 2) -> float:
    """Everything one sequence keeps between steps: KV cache plus all linear-attention states."""
    n_linear = sum(1 for kind in spec.layer_attention if kind == "linear")
    return kv_cache_bytes(spec, context_len, dtype_bytes) + n_linear * linear_state_bytes(spec, dtype_bytes)


__all__ = [
    "INDEX_KEY_SCALE_BYTES",
    "attended_tokens",
    "cached_tokens",
    "index_key_bytes_per_token",
    "indexed_tokens",
    "kv_cache_bytes",
    "kv_cache_bytes_per_token",
    "linear_state_bytes",
    "sequence_state_bytes",
]
