"""What moesim understood of a model, as one JSON-ready dict (`moesim models NAME`, `simulate --json`)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from moesim.simulator.models.layers import layer_pattern
from moesim.simulator.models.sequence_state import kv_cache_bytes_per_token
from moesim.simulator.models.spec import AttentionSpec, ModelSpec, attention_for
from moesim.simulator.models.weights import param_counts, total_weight_bytes


def layer_pattern_summary(spec: ModelSpec) -> dict[str, Any]:
    """The layer pattern: kind counts, a one-line description, and the per-layer kinds."""
    attention = dict(Counter(spec.layer_attention))
    ffn = dict(Counter(spec.layer_ffn))
    text = ", ".join(f"{n} {kind}" for kind, n in attention.items()) + " attention; "
    text += ", ".join(f"{n} {kind}" for kind, n in ffn.items()) + " FFN"
    pattern = layer_pattern(spec)
    if pattern is not None and len(pattern.attention_cycle) <= 8:
        cycle = "/".join(pattern.attention_cycle)
        moe = (
            f"MoE every {pattern.moe_every} from layer {pattern.dense_prefix}"
            if pattern.moe_every
            else "no MoE"
        )
        text += f" (attention cycle {cycle}; {moe})"
    return {"text": text, "attention": list(spec.layer_attention), "ffn": list(spec.layer_ffn)}


def attention_kind(att: AttentionSpec, kind: str = "full") -> str:
    """MLA, MHA, MQA or GQA, with the sparse / compressed / gated qualifiers of layers of `kind`."""
    if att.is_mla:
        name = "MLA"
    elif att.num_kv_heads == att.num_heads:
        name = "MHA"
    elif att.num_kv_heads == 1:
        name = "MQA"
    else:
        name = "GQA"
    qualifiers = [
        text
        for flag, text in (
            (att.index_topk is not None and kind == "full", f"sparse top-{att.index_topk}"),
            (att.kv_compress_ratio > 1 and kind == "full", f"compressed ÷{att.kv_compress_ratio}"),
            (kind == "compressed", f"compressed ÷{att.compressed_ratio}"),
            (att.output_gate, "gated"),
            (att.attention_experts > 0, f"{att.attention_experts} attention experts"),
        )
        if flag
    ]
    return f"{name} ({', '.join(qualifiers)})" if qualifiers else name


def _attention(spec: ModelSpec, kind: str) -> dict[str, Any]:
    att = attention_for(spec, kind)  # type: ignore[arg-type]
    out: dict[str, Any] = {
        "kind": attention_kind(att, kind),
        "heads": att.num_heads,
        "kv_heads": att.num_kv_heads,
        "head_dim": att.head_dim,
        "kv_cache_bytes_per_token": kv_cache_bytes_per_token(spec, kind),  # type: ignore[arg-type]
    }
    windowed = kind == "sliding" or kind == "compressed" or att.kv_compress_ratio > 1
    keys = ["sliding_window"] if windowed else []
    keys += ["kv_lora_rank", "q_lora_rank"]
    keys += ["index_topk", "index_heads", "index_head_dim", "kv_compress_ratio"] if kind == "full" else []
    keys += ["compressed_ratio"] if kind == "compressed" else []
    out.update({key: getattr(att, key) for key in keys if getattr(att, key) not in (None, 0, 1)})
    return out


def model_summary(spec: ModelSpec) -> dict[str, Any]:
    """Layer pattern, attention per kind, experts, widths, weight formats, parameter and byte counts,
    and (for imported configs) the assumptions made and the config keys not read."""
    counts = param_counts(spec)
    kinds = sorted(set(spec.layer_attention) - {"linear"})
    summary: dict[str, Any] = {
        "name": spec.name,
        "family": spec.family,
        "layers": spec.n_layers,
        "layer_pattern": layer_pattern_summary(spec),
        "attention": {kind: _attention(spec, kind) for kind in kinds},
        "experts": {
            "routed": spec.n_experts,
            "top_k": spec.top_k,
            "shared": spec.n_shared_experts,
            "groups": spec.n_groups,
            "topk_groups": spec.topk_groups,
            "router_score": spec.router_score,
            "moe_layers": spec.n_moe_layers,
        },
        "widths": {
            "hidden": spec.hidden,
            "vocab": spec.vocab,
            "dense_ffn": spec.dense_ffn_width,
            "expert": spec.expert_width,
            "shared_expert": spec.shared_expert_width,
        },
        "weight_format": {
            "dense": spec.weight_format,
            "experts": spec.expert_weight_format or spec.weight_format,
        },
        "params": {
            "total": counts.total,
            "active": counts.active,
            "active_excl_embedding": counts.active_excl_embedding,
            "mtp": counts.mtp,
            "total_with_mtp": counts.total_with_mtp,
        },
        "weight_bytes": {
            "total": total_weight_bytes(spec),
            "with_mtp": total_weight_bytes(spec, include_mtp=True),
        },
        "tied_embeddings": spec.tied_embeddings,
        "mtp_layers": spec.mtp_layers,
        "assumptions": list(spec.assumptions),
        "ignored_keys": list(spec.ignored_keys),
    }
    if spec.linear_attention is not None and "linear" in spec.layer_attention:
        lin = spec.linear_attention
        summary["linear_attention"] = {
            "key_heads": lin.num_key_heads,
            "value_heads": lin.num_value_heads,
            "key_head_dim": lin.key_head_dim,
            "value_head_dim": lin.value_head_dim,
            "conv_kernel": lin.conv_kernel,
        }
    return summary


__all__ = ["attention_kind", "layer_pattern_summary", "model_summary"]
