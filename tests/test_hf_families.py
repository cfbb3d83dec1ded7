"""Every transformers MoE family imports from a real-shaped config; totals match the transformers module.

The configs in data/hf_configs/families/ were written by generate.py there from transformers 5.23's own
configuration classes, so these tests exercise every family without transformers installed; the
torch-marked ones rebuild each model on the meta device and compare parameter totals.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from moesim.errors import MoesimError
from moesim.simulator.models.flops import attention_flops_per_token
from moesim.simulator.models.hf import FAMILIES, WRAPPERS, load_hf_config, spec_from_hf_config
from moesim.simulator.models.sequence_state import (
    INDEX_KEY_SCALE_BYTES,
    attended_tokens,
    cached_tokens,
    kv_cache_bytes,
    kv_cache_bytes_per_token,
    linear_state_bytes,
)
from moesim.simulator.models.summary import model_summary
from moesim.simulator.models.validate import validate_spec
from moesim.simulator.models.weights import (
    attention_projections,
    attention_vector_params,
    attention_weight_bytes,
    param_counts,
    total_weight_bytes,
)

FAMILY_DIR = Path(__file__).parent / "data" / "hf_configs" / "families"


def _generator() -> Any:
    """The module that wrote the family configs (its FAMILIES and SHAPES; transformers only in main())."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("generate_family_configs", FAMILY_DIR / "generate.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GENERATOR = _generator()
# Every MoE family of transformers 5.23 the issue names (and FlexOlmo): those the generator writes, plus DBRX (its config class cannot build a model
# in transformers 5.23; data/hf_configs/dbrx.json covers it).
ISSUE_FAMILIES = (*GENERATOR.FAMILIES, "dbrx")
FILES = sorted(path.stem for path in FAMILY_DIR.glob("*.json"))
TOWERS = ("visual", "vision", "audio", "multi_modal_projector", "mm_projector")


def _config(family: str) -> dict[str, Any]:
    return json.loads((FAMILY_DIR / f"{family}.json").read_text())


def test_every_issue_family_has_a_reader_and_a_config() -> None:
    known = set(FAMILIES) | set(WRAPPERS)
    assert set(ISSUE_FAMILIES) - known == set()
    assert set(ISSUE_FAMILIES) - set(FILES) == {"dbrx"}
    assert len(ISSUE_FAMILIES) == 37  # the 36 the issue names, and FlexOlmo


@pytest.mark.parametrize("family", FILES)
def test_family_imports_as_moe_with_its_counts(family: str) -> None:
    spec = load_hf_config(FAMILY_DIR / f"{family}.json")
    counts = param_counts(spec)
    assert spec.is_moe and spec.top_k <= spec.n_experts
    assert 0 < counts.active < counts.total
    assert counts.routed_experts_active * spec.n_experts == counts.routed_experts * spec.top_k
    summary = model_summary(spec)
    assert summary["params"]["total"] == counts.total
    assert summary["weight_bytes"]["total"] == total_weight_bytes(spec)
    assert len(summary["layer_pattern"]["attention"]) == spec.n_layers
    json.dumps(summary)  # JSON-ready


