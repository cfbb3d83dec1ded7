"""The DeepSeek lineage: multi-head latent attention (MLA), a dense prefix, grouped routing, MTP layers.

DeepSeek-V2 / V3 / R1, Kimi-K2 (`kimi_k2`, DeepseekV3 architecture), DeepSeek-V3.2 and GLM-5
(`glm_moe_dsa`) with their sparse-attention indexer, GLM-4.7-Flash (`glm4_moe_lite`) and DeepSeek-V4 with
compressed attention. Keys and defaults: transformers 5.23 `configuration_deepseek_v2.py`,
`configuration_deepseek_v3.py`, `configuration_deepseek_v32.py`, `configuration_glm_moe_dsa.py`,
`configuration_glm4_moe_lite.py`, `configuration_deepseek_v4.py` and their modelling files.
"""

from __future__ import annotations

from typing import Any

from moesim.simulator.models.hf import reader as r
from moesim.simulator.models.hf.reader import HfConfig


def _moe(
    cfg: HfConfig, n_layers: int, first_dense: int, scoring: str = "sigmoid", topk_method: str = "noaux_tc"
) -> dict[str, Any]:
    """A DeepSeek-style MoE block; noaux_tc routing keeps a score-correction bias per expert (a stored
    tensor in checkpoints)."""
    block = r.moe_block(cfg, n_layers, first_dense, scoring_default=scoring)
    return block | {"router_bias": cfg.get("topk_method", topk_method) == "noaux_tc"}


def deepseek(cfg: HfConfig, family: str) -> dict[str, Any]:
    """DeepSeek-V2 / V3 / R1, Kimi-K2 and GLM-4.7-Flash: MLA on every layer."""
    n = cfg.first_integer(r.LAYER_KEYS)
    if family == "deepseek_v2":  # DeepseekV2Config: no dense prefix, softmax scores, greedy top-k
        moe = _moe(cfg, n, 0, "softmax", "greedy")
    else:
        moe = _moe(cfg, n, 1 if family == "glm4_moe_lite" else 3)
    return r.base(
        cfg,
        family,
        layer_attention=("full",) * n,
        attention=r.mla(cfg),
        **moe,
    )


def deepseek_sparse(cfg: HfConfig, family: str) -> dict[str, Any]:
    """DeepSeek-V3.2 and GLM-5 (`glm_moe_dsa`): MLA whose queries attend to the indexer's top-k entries."""
    n = cfg.first_integer(r.LAYER_KEYS)
    kinds = r.attention_kinds(cfg, n, lambda i: "full")
    shared = [kind for kind in cfg.sequence("indexer_types", n) or [] if kind == "shared"]
    if shared:
        cfg.assume(
            f"indexer_types: {len(shared)} layers reuse the previous layer's top-k; modelled as running "
            "their own indexer (its weights and scan counted in every layer)"
        )
    return r.base(
        cfg,
        family,
        layer_attention=tuple(kinds),
        attention=r.mla(cfg, **r.indexer(cfg)),
        **_moe(cfg, n, 3),
    )


def deepseek_v4(cfg: HfConfig, family: str) -> dict[str, Any]:
    """DeepSeek-V4: one shared key/value head of width head_dim, low-rank query, grouped low-rank output,
    per-head sinks; CSA layers cache one entry per 4 tokens and attend to the indexer's top-k, HCA layers
    one entry per 128 tokens; both also attend to an uncompressed sliding window."""
    n = cfg.first_integer(r.LAYER_KEYS)
    kinds = r.attention_kinds(cfg, n, lambda i: "full")
    rates = cfg.get("compress_rates", {"compressed_sparse_attention": 4, "heavily_compressed_attention": 128})
    hidden = cfg.first_integer(r.HIDDEN_KEYS)
    attention = r.gqa(
        cfg,
        hidden,
        q_lora_rank=cfg.integer("q_lora_rank"),
        o_lora_rank=cfg.integer("o_lora_rank"),
        o_groups=cfg.integer("o_groups", 8),
        shared_kv=True,
        attention_sinks=True,
        sliding_window=cfg.integer("sliding_window", 128),
        kv_compress_ratio=int(rates.get("compressed_sparse_attention", 4)),
        compressed_ratio=int(rates.get("heavily_compressed_attention", 128)),
        **r.indexer(cfg),
    )
    hc = cfg.integer("hc_mult", 1)
    if hc > 1:
        cfg.assume(
            f"hc_mult {hc}: hyper-connections keep {hc} residual streams; their mixing weights and the "
            "wider residual traffic are not modelled (under 0.1% of parameters)"
        )
    cfg.assume(
        "compressed attention: the KV compressors' projections (a few MB per layer) are not counted; "
        "hash-routed MoE layers are modelled as top-k routed layers"
    )
    moe = _moe(cfg, n, 0)
    moe.pop("n_groups"), moe.pop("topk_groups")
    return r.base(cfg, family, layer_attention=tuple(kinds), attention=attention, **moe)
