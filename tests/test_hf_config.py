"""Hugging Face config import: each family imports to the catalogue's geometry; errors name the field."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from moesim.errors import MoesimError
from moesim.simulator.models.catalogue import load_model
from moesim.simulator.models.hf import load_hf_config, spec_from_hf_config
from moesim.simulator.models.weights import param_counts

CONFIGS = Path(__file__).parent / "data" / "hf_configs"
NAMES = sorted(path.stem for path in CONFIGS.glob("*.json"))
METADATA = (
    "name",
    "published_total_params",
    "published_active_params",
    "published_total_includes_mtp",
    "published_active_counts",
    "params_tolerance_reason",
    "notes",
    "source",
    "assumptions",
    "ignored_keys",
)


def _config(name: str) -> dict[str, Any]:
    return json.loads((CONFIGS / f"{name}.json").read_text())


def test_every_family_has_a_test_config() -> None:
    families = {_config(name)["model_type"] for name in NAMES}
    assert families >= {
        "mixtral", "qwen2_moe", "qwen3_moe", "qwen3_next", "deepseek_v3", "kimi_k2", "gpt_oss", "glm4_moe",
        "llama4", "olmoe", "dbrx", "grok-1", "qwen2", "qwen3", "llama",
    }  # fmt: skip


@pytest.mark.parametrize("name", NAMES)
def test_import_equals_catalogue_entry(name: str) -> None:
    imported = load_hf_config(CONFIGS / f"{name}.json")
    catalogue = load_model(name)
    assert imported.name == name
    assert param_counts(imported) == param_counts(catalogue)
    assert replace(imported, **{key: getattr(catalogue, key) for key in METADATA}) == catalogue


# Parameter counts of the real transformers modules, built on the meta device (no memory): the strongest
# check that norms, biases, QK-norms, MLA norms, gates and sinks are all counted exactly.
HF_CLASSES = [name for name in NAMES if _config(name)["model_type"] != "grok-1"]


@pytest.mark.torch
@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.slow) if n == "dbrx" else n for n in HF_CLASSES]
)
def test_param_count_equals_transformers_module(name: str) -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = _config(name)
    config.pop("quantization_config", None)
    config.pop("auto_map", None)
    if config["model_type"] == "kimi_k2":
        config["model_type"] = "deepseek_v3"
    if config["model_type"] == "llama4":
        text = {k: v for k, v in config["text_config"].items() if k != "attn_temperature_tuning"}
        hf_config = transformers.Llama4TextConfig(**text)
        model_cls = transformers.Llama4ForCausalLM
    else:
        hf_config = transformers.AutoConfig.for_model(**config)
        model_cls = transformers.AutoModelForCausalLM.from_config
    try:
        with torch.device("meta"):
            model = model_cls(hf_config)
    except Exception as err:  # a transformers version without this family
        pytest.skip(f"transformers cannot build {name}: {err}")
    stored = sum(p.numel() for p in model.parameters())
    # DeepSeek/GLM's score-correction bias is a buffer in transformers but a stored tensor in checkpoints.
    stored += sum(b.numel() for key, b in model.named_buffers() if "e_score_correction_bias" in key)
    assert param_counts(load_hf_config(CONFIGS / f"{name}.json")).total == stored
    layer_types = getattr(hf_config, "layer_types", None)
    if layer_types:  # transformers' own per-layer attention kinds
        kinds = {"full_attention": "full", "sliding_attention": "sliding", "chunked_attention": "sliding",
                 "linear_attention": "linear"}  # fmt: skip
        imported = load_hf_config(CONFIGS / f"{name}.json").layer_attention
        assert tuple(kinds[kind] for kind in layer_types) == imported


def test_qwen_moe_layer_rules() -> None:
    config = _config("qwen3-30b-a3b") | {
        "num_hidden_layers": 6,
        "decoder_sparse_step": 2,
        "mlp_only_layers": [5],
    }
    spec = spec_from_hf_config(config, "toy")
    assert spec.layer_ffn == ("dense", "moe", "dense", "moe", "dense", "dense")
    assert spec.dense_ffn_width == 6144


def test_sliding_window_rules() -> None:
    mixtral = spec_from_hf_config(_config("mixtral-8x7b") | {"sliding_window": 4096}, "mistral-window")
    assert set(mixtral.layer_attention) == {"sliding"} and mixtral.attention.sliding_window == 4096
    qwen = spec_from_hf_config(_config("qwen2-0.5b"), "qwen")
    assert set(qwen.layer_attention) == {"full"}  # use_sliding_window is false
    oss = load_hf_config(CONFIGS / "gpt-oss-20b.json")
    assert oss.layer_attention[:4] == ("sliding", "full", "sliding", "full")
    scout = load_hf_config(CONFIGS / "llama-4-scout-17b-16e.json")
    assert scout.layer_attention[:4] == ("sliding", "sliding", "sliding", "full")
    assert scout.attention.sliding_window == 8192


def test_weight_formats_from_quantization_config() -> None:
    deepseek = load_hf_config(CONFIGS / "deepseek-v3.json")
    assert deepseek.weight_format == "fp8" and deepseek.expert_weight_format is None
    oss = load_hf_config(CONFIGS / "gpt-oss-120b.json")
    assert (oss.weight_format, oss.expert_weight_format) == ("bf16", "mxfp4")
    odd_block = _config("deepseek-v3")
    odd_block["quantization_config"]["weight_block_size"] = [1, 128]
    with pytest.raises(MoesimError) as err:
        spec_from_hf_config(odd_block, "x")
    assert err.value.field.endswith("weight_block_size")
    with pytest.raises(MoesimError) as err:
        spec_from_hf_config(
            _config("mixtral-8x7b") | {"quantization_config": {"quant_method": "bitnet"}}, "x"
        )
    assert err.value.field.endswith("quant_method")


def test_error_paths(tmp_path: Path) -> None:
    with pytest.raises(
        MoesimError
    ) as err:  # an unknown family goes to the general reader, which names the key
        spec_from_hf_config({"model_type": "falcon"}, "x")
    assert err.value.field == "config.json:num_hidden_layers"
    assert "n_layers" in str(err.value)  # the aliases it looked for
    with pytest.raises(MoesimError) as err:
        spec_from_hf_config({"vocab_size": 10}, "x")
    assert err.value.field.endswith("model_type")
    config = _config("olmoe-1b-7b")
    del config["num_experts_per_tok"]
    config["num_experts"] = 4
    with pytest.raises(MoesimError) as err:
        spec_from_hf_config(config | {"num_experts_per_tok": 8}, "x", origin="cfg.json")
    assert err.value.field == "cfg.json:top_k"
    with pytest.raises(MoesimError) as err:
        spec_from_hf_config(_config("mixtral-8x7b") | {"hidden_size": None}, "x", origin="cfg.json")
    assert err.value.field == "cfg.json:hidden_size"
    with pytest.raises(MoesimError) as err:
        spec_from_hf_config(_config("gpt-oss-20b") | {"layer_types": ["full_attention"]}, "x")
    assert err.value.field.endswith("layer_types")
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    with pytest.raises(MoesimError, match="not valid JSON"):
        load_hf_config(bad)
