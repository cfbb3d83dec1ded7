"""The attention kernel terms (`hardware.sections.AttentionTerms`): what they add, where, and that a profile
without them prices attention as before.

An attention kernel over the KV cache carries its work units (sequences × KV heads × query tiles) and its
kind (gqa / mla); a profile's `[empirical.attention.<kind>]` adds fixed + units × per-unit to that kernel's
fixed part and to no other kernel, in both timers alike.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from moesim.errors import MoesimError
from moesim.simulator.execution.events import run_events
from moesim.simulator.execution.fastpath import StepRequest, fast_step, fast_steps
from moesim.simulator.hardware.profile import HardwareProfile, load_profile, save_profile
from moesim.simulator.hardware.sections import AttentionTerms
from moesim.simulator.models.catalogue import load_model
from moesim.simulator.models.layers import with_layer_count
from moesim.simulator.plan.attention import attention_work_units
from moesim.simulator.plan.styles import build_plan

TERMS = {"gqa": AttentionTerms(fixed_us=8.0, per_unit_us=0.02), "mla": AttentionTerms(10.0, 0.03)}


def _with_terms(name: str = "h200") -> tuple[HardwareProfile, HardwareProfile]:
    hw = load_profile(name)
    return hw, replace(hw, empirical=replace(hw.empirical, attention=TERMS))


@pytest.mark.parametrize(("model", "kind"), [("qwen3-30b-a3b", "gqa"), ("deepseek-v3", "mla")])
@pytest.mark.parametrize(("batch", "tokens"), [(1, 1), (8, 4), (64, 1)])
def test_the_terms_add_fixed_plus_units_to_each_attention_kernel_only(
    model: str, kind: str, batch: int, tokens: int
) -> None:
    plain, priced = _with_terms()
    spec = with_layer_count(load_model(model), 2)
    plan = build_plan(spec, batch, tokens, 2048, "fused", None, plain)
    attention = [k for s in plan.segments for k in s.kernels if k.attention_units > 0]
    assert attention and {k.attention_kind for k in attention} == {kind}
    added_s = sum(
        (TERMS[kind].fixed_us + k.attention_units * TERMS[kind].per_unit_us) * 1e-6 for k in attention
    )
    before = fast_step(plan, plain)
    after = fast_step(plan, priced)
    assert after.step_s - before.step_s == pytest.approx(added_s, rel=1e-9)
    engine = run_events(plan, priced)
    assert after.step_s == pytest.approx(engine.step_s, rel=1e-9)
    assert fast_steps([StepRequest(plan, "graph")], priced)[0] == after


def test_a_profile_without_terms_prices_attention_by_the_roofline_alone() -> None:
    hw = load_profile("h200")
    assert hw.empirical.attention is None  # the datasheet default: figures as before the term existed
    spec = with_layer_count(load_model("qwen3-30b-a3b"), 2)
    plan = build_plan(spec, 8, 4, 2048, "fused", None, hw)
    empty = replace(hw, empirical=replace(hw.empirical, attention={}))
    assert fast_step(plan, empty) == fast_step(plan, hw)


def test_work_units_grow_with_sequences_kv_heads_and_query_tiles() -> None:
    assert attention_work_units(1, 4, 1) == 4
    assert attention_work_units(8, 4, 1) == 32
    assert attention_work_units(8, 4, 2) == 64
    assert attention_work_units(8, 0, 0) == 8  # MLA: one latent head, at least one tile
    hw = load_profile("h200")
    spec = with_layer_count(load_model("deepseek-v3"), 4)
    units = {}
    for tokens in (1, 4):
        plan = build_plan(spec, 8, tokens, 2048, "fused", None, hw)
        units[tokens] = max(k.attention_units for s in plan.segments for k in s.kernels)
    assert units[4] > units[1]  # all heads × 4 queries outgrow one 64-row MLA tile


def test_attention_terms_round_trip_and_bad_ones_are_refused(tmp_path: Path) -> None:
    _, priced = _with_terms()
    path = tmp_path / "p.toml"
    save_profile(priced, path)
    assert load_profile(str(path)).empirical.attention == TERMS
    text = path.read_text()
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace("[empirical.attention.gqa]", "[empirical.attention.sparse]"))
    with pytest.raises(MoesimError) as info:
        load_profile(str(bad))
    assert "empirical.attention.sparse" in info.value.field
    bad.write_text(text.replace("fixed_us = 8.0", "fixed_us = -1.0", 1))
    with pytest.raises(MoesimError) as info:
        load_profile(str(bad))
    assert "fixed_us" in info.value.field


def test_prefill_chunks_carry_gqa_prefill_units_and_pay_its_terms_only() -> None:
    from moesim.simulator.execution.cost import kernel_time_s
    from moesim.simulator.plan.mixed import PrefillChunks, prefill_attention_kernel

    spec = load_model("qwen3-30b-a3b")  # 32 query heads over 4 KV heads: 8 query rows per token and KV head
    one = prefill_attention_kernel(spec, "full", PrefillChunks.of([(2048, 0)]))
    two = prefill_attention_kernel(spec, "full", PrefillChunks.of([(2048, 0), (2048, 0)]))
    assert one.attention_kind == "gqa_prefill"
    assert one.attention_units == 4 * (2048 * 8 // 128)  # KV heads × 128-row query tiles
    assert two.attention_units == 2 * one.attention_units
    plain, priced = _with_terms()
    terms = AttentionTerms(fixed_us=9.0, per_unit_us=0.04)
    priced = replace(priced, empirical=replace(priced.empirical, attention={**TERMS, "gqa_prefill": terms}))
    added = kernel_time_s(one, priced, 1e6) - kernel_time_s(one, plain, 1e6)
    assert added == pytest.approx((9.0 + one.attention_units * 0.04) * 1e-6, rel=1e-9)
    mla = prefill_attention_kernel(load_model("deepseek-v3"), "full", PrefillChunks.of([(512, 0)]))
    # dense MLA prefill: multi-head attention, every head its own keys, 128-row query tiles
    assert mla.attention_kind == "mla_prefill" and mla.attention_units == 128 * (512 // 128)