def _meta_parameter_count(config: dict[str, Any]) -> int:
    """Parameters of the transformers text model built on the meta device (towers left out)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    model_type = config["model_type"]
    hf_config = CONFIG_MAPPING[model_type](**{k: v for k, v in config.items() if k != "model_type"})
    with torch.device("meta"):
        if model_type == "qwen3_omni_moe":
            model = transformers.Qwen3OmniMoeThinkerForConditionalGeneration(hf_config.thinker_config)
        elif model_type in WRAPPERS:
            model = transformers.AutoModelForImageTextToText.from_config(hf_config)
        else:
            model = transformers.AutoModelForCausalLM.from_config(hf_config)
    stored = sum(p.numel() for key, p in model.named_parameters() if not any(t in key for t in TOWERS))
    # Score-correction / expert biases are buffers in transformers but stored tensors in checkpoints.
    corrections = ("e_score_correction_bias", "expert_bias")
    return stored + sum(b.numel() for key, b in model.named_buffers() if key.endswith(corrections))


@pytest.mark.torch
@pytest.mark.parametrize("family", FILES)
def test_param_total_matches_transformers_meta_model(family: str) -> None:
    config = _config(family)
    spec = load_hf_config(FAMILY_DIR / f"{family}.json")
    expected = _meta_parameter_count(config)
    # Unmodelled parts (DeepSeek-V4's KV compressors and hyper-connection mixers, 0.12%) stay within 0.5%
    # and are stated in the spec's assumptions.
    assert param_counts(spec).total == pytest.approx(expected, rel=0.005)


@pytest.mark.parametrize("family", FILES)
def test_config_file_is_what_the_configuration_class_writes(family: str) -> None:
    """The test data are the configuration classes' own output (regenerate with generate.py)."""
    pytest.importorskip("transformers")
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    fresh = CONFIG_MAPPING[family](**GENERATOR.SHAPES.get(family, {})).to_dict()
    imported = spec_from_hf_config(json.loads(json.dumps(fresh)), family)
    assert param_counts(imported) == param_counts(load_hf_config(FAMILY_DIR / f"{family}.json"))


# --- What each family's reader must understand ----------------------------------------------------------------


def test_sparse_attention_reads_top_k_but_caches_every_token() -> None:
    spec = load_hf_config(FAMILY_DIR / "deepseek_v32.json")
    att = spec.attention
    assert att.index_topk == 2048 and att.is_mla
    assert attended_tokens(spec, "full", 100_000) == 2048
    assert attended_tokens(spec, "full", 1000) == 1000
    assert cached_tokens(spec, "full", 100_000) == 100_000
    # the cache holds the latent and the fp8 index key of every token
    per_token = (att.kv_lora_rank + att.qk_rope_head_dim) * 2 + att.index_head_dim + INDEX_KEY_SCALE_BYTES
    assert kv_cache_bytes(spec, 100_000) == 61 * 100_000 * per_token
    # the indexer scans the whole context: attention work keeps growing past top-k, but only by its share
    short, long = (attention_flops_per_token(spec, "full", n) for n in (4096, 8192))
    indexer_growth = 2 * att.index_heads * att.index_head_dim * 4096
    assert long - short == pytest.approx(indexer_growth)


def test_compressed_attention_divides_the_cache() -> None:
    spec = load_hf_config(FAMILY_DIR / "deepseek_v4.json")
    att = spec.attention
    assert set(spec.layer_attention) == {"full", "compressed"}
    context = 65_536
    window = att.sliding_window
    assert cached_tokens(spec, "compressed", context) == context // 128 + window
    assert cached_tokens(spec, "full", context) == context // 4 + window
    assert attended_tokens(spec, "full", context) == att.index_topk + window
    assert kv_cache_bytes_per_token(spec, "full") == att.head_dim * 2  # one shared K=V head
    assert any("compressor" in text for text in spec.assumptions)


def test_dense_mlp_beside_moe_is_a_stated_shared_expert() -> None:
    spec = load_hf_config(FAMILY_DIR / "gemma4.json")
    text = _config("gemma4")["text_config"]
    assert (spec.n_shared_experts, spec.shared_expert_width) == (1, text["intermediate_size"])
    assert any("dense MLP beside the MoE block" in a for a in spec.assumptions)
    assert spec.full_attention is not None and spec.full_attention.head_dim == 512
    assert spec.attention.head_dim == 256 and spec.full_attention.shared_kv


def test_wrappers_read_the_text_model_and_say_what_they_left_out() -> None:
    for family in (
        "kimi_k25",
        "qwen3_vl_moe",
        "qwen3_omni_moe",
        "glm4v_moe",
        "qwen3_5_moe",
        "llama4",
        "gemma4",
    ):
        spec = load_hf_config(FAMILY_DIR / f"{family}.json")
        assert spec.family == family
        assert any("not modelled" in a and "vision_config" in a for a in spec.assumptions), family
    kimi = load_hf_config(FAMILY_DIR / "kimi_k25.json")
    assert kimi.attention.is_mla and kimi.n_experts == 256 and kimi.tied_embeddings  # the wrapper ties


