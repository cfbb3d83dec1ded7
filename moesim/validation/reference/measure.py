"""Measure the torch reference over a grid of (model, batch, draft length) into rows: the torch half.

Per configuration: one routing sample per MoE layer from the routing model (seeded by the config, see
`configs.config_routing`) and the torch step prepared with that forced routing. Rows record only what was
measured and how to rebuild the configuration; `predict.predict_rows` prices them, here or anywhere later.
Timing is wall clock around one step with a device synchronisation before and after (so it includes
launch, device work and the final sync, as the simulator's step time does); a single-threaded CPU run
is timed with the thread's CPU clock instead, so preemption by other processes on a shared machine is
not counted (see `step_clock`). With `flush_bytes` (the CPU default) a read of that many bytes before
each timed step evicts the caches, so each step starts cold, as a full-size model (many times any cache)
does; without it steps run back to back, each starting with the cache as the previous identical step
left it (the engine's warm-cache assumption), which on a CPU depends on how much of a scaled-down model
the machine's last-level cache happens to hold.
Repeats are split into rounds that cycle through all configurations of a model; the spread between
rounds' medians is the run-to-run noise floor reported beside the error.

torch is imported lazily (by `reference.py`), only when measuring.
"""

from __future__ import annotations

import functools
import gc
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from moesim.calibrate.fits.drift import PARTS, between_sample, median_sample
from moesim.errors import MoesimError
from moesim.simulator.models.spec import ModelSpec
from moesim.simulator.routing.base import RoutingModel
from moesim.validation.reference.configs import config_routing
from moesim.validation.reference.routing_replay import StepRouting, sample_step_routing


@dataclass(frozen=True)
class MeasureSettings:
    """How hard to measure: rounds × repeats per round after warm-up."""

    rounds: int = 3
    repeats: int = 5
    warmup: int = 2

    @classmethod
    def for_mode(cls, quick: bool) -> MeasureSettings:
        return cls(rounds=3, repeats=4, warmup=1) if quick else cls(rounds=3, repeats=5, warmup=2)


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
    probes: list[Any] = field(default_factory=list)  # the machine's speed during each round (ProbeSample)


def measure_model(
    spec: ModelSpec,
    shape_key: str,
    device: str,
    grid: list[tuple[int, int]],
    context_len: int,
    launch: str,
    routing: RoutingModel,
    settings: MeasureSettings,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
    clock: str = "auto",
    check: dict[str, bool] | None = None,
    flush_bytes: int = 0,
    style: str = "torch-reference",
    probe: Callable[[str], Any] | None = None,
) -> list[dict[str, Any]]:
    """Measured rows of every (batch, draft length) of `grid` for one model; with `check`, also record
    there whether the plan lists exactly the aten ops one small step of this model issues. With `probe`
    (`calibrate.suites.probe.Probe.sample`), the drift probe runs beside every row in every round, just before
    the row's warm-up and once after a round's last row; the row records the machine's speed as the median
    over its rounds of the speed between the probes just before and just after it, with that median's noise."""
    from moesim.calibrate.suites.timing import import_torch

    torch = import_torch()
    from moesim.validation.reference.torch_model import ReferenceModel

    model = ReferenceModel(spec, device=device, seed=seed, style=style)
    cuda = model.device.type == "cuda"
    clock_ns = step_clock(clock, cuda, torch.get_num_threads())

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    flush_buffer = (
        torch.ones(flush_bytes // 4, dtype=torch.float32, device=model.device) if flush_bytes else None
    )

    def start_cold() -> None:
        if flush_buffer is not None:
            torch.sum(flush_buffer)  # a read: evicts without leaving dirty lines for the step to write back
            sync()

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
            step_routing = config_routing(spec, routing, batch, draft_len, seed)
            inputs = model.prepare(batch, draft_len + 1, context_len, step_routing, seed=seed + 1)
            run = model.capture(inputs) if launch == "graph" else functools.partial(model.step, inputs)
            prepared.append(_Prepared(batch, draft_len, step_routing, inputs, run))
        for round_index in range(settings.rounds):
            beside: list[Any] = []  # this round's probes: one before each row, one after the last
            for item in prepared:
                if progress:
                    progress(
                        f"{spec.name} B={item.batch} K={item.draft_len} round {round_index + 1}/{settings.rounds}"
                    )
                if probe is not None:
                    beside.append(probe(f"{spec.name} B={item.batch} K={item.draft_len}"))
                for _ in range(settings.warmup):
                    item.run()
                sync()
                times = []
                for _ in range(settings.repeats):
                    start_cold()
                    sync()
                    t0 = clock_ns()
                    item.run()
                    sync()
                    times.append((clock_ns() - t0) * 1e-9)
                item.rounds.append(times)
            if probe is not None:  # each row's speed this round: the probes just before and just after it
                beside.append(probe(f"{spec.name} end of round {round_index + 1}"))
                for i, item in enumerate(prepared):
                    item.probes.append(between_sample(beside[i], beside[i + 1]))
    rows = [measured_row(spec, shape_key, device, launch, context_len, item) for item in prepared]
    del prepared, model
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    return rows


def measured_row(
    spec: ModelSpec, shape_key: str, device: str, launch: str, context_len: int, item: _Prepared
) -> dict[str, Any]:
    """One configuration's measurement: median time, spreads, and what rebuilds its work (shape, routing)."""
    all_times = [t for r in item.rounds for t in r]
    median = float(np.median(all_times))
    round_medians = [float(np.median(r)) for r in item.rounds]
    tokens_per_seq = item.draft_len + 1
    speed = {}
    if item.probes:
        during = median_sample(item.probes)
        speed = {
            "probe_memory_gbps": during.memory_gbps,
            "probe_compute_tflops": during.compute_tflops,
            "probe_dispatch_us": during.dispatch_us,
            "probe_stream_gemm_tflops": during.stream_gemm_tflops,
        } | {f"probe_{part}_noise": during.noise(part) for part in PARTS}
    return speed | {
        "model": spec.name,
        "shape": shape_key,
        "device": device,
        "launch": launch,
        "batch": item.batch,
        "draft_len": item.draft_len,
        "tokens_per_seq": tokens_per_seq,
        "m_tokens": item.batch * tokens_per_seq,
        "context_len": context_len,
        "measured_s": median,
        "spread": _relative_spread(all_times),
        "round_spread": float(max(abs(m - median) for m in round_medians) / median),
        "n_samples": len(all_times),
        "distinct_experts": float(np.mean(item.routing.distinct_experts())) if spec.is_moe else 0.0,
    }


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
    """(prepared inputs, plan of the model's style) of the small step (B = 2, T = 2) the kernel checks run."""
    from moesim.validation.reference.predict import REFERENCE_PLANS

    spec = model.spec
    step_routing = sample_step_routing(routing, spec.n_experts, spec.top_k, 2, 2, model.moe_layers, seed)
    context = min(context_len, 64)
    inputs = model.prepare(2, 2, context, step_routing)
    return inputs, REFERENCE_PLANS[model.style](spec, 2, 2, context, step_routing.loads)


def _plan_matches_torch(model: Any, routing: RoutingModel, context_len: int, seed: int) -> bool:
    from moesim.validation.reference.torch_model import count_step_ops

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
    "grouped_gate": "grouped_mm",
    "grouped_up": "grouped_mm",
    "grouped_down": "grouped_mm",
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


__all__ = [
    "CLOCKS",
    "KERNEL_TO_ATEN",
    "MeasureSettings",
    "aten_name",
    "clock_name",
    "measure_model",
    "measured_row",
    "step_clock",
]
