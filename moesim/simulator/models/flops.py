"""FLOPs per token of each component (2 per multiply-accumulate)."""

from __future__ import annotations

from moesim.simulator.models.sequence_state import attended_tokens, indexed_tokens
from moesim.simulator.models.spec import AttentionLayerKind, ModelSpec, attention_for
from moesim.simulator.models.weights import (
    attention_projections,
    dense_ffn_matrices,
    expert_matrices,
    lm_head_matrix,
    router_matrix,
    shared_expert_matrices,
)


def matmul_flops(rows: int, cols: int, tokens: int = 1) -> int:
    """FLOPs of multiplying `tokens` vectors by a rows × cols matrix (2 per multiply-accumulate)."""
    return 2 * rows * cols * tokens


def attention_projection_flops_per_token(spec: ModelSpec, kind: AttentionLayerKind) -> int:
    """Matmul FLOPs of one attention layer's projections for one token."""
    return sum(matmul_flops(rows, cols) for _, rows, cols in attention_projections(spec, kind))


def attention_flops_per_token(
    spec: ModelSpec, kind: AttentionLayerKind, context_len: int, mla_absorbed: bool = True
) -> float:
    """Attention-core FLOPs (scores and weighted values, projections excluded) for one query token.

    GQA/MHA: 2·H·d for QKᵀ plus 2·H·d for AV per attended token. MLA absorbed (as decode kernels run
    it): scores over the latent plus rope key (kv_lora + rope) and values over the latent; MLA
    non-absorbed: over the decompressed per-head dims. A sparse-attention indexer adds 2·heads·dim per
    entry it scores (every cached entry). Linear attention (Gated DeltaNet): a fixed cost
    of about 7·dk·dv per value head (decay, delta-rule read, rank-1 update, output read), independent of
    the context length.
    """
    if kind == "linear":
        lin = spec.linear_attention
        assert lin is not None
        return 7.0 * lin.num_value_heads * lin.key_head_dim * lin.value_head_dim
    att = attention_for(spec, kind)
    tokens = attended_tokens(spec, kind, context_len)
    indexer = 2.0 * att.index_heads * att.index_head_dim * indexed_tokens(spec, kind, context_len)
    if att.is_mla:
        kv_lora, rope = att.kv_lora_rank or 0, att.qk_rope_head_dim or 0
        if mla_absorbed:
            per_token = 2 * att.num_heads * (kv_lora + rope) + 2 * att.num_heads * kv_lora
        else:
            nope, v_dim = att.qk_nope_head_dim or 0, att.v_head_dim or 0
            per_token = 2 * att.num_heads * (nope + rope) + 2 * att.num_heads * v_dim
        return float(per_token * tokens) + indexer
    return float(2 * att.num_heads * (att.head_dim + att.value_head_dim) * tokens) + indexer


def expert_flops_per_token(spec: ModelSpec) -> int:
    """Matmul FLOPs of ONE routed expert for one token."""
    return sum(matmul_flops(rows, cols) for _, rows, cols in expert_matrices(spec))


def shared_expert_flops_per_token(spec: ModelSpec) -> int:
    """Matmul FLOPs of all shared experts of one layer (and their gate) for one token."""
    one = sum(matmul_flops(rows, cols) for _, rows, cols in shared_expert_matrices(spec))
    gate = matmul_flops(1, spec.hidden) if spec.shared_expert_gate and spec.n_shared_experts else 0
    return spec.n_shared_experts * one + gate


def dense_ffn_flops_per_token(spec: ModelSpec) -> int:
    return sum(matmul_flops(rows, cols) for _, rows, cols in dense_ffn_matrices(spec))


def router_flops_per_token(spec: ModelSpec) -> int:
    _, rows, cols = router_matrix(spec)
    return matmul_flops(rows, cols)


def lm_head_flops_per_token(spec: ModelSpec) -> int:
    _, rows, cols = lm_head_matrix(spec)
    return matmul_flops(rows, cols)


__all__ = [
    "attention_flops_per_token",
    "attention_projection_flops_per_token",
    "dense_ffn_flops_per_token",
    "expert_flops_per_token",
    "lm_head_flops_per_token",
    "matmul_flops",
    "router_flops_per_token",
    "shared_expert_flops_per_token",
]
