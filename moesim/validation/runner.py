"""Measure the torch reference over a grid of (model, batch, draft length) and predict each row.

Per configuration: one routing sample per MoE layer from the routing model (seeded by the config), the
torch step prepared with that forced routing, and the simulator's prediction for the same loads.
Timing is wall clock around one step with a device synchronisation before and after (so it includes
launch, device work and the final sync, as the simulator's step time does); a single-threaded CPU run
is timed with the thread's CPU clock instead, so preemption by other processes on a shared machine is
not counted (see `step_clock`). Steps run back to back, so
each starts with the cache as the previous identical step left it — the engine's warm-cache assumption.
Repeats are split into rounds that cycle through all configurations of a model; the spread between
rounds' medians is the run-to-run noise floor reported beside the error.

torch is imported lazily (by `reference.py`), only when measuring.
"""

from __future__ import annotations

import functools
import gc
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from moesim.errors import MoesimError
from moesim.simulator.hardware.profile import HardwareProfile
from moesim.simulator.models.spec import ModelSpec
from moesim.simulator.routing.base import RoutingModel
from moesim.validation.predict import predict_reference_step
from moesim.validation.routing_replay import StepRouting, sample_step_routing

BATCHES = (1, 2, 4, 8, 16, 32)
DRAFT_LENS = (0, 1, 3, 7)
QUICK_BATCHES = (1, 4, 32)
QUICK_DRAFT_LENS = (0, 1, 3, 7)


@dataclass(frozen=True)
class MeasureSettings:
    """How hard to measure: rounds × repeats per round after warm-up."""

    rounds: int = 3
    repeats: int = 5
    warmup: int = 2

    @classmethod
    def for_mode(cls, quick: bool) -> MeasureSettings:
        return cls(rounds=3, repeats=4, warmup=1) if quick else cls(rounds=3, repeats=5, warmup=2)


@dataclass
class Row:
    """One measured and predicted configuration."""

    model: str
    shape: str
    device: str
    launch: str
    batch: int
    draft_len: int
    context_len: int
    measured_s: float
    predicted_s: float
    spread: float  # relative IQR of the individual timings
    round_spread: float  # max relative deviation of a round's median from the overall median
    n_samples: int
    distinct_experts: float  # mean over MoE layers
    n_kernels: int
    predicted_breakdown_s: dict[str, float] = field(default_factory=dict)
    predicted_terms_s: dict[str, float] = field(default_factory=dict)
    measured_ratio: float | None = None  # this step / decode step at the same batch
    predicted_ratio: float | None = None
    cross_predicted_s: dict[str, float] = field(default_factory=dict)  # other profiles' predictions

    @property
    def tokens_per_seq(self) -> int:
        return self.draft_len + 1

    @property
    def error(self) -> float:
        """Signed relative error of the prediction, (predicted − measured) / measured."""
        return self.predicted_s / self.measured_s - 1.0

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "shape": self.shape,
            "device": self.device,
            "launch": self.launch,
            "batch": self.batch,
            "draft_len": self.draft_len,
            "tokens_per_seq": self.tokens_per_seq,
            "m_tokens": self.batch * self.tokens_per_seq,
            "context_len": self.context_len,
            "distinct_experts": self.distinct_experts,
            "n_kernels": self.n_kernels,
            "measured_s": self.measured_s,
            "predicted_s": self.predicted_s,
            "error": self.error,
            "abs_error": abs(self.error),
            "spread": self.spread,
            "round_spread": self.round_spread,
            "n_samples": self.n_samples,
            "measured_ratio": self.measured_ratio,
            "predicted_ratio": self.predicted_ratio,
            "predicted_breakdown_s": self.predicted_breakdown_s,
            "predicted_terms_s": self.predicted_terms_s,
            "cross_predicted_s": self.cross_predicted_s,
        }


def fill_ratios(rows: list[Row]) -> None:
    """Set each row's verify/decode ratio against the K = 0 row of the same model, launch and batch."""
    decode = {(r.model, r.launch, r.batch, r.context_len): r for r in rows if r.draft_len == 0}
    for r in rows:
        base = decode.get((r.model, r.launch, r.batch, r.context_len))
        if base is not None:
            r.measured_ratio = r.measured_s / base.measured_s
            r.predicted_ratio = r.predicted_s / base.predicted_s


def config_seed(model: str, batch: int, draft_len: int, seed: int) -> int:
    """A stable seed per configuration (so reruns sample the same routing)."""
    return zlib.crc32(f"{model}|{batch}|{draft_len}|{seed}".encode()) & 0x7FFFFFFF


