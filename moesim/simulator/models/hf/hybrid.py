"""Hybrid MoE families whose non-softmax layers are not Gated DeltaNet, mapped onto LinearAttentionSpec.

LinearAttentionSpec describes a layer as in_proj (2·key + 2·value widths, plus two scalars per value head),
a depthwise causal conv over (2·key + value) channels, a per-value-head state of key_head_dim ×
value_head_dim, and out_proj. Each mapping below keeps the projections exact and the state size right;
what differs is stated as an assumption. Keys: transformers 5.23 `configuration_minimax.py`,
`configuration_granitemoehybrid.py`, `configuration_lfm2_moe.py`.
"""

from __future__ import annotations

from typing import Any

from moesim.simulator.models.hf import reader as r
from moesim.simulator.models.hf.reader import HfConfig
from moesim.simulator.models.spec import LinearAttentionSpec


def minimax(cfg: HfConfig, family: str) -> dict[str, Any]:
    """MiniMax-Text-01: lightning (linear) attention layers with a full-attention layer every eighth.

    Lightning attention projects q, k, v and an output gate from the hidden state, keeps a head_dim ×
    head_dim state per head and has no conv: mapped with key = value = heads × head_dim and a
    1-tap conv (its few weights are the only extra parameters)."""
    n = cfg.integer("num_hidden_layers")
    hidden = cfg.integer("hidden_size")
    kinds = r.attention_kinds(cfg, n, lambda i: "full" if i % 8 == 7 else "linear")
    attention = r.gqa(cfg, hidden)
    heads, head_dim = attention.num_heads, attention.head_dim
    cfg.assume(
        "lightning attention mapped onto the linear-attention layer (q, k, v, gate projections; 1-tap conv)"
    )
    return r.base(
        cfg,
        family,
        layer_attention=tuple(kinds),
        attention=attention,
        linear_attention=LinearAttentionSpec(heads, heads, head_dim, head_dim, conv_kernel=1),
        **r.moe_block(cfg, n),
    )


def granitemoehybrid(cfg: HfConfig, family: str) -> dict[str, Any]:
    """Granite-4.0 hybrid: Mamba-2 layers and a few attention layers, MoE (or dense) MLPs with a shared MLP.

    Mamba-2 maps exactly: value heads = mamba_n_heads of mamba_d_head, key heads = mamba_n_groups of
    mamba_d_state (B and C), state n_heads × d_state × d_head; in_proj carries one dt per head where the
    mapping has two scalars per head."""
    n = cfg.integer("num_hidden_layers")
    hidden = cfg.integer("hidden_size")
    kinds = r.attention_kinds(cfg, n, lambda i: "linear")
    d_inner = cfg.integer("mamba_expand", 2) * hidden
    n_heads = cfg.integer("mamba_n_heads", 128)
    mamba = LinearAttentionSpec(
        num_key_heads=cfg.integer("mamba_n_groups", 1),
        num_value_heads=n_heads,
        key_head_dim=cfg.integer("mamba_d_state", 256),
        value_head_dim=cfg.integer("mamba_d_head", d_inner // n_heads),
        conv_kernel=cfg.integer("mamba_d_conv", 4),
    )
    cfg.assume("Mamba-2 layers mapped onto the linear-attention layer (same projections, conv and state)")
    spec = r.base(
        cfg,
        family,
        layer_attention=tuple(kinds),
        attention=r.gqa(
            cfg,
            hidden,
            bias=cfg.boolean("attention_bias", False),
            output_bias=cfg.boolean("attention_bias", False),
        ),
        linear_attention=mamba,
        **r.moe_block(cfg, n),
    )
    if not spec.get("n_experts"):  # dense Granite-4 hybrids: the shared MLP is the FFN
        spec["dense_ffn_width"] = cfg.integer("shared_intermediate_size")
    return spec


def lfm2_moe(cfg: HfConfig, family: str) -> dict[str, Any]:
    """LFM2-MoE: short gated-conv layers and a few GQA layers (QK-norm), dense first layers, expert bias.

    A short-conv layer projects h → 3h (B, C, x), runs a depthwise conv of conv_L_cache taps over x and
    projects back: mapped as key width h/2 in heads of 1 (so in_proj is 2·h/2 + 2·h = 3h rows) and one
    value head of width h (so out_proj is h × h and the recurrent state is tiny); the conv then spans 2h
    channels instead of h (a few thousand extra weights)."""
    n = cfg.integer("num_hidden_layers")
    hidden = cfg.integer("hidden_size")
    types = cfg.sequence("layer_types", n)
    if types is None:
        raise r.MoesimError(
            cfg.field("layer_types"), "is missing", "LFM2 configs list conv / full_attention per layer"
        )
    kinds = r.attention_kinds(cfg, n, lambda i: "full")
    conv = LinearAttentionSpec(hidden // 2, 1, 1, hidden, conv_kernel=cfg.integer("conv_L_cache", 3))
    cfg.assume(
        "short-conv layers mapped onto the linear-attention layer (3h in-projection, h×h out-projection)"
    )
    return r.base(
        cfg,
        family,
        layer_attention=tuple(kinds),
        attention=r.gqa(cfg, hidden, qk_norm=True),
        linear_attention=conv,
        router_bias=cfg.boolean("use_expert_bias", True),
        tied_embeddings=cfg.boolean("tie_word_embeddings", True),
        **r.moe_block(cfg, n, first_dense=2),
    )
