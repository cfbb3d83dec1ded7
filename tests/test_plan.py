"""Kernel plans: layer order, bytes of the weight formats, distinct experts, kernel styles, bad input."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from moesim.errors import MoesimError
from moesim.simulator.models.weights import expert_weight_bytes, param_counts
from moesim.simulator.plan.step import PlanBuilder, distinct_experts_by_layer, fused_layer
from moesim.simulator.plan.styles import KERNEL_STYLES, build_plan, register_kernel_style
from moesim.simulator.routing.independent import IndependentRouting
from tests.core_fixtures import h200, model, tiny_moe


def names(plan_kernels: tuple) -> list[str]:
    return [k.name for k in plan_kernels]


def test_moe_layer_runs_in_serving_engine_order() -> None:
    plan = build_plan(model("qwen3-30b-a3b"), 1, 1, 1024, "fused", None, h200())
    layer0 = [k.name.split(".", 1)[1] for k in plan.kernels if k.layer == 0]
    expected = [
        "input_norm",
        "qkv_proj",
        "qk_norm",
        "rotary",
        "kv_store",
        "attention",
        "o_proj",
        "post_attention_norm",
        "router",
        "topk",
        "moe_align",
        "experts_gate_up",
        "experts_act",
        "experts_down",
        "moe_combine",
    ]
    assert layer0 == expected
    assert names(plan.kernels)[0] == "embedding"
    assert names(plan.kernels)[-3:] == ["final_norm", "lm_head", "sampling"]
    verify = build_plan(model("qwen3-30b-a3b"), 1, 4, 1024, "fused", None, h200())
    assert names(verify.kernels)[-1] == "accept"
    assert len({k.layer for k in plan.kernels if k.layer >= 0}) == 48


def test_expert_bytes_are_distinct_experts_times_exact_expert_bytes() -> None:
    for name in ["qwen3-30b-a3b", "gpt-oss-120b", "deepseek-v3"]:
        spec = model(name)
        plan = build_plan(spec, 4, 4, 1024, "fused", None, h200())
        layer = next(i for i, kind in enumerate(spec.layer_ffn) if kind == "moe")
        expert_reads = [
            r
            for k in plan.kernels
            if k.layer == layer and k.name.endswith(("experts_gate_up", "experts_down"))
            for r in k.reads
            if "experts.w" in r.tensor
        ]
        total = sum(r.size_bytes for r in expert_reads)
        u = plan.distinct_experts_by_layer[0]
        assert total == pytest.approx(u * expert_weight_bytes(spec), rel=1e-6)


def test_fp8_weights_compute_in_fp8() -> None:
    plan = build_plan(model("deepseek-v3"), 1, 1, 1024, "fused", None, h200())
    experts = [k for k in plan.kernels if k.name.endswith("experts_gate_up")]
    assert experts and all(k.dtype == "fp8" for k in experts)


def test_mla_and_linear_attention_plans() -> None:
    mla = build_plan(model("deepseek-v3"), 1, 1, 1024, "fused", None, h200())
    assert any(k.name.endswith("q_absorb") for k in mla.kernels)
    nxt = model("qwen3-next-80b-a3b")
    short = build_plan(nxt, 1, 1, 128, "fused", None, h200())
    long = build_plan(nxt, 1, 1, 8192, "fused", None, h200())
    delta = [k for k in short.kernels if k.name.endswith("delta_rule")]
    assert len(delta) == sum(1 for kind in nxt.layer_attention if kind == "linear")

    # Linear layers keep a fixed state: their bytes do not grow with the context; full layers' do.
    def state_bytes(plan, suffix):  # type: ignore[no-untyped-def]
        return sum(r.size_bytes for k in plan.kernels if k.name.endswith(suffix) for r in k.reads)

    assert state_bytes(short, "delta_rule") == state_bytes(long, "delta_rule")
    assert state_bytes(long, "attention") > state_bytes(short, "attention")


def test_verification_reads_each_sequences_cache_once_per_query_tile() -> None:
    """The engines run a verification of T tokens as one attention pass per sequence (a decode with
    q_len > 1): the cache is read once per query tile of T × the heads sharing a KV head. With 16 MLA heads
    per rank (TP 8) a 3-token verification still fits one 64-row tile; with all 128 heads on one GPU it
    takes 6 tiles, each re-reading its sequence's latent cache, the repeats within one sequence's cache."""
    from moesim.simulator.plan.layout import ParallelLayout
    from moesim.simulator.plan.parallel import build_parallel_plan

    spec = model("deepseek-v3")

    def kv_read(plan):  # type: ignore[no-untyped-def]
        return next(k for k in plan.kernels if k.name.endswith(".attention")).reads[0]

    whole = {t: kv_read(build_plan(spec, 4, t, 4096, "fused", None, h200())) for t in (1, 3)}
    assert (whole[1].reads, whole[3].reads) == (2, 6)  # 128 rows, then 384, in 64-row tiles
    assert build_plan(spec, 4, 3, 4096, "fused", None, h200()).cache_reads_per_sequence == 6
    assert whole[3].size_bytes == pytest.approx(whole[1].size_bytes, rel=1e-3)  # + the 2 new tokens
    assert whole[3].working_set_bytes == pytest.approx(whole[3].size_bytes / 4)  # one sequence's cache
    layout = ParallelLayout(gpus=8, tp=8, ep=8)
    ranked = {t: kv_read(build_parallel_plan(spec, 4, t, layout, h200(), 4096).plan) for t in (1, 3)}
    assert (ranked[1].reads, ranked[3].reads) == (1, 1)
    assert ranked[3].size_bytes == whole[3].size_bytes  # TP replicates the single latent KV head


def test_mla_attention_maths_run_in_whole_query_tiles() -> None:
    """MLA's absorbed attention: 2·(2·kv_lora_rank + rope) FLOPs per key per query row, in 64-row tiles.
    16 heads per rank (TP 8): a decode pays a whole tile, so verifying up to 4 tokens costs the same maths
    and stays memory-bound; 128 heads on one GPU: 3 tokens are 6 tiles, compute-bound on a long context."""
    from moesim.simulator.execution.timer import FastTimer
    from moesim.simulator.plan.layout import ParallelLayout
    from moesim.simulator.plan.parallel import build_parallel_plan

    spec, hw = model("deepseek-v3"), h200()
    a = spec.attention

    def core(plan):  # type: ignore[no-untyped-def]
        return next(k for k in plan.kernels if k.name.endswith(".attention"))

    layout = ParallelLayout(gpus=8, tp=8, ep=8)
    ranked = {t: core(build_parallel_plan(spec, 64, t, layout, hw, 8192).plan) for t in (1, 3, 4, 5)}
    per_row_key = 2.0 * (2 * (a.kv_lora_rank or 0) + (a.qk_rope_head_dim or 0))
    assert ranked[1].flops == pytest.approx(64 * 64 * (8192 + 1) * per_row_key)
    assert ranked[3].flops == pytest.approx(ranked[1].flops * (8192 + 3) / (8192 + 1))
    assert ranked[5].flops == pytest.approx(2 * ranked[4].flops * (8192 + 5) / (8192 + 4))  # a second tile
    assert {ranked[t].category for t in (1, 3)} == {"kv_cache"}
    whole = {t: core(build_plan(spec, 64, t, 8192, "fused", None, hw)) for t in (1, 3)}
    assert whole[3].category == "attention"  # 384 rows per sequence against its 8k-token latent cache
    timer = FastTimer(hw)
    seconds = {t: timer.step(build_plan(spec, 64, t, 8192, "fused", None, hw), "graph") for t in (1, 3)}
    assert seconds[3].breakdown_s["attention"] > 2 * seconds[1].breakdown_s["attention"]
    # a profile that predates the term (mla_query_tile_rows = 0) prices the useful rows only
    from dataclasses import replace

    untiled = replace(hw, empirical=replace(hw.empirical, mla_query_tile_rows=0))
    plain = core(build_parallel_plan(spec, 64, 1, layout, untiled, 8192).plan)
    assert plain.flops == pytest.approx(ranked[1].flops / 4)  # 16 of the tile's 64 rows


def test_sliding_window_caps_the_kv_read() -> None:
    spec = model("gpt-oss-20b")
    plan = build_plan(spec, 1, 1, 16384, "fused", None, h200())
    reads = {k.layer: k.reads[0].size_bytes for k in plan.kernels if k.name.endswith(".attention")}
    sliding = [reads[i] for i, kind in enumerate(spec.layer_attention) if kind == "sliding"]
    full = [reads[i] for i, kind in enumerate(spec.layer_attention) if kind == "full"]
    assert max(sliding) < min(full)


@settings(max_examples=30, deadline=None)
@given(
    st.integers(1, 256),
    st.integers(1, 64),
    st.integers(1, 64),
    st.integers(1, 16),
    st.sampled_from([0.0, 0.0, 0.8]),
)
def test_distinct_experts_bounded_and_non_decreasing(
    n_experts: int, top_k: int, batch: int, tokens: int, alpha: float
) -> None:
    top_k = min(top_k, n_experts)
    spec = tiny_moe(2, 64, n_experts, top_k, 32)
    routing = IndependentRouting(popularity_alpha=alpha)
    fewer = distinct_experts_by_layer(spec, batch, tokens, routing)
    more = distinct_experts_by_layer(spec, batch, tokens + 1, routing)
    for a, b in zip(fewer, more, strict=True):
        assert top_k - 1e-9 <= a <= min(n_experts, batch * tokens * top_k) + 1e-9
        assert b >= a - 1e-9


def test_per_token_plan_launches_per_token_expert_pair() -> None:
    spec = tiny_moe(2, 256, 16, 2, 128)
    plan = build_plan(spec, 3, 2, 64, "per-token", None, h200())
    gate_ups = [k for k in plan.kernels if k.name.endswith("expert_gate_up")]
    assert len(gate_ups) == 2 * 3 * 2 * 2  # layers × tokens × top-k


def test_per_token_refuses_huge_plans() -> None:
    with pytest.raises(MoesimError, match="per-token"):
        build_plan(model("qwen3-30b-a3b"), 256, 8, 1024, "per-token", None, h200())


def test_register_kernel_style() -> None:
    register_kernel_style(PlanBuilder("test-style", "a copy of fused for the test", fused_layer))
    try:
        assert build_plan(tiny_moe(), 1, 1, 64, "test-style", None, h200()).kernel_style == "test-style"
    finally:
        KERNEL_STYLES.pop("test-style")


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"batch": 0}, "batch"),
        ({"tokens_per_seq": 0}, "tokens_per_seq"),
        ({"context_len": -1}, "context_len"),
        ({"kernel_style": "nope"}, "kernel_style"),
    ],
)
def test_bad_input_is_refused(kwargs: dict, field: str) -> None:
    args = {"batch": 1, "tokens_per_seq": 1, "context_len": 64, "kernel_style": "fused"} | kwargs
    with pytest.raises(MoesimError) as error:
        build_plan(
            tiny_moe(),
            args["batch"],
            args["tokens_per_seq"],
            args["context_len"],
            args["kernel_style"],
            None,
            h200(),
        )
    assert error.value.field == field


def test_identical_layers_share_a_template() -> None:
    plan = build_plan(model("qwen3-30b-a3b"), 1, 1, 1024, "fused", None, h200())
    layers = [s for s in plan.segments if s.layer >= 0]
    assert len({id(s.kernels) for s in layers}) == 1


def test_forced_routing_sets_every_moe_layer() -> None:
    spec = model("qwen3-30b-a3b")
    plan = build_plan(spec, 16, 1, 1024, "fused", None, h200(), distinct_override=40)
    assert plan.distinct_experts_by_layer == (40.0,) * spec.n_moe_layers
    assert plan.routing_description == "forced routing"


@pytest.mark.parametrize(
    "name", ["qwen3-30b-a3b", "mixtral-8x7b", "olmoe-1b-7b", "qwen3-next-80b-a3b", "llama-3.2-1b"]
)
def test_decode_at_batch_one_reads_the_active_weights(name: str) -> None:
    """A B=1 decode step touches exactly k experts per layer: its weight reads are the active parameters."""
    spec = model(name)
    plan = build_plan(spec, 1, 1, 0, "fused", None, h200())
    roles = (".attn.", ".mlp.", "experts.", ".shared.", ".router")
    weights = sum(
        r.size_bytes
        for k in plan.kernels
        for r in k.reads
        if any(x in r.tensor for x in roles) or r.tensor == "lm_head"
    )
    active = param_counts(spec).active_excl_embedding * spec.dense_format.value_bits / 8
    assert weights == pytest.approx(active, rel=2e-3)  # norm vectors are left out
