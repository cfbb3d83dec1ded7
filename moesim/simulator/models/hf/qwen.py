"""The Qwen MoE families: Qwen2-MoE, Qwen3-MoE, Qwen3-Next and Qwen3.5-MoE (hybrid Gated DeltaNet).

The vision-language and omni wrappers (qwen3_vl_moe, qwen3_omni_moe, qwen3_5_moe) nest these under
`text_config`. Keys and defaults: transformers 5.23 `configuration_qwen2_moe.py`,
`configuration_qwen3_moe.py`, `configuration_qwen3_next.py`, `configuration_qwen3_5_moe.py`.
"""

from __future__ import annotations

from typing import Any

from moesim.simulator.models.hf import reader as r
from moesim.simulator.models.hf.reader import HfConfig
from moesim.simulator.models.spec import AttentionLayerKind, AttentionSpec


def _ffn(cfg: HfConfig, n: int) -> dict[str, Any]:
    """Qwen MoE layers (MoE unless in mlp_only_layers, every decoder_sparse_step-th); a shared expert is gated."""
    block = r.moe_block(cfg, n)
    return block | {"shared_expert_gate": bool(block.get("n_shared_experts"))}


def qwen_attention(cfg: HfConfig, family: str) -> tuple[int, list[AttentionLayerKind], AttentionSpec]:
    """Qwen2 (QKV bias, no output bias) or Qwen3 (QK-norm, optional attention_bias) softmax layers."""
    if family.startswith("qwen2"):
        return r.softmax_attention(cfg, bias_key="qkv_bias", bias_default=True, output_bias=False)
    return r.softmax_attention(cfg, qk_norm=True)


def qwen_moe(cfg: HfConfig, family: str) -> dict[str, Any]:
    """Qwen2-MoE (QKV bias, gated shared expert) and Qwen3-MoE (QK-norm, no shared expert)."""
    n, kinds, attention = qwen_attention(cfg, family)
    return r.base(cfg, family, layer_attention=tuple(kinds), attention=attention, **_ffn(cfg, n))


def qwen_next(cfg: HfConfig, family: str) -> dict[str, Any]:
    """Qwen3-Next and Qwen3.5-MoE: Gated DeltaNet layers with a gated full-attention layer every fourth."""
    n = cfg.first_integer(r.LAYER_KEYS)
    hidden = cfg.first_integer(r.HIDDEN_KEYS)
    interval = cfg.integer("full_attention_interval", 4)
    kinds = r.attention_kinds(cfg, n, lambda i: "linear" if (i + 1) % interval else "full")
    bias = cfg.boolean("attention_bias", False)
    return r.base(
        cfg,
        family,
        layer_attention=tuple(kinds),
        attention=r.gqa(cfg, hidden, bias=bias, output_bias=bias, qk_norm=True, output_gate=True),
        linear_attention=r.gated_deltanet(cfg),
        **_ffn(cfg, n),
    )
