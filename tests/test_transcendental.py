"""Transcendental element-wise work (SiLU, exp, rsqrt): measured element rates on a CPU price the reference
plan's kernels that evaluate them; a profile without rates (every datasheet and GPU profile) is unchanged."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from moesim.calibrate.fits.build import build_profile
from moesim.calibrate.fits.drift import SpeedRatio, at_speed
from moesim.calibrate.fits.memory import transcendental_rates
from moesim.errors import MoesimError
from moesim.simulator.execution.cost import CostParams, kernel_time_s
from moesim.simulator.execution.events import run_events
from moesim.simulator.execution.fastpath import fast_step
from moesim.simulator.hardware.profile import load_profile, profile_from_dict, profile_to_dict
from moesim.simulator.plan.kernels import Kernel, TensorRead
from moesim.simulator.plan.reference import reference_step_plan
from moesim.simulator.plan.reference_fused import fused_reference_step_plan
from tests.test_calibrate_fit import synthetic_tables
from tests.test_validation_reference import tiny_spec

SILU_RATE = 2.4e9  # elements/s: F.silu in cache, one core of the 2-core EPYC VM


def silu_kernel(elements: float) -> Kernel:
    return Kernel(
        "silu_",
        "routed_experts",
        4.0 * elements,
        (TensorRead("gu", 4.0 * elements),),
        write_bytes=4.0 * elements,
        write_tensor="gu",
        transcendental_elements=elements,
        transcendental_op="silu",
    )


def with_rates(rates: dict[str, float] | None):
    cpu = profile_from_dict(profile_to_dict(build_profile(synthetic_tables(), "test-cpu")[0]), "t.toml")
    return replace(cpu, empirical=replace(cpu.empirical, transcendental_elements_per_s=rates))


def test_a_silu_kernel_takes_at_least_its_elements_at_the_element_rate() -> None:
    plain, rated = with_rates(None), with_rates({"silu": SILU_RATE})
    kernel, n = silu_kernel(131072.0), 131072.0
    bytes_only = kernel_time_s(kernel, plain, 0.0, 2 * 4 * n)
    fixed_s = plain.empirical.kernel_fixed_latency_us * 1e-6
    assert bytes_only < fixed_s + n / SILU_RATE  # without the rate it is priced far below the measured ~55 us
    assert kernel_time_s(kernel, rated, 0.0, 2 * 4 * n) == pytest.approx(fixed_s + n / SILU_RATE)
    # a rate far above the bytes' leaves the roofline in charge, and an op left out is unbounded
    assert kernel_time_s(kernel, with_rates({"silu": 1e14}), 0.0, 8 * n) == pytest.approx(bytes_only)
    assert kernel_time_s(kernel, with_rates({"exp": SILU_RATE}), 0.0, 8 * n) == pytest.approx(bytes_only)


def test_reference_plans_mark_silu_softmax_and_rsqrt_with_their_elements() -> None:
    spec = tiny_spec(shared=1)
    loads = [np.array([1, 1, 0, 2, 0, 0, 0, 0])] * spec.n_moe_layers
    for plan in (reference_step_plan(spec, 2, 1, 4, loads), fused_reference_step_plan(spec, 2, 1, 4, loads)):
        marked = {
            k.name: (k.transcendental_op, k.transcendental_elements)
            for k in plan.kernels
            if k.transcendental_op
        }
        ops = {op for op, _ in marked.values()}
        assert ops == {"silu", "exp", "rsqrt"}
        silu = [k for k in plan.kernels if k.transcendental_op == "silu"]
        assert sum(
            k.transcendental_elements for k in silu if k.category == "routed_experts"
        ) == pytest.approx(
            spec.n_moe_layers * 4 * spec.expert_width  # 4 (token, expert) rows per MoE layer
        )
        softmax = next(k for k in plan.kernels if k.name.endswith("softmax") and k.category == "attention")
        assert softmax.transcendental_elements == 2 * spec.attention.num_heads * 1 * 5  # B·heads·T·S
        assert all(k.transcendental_elements > 0 for k in plan.kernels if k.transcendental_op)


def test_fast_path_and_events_price_the_rates_alike_and_without_rates_nothing_moves() -> None:
    spec = tiny_spec(shared=1)
    loads = [np.array([1, 1, 0, 2, 0, 0, 0, 0])] * spec.n_moe_layers
    plan = reference_step_plan(spec, 2, 1, 4, loads)
    plain = with_rates(None)
    rated = with_rates({"silu": 1e6, "exp": 1e6, "rsqrt": 1e6})  # slow enough to show in a tiny model's step
    base = fast_step(plan, plain, "eager").step_s
    fast = fast_step(plan, rated, "eager").step_s
    events = run_events(plan, rated, "eager").step_s
    assert fast == pytest.approx(events, rel=1e-9)
    assert fast > base
    assert run_events(plan, plain, "eager").step_s == pytest.approx(base, rel=1e-9)


def test_datasheet_profiles_carry_no_rate() -> None:
    for name in ("h200", "h100-sxm", "mi300x"):
        hw = load_profile(name)
        assert hw.empirical.transcendental_elements_per_s is None
        assert CostParams.from_hardware(hw).transcendental == {}


def test_calibration_fits_the_rates_from_the_memory_suites_rows() -> None:
    tables = synthetic_tables()
    fixed_s = 5e-6
    tables.memory = [
        *tables.memory,
        {
            "kind": "transcendental",
            "op": "silu",
            "elements": 131072,
            "median_s": fixed_s + 131072 / SILU_RATE,
            "fixed_s": fixed_s,
        },
        {
            "kind": "transcendental",
            "op": "exp",
            "elements": 131072,
            "median_s": fixed_s / 2,
            "fixed_s": fixed_s,
        },
    ]
    rates = transcendental_rates(tables.memory)
    assert rates == {"silu": pytest.approx(SILU_RATE)}  # exp's net time is not positive: left unbounded
    profile, _ = build_profile(tables, "test-cpu")
    assert profile.empirical.transcendental_elements_per_s == {"silu": pytest.approx(SILU_RATE, rel=1e-6)}
    again = profile_from_dict(profile_to_dict(profile), "t.toml")
    assert again.empirical.transcendental_elements_per_s == profile.empirical.transcendental_elements_per_s
    slower = at_speed(profile, SpeedRatio(1.0, 0.5, 1.0, 1.0))
    assert slower.empirical.transcendental_elements_per_s == {"silu": pytest.approx(SILU_RATE / 2, rel=1e-6)}
    assert build_profile(synthetic_tables(), "test-cpu")[0].empirical.transcendental_elements_per_s is None


def test_a_profile_with_an_unknown_op_or_a_bad_rate_is_refused_in_one_line() -> None:
    data = profile_to_dict(build_profile(synthetic_tables(), "test-cpu")[0])
    for rates, field in (({"tanh": 1e9}, "tanh"), ({"silu": -1.0}, "silu"), ({"silu": 1e16}, "silu")):
        data["empirical"]["transcendental_elements_per_s"] = rates
        with pytest.raises(MoesimError, match=f"transcendental_elements_per_s.{field}"):
            profile_from_dict(data, "t.toml")
