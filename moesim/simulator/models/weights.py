"""Exact weight matrices, parameter counts and weight bytes of a ModelSpec, by component.

Conventions:
- A matrix is (name, rows, cols) with rows = output features and cols = input features (torch's
  `nn.Linear.weight` shape), so group scales along the input dimension run along `cols`.
- Linear-layer weights are stored in the model's formats: attention, dense FFN and shared-expert matrices
  in `dense_format`, routed experts in `expert_format`. Embeddings, the LM head, the router, norms, biases
  and other vectors stay 16-bit (`high_precision_format`), as in the published FP8 and MXFP4 checkpoints
  (DeepSeek-V3, Kimi-K2 and gpt-oss quantise only the transformer blocks' linear layers).
- FLOPs are per token: 2 per multiply-accumulate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from moesim.errors import MoesimError
from moesim.simulator.models.spec import (
    AttentionLayerKind,
    AttentionSpec,
    Matrix,
    ModelSpec,
    WeightFormat,
    attention_for,
    high_precision_format,
)


def _vector_bytes(spec: ModelSpec, n_values: int) -> int:
    return math.ceil(n_values * high_precision_format(spec).value_bits / 8)


def attention_projections(spec: ModelSpec, kind: AttentionLayerKind) -> list[Matrix]:
    """The weight matrices of one attention layer of `kind`, as (name, rows=out, cols=in).

    MLA lists its down/up projections (q_a, q_b, kv_a, kv_b, o); at decode with absorbed MLA the
    per-token work of kv_b's key and value halves (W_UK, W_UV) equals a matmul of kv_b's shape.
    MHA/GQA lists q (or q_a, q_b), k and v (or one kv), o (or o_a, o_b). A sparse-attention indexer adds
    index_q (from the query latent, or from the hidden state without one), index_k and index_weights.
    Linear attention (Gated DeltaNet) lists in_proj_qkvz, in_proj_ba, the depthwise conv1d weight
    (conv_dim × kernel) and out_proj.
    """
    h = spec.hidden
    if kind == "linear":
        lin = spec.linear_attention
        if lin is None:
            raise MoesimError("linear_attention", "linear layers need a linear_attention section")
        key_dim = lin.num_key_heads * lin.key_head_dim
        value_dim = lin.num_value_heads * lin.value_head_dim
        return [
            ("in_proj_qkvz", 2 * key_dim + 2 * value_dim, h),
            ("in_proj_ba", 2 * lin.num_value_heads, h),
            ("conv1d", 2 * key_dim + value_dim, lin.conv_kernel),
            ("out_proj", h, value_dim),
        ]
    att = attention_for(spec, kind)
    if att.is_mla:
        nope, rope = att.qk_nope_head_dim or 0, att.qk_rope_head_dim or 0
        v_dim, kv_lora = att.v_head_dim or 0, att.kv_lora_rank or 0
        q_out = att.num_heads * (nope + rope)
        mats = [*_query_matrices(att, q_out, h), ("kv_a", kv_lora + rope, h)]
        mats.append(("kv_b", att.num_heads * (nope + v_dim), kv_lora))
        mats += _output_matrices(att, att.num_heads * v_dim, h)
    else:
        q_width = att.num_heads * att.head_dim
        k_width = att.num_kv_heads * att.head_dim
        v_width = att.num_kv_heads * att.value_head_dim
        mats = _query_matrices(att, q_width * (2 if att.output_gate else 1), h)
        mats += [("kv", k_width, h)] if att.shared_kv else [("k", k_width, h), ("v", v_width, h)]
        mats += _output_matrices(att, att.num_heads * att.value_head_dim, h)
        idle = att.attention_experts - att.num_heads // att.num_kv_heads
        if att.attention_experts and idle > 0:
            mats += [("idle_q", idle * k_width, h), ("idle_o", h, idle * v_width)]
    if att.index_topk is not None and kind == "full":
        index_in = att.q_lora_rank or h
        mats += [
            ("index_q", att.index_heads * att.index_head_dim, index_in),
            ("index_k", att.index_head_dim, h),
            ("index_weights", att.index_heads, h),
        ]
    return mats


def _query_matrices(att: AttentionSpec, q_out: int, hidden: int) -> list[Matrix]:
    if att.q_lora_rank:
        return [("q_a", att.q_lora_rank, hidden), ("q_b", q_out, att.q_lora_rank)]
    return [("q", q_out, hidden)]


def _output_matrices(att: AttentionSpec, o_in: int, hidden: int) -> list[Matrix]:
    """The output projection: one matrix, or DeepSeek-V4's grouped low rank (o_a per group, then o_b).

    o_a is listed as one block-diagonal matrix of the groups' total size (rows o_groups·rank, cols the
    per-group input), so its parameter count and bytes are exact.
    """
    if att.o_lora_rank:
        rank_total = att.o_groups * att.o_lora_rank
        return [("o_a", rank_total, o_in // att.o_groups), ("o_b", hidden, rank_total)]
    return [("o", hidden, o_in)]


def attention_vector_params(spec: ModelSpec, kind: AttentionLayerKind) -> int:
    """Parameters of one attention layer outside its matrices: biases, QK-norms, MLA norms, sinks, gates."""
    if kind == "linear":
        lin = spec.linear_attention
        assert lin is not None
        # dt_bias and A_log per value head, plus the gated RMSNorm over one value head.
        return 2 * lin.num_value_heads + lin.value_head_dim
    att = attention_for(spec, kind)
    n = 2 * att.index_head_dim if att.index_topk is not None and kind == "full" else 0  # index-key LayerNorm
    if att.attention_sinks:
        n += att.num_heads
    if att.is_mla:
        return n + (att.q_lora_rank or 0) + (att.kv_lora_rank or 0)  # q_a_layernorm, kv_a_layernorm
    n += att.q_lora_rank or 0
    q_width = att.num_heads * att.head_dim
    kv_width = att.num_kv_heads * (att.head_dim + (0 if att.shared_kv else att.value_head_dim))
    if att.bias:
        n += q_width * (2 if att.output_gate else 1) + kv_width
    if att.output_bias:
        n += spec.hidden
    if att.qk_norm:
        n += 2 * att.head_dim if att.qk_norm_per_head else q_width + att.num_kv_heads * att.head_dim
    return n


def expert_matrices(spec: ModelSpec) -> list[Matrix]:
    """One routed expert's gated FFN: gate and up (width × hidden), down (hidden × width)."""
    return _gated_ffn(spec.hidden, spec.expert_width)


