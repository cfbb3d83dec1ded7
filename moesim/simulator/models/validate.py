"""Whether a ModelSpec describes a buildable model: `validate_spec`, one MoesimError naming the field and the fix."""

from __future__ import annotations

from typing import Any

from moesim.errors import MoesimError
from moesim.simulator.bounds import MAX_COUNT, MAX_EXPERTS
from moesim.simulator.models.spec import ATTENTION_KINDS, FFN_KINDS, AttentionSpec, ModelSpec, weight_format


def _require(ok: bool, field: str, problem: str, fix: str) -> None:
    if not ok:
        raise MoesimError(field, problem, fix)


def _positive(value: int | None, field: str, what: str = "", high: int = MAX_COUNT) -> None:
    _require(
        isinstance(value, int) and not isinstance(value, bool) and value > 0,
        field,
        f"must be a positive integer, got {value!r}",
        f"give {what or field} as a whole number above 0",
    )
    _at_most(value, field, high)


def _non_negative(value: int, field: str, high: int = MAX_COUNT) -> None:
    _require(
        isinstance(value, int) and not isinstance(value, bool) and value >= 0,
        field,
        f"must be a non-negative integer, got {value!r}",
        f"give {field} as a whole number ≥ 0",
    )
    _at_most(value, field, high)


def _at_most(value: Any, field: str, high: int) -> None:
    _require(
        value <= high,
        field,
        f"is {value:,}, above the {high:,} any model here can have",
        f"give {field} as a whole number ≤ {high:,}",
    )


def _validate_softmax_attention(att: AttentionSpec, prefix: str) -> None:
    _positive(att.num_heads, f"{prefix}.num_heads")
    _positive(att.num_kv_heads, f"{prefix}.num_kv_heads")
    _positive(att.head_dim, f"{prefix}.head_dim")
    if att.is_mla:
        for name in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            _positive(getattr(att, name), f"{prefix}.{name}", f"{name} (MLA needs all latent dims)")
    else:
        _require(
            att.num_heads % att.num_kv_heads == 0,
            f"{prefix}.num_kv_heads",
            f"{att.num_heads} query heads are not a multiple of {att.num_kv_heads} KV heads",
            "choose num_kv_heads dividing num_heads",
        )
    for name in ("q_lora_rank", "o_lora_rank", "index_topk", "v_head_dim"):
        if getattr(att, name) is not None:
            _positive(getattr(att, name), f"{prefix}.{name}")
    for name in ("o_groups", "kv_compress_ratio", "compressed_ratio"):
        _positive(getattr(att, name), f"{prefix}.{name}")
    _require(
        att.attention_experts == 0 or att.attention_experts >= att.num_heads // att.num_kv_heads,
        f"{prefix}.attention_experts",
        f"{att.attention_experts} attention experts but each token uses {att.num_heads // att.num_kv_heads}",
        "give at least num_heads ÷ num_kv_heads attention experts (0: none)",
    )
    if att.o_lora_rank is not None:
        _require(
            (att.num_heads * att.value_head_dim) % att.o_groups == 0,
            f"{prefix}.o_groups",
            f"{att.num_heads} heads × {att.value_head_dim} do not split into {att.o_groups} groups",
            "choose o_groups dividing the output width",
        )
    if att.index_topk is not None:
        _positive(att.index_heads, f"{prefix}.index_heads", "the indexer heads (sparse attention needs them)")
        _positive(att.index_head_dim, f"{prefix}.index_head_dim", "the indexer head width")


def _validate_attention(spec: ModelSpec) -> None:
    att = spec.attention
    if any(kind != "linear" for kind in spec.layer_attention):
        _validate_softmax_attention(att, "attention")
    if spec.full_attention is not None:
        _validate_softmax_attention(spec.full_attention, "full_attention")
    if "compressed" in spec.layer_attention:
        _require(
            att.compressed_ratio > 1,
            "attention.compressed_ratio",
            f"compressed layers need a compression ratio above 1, got {att.compressed_ratio}",
            "set compressed_ratio (tokens per cached entry) or make those layers full attention",
        )
    if "sliding" in spec.layer_attention:
        _positive(att.sliding_window, "attention.sliding_window", "the window (sliding layers need one)")
    if "linear" in spec.layer_attention:
        lin = spec.linear_attention
        _require(
            lin is not None,
            "linear_attention",
            "the layer pattern has linear-attention layers but no linear_attention section",
            "add linear_attention (key/value heads and head dims) or make those layers full attention",
        )
        assert lin is not None
        for name in ("num_key_heads", "num_value_heads", "key_head_dim", "value_head_dim", "conv_kernel"):
            _positive(getattr(lin, name), f"linear_attention.{name}")


