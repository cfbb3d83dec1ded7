"""GEMM efficiency curves per dtype (`Empirical.gemm_efficiency_by_dtype`): a GEMM computing in a dtype with a
curve of its own runs at that curve, every other GEMM at the shared `gemm_efficiency`, in both timers alike,
and a profile without such curves prices every GEMM as before.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from moesim.errors import MoesimError
from moesim.simulator.execution.cost import CostParams, compute_time_s, kernel_time_s
from moesim.simulator.execution.events import run_events
from moesim.simulator.execution.fastpath import StepRequest, fast_step, fast_steps
from moesim.simulator.hardware.profile import (
    HardwareProfile,
    load_profile,
    profile_from_dict,
    profile_to_dict,
    save_profile,
)
from moesim.simulator.hardware.sections import GemmEfficiency
from moesim.simulator.models.catalogue import load_model
from moesim.simulator.models.layers import with_layer_count
from moesim.simulator.plan.kernels import Kernel
from moesim.simulator.plan.styles import build_plan

FP8_CURVE = GemmEfficiency((1.0, 64.0, 4096.0), (0.01, 0.1, 0.4))  # well below any bundled bf16 curve


def _with_fp8_curve(name: str = "h200") -> tuple[HardwareProfile, HardwareProfile]:
    hw = load_profile(name)
    return hw, replace(hw, empirical=replace(hw.empirical, gemm_efficiency_by_dtype={"fp8": FP8_CURVE}))


def _gemm(dtype: str, m: int) -> Kernel:
    return Kernel("g", "dense_gemm", 2.0 * m * 7168 * 7168, (), m_tokens=m, dtype=dtype)


@pytest.mark.parametrize("m", [2, 64, 512, 4096, 16384])
def test_a_dtype_with_its_own_curve_runs_at_it_and_the_others_at_the_shared_one(m: int) -> None:
    plain, priced = _with_fp8_curve()
    params = CostParams.from_hardware(priced)
    index = params.gemm_curve_index(["bf16", "fp8", "fp16"])
    assert index is not None and list(index) == [0, 1, 0]
    efficiency = params.gemm_efficiency(np.full(3, float(m)), index)
    shared = CostParams.from_hardware(plain).gemm_efficiency(float(m))
    # the fp8 curve as the cost model reads any curve (from the weight stream's value at M = 1)
    as_shared = replace(plain, empirical=replace(plain.empirical, gemm_efficiency=FP8_CURVE))
    own = CostParams.from_hardware(as_shared).gemm_efficiency(float(m))
    assert efficiency[0] == efficiency[2] == pytest.approx(shared, rel=1e-12)
    assert efficiency[1] == pytest.approx(own, rel=1e-12)
    flops = 2.0 * m * 7168 * 7168
    assert compute_time_s(flops, m, params.peak("fp8"), params, np.array([1]))[0] == pytest.approx(
        flops / (params.peak("fp8") * own), rel=1e-12
    )
    for dtype in ("bf16", "fp16"):  # no curve of their own: priced exactly as without the fp8 curve
        assert kernel_time_s(_gemm(dtype, m), priced, 1e8) == kernel_time_s(_gemm(dtype, m), plain, 1e8)
    assert kernel_time_s(_gemm("fp8", m), priced, 1e8) >= kernel_time_s(_gemm("fp8", m), plain, 1e8)


def test_no_curve_of_its_own_means_no_index_and_the_same_figures() -> None:
    plain, priced = _with_fp8_curve()
    assert plain.empirical.gemm_efficiency_by_dtype is None  # the datasheet default
    assert CostParams.from_hardware(plain).gemm_curve_index(["bf16", "fp8"]) is None
    assert CostParams.from_hardware(priced).gemm_curve_index(["bf16", "fp32"]) is None
    assert priced.empirical.gemm_curve("bf16") == plain.empirical.gemm_efficiency
    assert priced.empirical.gemm_curve("fp8") == FP8_CURVE
    spec = with_layer_count(load_model("qwen3-30b-a3b"), 2)  # bf16 weights: no GEMM in fp8
    plan = build_plan(spec, 8, 4, 2048, "fused", None, plain)
    assert fast_step(plan, priced) == fast_step(plan, plain)


@pytest.mark.parametrize(("batch", "tokens"), [(1, 1), (8, 4), (64, 3)])
def test_both_timers_price_an_fp8_models_gemms_on_the_fp8_curve(batch: int, tokens: int) -> None:
    plain, priced = _with_fp8_curve()
    spec = with_layer_count(load_model("deepseek-v3"), 3)  # fp8 weights: dense, expert and attention GEMMs
    plan = build_plan(spec, batch, tokens, 2048, "fused", None, plain)
    assert any(k.dtype == "fp8" and k.m_tokens > 0 for s in plan.segments for k in s.kernels)
    step = fast_step(plan, priced)
    assert step.step_s == pytest.approx(run_events(plan, priced).step_s, rel=1e-9)
    assert fast_steps([StepRequest(plan, "graph")], priced)[0] == step
    assert step.step_s >= fast_step(plan, plain).step_s  # a slower curve never makes a step faster


def test_curves_per_dtype_round_trip_and_bad_ones_are_refused(tmp_path: Path) -> None:
    _, priced = _with_fp8_curve()
    path = tmp_path / "p.toml"
    save_profile(priced, path)
    assert "[empirical.gemm_efficiency_by_dtype.fp8]" in path.read_text()
    assert load_profile(str(path)).empirical.gemm_efficiency_by_dtype == {"fp8": FP8_CURVE}
    data = profile_to_dict(priced)
    curve = data["empirical"]["gemm_efficiency_by_dtype"]["fp8"]
    for efficiency, words in (
        ([0.01, 0.1, 1.4], "efficiency"),
        ([0.01, 0.1], "3 entries but efficiency has 2"),
    ):
        curve["efficiency"] = efficiency
        with pytest.raises(MoesimError, match=words) as info:
            profile_from_dict(data, "bad.toml")
        assert info.value.field.startswith("bad.toml: empirical.gemm_efficiency_by_dtype.fp8")