def shared_expert_matrices(spec: ModelSpec) -> list[Matrix]:
    """One shared expert's gated FFN (a layer has `n_shared_experts` of them)."""
    return _gated_ffn(spec.hidden, spec.shared_expert_width)


def dense_ffn_matrices(spec: ModelSpec) -> list[Matrix]:
    """The gated FFN of one dense layer."""
    return _gated_ffn(spec.hidden, spec.dense_ffn_width)


def router_matrix(spec: ModelSpec) -> Matrix:
    """The router (gate) of one MoE layer: one logit per routed expert."""
    return ("router", spec.n_experts, spec.hidden)


def lm_head_matrix(spec: ModelSpec) -> Matrix:
    return ("lm_head", spec.vocab, spec.hidden)


def _gated_ffn(hidden: int, width: int) -> list[Matrix]:
    return [("gate", width, hidden), ("up", width, hidden), ("down", hidden, width)]


def _params(matrices: list[Matrix]) -> int:
    return sum(rows * cols for _, rows, cols in matrices)


def _bytes(fmt: WeightFormat, matrices: list[Matrix]) -> int:
    return sum(fmt.matrix_bytes(rows, cols) for _, rows, cols in matrices)


def attention_params(spec: ModelSpec, kind: AttentionLayerKind) -> int:
    """Parameters of one attention layer of `kind` (matrices plus biases/norms)."""
    return _params(attention_projections(spec, kind)) + attention_vector_params(spec, kind)


def expert_params(spec: ModelSpec) -> int:
    """Parameters of ONE routed expert (gate + up + down, plus biases where the model has them)."""
    bias = 2 * spec.expert_width + spec.hidden if spec.expert_bias else 0
    return _params(expert_matrices(spec)) + bias


def shared_expert_params(spec: ModelSpec) -> int:
    """Parameters of ALL shared experts of one MoE layer, including a shared-expert gate."""
    gate = spec.hidden if spec.shared_expert_gate and spec.n_shared_experts else 0
    return spec.n_shared_experts * _params(shared_expert_matrices(spec)) + gate


def dense_ffn_params(spec: ModelSpec) -> int:
    return _params(dense_ffn_matrices(spec))


def router_params(spec: ModelSpec) -> int:
    """Router parameters of one MoE layer (weights plus bias or score-correction bias)."""
    _, rows, cols = router_matrix(spec)
    return rows * cols + (spec.n_experts if spec.router_bias else 0)


def layer_norm_params(spec: ModelSpec) -> int:
    """Norm weights of one transformer block (pre-attention, pre-FFN, and any sandwich norms)."""
    return spec.norms_per_layer * spec.hidden


