"""Predict a measured reference step with the simulator, and split the prediction into cost terms.

No torch here. The prediction is the discrete-event timer run on the exact `torch-reference` plan of
the step (`reference_step_plan` with the replayed expert loads), so it prices exactly the measured work.
The term split (launch, fixed latency, compute, memory, cache) feeds the error attribution in report.py.
`predict_rows` is the pure half of validation: it prices the rows a measuring run wrote (`measure.py`),
right after measuring or later on a machine without torch (`moesim validate repredict`). Where the
profile recorded its calibration's drift probe and the rows the probe measured beside them, each row is also
predicted with the profile at the machine speed of that moment (`calibrate.fits.drift.at_speed`): the median of
the probe readings of the rows around it (`row_speeds`), in each part that moved beyond the scatter between
probes (`drift.beyond_noise` with `drift.window_speeds`' noise).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from moesim.calibrate.fits.drift import (
    PARTS,
    ProbeSample,
    SpeedRatio,
    at_speed,
    beyond_noise,
    reference_sample,
    window_speeds,
)
from moesim.errors import MoesimError
from moesim.simulator.execution.cost import CostParams, kernel_times_s, memory_time_s
from moesim.simulator.hardware.profile import HardwareProfile
from moesim.simulator.models.spec import ModelSpec
from moesim.simulator.plan.reference import reference_step_plan
from moesim.simulator.plan.reference_fused import fused_reference_step_plan
from moesim.simulator.plan.step import StepPlan
from moesim.validation.reference.configs import row_routing, row_spec

TERMS = ("launch", "fixed", "compute", "memory", "cache")
# The exact step plan of each reference style the torch side runs (validation/reference.py).
REFERENCE_PLANS = {"torch-reference": reference_step_plan, "torch-fused": fused_reference_step_plan}
# What a measuring run records per row (measure.measured_row); prediction carries these over unchanged.
MEASURED_KEYS = (
    "model",
    "shape",
    "device",
    "launch",
    "batch",
    "draft_len",
    "tokens_per_seq",
    "m_tokens",
    "context_len",
    "measured_s",
    "spread",
    "round_spread",
    "n_samples",
    "probe_memory_gbps",
    "probe_compute_tflops",
    "probe_dispatch_us",
    "probe_stream_gemm_tflops",
    "probe_memory_noise",
    "probe_compute_noise",
    "probe_dispatch_noise",
    "probe_stream_gemm_noise",
)


@dataclass(frozen=True)
class Prediction:
    """The simulator's view of one step: its time, category breakdown and cost-term split."""

    step_s: float
    breakdown_s: dict[str, float]
    terms_s: dict[str, float]  # sums to step_s
    n_kernels: int
    hbm_bytes: float
    cache_bytes: float


def cost_terms(
    plan: StepPlan,
    hardware: HardwareProfile,
    step_s: float,
    params: CostParams | None = None,
    warm_cache: bool = True,
) -> dict[str, float]:
    """Split a simulated step of `step_s` seconds into launch (host issue, gaps, sync: everything outside
    kernels), fixed kernel latency, compute, memory-bandwidth and cache-bandwidth time. Each kernel's
    roofline time goes to compute when compute-bound, else to memory and cache in proportion to their
    times. Uses the fast path's per-kernel costs (the engine's cache semantics and cost formulas), or,
    for a step starting with a cold cache, the engine's cache pass from cold."""
    from moesim.simulator.execution.fastpath import cost_plan, plan_arrays

    params = params or CostParams.from_hardware(hardware)
    arrays = plan_arrays(plan)
    m = arrays.m_tokens
    if warm_cache:
        costs = cost_plan(arrays, params)
        hbm, compute, memory, total = costs.hbm_bytes, costs.compute_s, costs.memory_s, costs.total_s
    else:
        from moesim.simulator.execution.events import cache_pass

        cache, hbm = cache_pass(plan.kernels, params.cache_capacity_bytes, warm=False)
        peaks = np.array([params.peak(k.dtype) for k in plan.kernels])
        curve = params.gemm_curve_index([k.dtype for k in plan.kernels])
        evaluation = params.transcendental_s(arrays.transcendental)
        total, compute, memory = kernel_times_s(
            arrays.flops, m, peaks, hbm, cache, params, gemm_curve=curve, transcendental_s=evaluation
        )
    hbm_time = memory_time_s(hbm, np.zeros_like(hbm), m > 0, params)
    cache_time = np.maximum(memory - hbm_time, 0.0)
    bound_compute = compute >= memory
    mem_total = np.maximum(hbm_time + cache_time, 1e-30)
    roof = total - params.fixed_s
    terms = {
        "fixed": float(params.fixed_s * arrays.n_kernels),
        "compute": float(np.sum(np.where(bound_compute, roof, 0.0))),
        "memory": float(np.sum(np.where(bound_compute, 0.0, roof * hbm_time / mem_total))),
        "cache": float(np.sum(np.where(bound_compute, 0.0, roof * cache_time / mem_total))),
    }
    terms["launch"] = max(0.0, step_s - sum(terms.values()))
    scale = step_s / max(sum(terms.values()), 1e-30)
    return {name: terms[name] * scale for name in TERMS}


