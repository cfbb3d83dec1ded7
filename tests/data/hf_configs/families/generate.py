"""Write one real-shaped config.json per transformers MoE family into this folder (run by hand).

Each file is `ConfigClass(**SHAPES.get(model_type, {})).to_dict()` from transformers 5.23: the class
defaults are the shapes of the family's reference checkpoint; SHAPES sets the MoE variant where the
defaults describe a dense or toy model. Tests read these files without transformers installed.

    python tests/data/hf_configs/families/generate.py
"""

from __future__ import annotations

import json
from pathlib import Path

FAMILIES = [
    "deepseek_v2",
    "deepseek_v3",
    "deepseek_v32",
    "deepseek_v4",
    "kimi_k25",
    "qwen3_vl_moe",
    "qwen3_omni_moe",
    "glm4v_moe",
    "llama4",
    "qwen2_moe",
    "qwen3_moe",
    "qwen3_next",
    "qwen3_5_moe",
    "glm4_moe",
    "glm4_moe_lite",
    "glm_moe_dsa",
    "minimax",
    "minimax_m2",
    "mimo_v2_flash",
    "gemma4",
    "gpt_oss",
    "mixtral",
    "phimoe",
    "olmoe",
    "flex_olmo",
    "jetmoe",
    "granitemoe",
    "granitemoeshared",
    "granitemoehybrid",
    "granitemoe_swa",
    "ernie4_5_moe",
    "hunyuan_v1_moe",
    "lfm2_moe",
    "exaone_moe",
    "afmoe",
    "cohere2_moe",
]

# Variants where the class defaults are not an MoE checkpoint's shape (values from the public
# configs of the models named).
SHAPES: dict[str, dict] = {
    # Gemma-4-26B-A4B-style MoE: 128 experts of width 704, top-8, beside a dense MLP of 2112.
    "gemma4": {
        "text_config": {
            "hidden_size": 2816,
            "intermediate_size": 2112,
            "num_hidden_layers": 30,
            "num_attention_heads": 16,
            "num_key_value_heads": 8,
            "head_dim": 256,
            "global_head_dim": 512,
            "num_global_key_value_heads": 2,
            "attention_k_eq_v": True,
            "hidden_size_per_layer_input": 0,
            "vocab_size_per_layer_input": 262144,
            "enable_moe_block": True,
            "num_experts": 128,
            "top_k_experts": 8,
            "moe_intermediate_size": 704,
            "sliding_window": 1024,
        }
    },
    # Hunyuan-A13B: 64 experts of 3072, top-8, one shared MLP, GQA 32/8.
    "hunyuan_v1_moe": {
        "hidden_size": 4096,
        "intermediate_size": 3072,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "num_experts": 64,
        "moe_topk": 8,
        "vocab_size": 128167,
    },
    # LFM2-8B-A1B: 24 layers, 6 of them attention.
    "lfm2_moe": {
        "num_hidden_layers": 24,
        "layer_types": ["full_attention" if i in (2, 6, 10, 14, 18, 21) else "conv" for i in range(24)],
    },
    "granitemoeshared": {"shared_intermediate_size": 1024},
    # DeepseekV2Config leaves top-k unset; DeepSeek-V2(-Lite) routes each token to 6 experts.
    "deepseek_v2": {"num_experts_per_tok": 6},
}


def main() -> None:
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    here = Path(__file__).parent
    for family in FAMILIES:
        config = CONFIG_MAPPING[family](**SHAPES.get(family, {})).to_dict()
        for key in ("transformers_version", "architectures", "id2label", "label2id"):
            config.pop(key, None)
        (here / f"{family}.json").write_text(json.dumps(config, indent=1, sort_keys=True) + "\n")
        print(f"wrote {family}.json")


if __name__ == "__main__":
    main()
