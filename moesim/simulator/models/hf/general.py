"""The general reader: dense families and any `model_type` without its own reader, from common key names.

It reads what most configs share (hidden / layers / heads / vocabulary, MLA latents, `layer_types`,
`mlp_layer_types`, the expert spellings, sliding windows, sparse-attention indexers, Gated DeltaNet keys),
states every assumption it makes, and refuses with the missing key named when a shape cannot be determined.
"""

from __future__ import annotations

from typing import Any

from moesim.simulator.models.hf import reader as r
from moesim.simulator.models.hf.qwen import qwen_attention
from moesim.simulator.models.hf.reader import HfConfig


def dense(cfg: HfConfig, family: str) -> dict[str, Any]:
    """Dense Qwen2 (QKV bias), Qwen3 (QK-norm), Llama and Mistral: the draft models."""
    if family in ("qwen2", "qwen3"):
        n, kinds, attention = qwen_attention(cfg, family)
    else:
        n, kinds, attention = r.softmax_attention(cfg)
    return r.base(
        cfg,
        family,
        layer_attention=tuple(kinds),
        layer_ffn=("dense",) * n,
        attention=attention,
        dense_ffn_width=cfg.first_integer(("intermediate_size", "ffn_hidden_size")),
    )


def general(cfg: HfConfig, family: str) -> dict[str, Any]:
    """Any other architecture, read from the common keys with its assumptions stated."""
    cfg.assume(
        f"model_type {family!r} has no dedicated reader: read from common key names; attention biases, "
        "QK-norms, router biases and extra norms are assumed absent (they are under 1% of parameters)"
    )
    n = cfg.first_integer(r.LAYER_KEYS)
    hidden = cfg.first_integer(r.HIDDEN_KEYS)
    kinds = r.attention_kinds(cfg, n, r.sliding_rule(cfg))
    extra: dict[str, Any] = {"sliding_window": r.window(cfg, kinds)}
    if cfg.has("index_topk"):
        extra |= r.indexer(cfg)
    attention = r.mla(cfg, **extra) if cfg.has("kv_lora_rank") else r.gqa(cfg, hidden, **extra)
    fields: dict[str, Any] = {}
    if "linear" in kinds:
        cfg.assume("linear-attention layers read as Gated DeltaNet (linear_* keys)")
        fields["linear_attention"] = r.gated_deltanet(cfg)
    moe = r.moe_block(cfg, n)
    if moe.get("n_experts") and not any(cfg.has(key) for key in r.EXPERT_WIDTH_KEYS):
        cfg.assume("expert width taken from intermediate_size (no moe_intermediate_size key)")
    return r.base(cfg, family, layer_attention=tuple(kinds), attention=attention, **moe, **fields)