def simulate_plan(
    plan: StepPlan, hardware: HardwareProfile, launch: str, params: CostParams, warm_cache: bool = True
) -> tuple[float, dict[str, float], float, float]:
    """(step_s, breakdown_s, hbm_bytes, cache_bytes) from the discrete-event timer, or from the closed-form
    fast path (equal to the engine on one stream, as every torch-reference plan is, and warm only) where
    simpy is missing."""
    try:
        from moesim.simulator.execution.events import run_events
    except ImportError:
        if not warm_cache:
            raise
        from moesim.simulator.execution.fastpath import fast_step

        fast = fast_step(plan, hardware, launch, params=params)
        return fast.step_s, dict(fast.breakdown_s), fast.hbm_bytes, fast.cache_bytes
    result = run_events(plan, hardware, launch, params=params, warm_cache=warm_cache)
    return result.step_s, dict(result.breakdown_s), result.hbm_bytes, result.cache_bytes


def predict_reference_step(
    model: ModelSpec,
    hardware: HardwareProfile,
    batch: int,
    tokens_per_seq: int,
    context_len: int,
    expert_loads: Sequence[np.ndarray],
    launch: str,
    warm_cache: bool = True,
    style: str = "torch-reference",
) -> Prediction:
    """The simulator's prediction for the reference step with these exact per-layer expert loads, starting
    warm from the previous identical step or (`warm_cache=False`) with an empty cache."""
    plan = REFERENCE_PLANS[style](model, batch, tokens_per_seq, context_len, expert_loads)
    return predict_plan(plan, hardware, launch, warm_cache)


def predict_plan(
    plan: StepPlan, hardware: HardwareProfile, launch: str, warm_cache: bool = True
) -> Prediction:
    """The prediction for a reference step's plan on `hardware`: its time, breakdown and cost terms."""
    params = CostParams.from_hardware(hardware)
    step_s, breakdown, hbm_bytes, cache_bytes = simulate_plan(plan, hardware, launch, params, warm_cache)
    return Prediction(
        step_s=step_s,
        breakdown_s=breakdown,
        terms_s=cost_terms(plan, hardware, step_s, params, warm_cache),
        n_kernels=len(plan.kernels),
        hbm_bytes=hbm_bytes,
        cache_bytes=cache_bytes,
    )


def row_speeds(measured_rows: Sequence[dict[str, Any]]) -> dict[int, ProbeSample]:
    """The machine speed beside each probed row (by its index): the median of the probe readings of the rows
    around it, with the noise of the scatter between the run's readings (`drift.window_speeds`)."""
    probed = [
        (index, row)
        for index, row in enumerate(measured_rows)
        if row.get("probe_memory_gbps") and row.get("probe_compute_tflops")
    ]
    beside = [
        ProbeSample(
            "row",
            0.0,
            row["probe_memory_gbps"],
            row["probe_compute_tflops"],
            dispatch_us=row.get("probe_dispatch_us") or 0.0,
            stream_gemm_tflops=row.get("probe_stream_gemm_tflops") or 0.0,
            **{f"{part}_noise": row.get(f"probe_{part}_noise") or 0.0 for part in PARTS},
        )
        for _, row in probed
    ]
    return {index: speed for (index, _), speed in zip(probed, window_speeds(beside), strict=True)}


