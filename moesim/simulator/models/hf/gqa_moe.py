"""MoE families with softmax (MHA/GQA) attention on every layer: one reader each, sharing `_read`.

Keys and defaults from each family's transformers 5.23 `configuration_<family>.py`; layer rules, biases,
norms and gates from its `modeling_<family>.py`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from moesim.simulator.models.hf import reader as r
from moesim.simulator.models.hf.reader import HfConfig
from moesim.simulator.models.spec import AttentionLayerKind, AttentionSpec


def _read(
    cfg: HfConfig,
    family: str,
    *,
    rule: Callable[[int], AttentionLayerKind] | None = None,
    first_dense: int = 0,
    shared_default: int | None = None,
    attention: dict[str, Any] | None = None,
    bias_key: str = "attention_bias",
    bias_default: bool = False,
    output_bias: bool = True,
    **fields: Any,
) -> dict[str, Any]:
    """A GQA MoE model: attention kinds from `layer_types` (or `rule`), attention bias from `bias_key`."""
    n, kinds, att = r.softmax_attention(
        cfg, rule, bias_key=bias_key, bias_default=bias_default, output_bias=output_bias, **(attention or {})
    )
    moe = r.moe_block(cfg, n, first_dense, shared_default) | fields  # the family's facts win
    return r.base(cfg, family, layer_attention=tuple(kinds), attention=att, **moe)


EXPERT_DEFAULTS = {"mixtral": (8, 2), "phimoe": (16, 2), "minimax_m2": (256, 8)}
"""(num_local_experts, num_experts_per_tok) each family's transformers configuration class defaults to
(transformers 5.23: MixtralConfig, PhimoeConfig, MiniMaxM2Config): a config that omits them is still that
MoE model, as transformers would build it."""


def _expert_defaults(cfg: HfConfig, family: str) -> None:
    experts, top_k = EXPERT_DEFAULTS[family]
    for key, default in (("num_local_experts", experts), ("num_experts_per_tok", top_k)):
        if not any(
            cfg.has(alias) for alias in (r.EXPERT_KEYS if key == "num_local_experts" else r.TOP_K_KEYS)
        ):
            cfg.data[key] = default
            cfg.assume(f"{key} absent: {default}, the {family} configuration's default in transformers 5.23")


def mixtral(cfg: HfConfig, family: str) -> dict[str, Any]:
    """Mixtral; MiniMax-M2 (QK-norm over the whole projection, score-correction bias); PhiMoE (LayerNorm
    with biases, so four norm vectors per block). Expert counts absent: the family's defaults."""
    _expert_defaults(cfg, family)
    if family == "minimax_m2":
        return _read(cfg, family, attention={"qk_norm": True, "qk_norm_per_head": False}, router_bias=True)
    if family == "phimoe":
        return _read(cfg, family, norms_per_layer=4)
    return _read(cfg, family)


def olmoe(cfg: HfConfig, family: str) -> dict[str, Any]:
    """OLMoE and FlexOlmo: QK-norm over the whole q and k projections."""
    return _read(cfg, family, attention={"qk_norm": True, "qk_norm_per_head": False})


def granitemoe(cfg: HfConfig, family: str) -> dict[str, Any]:
    """GraniteMoE, GraniteMoE-Shared (one shared MLP of `shared_intermediate_size`) and GraniteMoE-SWA."""
    return _read(cfg, family)


def glm4_moe(cfg: HfConfig, family: str) -> dict[str, Any]:
    """GLM-4.5 / 4.6 (and GLM-4.5V's text model): dense first layer, sigmoid routing with correction bias,
    one shared expert, q/k/v biases without an output bias."""
    return _read(
        cfg,
        family,
        first_dense=1,
        shared_default=1,  # Glm4MoeConfig default
        output_bias=False,
        attention={"qk_norm": cfg.boolean("use_qk_norm", False)},
        router_score="sigmoid",
        router_bias=True,
    )


def ernie(cfg: HfConfig, family: str) -> dict[str, Any]:
    """ERNIE-4.5-MoE: MoE from moe_layer_start_index every moe_layer_interval, `use_bias` on attention,
    shared experts of moe_num_shared_experts × moe_intermediate_size, score-correction bias."""
    return _read(cfg, family, bias_key="use_bias", router_bias=True)


def hunyuan(cfg: HfConfig, family: str) -> dict[str, Any]:
    """Hunyuan-A13B (hunyuan_v1_moe): experts and one shared MLP all `intermediate_size` wide, QK-norm."""
    spec = _read(cfg, family, attention={"qk_norm": True})
    width = spec["expert_width"]
    return {**spec, "n_shared_experts": 1, "shared_expert_width": width}