def test_mixture_of_attention_stores_idle_experts_outside_the_step() -> None:
    spec = load_hf_config(FAMILY_DIR / "jetmoe.json")
    names = [name for name, _, _ in attention_projections(spec, "full")]
    assert {"idle_q", "idle_o"} <= set(names)
    att = spec.attention
    idle = att.attention_experts - att.num_heads // att.num_kv_heads
    assert idle == 6


def test_hybrid_layers_map_onto_linear_attention() -> None:
    mamba = load_hf_config(FAMILY_DIR / "granitemoehybrid.json")
    config = _config("granitemoehybrid")
    lin = mamba.linear_attention
    assert lin is not None
    assert (
        linear_state_bytes(mamba, 1)
        >= config["mamba_n_heads"] * config["mamba_d_head"] * config["mamba_d_state"]
    )
    lfm = load_hf_config(FAMILY_DIR / "lfm2_moe.json")
    assert lfm.layer_attention.count("full") == 6 and lfm.layer_ffn[:2] == ("dense", "dense")
    in_proj = dict((name, rows) for name, rows, _ in attention_projections(lfm, "linear"))
    assert in_proj["in_proj_qkvz"] == 3 * lfm.hidden


# --- Key spellings and structures -----------------------------------------------------------------------------


BASE = _config("qwen3_moe")


@pytest.mark.parametrize(
    "experts_key", ["num_experts", "n_routed_experts", "num_local_experts", "moe_num_experts"]
)
@pytest.mark.parametrize("top_k_key", ["num_experts_per_tok", "top_k_experts", "moe_topk", "moe_k"])
def test_expert_and_top_k_spellings(experts_key: str, top_k_key: str) -> None:
    config = {
        k: v for k, v in BASE.items() if k not in ("num_local_experts", "num_experts", "num_experts_per_tok")
    }
    config |= {"model_type": "some_new_moe", experts_key: 64, top_k_key: 4}
    spec = spec_from_hf_config(config, "x")
    assert (spec.n_experts, spec.top_k) == (64, 4)
    assert any("no dedicated reader" in a for a in spec.assumptions)


def test_null_shared_count_and_per_layer_lists() -> None:
    config = BASE | {"model_type": "some_new_moe", "n_shared_experts": None, "num_hidden_layers": 4}
    assert spec_from_hf_config(config, "x").n_shared_experts == 0
    listed = config | {"mlp_layer_types": ["dense", "sparse", "sparse", "dense"]}
    assert spec_from_hf_config(listed, "x").layer_ffn == ("dense", "moe", "moe", "dense")
    prefix = config | {"first_k_dense_replace": 1, "moe_layer_freq": 2}
    assert spec_from_hf_config(prefix, "x").layer_ffn == ("dense", "dense", "moe", "dense")
    ernie = config | {"moe_layer_start_index": 1, "moe_layer_end_index": 2}
    assert spec_from_hf_config(ernie, "x").layer_ffn == ("dense", "moe", "moe", "dense")


def test_general_reader_lists_ignored_keys_and_names_missing_ones() -> None:
    config = BASE | {"model_type": "some_new_moe", "fancy_router_temperature_layers": [1, 2]}
    spec = spec_from_hf_config(config, "x")
    assert "fancy_router_temperature_layers" in spec.ignored_keys
    assert "rms_norm_eps" not in spec.ignored_keys  # no effect on shapes: not reported
    config = {k: v for k, v in BASE.items() if k != "num_attention_heads"} | {"model_type": "some_new_moe"}
    with pytest.raises(MoesimError) as err:
        spec_from_hf_config(config, "x", origin="new.json")
    assert err.value.field == "new.json:num_attention_heads"


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"hidden_size": None}, "hidden_size"),
        ({"num_hidden_layers": "forty"}, "num_hidden_layers"),
        ({"num_experts_per_tok": 300}, "top_k"),
        ({"layer_types": ["full_attention"]}, "layer_types"),
        ({"mlp_layer_types": ["dense"] * 24}, "dense_ffn_width"),
        ({"num_key_value_heads": 5}, "num_kv_heads"),
        ({"layer_types": ["banana"] * 24}, "layer_types"),
    ],
)
def test_bad_configs_name_the_key(change: dict[str, Any], key: str) -> None:
    config = {**BASE, **change}
    if key == "dense_ffn_width":
        config.pop("intermediate_size")
    with pytest.raises(MoesimError) as err:
        spec_from_hf_config(config, "x", origin="cfg.json")
    expected = "intermediate_size" if key == "dense_ffn_width" else key
    assert err.value.field.endswith(expected)


