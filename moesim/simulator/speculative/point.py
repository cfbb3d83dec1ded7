"""The speculative point: decode, draft, verify → the SD speedup of one (batch, draft length), written once.

    point = speculative_point(resolved, timer, draft_len)
    point.speedup == tokens_per_step × T_decode ÷ (T_draft + T_verify)

`simulate` runs it on the simpy engine, `sweep` on the fast path; both go through this module, so a point
means the same in both. A step on a multi-GPU layout is the slowest rank's, collectives included.
"""

from __future__ import annotations

from dataclasses import dataclass

from moesim.simulator.execution.launch import LaunchParams
from moesim.simulator.execution.timer import StepTimer, TimedStep, time_parallel
from moesim.simulator.plan.parallel import ParallelStep, build_parallel_plan
from moesim.simulator.plan.step import StepPlan
from moesim.simulator.plan.styles import build_plan
from moesim.simulator.scenario import ResolvedScenario
from moesim.simulator.speculative.acceptance import expected_tokens, speedup
from moesim.simulator.speculative.drafters import draft_pass_s, draft_time_s, handoff_s


@dataclass(frozen=True)
class TimedPlan:
    """One step: its plan (the slowest rank's on a multi-GPU layout), its timing, and the parallel step."""

    plan: StepPlan
    timing: TimedStep
    parallel: ParallelStep | None = None

    @property
    def step_s(self) -> float:
        return self.timing.step_s


@dataclass(frozen=True)
class SpeculativePoint:
    """Decode and verification steps, the drafter's time, expected tokens and the speedup they imply."""

    draft_len: int
    decode: TimedPlan
    verify: TimedPlan
    draft_s: float
    tokens_per_step: float
    speedup: float

    @property
    def verify_over_decode(self) -> float:
        return self.verify.step_s / self.decode.step_s


def time_step(resolved: ResolvedScenario, timer: StepTimer, tokens_per_seq: int) -> TimedPlan:
    """One step of the scenario's batch with `tokens_per_seq` tokens each (1: decode; K + 1: verification)."""
    r = resolved
    if r.layout.is_single:
        plan = build_plan(r.model, r.batch, tokens_per_seq, r.context_len, r.engine, r.routing, r.hardware)
        return TimedPlan(plan, timer.step(plan, r.launch))
    step = build_parallel_plan(
        r.model, r.batch, tokens_per_seq, r.layout, r.hardware, r.context_len, r.engine, r.routing
    )
    return TimedPlan(step.plan, time_parallel(timer, step, r.launch), step)


def drafter_pass_s(resolved: ResolvedScenario, timer: StepTimer) -> float:
    """Device seconds of one drafter pass at the scenario's batch (the same for every draft length)."""
    r = resolved
    return draft_pass_s(
        r.drafter, r.model, r.layout, r.batch, r.context_len, r.engine, r.routing, timer, r.launch
    )


def speculative_point(
    resolved: ResolvedScenario,
    timer: StepTimer,
    draft_len: int | None = None,
    *,
    decode: TimedPlan | None = None,
    pass_s: float | None = None,
) -> SpeculativePoint:
    """The SD point at `draft_len` (default: the scenario's). A sweep passes the batch's `decode` step and
    drafter `pass_s` so they are computed once for all draft lengths."""
    r = resolved
    k = r.scenario.draft_len if draft_len is None else draft_len
    decode = decode or time_step(r, timer, 1)
    verify = time_step(r, timer, k + 1)
    overhead_s = LaunchParams.from_hardware(r.hardware, r.launch).overhead_s
    t_draft = draft_time_s(
        r.drafter,
        r.batch,
        k,
        decode.step_s,
        drafter_pass_s(r, timer) if pass_s is None else pass_s,
        overhead_s,
        handoff_s(r.drafter, r.model, timer, r.layout, r.batch, k),
    )
    tokens = expected_tokens(k, r.scenario.acceptance, r.scenario.acceptance_length)
    gain = float(speedup(tokens, decode.step_s, t_draft, verify.step_s))
    return SpeculativePoint(k, decode, verify, t_draft, tokens, gain)


__all__ = ["SpeculativePoint", "TimedPlan", "drafter_pass_s", "speculative_point", "time_step"]