def default_routing(model: ModelSpec, name: str) -> RoutingModel:
    """The routing model that drives validation: 'typical' (correlated, documented default) or 'uniform'."""
    if name == "uniform":
        from moesim.simulator.routing.independent import IndependentRouting

        return IndependentRouting()
    if name == "typical":
        from moesim.simulator.routing.presets import typical_routing

        return typical_routing(model.n_experts, model.top_k, model.n_groups, model.topk_groups)
    raise MoesimError("--routing", f"unknown routing {name!r}", "choose typical or uniform")


def _relative_spread(times: list[float]) -> float:
    q1, med, q3 = np.percentile(times, [25, 50, 75])
    return float((q3 - q1) / med) if med > 0 else 0.0


@dataclass
class _Prepared:
    batch: int
    draft_len: int
    routing: StepRouting
    inputs: Any
    run: Callable[[], Any]
    rounds: list[list[float]] = field(default_factory=list)


def measure_model(
    spec: ModelSpec,
    shape_key: str,
    device: str,
    grid: list[tuple[int, int]],
    context_len: int,
    launch: str,
    routing: RoutingModel,
    settings: MeasureSettings,
    hardware: HardwareProfile,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
    clock: str = "auto",
    check: dict[str, bool] | None = None,
    cross_hardware: dict[str, HardwareProfile] | None = None,
) -> list[Row]:
    """Measure and predict every (batch, draft length) of `grid` for one model; with `check`, also
    record there whether the plan lists exactly the aten ops one small step of this model issues."""
    from moesim.calibrate.timing import import_torch

    torch = import_torch()
    from moesim.validation.reference import ReferenceModel

    model = ReferenceModel(spec, device=device, seed=seed)
    cuda = model.device.type == "cuda"
    clock_ns = step_clock(clock, cuda, torch.get_num_threads())

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    prepared: list[_Prepared] = []
    with torch.inference_mode():
        if check is not None:
            check[spec.name] = _plan_matches_torch(model, routing, context_len, seed)
            if cuda:
                launched, planned = _cuda_kernel_counts(model, routing, context_len, seed)
                check[f"{spec.name}: CUDA kernels launched {launched} = planned {planned}"] = (
                    launched == planned
                )
        for batch, draft_len in grid:
            step_routing = sample_step_routing(
                routing,
                spec.n_experts,
                spec.top_k,
                batch,
                draft_len + 1,
                model.moe_layers,
                config_seed(spec.name, batch, draft_len, seed),
            )
            inputs = model.prepare(batch, draft_len + 1, context_len, step_routing, seed=seed + 1)
            run = model.capture(inputs) if launch == "graph" else functools.partial(model.step, inputs)
            prepared.append(_Prepared(batch, draft_len, step_routing, inputs, run))
        for round_index in range(settings.rounds):
            for item in prepared:
                if progress:
                    progress(
                        f"{spec.name} B={item.batch} K={item.draft_len} round {round_index + 1}/{settings.rounds}"
                    )
                for _ in range(settings.warmup):
                    item.run()
                sync()
                times = []
                for _ in range(settings.repeats):
                    sync()
                    t0 = clock_ns()
                    item.run()
                    sync()
                    times.append((clock_ns() - t0) * 1e-9)
                item.rounds.append(times)
    rows = []
    for item in prepared:
        all_times = [t for r in item.rounds for t in r]
        median = float(np.median(all_times))
        round_medians = [float(np.median(r)) for r in item.rounds]
        pred = predict_reference_step(
            spec, hardware, item.batch, item.draft_len + 1, context_len, item.routing.loads, launch
        )
        cross = {
            name: predict_reference_step(
                spec, other, item.batch, item.draft_len + 1, context_len, item.routing.loads, launch
            ).step_s
            for name, other in (cross_hardware or {}).items()
        }
        rows.append(
            Row(
                model=spec.name,
                shape=shape_key,
                device=device,
                launch=launch,
                batch=item.batch,
                draft_len=item.draft_len,
                context_len=context_len,
                measured_s=median,
                predicted_s=pred.step_s,
                spread=_relative_spread(all_times),
                round_spread=float(max(abs(m - median) for m in round_medians) / median),
                n_samples=len(all_times),
                distinct_experts=float(np.mean(item.routing.distinct_experts())) if spec.is_moe else 0.0,
                n_kernels=pred.n_kernels,
                predicted_breakdown_s=pred.breakdown_s,
                predicted_terms_s=pred.terms_s,
                cross_predicted_s=cross,
            )
        )
    del prepared, model
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    return rows


CLOCKS = ("auto", "wall", "thread")