# --- Weight formats from quantization_config, exact bytes -----------------------------------------------------


@pytest.mark.parametrize(
    ("quant", "dense", "experts", "bits_per_value"),
    [
        ({"quant_method": "fp8", "weight_block_size": [128, 128]}, "fp8", None, 8 + 32 / 128**2),
        ({"quant_method": "mxfp4"}, "bf16", "mxfp4", 4 + 8 / 32),
        ({"quant_method": "modelopt", "quant_algo": "NVFP4"}, "nvfp4", None, 4 + 8 / 16),
        ({"quant_method": "gptq", "bits": 4, "group_size": 32}, "int4-g32", None, 4 + 16 / 32),
        ({"quant_method": "awq", "bits": 4, "group_size": 128}, "int4", None, 4 + 16 / 128),
        (
            {
                "quant_method": "compressed-tensors",
                "config_groups": {"g": {"weights": {"num_bits": 4, "type": "float", "group_size": 16}}},
                "ignore": ["lm_head", "re:.*self_attn.*"],
            },
            "bf16",
            "nvfp4",
            4 + 8 / 16,
        ),
        (  # Kimi-K2-Thinking / K2.5 style: int4 experts in groups of 32, attention and shared experts 16-bit
            {
                "quant_method": "compressed-tensors",
                "config_groups": {"g": {"weights": {"num_bits": 4, "type": "int", "group_size": 32}}},
                "ignore": ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*"],
            },
            "bf16",
            "int4-g32",
            4 + 16 / 32,
        ),
    ],
)
def test_quantisation_gives_the_exact_byte_count(
    quant: dict[str, Any], dense: str, experts: str | None, bits_per_value: float
) -> None:
    spec = spec_from_hf_config(BASE | {"quantization_config": quant}, "x")
    assert (spec.weight_format, spec.expert_weight_format) == (dense, experts)
    rows, cols = spec.expert_width, spec.hidden
    assert spec.expert_format.matrix_bytes(rows, cols) == math.ceil(rows * cols * bits_per_value / 8)