def validate_spec(spec: ModelSpec) -> ModelSpec:
    """Check that `spec` describes a buildable model; return it unchanged or raise MoesimError.

    The error names the offending field and how to fix it (top-k above the expert count, non-positive
    sizes, inconsistent layer pattern, MoE layers without experts, bad grouping, unknown weight format).
    """
    _require(bool(spec.name), "name", "is empty", "give the model a name")
    _positive(spec.hidden, "hidden")
    _positive(spec.vocab, "vocab")
    _require(
        len(spec.layer_attention) == len(spec.layer_ffn),
        "layer_attention",
        f"has {len(spec.layer_attention)} entries but layer_ffn has {len(spec.layer_ffn)}",
        "give one attention kind and one FFN kind per layer",
    )
    _require(spec.n_layers > 0, "layers", "the model has no layers", "give at least one layer")
    for i, kind in enumerate(spec.layer_attention):
        _require(
            kind in ATTENTION_KINDS,
            "layer_attention",
            f"layer {i} has unknown kind {kind!r}",
            f"use one of {', '.join(ATTENTION_KINDS)}",
        )
    for i, ffn_kind in enumerate(spec.layer_ffn):
        _require(
            ffn_kind in FFN_KINDS,
            "layer_ffn",
            f"layer {i} has unknown kind {ffn_kind!r}",
            "use 'dense' or 'moe'",
        )
    _validate_attention(spec)
    for name in ("n_experts", "top_k", "expert_width", "n_shared_experts", "shared_expert_width"):
        _non_negative(getattr(spec, name), name, MAX_EXPERTS if name in ("n_experts", "top_k") else MAX_COUNT)
    _non_negative(spec.dense_ffn_width, "dense_ffn_width")
    _non_negative(spec.mtp_layers, "mtp_layers")
    _non_negative(spec.norms_per_layer, "norms_per_layer")
    if spec.n_dense_layers:
        _positive(spec.dense_ffn_width, "dense_ffn_width", "the dense FFN width (the model has dense layers)")
    if spec.is_moe or spec.n_experts:
        _require(
            spec.n_experts > 0,
            "n_experts",
            f"{spec.n_moe_layers} MoE layers but no routed experts",
            "set --experts above 0, or make those layers dense",
        )
        _positive(spec.top_k, "top_k", "top-k (experts per token)")
        _positive(spec.expert_width, "expert_width", "the expert width")
        _require(
            spec.top_k <= spec.n_experts,
            "top_k",
            f"top-k {spec.top_k} exceeds the {spec.n_experts} routed experts",
            "choose top_k ≤ n_experts",
        )
        _positive(spec.n_groups, "n_groups")
        _positive(spec.topk_groups, "topk_groups")
        _require(
            spec.n_experts % spec.n_groups == 0,
            "n_groups",
            f"{spec.n_experts} experts do not split evenly into {spec.n_groups} groups",
            "choose n_groups dividing n_experts (1 for no grouping)",
        )
        _require(
            spec.topk_groups <= spec.n_groups,
            "topk_groups",
            f"topk_groups {spec.topk_groups} exceeds n_groups {spec.n_groups}",
            "choose topk_groups ≤ n_groups",
        )
        per_group = spec.n_experts // spec.n_groups
        _require(
            spec.top_k <= spec.topk_groups * per_group,
            "top_k",
            f"top-k {spec.top_k} exceeds the {spec.topk_groups * per_group} experts in the chosen groups",
            "raise topk_groups or lower top_k",
        )
    if spec.n_shared_experts:
        _positive(spec.shared_expert_width, "shared_expert_width", "the shared expert width")
    _require(
        spec.published_active_counts in ("embedding_and_lm_head", "lm_head", "neither"),
        "published_active_counts",
        f"unknown convention {spec.published_active_counts!r}",
        "use embedding_and_lm_head, lm_head or neither",
    )
    _require(
        spec.router_score in ("softmax", "sigmoid"),
        "router_score",
        f"unknown router score {spec.router_score!r}",
        "use 'softmax' or 'sigmoid'",
    )
    weight_format(spec.weight_format)
    if spec.expert_weight_format is not None:
        try:
            weight_format(spec.expert_weight_format)
        except MoesimError as err:
            raise MoesimError("expert_weight_format", err.problem, err.fix) from None
    return spec


__all__ = [
    "validate_spec",
]
