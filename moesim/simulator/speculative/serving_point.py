"""One speculative-decoding point under a serving engine: the step model's device times with what the
engine adds (padding to captured graph sizes, the launch mode per step, host time per the overlap rule,
tree verification, the drafter's own launch and host cost, the acceptance sync).

    decode  = device(B', 1, launch) + exposed host            B' = B padded to the next captured size
    verify  = device(B', q, launch) + exposed host            q = K + 1 (chain) or the tree's draft tokens
                                                              (batch expansion: B·q rows of one token)
    draft   = drafter passes (their own launch mode) + K·draft_step_us   (n-gram: host time)
    speedup = AL × decode ÷ (draft + verify + acceptance sync)

Device times come from a step timer (`StepTimer`: sequences, tokens per sequence, launch → seconds of one
step with its launch and sync) and a drafter timer; `fast_path_timers` builds both from the fast path.
With the `ideal` profile every added term is exactly 0 and the padded batch is the batch, so the point is
the step model's own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from moesim.simulator.engines import overheads as ov
from moesim.simulator.engines.profile import ServingEngineProfile
from moesim.simulator.execution.cost import CostParams
from moesim.simulator.execution.fastpath import LaunchParams, fast_step
from moesim.simulator.hardware.profile import HardwareProfile
from moesim.simulator.models.spec import ModelSpec
from moesim.simulator.plan.layout import ParallelLayout
from moesim.simulator.plan.parallel import ParallelStep, build_parallel_plan, fast_parallel_step
from moesim.simulator.plan.step import StepPlan, build_plan
from moesim.simulator.routing.base import RoutingModel
from moesim.simulator.speculative.drafters import Drafter
from moesim.simulator.speculative.parallel_draft import parallel_draft_time_s

StepTimer = Callable[[int, int, str], float]  # (sequences, tokens per sequence, "graph"|"eager") -> s
DraftTimer = Callable[[int, int, str], float]  # (sequences, draft length, "graph"|"eager") -> s


@dataclass(frozen=True)
class PiecewiseCosts:
    """What a piecewise-graph step costs the host: one graph launch per piece, one eager attention launch
    per layer (from the hardware profile's launch costs)."""

    layers: int
    graph_launch_s: float
    eager_launch_s: float


@dataclass(frozen=True)
class EngineStep:
    """One forward step as the engine runs it."""

    sequences: int  # the batch as run (padded up to the captured size)
    tokens_per_seq: int
    launch: str  # graph | eager | piecewise
    device_s: float  # the kernel stream at the padded batch, with its launch and sync
    padding_s: float  # device time the dummy rows add (0 when not padded)
    host_s: float  # the engine's host work for the step
    engine_host_s: float  # the part of it the device does not hide

    @property
    def step_s(self) -> float:
        return self.device_s + self.engine_host_s

    def to_json(self) -> dict[str, Any]:
        return {
            "sequences_run": self.sequences,
            "tokens_per_seq": self.tokens_per_seq,
            "launch": self.launch,
            "device_s": self.device_s,
            "step_s": self.step_s,
            "breakdown_s": {"padding": self.padding_s, "engine_host": self.engine_host_s},
            "host_s": self.host_s,
        }


def engine_step(
    profile: ServingEngineProfile,
    batch: int,
    tokens_per_seq: int,
    requested_launch: str,
    timer: StepTimer,
    piecewise: PiecewiseCosts,
) -> EngineStep:
    """A step of `batch` × `tokens_per_seq` under `profile` (see the module docstring)."""
    launch = ov.launch_for(profile, batch, tokens_per_seq, requested_launch)
    sequences = ov.padded_sequences(profile, batch, tokens_per_seq, requested_launch)
    timed_launch = "graph" if launch == "piecewise" else launch
    device_s = timer(sequences, tokens_per_seq, timed_launch)
    if launch == "piecewise":
        device_s = ov.piecewise_step_s(
            device_s, piecewise.layers, piecewise.graph_launch_s, piecewise.eager_launch_s
        )
    padding_s = device_s - timer(batch, tokens_per_seq, timed_launch) if sequences != batch else 0.0
    host_s = ov.host_time_s(profile, batch, batch * tokens_per_seq)
    return EngineStep(
        sequences=sequences,
        tokens_per_seq=tokens_per_seq,
        launch=launch,
        device_s=device_s,
        padding_s=max(0.0, padding_s),
        host_s=host_s,
        engine_host_s=ov.exposed_host_s(profile, host_s, device_s),
    )


@dataclass(frozen=True)
class EnginePoint:
    """Decode, verification, drafting and acceptance of one (batch, K) under a serving engine."""

    serving_engine: str
    decode: EngineStep
    verify: EngineStep
    draft_s: float
    draft_host_s: float
    accept_sync_s: float
    tokens_per_step: float

    @property
    def round_s(self) -> float:
        return self.draft_s + self.verify.step_s + self.accept_sync_s

    @property
    def speedup(self) -> float:
        return self.tokens_per_step * self.decode.step_s / self.round_s

    @property
    def step_ratio(self) -> float:
        """Cost of one SD round in decode steps (what measured runs call the step ratio)."""
        return self.round_s / self.decode.step_s

    def to_json(self) -> dict[str, Any]:
        return {
            "serving_engine": self.serving_engine,
            "decode": self.decode.to_json(),
            "verify": self.verify.to_json(),
            "draft_s": self.draft_s,
            "draft_host_s": self.draft_host_s,
            "accept_sync_s": self.accept_sync_s,
            "tokens_per_step": self.tokens_per_step,
            "step_ratio": self.step_ratio,
            "speedup": self.speedup,
        }


def engine_point(
    profile: ServingEngineProfile,
    drafter: Drafter,
    batch: int,
    draft_len: int,
    tokens_per_step: float,
    requested_launch: str,
    step_timer: StepTimer,
    draft_timer: DraftTimer,
    piecewise: PiecewiseCosts,
) -> EnginePoint:
    """The speculative point of (batch, K) under `profile`: the engine's steps and the speedup they imply."""
    decode = engine_step(profile, batch, 1, requested_launch, step_timer, piecewise)
    rows, tokens_per_row = ov.verify_shape(profile.drafter, batch, draft_len)
    verify = engine_step(profile, rows, tokens_per_row, requested_launch, step_timer, piecewise)
    if drafter.kind == "ngram":
        draft_s, draft_host_s = ov.ngram_draft_s(profile, batch), 0.0
    else:
        draft_host_s = ov.draft_host_s(profile, draft_len)
        launch = ov.drafter_launch(profile.drafter, verify.launch)
        draft_s = draft_timer(ov.draft_sequences(profile.drafter, batch), draft_len, launch) + draft_host_s
    return EnginePoint(
        serving_engine=profile.name,
        decode=decode,
        verify=verify,
        draft_s=draft_s,
        draft_host_s=draft_host_s,
        accept_sync_s=ov.accept_sync_s(profile),
        tokens_per_step=tokens_per_step,
    )


def fast_path_timers(
    model: ModelSpec,
    hardware: HardwareProfile,
    layout: ParallelLayout,
    drafter: Drafter,
    context_len: int,
    engine: str,
    routing: RoutingModel,
    draft_vocab_size: int = 0,
) -> tuple[StepTimer, DraftTimer, PiecewiseCosts]:
    """Step and drafter timers on the closed-form fast path (memoised per call), and the piecewise costs."""
    params = CostParams.from_hardware(hardware)
    cache: dict[tuple[Any, ...], float] = {}

    def plan_time(plan: StepPlan, launch: str, with_launch: bool) -> float:
        return fast_step(plan, hardware, launch, params, with_launch).step_s

    def parallel_time(step: ParallelStep, launch: str, with_launch: bool) -> float:
        return fast_parallel_step(step, hardware, launch, params, with_launch).step_s

    def step_timer(sequences: int, tokens_per_seq: int, launch: str) -> float:
        key = ("step", sequences, tokens_per_seq, launch)
        if key not in cache:
            if layout.is_single:
                plan = build_plan(model, sequences, tokens_per_seq, context_len, engine, routing, hardware)
                cache[key] = plan_time(plan, launch, True)
            else:
                step = build_parallel_plan(
                    model, sequences, tokens_per_seq, layout, hardware, context_len, engine, routing
                )
                cache[key] = parallel_time(step, launch, True)
        return cache[key]

    target = replace(model, vocab=draft_vocab_size) if draft_vocab_size and drafter.kind == "eagle" else model

    def draft_timer(sequences: int, draft_len: int, launch: str) -> float:
        key = ("draft", sequences, draft_len, launch)
        if key not in cache:
            cache[key] = parallel_draft_time_s(
                drafter,
                target,
                hardware,
                layout,
                sequences,
                draft_len,
                context_len,
                engine,
                routing,
                step_timer(sequences, 1, launch),
                lambda plan, with_launch: plan_time(plan, launch, with_launch),
                lambda step, with_launch: parallel_time(step, launch, with_launch),
                LaunchParams.from_hardware(hardware, launch).overhead_s,
            )
        return cache[key]

    em = hardware.empirical
    piecewise = PiecewiseCosts(model.n_layers, em.graph_launch_us * 1e-6, em.launch_eager_us * 1e-6)
    return step_timer, draft_timer, piecewise