def exaone(cfg: HfConfig, family: str) -> dict[str, Any]:
    """EXAONE-MoE: 3 sliding layers then one full, QK-norm, dense first layer, correction bias."""
    return _read(
        cfg, family, rule=r.pattern_rule(4, 3), first_dense=1, attention={"qk_norm": True}, router_bias=True
    )


def afmoe(cfg: HfConfig, family: str) -> dict[str, Any]:
    """AFMoE (Arcee Trinity): gated attention (a sigmoid gate as wide as the queries), QK-norm,
    sandwich norms (four per block), dense first layers, expert bias."""
    every = cfg.integer("global_attn_every_n_layers", 4)
    return _read(
        cfg,
        family,
        rule=r.pattern_rule(every, every - 1),
        first_dense=1,
        attention={"qk_norm": True, "output_gate": True},
        norms_per_layer=4,
        router_bias=True,
    )


def cohere2_moe(cfg: HfConfig, family: str) -> dict[str, Any]:
    """Command-A-style MoE: attention and MoE run in parallel off one norm per block; tied embeddings."""
    return _read(
        cfg, family, rule=r.pattern_rule(cfg.integer("sliding_window_pattern", 4), 3), norms_per_layer=1
    )


def mimo_v2_flash(cfg: HfConfig, family: str) -> dict[str, Any]:
    """MiMo-V2-Flash: value heads narrower than query/key heads; sliding layers have twice the KV heads
    and per-head sinks; dense first layer; correction bias."""
    spec = _read(cfg, family, first_dense=1, router_bias=True)
    full: AttentionSpec = spec["attention"]
    value = cfg.integer("v_head_dim", full.head_dim)
    full = replace(full, v_head_dim=value if value != full.head_dim else None)
    sliding = replace(full, num_kv_heads=2 * full.num_kv_heads, attention_sinks=True)
    if "sliding" not in spec["layer_attention"]:
        return {**spec, "attention": full}
    return {**spec, "attention": sliding, "full_attention": full}


def gpt_oss(cfg: HfConfig, family: str) -> dict[str, Any]:
    """gpt-oss: alternating sliding / full layers, biases everywhere, sinks, MXFP4 experts."""
    return _read(
        cfg,
        family,
        bias_default=True,
        rule=lambda i: "sliding" if (i + 1) % 2 else "full",
        attention={"attention_sinks": True},
        expert_bias=True,
        router_bias=True,
    )


def llama4(cfg: HfConfig, family: str) -> dict[str, Any]:
    """Llama-4: chunked attention on RoPE layers (every fourth layer global, no RoPE), one shared expert
    as wide as the routed ones, MoE every `interleave_moe_layer_step` layers."""
    n = cfg.first_integer(r.LAYER_KEYS)
    chunk = cfg.integer("attention_chunk_size", None)
    interval = cfg.integer("no_rope_layer_interval", 4)
    rope = cfg.sequence("no_rope_layers", n) or [int((i + 1) % interval != 0) for i in range(n)]
    cfg.get("use_qk_norm", None)  # Llama-4's QK-norm is a parameter-free L2 norm: nothing to count

    def rule(i: int) -> AttentionLayerKind:
        return "sliding" if rope[i] and chunk else "full"

    spec = _read(cfg, family, rule=rule, router_score="sigmoid")
    window = chunk if "sliding" in spec["layer_attention"] else None
    att = replace(spec["attention"], sliding_window=window)
    width = spec["expert_width"]
    dense = cfg.integer("intermediate_size_mlp") if "dense" in spec["layer_ffn"] else 0
    return {
        **spec,
        "attention": att,
        "n_shared_experts": 1,
        "shared_expert_width": width,
        "dense_ffn_width": dense,
    }


def dbrx(cfg: HfConfig, family: str) -> dict[str, Any]:
    """DBRX: its own key names (d_model, n_heads, n_layers, attn_config, ffn_config)."""
    attn, ffn = cfg.sub("attn_config"), cfg.sub("ffn_config")
    hidden, heads, n = cfg.integer("d_model"), cfg.integer("n_heads"), cfg.integer("n_layers")
    return r.base(
        cfg,
        family,
        layer_attention=("full",) * n,
        layer_ffn=("moe",) * n,
        attention=AttentionSpec(
            num_heads=heads, num_kv_heads=attn.integer("kv_n_heads", 1), head_dim=hidden // heads
        ),
        n_experts=ffn.integer("moe_num_experts", 4),
        top_k=ffn.integer("moe_top_k", 1),
        expert_width=ffn.integer("ffn_hidden_size", 3584),
    )


