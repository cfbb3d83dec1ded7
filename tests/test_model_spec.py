"""Model-spec physics: exact byte counts against closed forms, parameter identities, validation, overrides."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from moesim.errors import MoesimError
from moesim.simulator.models.catalogue import list_models, load_model
from moesim.simulator.models.flops import attention_flops_per_token, expert_flops_per_token
from moesim.simulator.models.layers import layer_pattern
from moesim.simulator.models.overrides import OVERRIDE_OPTIONS, apply_overrides, with_overrides
from moesim.simulator.models.sequence_state import (
    kv_cache_bytes,
    kv_cache_bytes_per_token,
    linear_state_bytes,
    sequence_state_bytes,
)
from moesim.simulator.models.spec import WEIGHT_FORMATS, weight_format
from moesim.simulator.models.validate import validate_spec
from moesim.simulator.models.weights import (
    attention_projections,
    attention_weight_bytes,
    dense_ffn_weight_bytes,
    embedding_bytes,
    expert_matrices,
    expert_weight_bytes,
    lm_head_bytes,
    lm_head_read_bytes,
    mtp_weight_bytes,
    param_counts,
    router_weight_bytes,
    shared_expert_weight_bytes,
    total_weight_bytes,
)

FORMATS = sorted(WEIGHT_FORMATS)
dims = st.integers(min_value=1, max_value=5000)


# --- WeightFormat.matrix_bytes -----------------------------------------------------------------------


@given(st.sampled_from(FORMATS), dims, dims, st.integers(1, 300), st.integers(1, 300))
def test_matrix_bytes_is_monotone_in_both_dimensions(
    name: str, rows: int, cols: int, dr: int, dc: int
) -> None:
    fmt = WEIGHT_FORMATS[name]
    assert fmt.matrix_bytes(rows + dr, cols) >= fmt.matrix_bytes(rows, cols)
    assert fmt.matrix_bytes(rows, cols + dc) >= fmt.matrix_bytes(rows, cols)


@given(st.sampled_from(FORMATS), dims, dims)
def test_matrix_bytes_never_below_the_values_alone(name: str, rows: int, cols: int) -> None:
    fmt = WEIGHT_FORMATS[name]
    assert fmt.matrix_bytes(rows, cols) >= rows * cols * fmt.value_bits / 8


@given(st.sampled_from(FORMATS), st.integers(1, 40), st.integers(1, 40))
def test_matrix_bytes_exact_for_block_divisible_shapes(name: str, a: int, b: int) -> None:
    fmt = WEIGHT_FORMATS[name]
    block_rows, block_cols = fmt.scale_block
    rows, cols = a * block_rows * 2, b * block_cols * 2  # even counts: whole bytes for 4-bit values
    expected = rows * cols * fmt.value_bits // 8 + (4 * a * b * fmt.scale_bits // 8 if fmt.scale_bits else 0)
    assert fmt.matrix_bytes(rows, cols) == expected


def test_unknown_weight_format_names_the_field() -> None:
    with pytest.raises(MoesimError) as err:
        weight_format("fp3")
    assert err.value.field == "weight_format"
    assert "bf16" in str(err.value)


# --- component byte counts against hand-computed closed forms -----------------------------------------


def test_deepseek_fp8_expert_and_attention_bytes() -> None:
    spec = load_model("deepseek-v3")
    h, w = 7168, 2048
    # gate/up: 2048 × 7168 → 16 × 56 blocks; down: 7168 × 2048 → 56 × 16 blocks; fp32 scales.
    assert expert_weight_bytes(spec) == 3 * (w * h + 16 * 56 * 4)
    assert shared_expert_weight_bytes(spec) == expert_weight_bytes(spec)
    assert dense_ffn_weight_bytes(spec) == 3 * (18432 * h + 144 * 56 * 4)

    # MLA matrices: q_a 1536×7168, q_b 24576×1536, kv_a 576×7168, kv_b 32768×512, o 7168×16384.
    def fp8(r: int, c: int) -> int:
        return r * c + math.ceil(r / 128) * math.ceil(c / 128) * 4

    mats = fp8(1536, h) + fp8(24576, 1536) + fp8(576, h) + fp8(32768, 512) + fp8(h, 16384)
    assert attention_weight_bytes(spec, "full") == mats + 2 * (1536 + 512)  # + q_a/kv_a norms, bf16
    assert router_weight_bytes(spec) == 2 * (256 * h + 256)
    assert embedding_bytes(spec) == lm_head_bytes(spec) == 2 * 129280 * h


def test_gpt_oss_mxfp4_experts_bf16_rest() -> None:
    spec = load_model("gpt-oss-120b")
    h = w = 2880
    mxfp4 = 3 * (w * h // 2 + w * h // 32)  # 4-bit values + one byte per 32 values
    assert expert_weight_bytes(spec) == mxfp4 + 2 * (2 * w + h)  # biases stay bf16
    q, kv = 64 * 64, 8 * 64
    mats = 2 * (q * h + 2 * kv * h + h * q)
    vectors = 2 * (q + 2 * kv + h + 64)  # qkv bias, o bias, sinks
    assert attention_weight_bytes(spec, "full") == attention_weight_bytes(spec, "sliding") == mats + vectors


@pytest.mark.parametrize("name", list_models())
def test_sixteen_bit_models_store_two_bytes_per_parameter(name: str) -> None:
    spec = load_model(name)
    counts = param_counts(spec)
    if spec.dense_format.value_bits == spec.expert_format.value_bits == 16:
        assert total_weight_bytes(spec) == 2 * counts.total
        assert total_weight_bytes(spec, include_mtp=True) == 2 * counts.total_with_mtp
    else:  # quantised: between the values alone and bf16
        assert counts.total * 0.5 < total_weight_bytes(spec) < 2 * counts.total


def test_tied_lm_head_costs_no_storage_but_is_still_read() -> None:
    spec = load_model("qwen2-0.5b")
    assert spec.tied_embeddings
    assert lm_head_bytes(spec) == 0
    assert lm_head_read_bytes(spec) == embedding_bytes(spec) == 2 * 151936 * 896


def test_mtp_bytes_hold_one_moe_block() -> None:
    spec = load_model("deepseek-v3")
    block = (
        256 * expert_weight_bytes(spec)
        + shared_expert_weight_bytes(spec)
        + attention_weight_bytes(spec, "full")
    )
    assert block < mtp_weight_bytes(spec) < 1.02 * block


# --- KV cache and linear state ---------------------------------------------------------------------


def test_kv_cache_closed_forms() -> None:
    deepseek = load_model("deepseek-v3")
    assert kv_cache_bytes_per_token(deepseek, "full") == (512 + 64) * 2
    assert kv_cache_bytes(deepseek, 4096) == 61 * 4096 * 1152
    oss = load_model("gpt-oss-120b")
    per_token = 2 * 8 * 64 * 2
    assert kv_cache_bytes(oss, 1000) == 18 * 1000 * per_token + 18 * 128 * per_token
    assert kv_cache_bytes(oss, 100) == 36 * 100 * per_token


@given(st.integers(1, 10**6), st.integers(1, 10**5))
def test_kv_cache_grows_with_context_and_sliding_layers_saturate(context: int, extra: int) -> None:
    oss = load_model("gpt-oss-20b")
    assert kv_cache_bytes(oss, context + extra) >= kv_cache_bytes(oss, context)
    sliding_only = replace(oss, layer_attention=tuple("sliding" for _ in oss.layer_attention))
    assert kv_cache_bytes(sliding_only, 128 + context) == kv_cache_bytes(sliding_only, 128)


def test_linear_state_is_fixed_size() -> None:
    spec = load_model("qwen3-next-80b-a3b")
    recurrent = 32 * 128 * 128
    conv = (2 * 16 * 128 + 32 * 128) * 3
    assert linear_state_bytes(spec) == 2 * (recurrent + conv)
    assert kv_cache_bytes_per_token(spec, "linear") == 0
    # 12 full-attention layers cache KV; 36 linear layers keep a fixed state.
    growth = sequence_state_bytes(spec, 2000) - sequence_state_bytes(spec, 1000)
    assert growth == 12 * 1000 * 2 * 2 * 256 * 2


# --- FLOPs ---------------------------------------------------------------------------------------------


def test_attention_flops_closed_forms() -> None:
    qwen = load_model("qwen3-30b-a3b")
    assert attention_flops_per_token(qwen, "full", 1000) == 4 * 32 * 128 * 1000
    oss = load_model("gpt-oss-120b")
    assert attention_flops_per_token(oss, "sliding", 10_000) == attention_flops_per_token(oss, "full", 128)
    deepseek = load_model("deepseek-v3")
    assert attention_flops_per_token(deepseek, "full", 10) == 10 * (2 * 128 * 576 + 2 * 128 * 512)
    assert attention_flops_per_token(deepseek, "full", 10, mla_absorbed=False) == 10 * (
        2 * 128 * 192 + 2 * 128 * 128
    )
    nxt = load_model("qwen3-next-80b-a3b")
    assert attention_flops_per_token(nxt, "linear", 10) == attention_flops_per_token(nxt, "linear", 10**6) > 0


def test_expert_flops_are_twice_the_expert_matrix_params() -> None:
    spec = load_model("mixtral-8x7b")
    assert (
        expert_flops_per_token(spec)
        == 2 * sum(r * c for _, r, c in expert_matrices(spec))
        == 6 * 4096 * 14336
    )


def test_projection_shapes_have_the_published_dims() -> None:
    deepseek = load_model("deepseek-v3")
    shapes = {name: (rows, cols) for name, rows, cols in attention_projections(deepseek, "full")}
    assert shapes["kv_a"] == (576, 7168) and shapes["q_b"] == (128 * 192, 1536)
    nxt = load_model("qwen3-next-80b-a3b")
    full = {name: (rows, cols) for name, rows, cols in attention_projections(nxt, "full")}
    assert full["q"] == (2 * 16 * 256, 2048)  # output gate doubles the query projection


# --- parameter identities ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", list_models())
def test_param_count_identities(name: str) -> None:
    spec = load_model(name)
    c = param_counts(spec)
    parts = (
        c.embedding
        + c.lm_head
        + c.attention
        + c.norms
        + c.dense_ffn
        + c.routed_experts
        + c.shared_experts
        + c.router
    )
    assert c.total == parts
    assert c.active_non_embedding <= c.active_excl_embedding <= c.active <= c.total <= c.total_with_mtp
    assert c.routed_experts_active * spec.n_experts == c.routed_experts * spec.top_k
    if not spec.is_moe and spec.tied_embeddings:
        assert c.active == c.total == c.active_excl_embedding


# --- validation ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"top_k": 300}, "top_k"),
        ({"expert_width": -5}, "expert_width"),
        ({"hidden": 0}, "hidden"),
        ({"n_experts": 0}, "n_experts"),
        ({"topk_groups": 9}, "topk_groups"),
        ({"n_groups": 7}, "n_groups"),
        ({"weight_format": "fp7"}, "weight_format"),
        ({"expert_weight_format": "int3"}, "expert_weight_format"),
        ({"dense_ffn_width": 0}, "dense_ffn_width"),
        ({"n_shared_experts": 2, "shared_expert_width": 0}, "shared_expert_width"),
    ],
)
def test_impossible_designs_name_the_field(changes: dict[str, object], field: str) -> None:
    with pytest.raises(MoesimError) as err:
        with_overrides(load_model("deepseek-v3"), **changes)
    assert err.value.field == field
    assert err.value.fix


def test_structural_errors() -> None:
    spec = load_model("qwen3-30b-a3b")
    with pytest.raises(MoesimError, match="layer_ffn has"):
        validate_spec(replace(spec, layer_ffn=spec.layer_ffn[:-1]))
    with pytest.raises(MoesimError) as err:
        validate_spec(replace(spec, layer_attention=("sliding",) * spec.n_layers))
    assert err.value.field == "attention.sliding_window"
    with pytest.raises(MoesimError) as err:
        validate_spec(replace(spec, layer_attention=("linear",) * spec.n_layers))
    assert err.value.field == "linear_attention"
    with pytest.raises(MoesimError) as err:
        validate_spec(replace(spec, attention=replace(spec.attention, num_kv_heads=5)))
    assert err.value.field == "attention.num_kv_heads"
    with pytest.raises(MoesimError, match="unknown model field"):
        with_overrides(spec, experts=3)


# --- layer patterns and overrides ----------------------------------------------------------------------


@pytest.mark.parametrize("name", list_models())
def test_every_catalogue_layout_is_a_regular_pattern(name: str) -> None:
    spec = load_model(name)
    pattern = layer_pattern(spec)
    assert pattern is not None
    assert pattern.build() == (spec.layer_attention, spec.layer_ffn)


def test_layers_override_keeps_dense_prefix_and_interleave() -> None:
    deepseek = apply_overrides(load_model("deepseek-v3"), {"layers": 10})
    assert deepseek.layer_ffn == ("dense",) * 3 + ("moe",) * 7
    maverick = apply_overrides(load_model("llama-4-maverick-17b-128e"), {"layers": "6"})
    assert maverick.layer_ffn == ("dense", "moe") * 3
    assert maverick.layer_attention == ("sliding", "sliding", "sliding", "full", "sliding", "sliding")


def test_weight_format_override_sets_both_unless_experts_given() -> None:
    oss = load_model("gpt-oss-120b")
    both = apply_overrides(oss, {"weight_format": "fp8"})
    assert both.dense_format.name == both.expert_format.name == "fp8"
    split = apply_overrides(oss, {"weight_format": "fp8", "expert_weight_format": "int4"})
    assert (split.dense_format.name, split.expert_format.name) == ("fp8", "int4")
    only_experts = apply_overrides(oss, {"expert_weight_format": "bf16"})
    assert expert_weight_bytes(only_experts) > expert_weight_bytes(oss)


def test_overrides_from_command_line_strings() -> None:
    base = load_model("qwen3-30b-a3b")
    spec = apply_overrides(
        base,
        {
            "n_experts": "256",
            "top_k": "8",
            "expert_width": "1024",
            "n_shared_experts": "1",
            "tied_embeddings": "true",
        },
    )
    assert (spec.n_experts, spec.top_k, spec.expert_width, spec.n_shared_experts) == (256, 8, 1024, 1)
    assert spec.shared_expert_width == 1024  # defaults to the routed expert width
    assert spec.tied_embeddings and param_counts(spec).lm_head == 0
    with pytest.raises(MoesimError) as err:
        apply_overrides(base, {"top_k": "eight"})
    assert err.value.field == "top_k"
    with pytest.raises(MoesimError) as err:
        apply_overrides(base, {"top_k": 200})
    assert err.value.field == "top_k"
    with pytest.raises(MoesimError, match="unknown model field"):
        apply_overrides(base, {"expertz": 3})


def test_giving_a_dense_model_experts_makes_it_moe() -> None:
    dense = load_model("llama-3.2-1b")
    moe = apply_overrides(dense, {"n_experts": 8, "top_k": 2})
    assert moe.n_moe_layers == moe.n_layers and moe.expert_width == dense.dense_ffn_width
    assert param_counts(moe).routed_experts == 8 * param_counts(dense).dense_ffn
    with pytest.raises(MoesimError) as err:
        apply_overrides(dense, {"n_experts": 8})
    assert err.value.field == "top_k"


def test_attention_overrides_and_option_table() -> None:
    spec = apply_overrides(load_model("gpt-oss-20b"), {"num_kv_heads": 4, "sliding_window": 4096})
    assert spec.attention.num_kv_heads == 4 and spec.attention.sliding_window == 4096
    with pytest.raises(MoesimError, match="no sliding-window layers"):  # a window would change nothing
        apply_overrides(load_model("mixtral-8x7b"), {"sliding_window": 4096})
    with pytest.raises(MoesimError, match="no shared experts"):
        apply_overrides(load_model("mixtral-8x7b"), {"shared_expert_width": 1024})
    with pytest.raises(MoesimError, match="shared_expert_width"):  # 0 is no longer replaced by 1024
        apply_overrides(load_model("mixtral-8x7b"), {"n_shared_experts": 1, "shared_expert_width": 0})
    flags = {flag for flag, *_ in OVERRIDE_OPTIONS}
    for required in (
        "--experts",
        "--top-k",
        "--expert-width",
        "--shared-experts",
        "--shared-expert-width",
        "--dense-ffn-width",
        "--hidden",
        "--layers",
        "--vocab",
        "--n-groups",
        "--topk-groups",
        "--weight-format",
        "--expert-weight-format",
        "--mtp-layers",
        "--tied-embeddings",
    ):
        assert required in flags
    base = load_model("deepseek-v3")
    for _flag, field, kind, help_text in OVERRIDE_OPTIONS:
        assert help_text
        current = (
            base.n_layers if field == "layers" else getattr(base, field, getattr(base.attention, field, None))
        )
        if current is None:
            continue
        assert isinstance(
            apply_overrides(base, {field: kind(current) if kind is not bool else "false"}), type(base)
        )