def mtp_layer_params(spec: ModelSpec) -> int:
    """One multi-token-prediction module: a full-attention block (MoE if the model is) + fusion projection.

    As in DeepSeek-V3, GLM-4.5 and Qwen3-Next: norms on the embedding and hidden inputs, a 2h → h
    projection, one transformer block and a final norm; embedding and LM head are shared with the model.
    """
    h = spec.hidden
    block = attention_params(spec, "full") + layer_norm_params(spec)
    if spec.is_moe:
        block += spec.n_experts * expert_params(spec) + shared_expert_params(spec) + router_params(spec)
    else:
        block += dense_ffn_params(spec)
    return block + 2 * h * h + 3 * h


def _kinds(spec: ModelSpec) -> dict[AttentionLayerKind, int]:
    counts: dict[AttentionLayerKind, int] = {}
    for kind in spec.layer_attention:
        counts[kind] = counts.get(kind, 0) + 1
    return counts


@dataclass(frozen=True)
class ParamCounts:
    """Parameter counts of a model, by component.

    `total`: every stored parameter except MTP modules (`total_with_mtp` adds them).
    `active`: parameters touched per token = everything except unchosen routed experts and MTP
    modules, counting the whole embedding table and the LM head. This is how most publishers count
    (Mistral, Qwen, DeepSeek, Meta, AI2, Databricks, Zhipu; e.g. Qwen3-30B-A3B 3.3B, DeepSeek-V3 37B).
    `active_excl_embedding`: the same without the input embedding table (a token reads only one row of
    it; a tied table still counts, as LM head) — OpenAI's convention for gpt-oss, and what a decode
    step actually reads. `active_non_embedding`: without embedding table and LM head (Zhipu's GLM-4.5).
    """

    total: int
    active: int
    active_excl_embedding: int
    active_non_embedding: int
    embedding: int
    lm_head: int  # extra storage: 0 when tied to the embedding
    attention: int
    norms: int
    dense_ffn: int
    routed_experts: int
    routed_experts_active: int
    shared_experts: int
    router: int
    mtp: int
    total_with_mtp: int


def param_counts(spec: ModelSpec) -> ParamCounts:
    """Count every parameter of `spec`: matrices, biases, norms, router, QK-norms, MLA norms, MTP."""
    kinds = _kinds(spec)
    attention = sum(n * attention_params(spec, kind) for kind, n in kinds.items())
    norms = spec.n_layers * layer_norm_params(spec) + spec.hidden
    embedding = spec.vocab * spec.hidden
    lm_head = 0 if spec.tied_embeddings else spec.vocab * spec.hidden
    dense_ffn = spec.n_dense_layers * dense_ffn_params(spec)
    n_moe = spec.n_moe_layers
    routed = n_moe * spec.n_experts * expert_params(spec)
    routed_active = n_moe * spec.top_k * expert_params(spec)
    shared = n_moe * shared_expert_params(spec)
    router = n_moe * router_params(spec) if n_moe else 0
    mtp = spec.mtp_layers * mtp_layer_params(spec)
    common = attention + norms + dense_ffn + shared + router
    total = common + routed + embedding + lm_head
    active = common + routed_active + embedding + lm_head
    return ParamCounts(
        total=total,
        active=active,
        active_excl_embedding=active - (0 if spec.tied_embeddings else embedding),
        active_non_embedding=active - embedding - lm_head,
        embedding=embedding,
        lm_head=lm_head,
        attention=attention,
        norms=norms,
        dense_ffn=dense_ffn,
        routed_experts=routed,
        routed_experts_active=routed_active,
        shared_experts=shared,
        router=router,
        mtp=mtp,
        total_with_mtp=total + mtp,
    )


def params_as_published(spec: ModelSpec) -> tuple[int, int]:
    """(total, active) counted the way the publisher counts them, to compare with `published_*_params`:
    MTP modules in the total only when `published_total_includes_mtp`; the vocabulary matrices in the
    active count as `published_active_counts` says."""
    counts = param_counts(spec)
    total = counts.total_with_mtp if spec.published_total_includes_mtp else counts.total
    active = {
        "embedding_and_lm_head": counts.active,
        "lm_head": counts.active_excl_embedding,
        "neither": counts.active_non_embedding,
    }[spec.published_active_counts]
    return total, active


def attention_weight_bytes(spec: ModelSpec, kind: AttentionLayerKind) -> int:
    """Bytes of one attention layer of `kind`: projections in the dense format, vectors 16-bit."""
    matrices = _bytes(spec.dense_format, attention_projections(spec, kind))
    return matrices + _vector_bytes(spec, attention_vector_params(spec, kind))