def test_unknown_quantisation_names_the_key() -> None:
    with pytest.raises(MoesimError) as err:
        spec_from_hf_config(BASE | {"quantization_config": {"quant_method": "bitnet"}}, "x")
    assert err.value.field.endswith("quantization_config.quant_method")
    with pytest.raises(MoesimError) as err:
        spec_from_hf_config(
            BASE | {"quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 48}}, "x"
        )
    assert err.value.field.endswith("group_size")


# --- The kernel plan reads what the new attention kinds hold -------------------------------------------------


def _attention_weight_reads(plan: Any) -> float:
    return sum(r.size_bytes for k in plan.kernels for r in k.reads if ".attn." in r.tensor)


@pytest.mark.parametrize("family", ["deepseek_v4", "deepseek_v32", "gemma4", "mimo_v2_flash", "qwen3_5_moe"])
def test_decode_plan_reads_every_attention_weight_once(family: str) -> None:
    from moesim.simulator.plan.styles import build_plan

    spec = load_hf_config(FAMILY_DIR / f"{family}.json")
    plan = build_plan(spec, 1, 1, 2048)
    vectors = sum(attention_vector_params(spec, kind) for kind in spec.layer_attention) * 2
    stored = sum(attention_weight_bytes(spec, kind) for kind in spec.layer_attention) - vectors
    assert _attention_weight_reads(plan) == pytest.approx(stored, rel=1e-9)


def test_indexer_scans_the_context_while_attention_reads_top_k() -> None:
    from moesim.simulator.plan.styles import build_plan

    spec = load_hf_config(FAMILY_DIR / "deepseek_v32.json")

    def reads(context: int, name: str) -> float:
        plan = build_plan(spec, 1, 1, context)
        return sum(
            r.size_bytes
            for k in plan.kernels
            if k.name.endswith(name)
            for r in k.reads
            if "L" in r.tensor[:2]
        )

    assert reads(8192, "index_scan") == pytest.approx(2 * reads(4096, "index_scan"), rel=0.01)
    assert reads(16384, ".attention") == reads(8192, ".attention")  # capped at index_topk = 2048
    assert reads(1024, ".attention") < reads(8192, ".attention")


def test_per_layer_expert_counts_are_read_or_averaged_with_a_statement() -> None:
    config = _config("hunyuan_v1_moe")
    n = config["num_hidden_layers"]
    uniform = spec_from_hf_config(config | {"moe_topk": [8] * n}, "x")
    assert uniform.top_k == 8 and not any("per-layer" in a for a in uniform.assumptions)
    varied = spec_from_hf_config(config | {"moe_topk": [4] * (n // 2) + [8] * (n // 2)}, "x")
    assert varied.top_k == 6
    assert any("moe_topk: per-layer values 4–8 modelled as their mean 6" in a for a in varied.assumptions)


@pytest.mark.parametrize("family", FILES)
def test_imported_spec_round_trips_through_catalogue_toml(family: str) -> None:
    from moesim.simulator.models.catalogue import parse_toml, spec_from_dict, spec_to_toml

    spec = load_hf_config(FAMILY_DIR / f"{family}.json")
    assert spec_from_dict(parse_toml("x.toml", spec_to_toml(spec), "x.toml", "model file"), "x.toml") == spec


def test_general_reader_unwraps_an_unknown_multimodal_config() -> None:
    config = _config("qwen3_vl_moe")
    config["model_type"] = "brand_new_vl"
    config["text_config"] = config["text_config"] | {"model_type": "brand_new_vl_text"}
    spec = spec_from_hf_config(config, "x")
    known = load_hf_config(FAMILY_DIR / "qwen3_vl_moe.json")
    assert (spec.n_experts, spec.top_k, spec.n_layers) == (known.n_experts, known.top_k, known.n_layers)
    assert any("no dedicated reader" in a for a in spec.assumptions)
    assert any("vision_config" in a and "not modelled" in a for a in spec.assumptions)
    # the general reader assumes no QK-norm: within 0.1% of the Qwen3 reader's count
    assert param_counts(spec).total == pytest.approx(param_counts(known).total, rel=1e-3)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"index_topk": 0}, "attention.index_topk"),
        ({"index_heads": 0}, "attention.index_heads"),
        ({"compressed_ratio": 1}, "attention.compressed_ratio"),
        ({"o_lora_rank": 1024, "o_groups": 7}, "attention.o_groups"),
        ({"kv_compress_ratio": 0}, "attention.kv_compress_ratio"),
    ],
)
def test_impossible_attention_shapes_name_the_field(change: dict[str, Any], field: str) -> None:
    from dataclasses import replace

    spec = load_hf_config(FAMILY_DIR / "deepseek_v4.json")
    with pytest.raises(MoesimError) as err:
        validate_spec(replace(spec, attention=replace(spec.attention, **change)))
    assert err.value.field == field


@pytest.mark.parametrize(
    ("family", "change", "key"),
    [
        ("gemma4", {"per_layer_config": [1, 2]}, "per_layer_config"),
        ("deepseek_v4", {"compress_rates": 4}, "compress_rates"),
        ("deepseek_v3", {"mlp_layer_types": "dense"}, "mlp_layer_types"),
    ],
)
def test_malformed_structures_name_the_key(family: str, change: dict[str, Any], key: str) -> None:
    config = _config(family)
    if "text_config" in config:
        config["text_config"] = config["text_config"] | change
    else:
        config |= change
    with pytest.raises(MoesimError) as err:
        spec_from_hf_config(config, "x", origin="c.json")
    assert err.value.field.endswith(key)
