"""Predict a measured reference step with the simulator, and split the prediction into cost terms.

No torch here. The prediction is the discrete-event engine run on the exact `torch-reference` plan of
the step (`reference_step_plan` with the replayed expert loads), so it prices exactly the measured work.
The term split (launch, fixed latency, compute, memory, cache) feeds the error attribution in report.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from moesim.simulator.execution.cost import CostParams, memory_time_s
from moesim.simulator.hardware.profile import HardwareProfile
from moesim.simulator.models.spec import ModelSpec
from moesim.simulator.plan.reference import reference_step_plan
from moesim.simulator.plan.step import StepPlan

TERMS = ("launch", "fixed", "compute", "memory", "cache")


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
    plan: StepPlan, hardware: HardwareProfile, step_s: float, params: CostParams | None = None
) -> dict[str, float]:
    """Split a simulated step of `step_s` seconds into launch (host issue, gaps, sync: everything outside
    kernels), fixed kernel latency, compute, memory-bandwidth and cache-bandwidth time. Each kernel's
    roofline time goes to compute when compute-bound, else to memory and cache in proportion to their
    times. Uses the fast path's per-kernel costs (the engine's cache semantics and cost formulas)."""
    from moesim.simulator.execution.fastpath import cost_plan, plan_arrays

    params = params or CostParams.from_hardware(hardware)
    arrays = plan_arrays(plan)
    costs = cost_plan(arrays, params)
    hbm, m = costs.hbm_bytes, arrays.m_tokens
    compute, memory = costs.compute_s, costs.memory_s
    hbm_time = memory_time_s(hbm, np.zeros_like(hbm), m > 0, params)
    cache_time = np.maximum(memory - hbm_time, 0.0)
    bound_compute = compute >= memory
    mem_total = np.maximum(hbm_time + cache_time, 1e-30)
    roof = costs.total_s - params.fixed_s
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
    plan: StepPlan, hardware: HardwareProfile, launch: str, params: CostParams
) -> tuple[float, dict[str, float], float, float]:
    """(step_s, breakdown_s, hbm_bytes, cache_bytes) from the discrete-event engine, or from the closed-form
    fast path (equal to the engine on one stream, as every torch-reference plan is) where simpy is missing."""
    try:
        from moesim.simulator.execution.engine import run_engine
    except ImportError:
        from moesim.simulator.execution.fastpath import fast_step

        fast = fast_step(plan, hardware, launch, params=params)
        return fast.step_s, dict(fast.breakdown_s), fast.hbm_bytes, fast.cache_bytes
    result = run_engine(plan, hardware, launch, params=params)
    return result.step_s, dict(result.breakdown_s), result.hbm_bytes, result.cache_bytes


def predict_reference_step(
    model: ModelSpec,
    hardware: HardwareProfile,
    batch: int,
    tokens_per_seq: int,
    context_len: int,
    expert_loads: Sequence[np.ndarray],
    launch: str,
) -> Prediction:
    """The simulator's prediction for the reference step with these exact per-layer expert loads."""
    plan = reference_step_plan(model, batch, tokens_per_seq, context_len, expert_loads)
    params = CostParams.from_hardware(hardware)
    step_s, breakdown, hbm_bytes, cache_bytes = simulate_plan(plan, hardware, launch, params)
    return Prediction(
        step_s=step_s,
        breakdown_s=breakdown,
        terms_s=cost_terms(plan, hardware, step_s, params),
        n_kernels=len(plan.kernels),
        hbm_bytes=hbm_bytes,
        cache_bytes=cache_bytes,
    )


__all__ = ["TERMS", "Prediction", "cost_terms", "predict_reference_step", "simulate_plan"]