def step_clock(clock: str, cuda: bool, threads: int) -> Callable[[], int]:
    """The clock steps are timed with: wall time, or the thread's CPU time for a single-threaded CPU run.

    On a shared CPU other processes preempt the measuring thread; the simulator models an uncontended
    machine, so 'auto' uses the thread's CPU time (which stops while the thread is not running) when
    torch computes on this one thread, and wall time everywhere else (always on a GPU).
    """
    if clock not in CLOCKS:
        raise MoesimError("--clock", f"unknown clock {clock!r}", f"choose one of {', '.join(CLOCKS)}")
    if clock == "thread" and (cuda or threads != 1):
        raise MoesimError(
            "--clock",
            "the thread clock times single-threaded CPU runs only",
            "use --threads 1 on a CPU, or --clock wall",
        )
    if clock == "thread" or (clock == "auto" and not cuda and threads == 1):
        return time.thread_time_ns
    return time.perf_counter_ns


def clock_name(clock: str, cuda: bool, threads: int) -> str:
    """Which clock `step_clock` picks, in words."""
    return "thread CPU time" if step_clock(clock, cuda, threads) is time.thread_time_ns else "wall clock"


def _small_step(model: Any, routing: RoutingModel, context_len: int, seed: int) -> tuple[Any, Any]:
    """(prepared inputs, torch-reference plan) of the small step (B = 2, T = 2) the kernel checks run."""
    from moesim.simulator.plan.reference import reference_step_plan

    spec = model.spec
    step_routing = sample_step_routing(routing, spec.n_experts, spec.top_k, 2, 2, model.moe_layers, seed)
    context = min(context_len, 64)
    inputs = model.prepare(2, 2, context, step_routing)
    return inputs, reference_step_plan(spec, 2, 2, context, step_routing.loads)


def _plan_matches_torch(model: Any, routing: RoutingModel, context_len: int, seed: int) -> bool:
    from moesim.validation.reference import count_step_ops

    inputs, plan = _small_step(model, routing, context_len, seed)
    kernels, views = count_step_ops(model, inputs)
    return not views and [aten_name(k.name) for k in plan.kernels] == [op.lstrip("_") for op in kernels]


def _cuda_kernel_counts(model: Any, routing: RoutingModel, context_len: int, seed: int) -> tuple[int, int]:
    """(CUDA kernels one small step launches, by the torch profiler; kernels the plan lists)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    inputs, plan = _small_step(model, routing, context_len, seed)
    model.step(inputs)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        model.step(inputs)
        torch.cuda.synchronize()
    launched = sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
    return launched, len(plan.kernels)


KERNEL_TO_ATEN = {
    "embed": "index_select",
    "pow": "pow",
    "mean": "mean",
    "add_": "add_",
    "rsqrt_": "rsqrt_",
    "mul": "mul",
    "mul_": "mul_",
    "qkv": "mm",
    "roll": "roll",
    "addcmul_": "addcmul_",
    "q_layout": "copy_",
    "k_write": "copy_",
    "v_write": "copy_",
    "scores": "baddbmm",
    "softmax": "softmax",
    "values": "bmm",
    "o_layout": "copy_",
    "o_proj": "addmm_",
    "router": "mm",
    "router_softmax": "softmax",
    "topk": "topk",
    "gather": "gather",
    "gate_sum": "sum",
    "gate_div_": "div_",
    "dispatch_x": "index_select",
    "dispatch_w": "index_select",
    "gate_up": "mm",
    "silu_": "silu_",
    "down": "mm",
    "scale_": "mul_",
    "combine": "index_add_",
    "lm_head": "mm",
    "argmax": "argmax",
}


def aten_name(kernel_name: str) -> str:
    """The aten op (leading underscores dropped) a torch-reference kernel is; GEMMs accumulating into
    the residual (shared experts, dense FFN) are addmm_."""
    last = kernel_name.rsplit(".", 1)[-1]
    if last == "down" and (".shared." in f".{kernel_name}" or ".dense_ffn." in f".{kernel_name}"):
        return "addmm_"
    return KERNEL_TO_ATEN.get(last, last)


def validation_grid(
    quick: bool, batches: list[int] | None = None, draft_lens: list[int] | None = None
) -> list[tuple[int, int]]:
    """(batch, draft length) pairs: the issue's full grid, or the quick one (4 batches × 4 draft lengths)."""
    bs = batches or list(QUICK_BATCHES if quick else BATCHES)
    ks = draft_lens if draft_lens is not None else list(QUICK_DRAFT_LENS if quick else DRAFT_LENS)
    if 0 not in ks:
        ks = [0, *ks]  # the verify/decode ratio needs the decode step
    return [(b, k) for b in bs for k in ks]


__all__ = [
    "BATCHES",
    "CLOCKS",
    "DRAFT_LENS",
    "KERNEL_TO_ATEN",
    "MeasureSettings",
    "Row",
    "aten_name",
    "clock_name",
    "config_seed",
    "default_routing",
    "fill_ratios",
    "measure_model",
    "step_clock",
    "validation_grid",
]
