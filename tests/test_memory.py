"""Memory fit per rank: weights (format and scales included), KV cache, reserve; clear errors when short."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from moesim.errors import MoesimError
from moesim.simulator.hardware.profile import HardwareProfile
from moesim.simulator.hardware.sections import Datasheet, Empirical, GemmEfficiency, NodeSpec, Provenance
from moesim.simulator.models.sequence_state import kv_cache_bytes
from moesim.simulator.models.spec import AttentionSpec, ModelSpec
from moesim.simulator.models.weights import total_weight_bytes
from moesim.simulator.plan.layout import ParallelLayout, default_layout
from moesim.simulator.plan.memory import (
    RESERVE_FRACTION,
    fit_layout,
    kv_cache_bytes_per_rank,
    rank_memory,
    smallest_fitting_layout,
    weight_bytes_per_rank,
)

GB = 1e9

MLA = AttentionSpec(
    num_heads=64,
    num_kv_heads=64,
    head_dim=128,
    q_lora_rank=1536,
    kv_lora_rank=512,
    qk_nope_head_dim=128,
    qk_rope_head_dim=64,
    v_head_dim=128,
)
# Kimi-K2's published geometry (reference/moe_models.md), FP8 block-scaled weights.
KIMI = ModelSpec(
    name="kimi-k2",
    hidden=7168,
    vocab=163840,
    layer_attention=("full",) * 61,
    layer_ffn=("dense",) + ("moe",) * 60,
    attention=MLA,
    dense_ffn_width=18432,
    n_experts=384,
    top_k=8,
    expert_width=2048,
    n_shared_experts=1,
    shared_expert_width=2048,
    router_score="sigmoid",
    weight_format="fp8",
)
GQA = ModelSpec(
    name="gqa-moe",
    hidden=2048,
    vocab=151936,
    layer_attention=("full", "sliding") * 8,
    layer_ffn=("moe",) * 16,
    attention=AttentionSpec(num_heads=32, num_kv_heads=4, head_dim=128, sliding_window=128),
    n_experts=128,
    top_k=8,
    expert_width=768,
)


def _profile(capacity_gb: float, name: str = "h200") -> HardwareProfile:
    return HardwareProfile(
        name=name,
        datasheet=Datasheet(
            device_name=name,
            memory_bandwidth_gbps=4800,
            memory_capacity_bytes=capacity_gb * GB,
            last_level_cache_bytes=50e6,
            peak_dense_tflops={"bf16": 989, "fp8": 1979},
        ),
        empirical=Empirical(
            memory_bandwidth_fraction=0.8,
            cache_bandwidth_gbps=12000,
            cache_effective_bytes=30e6,
            half_bandwidth_transfer_bytes=4e6,
            kernel_fixed_latency_us=2.5,
            launch_eager_us=7,
            launch_graph_gap_us=1.5,
            graph_launch_us=10,
            sync_us=8,
            gemm_efficiency=GemmEfficiency((1.0, 4096.0), (0.05, 0.75)),
        ),
        provenance=Provenance("datasheet", "test"),
        node=NodeSpec(8, 450, 3, 50, 10),
    )


H200 = _profile(141)


def test_one_gpu_holds_every_weight_byte() -> None:
    for spec in (KIMI, GQA):
        parts = weight_bytes_per_rank(spec, default_layout(1))
        assert sum(parts.values()) == pytest.approx(total_weight_bytes(spec))


def test_fp8_scales_are_counted() -> None:
    bf16 = replace(KIMI, weight_format="bf16")
    fp8_bytes = weight_bytes_per_rank(KIMI, default_layout(1))["routed_experts"]
    bf16_bytes = weight_bytes_per_rank(bf16, default_layout(1))["routed_experts"]
    assert fp8_bytes > bf16_bytes / 2  # values halve, 128×128 block scales add a little
    assert fp8_bytes == pytest.approx(bf16_bytes / 2 * (1 + 4 / (128 * 128)), rel=1e-3)


def test_expert_parallelism_divides_routed_experts_exactly() -> None:
    one = weight_bytes_per_rank(KIMI, default_layout(1))["routed_experts"]
    for gpus in (2, 4, 8, 16):
        assert weight_bytes_per_rank(KIMI, default_layout(gpus))["routed_experts"] == pytest.approx(
            one / gpus
        )


def test_per_rank_weights_fall_with_more_gpus_but_replicated_parts_stay() -> None:
    totals = [sum(weight_bytes_per_rank(KIMI, default_layout(g)).values()) for g in (1, 2, 4, 8, 16, 32)]
    assert all(b < a for a, b in itertools.pairwise(totals))
    replicated = weight_bytes_per_rank(KIMI, default_layout(32))["norms_router"]
    assert replicated == weight_bytes_per_rank(KIMI, default_layout(1))["norms_router"]


def test_replicated_shared_experts_cost_more_than_split_ones() -> None:
    split = weight_bytes_per_rank(KIMI, ParallelLayout(8, 8, 8, shared_experts="split"))["shared_experts"]
    whole = weight_bytes_per_rank(KIMI, ParallelLayout(8, 8, 8, shared_experts="replicated"))[
        "shared_experts"
    ]
    assert whole == pytest.approx(8 * split)


def test_mla_cache_is_whole_on_every_tp_rank_but_data_parallel_attention_divides_it() -> None:
    one = kv_cache_bytes_per_rank(KIMI, default_layout(1), 8, 4096)
    assert one == pytest.approx(8 * kv_cache_bytes(KIMI, 4096))
    assert kv_cache_bytes_per_rank(KIMI, default_layout(8), 8, 4096) == pytest.approx(one)
    assert kv_cache_bytes_per_rank(KIMI, ParallelLayout(8, 1, 8), 8, 4096) == pytest.approx(one / 8)


def test_gqa_cache_splits_by_kv_head_until_heads_run_out() -> None:
    per_tp = [kv_cache_bytes_per_rank(GQA, ParallelLayout(g, g, g), 4, 1000) for g in (1, 2, 4, 8)]
    assert per_tp[0] == pytest.approx(4 * kv_cache_bytes(GQA, 1000))
    assert per_tp[1] == pytest.approx(per_tp[0] / 2)
    assert per_tp[2] == pytest.approx(per_tp[0] / 4)
    assert per_tp[3] == pytest.approx(per_tp[2])  # 4 KV heads: beyond TP 4 each rank keeps one head


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 256), st.integers(1, 65536))
def test_kv_cache_is_linear_in_batch_and_capped_by_the_window(batch: int, context: int) -> None:
    layout = default_layout(1)
    kv = kv_cache_bytes_per_rank(GQA, layout, batch, context)
    assert kv == pytest.approx(batch * kv_cache_bytes_per_rank(GQA, layout, 1, context))
    per_layer_token = 2 * 4 * 128 * 2
    assert kv == pytest.approx(batch * 8 * per_layer_token * (context + min(context, 128)))


def test_kimi_k2_fp8_fits_eight_h200_but_not_one() -> None:
    use = fit_layout(KIMI, H200, batch=1, context_len=4096, layout=default_layout(8))
    assert use.fits and use.layout.gpus == 8
    with pytest.raises(MoesimError) as err:
        fit_layout(KIMI, H200, batch=1, context_len=4096, layout=default_layout(1))
    message = str(err.value)
    assert err.value.field == "memory"
    assert "missing" in message and "--gpus 8" in message
    one = rank_memory(KIMI, default_layout(1), H200.datasheet.memory_capacity_bytes, 1, 4096)
    assert f"{one.missing_bytes / GB:.1f} GB missing" in message


def test_default_is_the_smallest_layout_that_fits() -> None:
    use = fit_layout(KIMI, H200, batch=1, context_len=4096)
    assert use.layout == default_layout(8)
    assert fit_layout(GQA, H200, batch=1, context_len=4096).layout == default_layout(1)
    smaller_gpu = _profile(80, "h100")
    assert fit_layout(KIMI, smaller_gpu, batch=1, context_len=4096).layout.gpus == 16


def test_a_bigger_batch_can_need_more_gpus() -> None:
    small = smallest_fitting_layout(KIMI, H200, 1, 4096)
    large = smallest_fitting_layout(KIMI, H200, 64, 32768)
    assert small is not None and large is not None
    assert large.layout.gpus > small.layout.gpus
    assert large.layout.dp > 1  # MLA's cache only splits across data-parallel attention groups


def test_nothing_fits_says_so() -> None:
    tiny = _profile(1, "tiny")
    with pytest.raises(MoesimError, match="no layout up to 64 GPUs fits"):
        fit_layout(KIMI, tiny, batch=1, context_len=4096)


def test_reserve_is_the_stated_fraction_and_missing_bytes_add_up() -> None:
    use = rank_memory(KIMI, default_layout(4), H200.datasheet.memory_capacity_bytes, 2, 2048)
    assert use.reserve_bytes == pytest.approx(RESERVE_FRACTION * 141 * GB)
    assert use.total_bytes == pytest.approx(use.weights_bytes + use.kv_cache_bytes + use.reserve_bytes)
    assert use.missing_bytes == pytest.approx(use.total_bytes - use.capacity_bytes)
    assert not use.fits
    assert use.as_dict()["fits"] is False


def test_a_shared_drafter_costs_target_memory_a_separate_one_does_not() -> None:
    shared = rank_memory(KIMI, default_layout(8), 141 * GB, 1, 4096, drafter_bytes=2 * GB)
    separate = rank_memory(
        KIMI, ParallelLayout(8, 8, 8, draft_on="separate"), 141 * GB, 1, 4096, drafter_bytes=2 * GB
    )
    assert shared.total_bytes - separate.total_bytes == pytest.approx(2 * GB)
    with pytest.raises(MoesimError) as err:
        fit_layout(KIMI, H200, 1, 4096, ParallelLayout(8, 8, 8, draft_on="separate"), drafter_bytes=200 * GB)
    assert err.value.field == "draft_on"


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 512), st.integers(1, 131072))
def test_more_gpus_never_need_more_per_rank(batch: int, context: int) -> None:
    needs = [
        rank_memory(KIMI, default_layout(g), 141 * GB, batch, context).total_bytes for g in (1, 2, 4, 8, 16)
    ]
    assert all(b <= a for a, b in itertools.pairwise(needs))


def test_bad_sizes_raise() -> None:
    with pytest.raises(MoesimError):
        rank_memory(KIMI, default_layout(8), 141 * GB, 0, 4096)
    with pytest.raises(MoesimError):
        rank_memory(KIMI, default_layout(8), 141 * GB, 1, 4096, reserve_fraction=1.0)
