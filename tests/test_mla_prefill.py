"""MLA prefill as the engines run it (`plan.attention.mla_prefill_runs_mha`, `plan.mixed`): kv_b_proj
decompresses every key's latent, the keys are assembled, multi-head attention runs over them with q/k head
dim nope + rope and v head dim v_head_dim, its output straight into o_proj; the absorption runs for the
decode rows only. Decode and verification plans are untouched.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from moesim.simulator.execution.events import run_events
from moesim.simulator.execution.fastpath import fast_step
from moesim.simulator.hardware.profile import load_profile
from moesim.simulator.models.catalogue import load_model
from moesim.simulator.models.layers import with_layer_count
from moesim.simulator.plan.attention import mla_prefill_runs_mha
from moesim.simulator.plan.mixed import (
    MLA_PREFILL_K,
    MLA_PREFILL_KV,
    PrefillChunks,
    build_mixed_plan,
    prefill_attention_kernel,
)
from moesim.simulator.plan.shapes import attention_matrices
from moesim.simulator.plan.styles import build_plan

CHUNKS = [(512, 1024), (256, 0)]  # (chunk tokens, tokens already prefilled)


def _first_layer(plan):  # type: ignore[no-untyped-def]
    return next(s.kernels for s in plan.segments if any(k.name == "input_norm" for k in s.kernels))


def _layer_kernels(plan):  # type: ignore[no-untyped-def]
    return {k.name: k for k in _first_layer(plan)}


@pytest.mark.parametrize("model", ["deepseek-v3", "kimi-k2"])
def test_dense_mla_prefill_decompresses_every_key_and_runs_multi_head_attention(model: str) -> None:
    spec = with_layer_count(load_model(model), 2)
    a = spec.attention
    assert mla_prefill_runs_mha(spec, "full")
    chunks = PrefillChunks.of(CHUNKS)
    plan = build_mixed_plan(spec, 8, 1, 2048, chunks, "fused", None, load_profile("h200"))
    k = _layer_kernels(plan)
    qk, v_dim, nope = a.qk_nope_head_dim + a.qk_rope_head_dim, a.v_head_dim, a.qk_nope_head_dim  # type: ignore[operator]
    mats = attention_matrices(spec, "full")
    decompress = k["prefill_kv_b_proj"]
    rows = 512 + 1024 + 256  # every key the chunks attend to: prefix and chunk
    assert decompress.m_tokens == rows
    assert decompress.flops == pytest.approx(2.0 * rows * (mats["kv_b_k"].params + mats["kv_b_v"].params))
    assert decompress.write_tensor == MLA_PREFILL_KV
    assert decompress.write_bytes == rows * a.num_heads * (nope + v_dim) * 2
    assert k["prefill_k_concat"].write_bytes == rows * a.num_heads * qk * 2
    attention = k["prefill_attention"]
    reads = {r.tensor: r.size_bytes for r in attention.reads}
    assert reads[MLA_PREFILL_K] == rows * a.num_heads * qk * 2
    assert reads[MLA_PREFILL_KV] == rows * a.num_heads * v_dim * 2
    assert attention.write_tensor == "attn_out" and attention.write_bytes == 768 * a.num_heads * v_dim * 2
    pairs = 512 * (1024 + 513 / 2) + 256 * (257 / 2)
    # the mean keys per query rounded to whole tokens (`prefill_attention_kernel`)
    assert attention.flops == pytest.approx(2.0 * pairs * a.num_heads * (qk + v_dim), rel=1e-3)
    assert attention.attention_kind == "mla_prefill"
    assert attention.attention_units == 2 * a.num_heads * 3  # chunks × heads × ⌈384 / 128⌉ mean tiles
    # the absorption only for the 8 decode rows
    assert k["q_absorb"].m_tokens == k["v_up"].m_tokens == 8
    order = [kern.name for kern in _first_layer(plan)]
    assert order.index("kv_store") < order.index("prefill_kv_b_proj") < order.index("prefill_attention")
    assert order.index("prefill_attention") < order.index("o_proj")


def test_a_prefill_only_step_has_no_absorption_and_decode_plans_are_unchanged() -> None:
    hw = load_profile("h200")
    spec = with_layer_count(load_model("deepseek-v3"), 2)
    only = _layer_kernels(build_mixed_plan(spec, 0, 1, 0, PrefillChunks.of([(2048, 0)]), "fused", None, hw))
    assert "q_absorb" not in only and "v_up" not in only and "attention" not in only
    assert {"prefill_kv_b_proj", "prefill_k_concat", "prefill_attention"} <= set(only)
    decode = _layer_kernels(build_plan(spec, 8, 4, 2048, "fused", None, hw))
    assert decode["q_absorb"].m_tokens == decode["v_up"].m_tokens == 32
    assert not any(name.startswith("prefill") for name in decode)


def test_sparse_mla_prefill_keeps_the_absorbed_kernel() -> None:
    spec = load_model("deepseek-v3")
    sparse = replace(spec, attention=replace(spec.attention, index_topk=2048))
    assert not mla_prefill_runs_mha(sparse, "full")
    kernel = prefill_attention_kernel(sparse, "full", PrefillChunks.of([(512, 0)]))
    assert kernel.attention_kind == "" and kernel.write_tensor == "attn_latent"


@pytest.mark.parametrize(("decode", "chunks"), [(0, [(2048, 0)]), (8, CHUNKS)])
def test_both_timers_agree_on_a_mixed_mla_step(decode: int, chunks: list[tuple[int, int]]) -> None:
    hw = load_profile("h200")
    spec = with_layer_count(load_model("deepseek-v3"), 3)
    plan = build_mixed_plan(spec, decode, 1, 1024, PrefillChunks.of(chunks), "fused", None, hw)
    assert fast_step(plan, hw).step_s == pytest.approx(run_events(plan, hw).step_s, rel=1e-3)


def test_decompressing_more_prefix_costs_more() -> None:
    hw = load_profile("h200")
    spec = with_layer_count(load_model("deepseek-v3"), 2)
    times = [
        fast_step(build_mixed_plan(spec, 0, 1, 0, PrefillChunks.of([(512, p)]), "fused", None, hw), hw).step_s
        for p in (0, 2048, 8192)
    ]
    assert times == sorted(times) and times[0] < times[-1]


def test_an_attention_rate_of_its_own_prices_the_prefill_arithmetic_in_both_timers() -> None:
    """`AttentionTerms.flops_fraction` replaces the GEMM curve for that kind's kernels only: a long MLA
    prefill (compute-bound) at a sixth of the peak takes its FLOPs / (peak / 6), decode is untouched."""
    from moesim.simulator.execution.cost import CostParams, kernel_time_s
    from moesim.simulator.hardware.sections import AttentionTerms

    hw = load_profile("h200")
    terms = {"mla_prefill": AttentionTerms(0.0, 0.0, flops_fraction=1 / 6)}
    rated = replace(hw, empirical=replace(hw.empirical, attention=terms))
    spec = with_layer_count(load_model("deepseek-v3"), 2)
    kernel = prefill_attention_kernel(spec, "full", PrefillChunks.of([(4096, 0)]))
    peak = CostParams.from_hardware(hw).peak(kernel.dtype)
    assert kernel_time_s(kernel, rated, 0.0) == pytest.approx(
        hw.empirical.kernel_fixed_latency_us * 1e-6 + kernel.flops / (peak / 6), rel=1e-9
    )
    assert kernel_time_s(kernel, rated, 0.0) > kernel_time_s(kernel, hw, 0.0)
    plan = build_mixed_plan(spec, 4, 1, 1024, PrefillChunks.of([(4096, 0)]), "fused", None, hw)
    assert fast_step(plan, rated).step_s > fast_step(plan, hw).step_s
    assert fast_step(plan, rated).step_s == pytest.approx(run_events(plan, rated).step_s, rel=1e-3)
    decode = build_plan(spec, 8, 4, 2048, "fused", None, hw)
    assert fast_step(decode, rated) == fast_step(decode, hw)