def grok(cfg: HfConfig, family: str) -> dict[str, Any]:
    """Grok-1 in the community Hugging Face format (no official config exists): tied embedding, 4 norms/block."""
    return _read(cfg, "grok-1", norms_per_layer=4, tied_embeddings=cfg.boolean("tie_word_embeddings", True))


def jetmoe(cfg: HfConfig, family: str) -> dict[str, Any]:
    """JetMoE: mixture-of-attention (each of num_local_experts attention experts owns a query and an output
    projection; top-k of them run per token, sharing one key/value projection) and MoE MLPs."""
    n = cfg.integer("num_hidden_layers")
    top_k = cfg.integer("num_experts_per_tok", 2)
    kv_heads, head_dim = cfg.integer("num_key_value_heads", 16), cfg.integer("kv_channels", 128)
    n_experts = cfg.integer("num_local_experts", 8)
    cfg.assume(
        f"mixture of attention: modelled as GQA with {top_k * kv_heads} query heads (the top-{top_k} "
        f"attention experts' heads); the other {n_experts - top_k} attention experts' q/o weights are "
        "stored but a step reads only the chosen ones' (exact at batch 1, low at large batch)"
    )
    return r.base(
        cfg,
        family,
        layer_attention=("full",) * n,
        layer_ffn=("moe",) * n,
        attention=AttentionSpec(
            num_heads=top_k * kv_heads,
            num_kv_heads=kv_heads,
            head_dim=head_dim,
            output_bias=True,
            attention_experts=n_experts,
        ),
        n_experts=n_experts,
        top_k=top_k,
        expert_width=cfg.integer("intermediate_size"),
        tied_embeddings=cfg.boolean("tie_word_embeddings", True),
    )


def gemma4(cfg: HfConfig, family: str) -> dict[str, Any]:
    """Gemma-4: sliding layers and wider global layers (own head_dim / KV heads, key = value when
    attention_k_eq_v); with enable_moe_block, a routed MoE beside the dense MLP in every layer."""
    n = cfg.integer("num_hidden_layers")
    hidden = cfg.integer("hidden_size")
    kinds = r.attention_kinds(cfg, n, r.pattern_rule(6, 5))
    sliding = r.gqa(cfg, hidden, qk_norm=True, sliding_window=r.window(cfg, kinds))
    overrides = {int(layer): value for layer, value in cfg.mapping("per_layer_config", {}).items()}
    full_layers = [i for i, kind in enumerate(kinds) if kind == "full"]
    distinct = {json.dumps(overrides.get(i, {}), sort_keys=True) for i in full_layers}
    if len(distinct) > 1:
        cfg.assume(
            f"per_layer_config: full layers differ ({len(distinct)} variants); the first is used for all"
        )
    full_override = overrides.get(full_layers[0], {}) if full_layers else {}
    full = replace(
        sliding,
        sliding_window=None,
        head_dim=full_override.get("head_dim", cfg.integer("global_head_dim", 512)),
        num_kv_heads=full_override.get("num_key_value_heads", sliding.num_kv_heads),
        shared_kv=cfg.boolean("attention_k_eq_v", False),
    )
    per_layer_width = cfg.integer("hidden_size_per_layer_input", 0)
    if per_layer_width:
        cfg.assume(
            f"per-layer input embeddings ({cfg.integer('vocab_size_per_layer_input', 0)} × {n} × "
            f"{per_layer_width}) and their projections are not counted"
        )
    if cfg.integer("num_kv_shared_layers", 0):
        cfg.assume(
            "num_kv_shared_layers: layers that reuse another layer's KV cache are modelled with their own"
        )
    width = cfg.integer("intermediate_size")
    fields: dict[str, Any] = {"layer_ffn": ("dense",) * n, "dense_ffn_width": width}
    if cfg.boolean("enable_moe_block", False):
        cfg.assume(
            f"the dense MLP beside the MoE block (width {width}) is modelled as one always-active shared "
            "expert of that width (same weights, bytes and FLOPs)"
        )
        fields = {
            "layer_ffn": ("moe",) * n,
            "n_experts": cfg.first_integer(("num_experts",)),
            "top_k": cfg.first_integer(("top_k_experts", "num_experts_per_tok")),
            "expert_width": cfg.integer("moe_intermediate_size"),
            "n_shared_experts": 1,
            "shared_expert_width": width,
        }
    return r.base(
        cfg,
        family,
        layer_attention=tuple(kinds),
        attention=sliding,
        full_attention=full if full_layers else None,
        norms_per_layer=7 if cfg.boolean("enable_moe_block", False) else 4,
        tied_embeddings=cfg.boolean("tie_word_embeddings", True),
        **fields,
    )