def predict_rows(
    meta: dict[str, Any],
    measured_rows: Sequence[dict[str, Any]],
    hardware: HardwareProfile,
    cross_hardware: dict[str, HardwareProfile] | None = None,
) -> list[dict[str, Any]]:
    """The measured rows of a run (with its `meta`) predicted with `hardware` and each cross profile.

    Each row's validation spec and forced routing are rebuilt from the meta and the row's configuration
    seed, exactly as the measuring run drew them; a row whose re-sampled distinct-expert count differs
    from the recorded one is refused (another seed or routing model measured it).
    """
    rows: list[dict[str, Any]] = []
    mismatched: list[str] = []
    reference = reference_sample(hardware)
    warm = meta.get("cache_between_steps", "warm") != "cold"  # runs before the flush option ran warm
    style = meta.get("reference_style", "torch-reference")
    if style not in REFERENCE_PLANS:
        raise MoesimError(
            "--repredict",
            f"unknown reference style {style!r}",
            f"runs record one of {', '.join(REFERENCE_PLANS)}",
        )
    speeds = row_speeds(measured_rows) if reference is not None else {}
    for index, old in enumerate(measured_rows):
        spec = row_spec(meta, old)
        routing = row_routing(meta, spec, old)
        distinct = float(np.mean(routing.distinct_experts())) if spec.is_moe else 0.0
        if old.get("distinct_experts") is not None and abs(distinct - float(old["distinct_experts"])) > 1e-9:
            mismatched.append(f"{spec.name} B={old['batch']} K={old['draft_len']}")
        launch = old.get("launch") or meta.get("launch", "eager")
        # The plan depends on the row, not the hardware: built once, timed on every profile.
        plan = REFERENCE_PLANS[style](
            spec, old["batch"], old["draft_len"] + 1, old["context_len"], routing.loads
        )
        pred = predict_plan(plan, hardware, launch, warm)
        cross = {
            name: simulate_plan(plan, other, launch, CostParams.from_hardware(other), warm)[0]
            for name, other in (cross_hardware or {}).items()
        }
        corrected = {}
        if reference is not None and index in speeds:
            beside = speeds[index]
            measured_ratio = SpeedRatio.between(beside, reference)
            ratio = beyond_noise(measured_ratio, beside, reference)
            drifted = at_speed(hardware, ratio)
            corrected = {
                "measured_speed_ratio": measured_ratio.as_dict(),
                "speed_ratio": ratio.as_dict(),
                "drift_predicted_s": simulate_plan(
                    plan, drifted, launch, CostParams.from_hardware(drifted), warm
                )[0],
            }
        rows.append(
            {key: old.get(key) for key in MEASURED_KEYS}
            | corrected
            | {
                "distinct_experts": distinct,
                "n_kernels": pred.n_kernels,
                "predicted_s": pred.step_s,
                "predicted_breakdown_s": pred.breakdown_s,
                "predicted_terms_s": pred.terms_s,
                "cross_predicted_s": cross,
            }
        )
    if mismatched:
        raise MoesimError(
            "--repredict",
            f"re-sampled routing differs from the measured run for {', '.join(mismatched[:3])}"
            + (f" and {len(mismatched) - 3} more" if len(mismatched) > 3 else ""),
            "the run used another seed or routing model than its result.json records",
        )
    return rows


__all__ = [
    "MEASURED_KEYS",
    "REFERENCE_PLANS",
    "TERMS",
    "Prediction",
    "cost_terms",
    "predict_plan",
    "predict_reference_step",
    "predict_rows",
    "simulate_plan",
]
