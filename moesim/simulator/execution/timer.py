"""One interface, two timers: the event timer and the closed-form fast path time a step plan alike.

    timer = EventTimer(hardware)   # discrete-event: timeline, shared bandwidth, exact side streams
    timer = FastTimer(hardware)     # numpy closed form: the same costs, for sweeps and screening
    timed = timer.step(plan, "graph")                       # one step, launch and sync included
    timed = time_parallel(timer, parallel_step, "graph")    # the slowest rank, collectives on the links
    timed = timer.steps([StepCall(plan, "graph"), ...])     # many at once (the fast path: one numpy pass)

Both read the same launch model (`launch`), cost model (`cost`), cache model (`cache`) and collective
times (`collectives.step_collective_times_s`); they agree exactly where nothing overlaps on side streams.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np

from moesim.simulator.execution.collectives import step_collective_times_s
from moesim.simulator.execution.cost import CostParams
from moesim.simulator.execution.events import StepResult, run_events
from moesim.simulator.hardware.profile import HardwareProfile
from moesim.simulator.plan.parallel import ParallelStep, collective_name
from moesim.simulator.plan.step import StepPlan

if TYPE_CHECKING:  # the fast path loads with its first use: `moesim simulate` runs the event timer alone
    from moesim.simulator.execution.fastpath import FastStep


class TimedStep(Protocol):
    """What every timer returns: the step's seconds and where they went."""

    @property
    def step_s(self) -> float: ...
    @property
    def breakdown_s(self) -> dict[str, float]: ...


@dataclass(frozen=True)
class StepCall:
    """One step for `StepTimer.steps`: the arguments of `StepTimer.step`."""

    plan: StepPlan
    launch: str
    collectives: Mapping[str, float] | None = None
    include_launch_and_sync: bool = True


class StepTimer(Protocol):
    """Times one step plan on `hardware`; `collectives` gives each collective's seconds by name.
    `steps` times many, each as `step` would."""

    hardware: HardwareProfile

    def steps(self, calls: Sequence[StepCall]) -> Sequence[TimedStep]: ...

    def step(
        self,
        plan: StepPlan,
        launch: str,
        *,
        collectives: Mapping[str, float] | None = None,
        include_launch_and_sync: bool = True,
    ) -> TimedStep: ...


@dataclass
class _ProfileTimer:
    """A timer bound to one profile, its cost parameters computed once."""

    hardware: HardwareProfile
    params: CostParams = field(init=False)

    def __post_init__(self) -> None:
        self.params = CostParams.from_hardware(self.hardware)


@dataclass
class EventTimer(_ProfileTimer):
    """The event timer: a timeline of every kernel, bandwidth shared between streams."""

    def steps(self, calls: Sequence[StepCall]) -> list[StepResult]:
        return [
            self.step(
                c.plan, c.launch, collectives=c.collectives, include_launch_and_sync=c.include_launch_and_sync
            )
            for c in calls
        ]

    def step(
        self,
        plan: StepPlan,
        launch: str,
        *,
        collectives: Mapping[str, float] | None = None,
        include_launch_and_sync: bool = True,
    ) -> StepResult:
        hook = None
        if collectives is not None:
            comm = dict(collectives)

            def hook(kernel: object) -> float | None:
                name = collective_name(kernel)  # type: ignore[arg-type]
                return None if name is None else comm.get(name, 0.0)

        return run_events(
            plan,
            self.hardware,
            launch,
            include_launch_and_sync=include_launch_and_sync,
            external_time_s=hook,
            params=self.params,
        )


@dataclass
class FastTimer(_ProfileTimer):
    """The closed-form fast path (numpy only)."""

    def step(
        self,
        plan: StepPlan,
        launch: str,
        *,
        collectives: Mapping[str, float] | None = None,
        include_launch_and_sync: bool = True,
    ) -> FastStep:
        from moesim.simulator.execution.fastpath import fast_step

        external = None if collectives is None else _collective_vector(plan, collectives)
        return fast_step(plan, self.hardware, launch, self.params, include_launch_and_sync, external)

    def steps(self, calls: Sequence[StepCall]) -> list[FastStep]:
        """Every call's `step`, plans of one structure costed together (`fastpath.fast_steps`)."""
        from moesim.simulator.execution.fastpath import StepRequest, fast_steps

        requests = [
            StepRequest(
                c.plan,
                c.launch,
                c.include_launch_and_sync,
                None if c.collectives is None else _collective_vector(c.plan, c.collectives),
            )
            for c in calls
        ]
        return fast_steps(requests, self.hardware, self.params)


def _collective_vector(plan: StepPlan, collectives: Mapping[str, float]) -> np.ndarray:
    """Seconds of every kernel that is a collective (NaN for the rest), in issue order."""
    per_segment: dict[int, np.ndarray] = {}
    parts = []
    for segment in plan.segments:
        key = id(segment.kernels)
        if key not in per_segment:
            names = [collective_name(k) for k in segment.kernels]
            per_segment[key] = np.array(
                [np.nan if name is None else collectives.get(name, 0.0) for name in names], dtype=float
            )
        parts.append(per_segment[key])
    return np.concatenate(parts) if parts else np.zeros(0)


def time_parallel(
    timer: StepTimer, step: ParallelStep, launch: str, include_launch_and_sync: bool = True
) -> TimedStep:
    """The slowest rank's step of a parallel plan, its collectives timed on the node's links."""
    call = parallel_call(timer, step, launch, include_launch_and_sync)
    return timer.step(
        call.plan,
        call.launch,
        collectives=call.collectives,
        include_launch_and_sync=call.include_launch_and_sync,
    )


def parallel_call(
    timer: StepTimer, step: ParallelStep, launch: str, include_launch_and_sync: bool = True
) -> StepCall:
    """`time_parallel` as a call for `StepTimer.steps`."""
    collectives = step_collective_times_s(step, timer.hardware.node)
    return StepCall(step.plan, launch, collectives, include_launch_and_sync)


__all__ = [
    "EventTimer",
    "FastTimer",
    "StepCall",
    "StepTimer",
    "TimedStep",
    "parallel_call",
    "time_parallel",
]