def expert_weight_bytes(spec: ModelSpec) -> int:
    """Bytes of ONE routed expert (gate + up + down) in the expert format, biases 16-bit."""
    bias = 2 * spec.expert_width + spec.hidden if spec.expert_bias else 0
    return _bytes(spec.expert_format, expert_matrices(spec)) + _vector_bytes(spec, bias)


def shared_expert_weight_bytes(spec: ModelSpec) -> int:
    """Bytes of ALL shared experts of one MoE layer (dense format), plus a shared-expert gate."""
    gate = spec.hidden if spec.shared_expert_gate and spec.n_shared_experts else 0
    one = _bytes(spec.dense_format, shared_expert_matrices(spec))
    return spec.n_shared_experts * one + _vector_bytes(spec, gate)


def dense_ffn_weight_bytes(spec: ModelSpec) -> int:
    """Bytes of one dense layer's FFN in the dense format."""
    return _bytes(spec.dense_format, dense_ffn_matrices(spec)) if spec.dense_ffn_width else 0


def router_weight_bytes(spec: ModelSpec) -> int:
    """Bytes of one MoE layer's router (kept 16-bit in quantised checkpoints)."""
    return _vector_bytes(spec, router_params(spec)) if spec.n_experts else 0


def layer_norm_bytes(spec: ModelSpec) -> int:
    """Bytes of one block's norm weights."""
    return _vector_bytes(spec, layer_norm_params(spec))


def embedding_bytes(spec: ModelSpec) -> int:
    """Bytes of the input embedding table (16-bit)."""
    return _vector_bytes(spec, spec.vocab * spec.hidden)


def lm_head_bytes(spec: ModelSpec) -> int:
    """Extra storage of the LM head: 0 when tied to the embedding (see `lm_head_read_bytes`)."""
    return 0 if spec.tied_embeddings else lm_head_read_bytes(spec)


def lm_head_read_bytes(spec: ModelSpec) -> int:
    """Bytes the LM head reads at every step, tied or not (16-bit)."""
    return _vector_bytes(spec, spec.vocab * spec.hidden)


def mtp_weight_bytes(spec: ModelSpec) -> int:
    """Bytes of one MTP module (its embedding and LM head are the model's own, not counted)."""
    h = spec.hidden
    block = attention_weight_bytes(spec, "full") + layer_norm_bytes(spec)
    if spec.is_moe:
        block += spec.n_experts * expert_weight_bytes(spec) + shared_expert_weight_bytes(spec)
        block += router_weight_bytes(spec)
    else:
        block += dense_ffn_weight_bytes(spec)
    return block + spec.dense_format.matrix_bytes(h, 2 * h) + _vector_bytes(spec, 3 * h)


def total_weight_bytes(spec: ModelSpec, include_mtp: bool = False) -> int:
    """Bytes of every weight of the model as stored (MTP modules only when `include_mtp`)."""
    kinds = _kinds(spec)
    total = sum(n * attention_weight_bytes(spec, kind) for kind, n in kinds.items())
    total += spec.n_layers * layer_norm_bytes(spec) + _vector_bytes(spec, spec.hidden)
    total += spec.n_dense_layers * dense_ffn_weight_bytes(spec)
    if spec.n_moe_layers:
        per_layer = spec.n_experts * expert_weight_bytes(spec) + shared_expert_weight_bytes(spec)
        total += spec.n_moe_layers * (per_layer + router_weight_bytes(spec))
    total += embedding_bytes(spec) + lm_head_bytes(spec)
    if include_mtp:
        total += spec.mtp_layers * mtp_weight_bytes(spec)
    return total


__all__ = [
    "ParamCounts",
    "attention_params",
    "attention_projections",
    "attention_vector_params",
    "attention_weight_bytes",
    "dense_ffn_matrices",
    "dense_ffn_params",
    "dense_ffn_weight_bytes",
    "embedding_bytes",
    "expert_matrices",
    "expert_params",
    "expert_weight_bytes",
    "layer_norm_bytes",
    "layer_norm_params",
    "lm_head_bytes",
    "lm_head_matrix",
    "lm_head_read_bytes",
    "mtp_layer_params",
    "mtp_weight_bytes",
    "param_counts",
    "params_as_published",
    "router_matrix",
    "router_params",
    "router_weight_bytes",
    "shared_expert_matrices",
    "shared_expert_params",
    "shared_expert_weight_bytes",
    "total_weight_bytes",
]
