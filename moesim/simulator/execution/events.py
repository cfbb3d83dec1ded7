"""The discrete-event timer (simpy): a host issues launches, device streams execute kernels, bandwidth is shared.

- The host process issues the plan's kernels in order: in eager mode one every `launch_eager_us` (a GEMM
  every `launch_eager_gemm_us` where the profile sets it: the cuBLAS launch path costs the host more);
  in graph replay the whole step after one `graph_launch_us`.
- One process per device stream runs its kernels in issue order: a kernel starts `gap` after both its launch
  and its predecessor (eager gap = twice the graph-replay gap), takes the fixed latency, then
  max(compute, memory) where its memory time is work on a shared memory-bandwidth server (processor
  sharing: kernels moving bytes at the same time on different streams split the bandwidth equally).
- A side-stream kernel issued right after a kernel of another stream waits for it (event record / wait);
  a `join` kernel waits for everything issued before it on the other streams. The step ends with a sync.
- The L2 state is carried kernel to kernel in issue order, warm from the previous identical step.
- A plan on one stream has no cross-stream waits and nothing to share the bandwidth with: its schedule is
  worked out in plain floats (`serial_schedule`), the same additions in the same order as the simpy processes
  make, so simpy loads and runs only for plans with side streams.

Collectives hook: kernels of category "communication" (on their own stream) take the time that
`external_time_s(kernel)` returns instead of the memory roofline.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from moesim.simulator.execution.cache import CacheState, footprints
from moesim.simulator.execution.cost import (
    CostParams,
    attention_units_by_kind,
    kernel_parts_s,
    transcendental_elements_by_op,
)
from moesim.simulator.execution.launch import LaunchParams
from moesim.simulator.hardware.profile import HardwareProfile
from moesim.simulator.plan.kernels import CATEGORIES, Kernel
from moesim.simulator.plan.step import StepPlan
from moesim.simulator.routing.base import DistinctExperts

if TYPE_CHECKING:
    import simpy

TimelineEntry = tuple[str, int, float, float]  # kernel name, stream, start_s, end_s
_EPS = 1e-15


@dataclass
class StepResult:
    """One simulated step: its time, where the time went, and the timeline behind it."""

    step_s: float
    breakdown_s: dict[str, float]
    timeline: list[TimelineEntry]
    kernel_times_s: np.ndarray
    hbm_bytes: float
    cache_bytes: float
    plan: StepPlan
    launch: str
    distinct_experts: DistinctExperts | None = None  # distribution per MoE layer (from routing samples)
    notes: list[str] = field(default_factory=list)

    @property
    def distinct_experts_per_layer(self) -> float:
        """Mean distinct experts per MoE layer used by the plan (0 for a dense model)."""
        return self.plan.mean_distinct_experts

    def to_json(self, timeline: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "model": self.plan.model_name,
            "step_s": self.step_s,
            "breakdown_s": dict(self.breakdown_s),
            "batch": self.plan.batch,
            "tokens_per_seq": self.plan.tokens_per_seq,
            "m_tokens": self.plan.m_tokens,
            "context_len": self.plan.context_len,
            "distinct_experts_per_layer": self.distinct_experts_per_layer,
            "distinct_experts_by_layer": list(self.plan.distinct_experts_by_layer),
            "distinct_experts_distribution": (
                None
                if self.distinct_experts is None
                else {
                    "mean": self.distinct_experts.mean,
                    "p10": self.distinct_experts.p10,
                    "p50": self.distinct_experts.p50,
                    "p90": self.distinct_experts.p90,
                }
            ),
            "n_kernels": len(self.kernel_times_s),
            "cache_reads_per_sequence": self.plan.cache_reads_per_sequence,
            "hbm_bytes": self.hbm_bytes,
            "cache_bytes": self.cache_bytes,
            "kernel_style": self.plan.kernel_style,
            "launch": self.launch,
        }
        if timeline:
            out["timeline"] = [
                {"kernel": name, "stream": stream, "start_s": start, "end_s": end}
                for name, stream, start, end in self.timeline
            ]
        return out


class SharedBandwidth:
    """Memory bandwidth as a processor-sharing server: n concurrent transfers each progress at 1/n speed."""

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self.jobs: dict[simpy.Event, float] = {}  # completion event -> remaining seconds at full bandwidth
        self.last = 0.0
        self.wakeup = env.event()
        env.process(self._serve())

    def transfer(self, work_s: float) -> simpy.Event:
        done = self.env.event()
        if work_s <= 0:
            done.succeed()
            return done
        self._advance()
        self.jobs[done] = work_s
        if not self.wakeup.triggered:
            self.wakeup.succeed()
        return done

    def _advance(self) -> None:
        elapsed = self.env.now - self.last
        if self.jobs and elapsed > 0:
            share = elapsed / len(self.jobs)
            for job in self.jobs:
                self.jobs[job] -= share
        self.last = self.env.now

    def _serve(self) -> Any:
        while True:
            if not self.jobs:
                self.wakeup = self.env.event()
                yield self.wakeup
                continue
            self.wakeup = self.env.event()
            next_done = min(self.jobs.values()) * len(self.jobs)
            yield self.env.any_of([self.env.timeout(max(next_done, 0.0)), self.wakeup])
            self._advance()
            for job in [j for j, left in self.jobs.items() if left <= _EPS * max(1.0, self.env.now)]:
                del self.jobs[job]
                job.succeed()


def cache_pass(
    kernels: tuple[Kernel, ...], capacity_bytes: float, warm: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """(cache bytes, memory bytes) per kernel, carrying the L2 state through the step in issue order."""
    state = CacheState(capacity_bytes, footprints(kernels))
    if warm:
        for kernel in kernels:
            state.replay(kernel)
    cache = np.zeros(len(kernels))
    memory = np.zeros(len(kernels))
    for i, kernel in enumerate(kernels):
        cache[i], memory[i] = state.kernel_traffic(kernel)
    return cache, memory


def _dependencies(kernels: tuple[Kernel, ...]) -> list[list[int]]:
    """Cross-stream waits: forks of side streams and joins (same-stream order is implicit)."""
    deps: list[list[int]] = [[] for _ in kernels]
    last_on_stream: dict[int, int] = {}
    for i, kernel in enumerate(kernels):
        if i > 0 and kernel.stream != 0 and kernels[i - 1].stream != kernel.stream:
            deps[i].append(i - 1)
        if kernel.join:
            deps[i].extend(j for s, j in last_on_stream.items() if s != kernel.stream)
        last_on_stream[kernel.stream] = i
    return deps


def breakdown_from_timeline(
    timeline: list[TimelineEntry], categories: list[str], step_s: float
) -> dict[str, float]:
    """Split the step's wall time among categories: overlapping kernels share an interval equally,
    and time with no kernel running is launch / idle."""
    out = dict.fromkeys(CATEGORIES, 0.0)
    edges: list[tuple[float, int, int]] = []
    for index, (_, _, start, end) in enumerate(timeline):
        edges.append((start, 1, index))
        edges.append((end, -1, index))
    edges.sort(key=lambda e: (e[0], e[1]))
    active: set[int] = set()
    now = 0.0
    for time, kind, index in edges:
        if time > now:
            span = time - now
            if active:
                share = span / len(active)
                for a in active:
                    out[categories[a]] += share
            else:
                out["launch_idle"] += span
            now = time
        if kind == 1:
            active.add(index)
        else:
            active.discard(index)
    if step_s > now:
        out["launch_idle"] += step_s - now
    return out


@dataclass(frozen=True)
class KernelTimes:
    """Per kernel, in issue order: its time alone on the device and the parts the event timer schedules."""

    total_s: np.ndarray
    fixed_s: np.ndarray
    compute_s: np.ndarray
    memory_s: np.ndarray  # at full bandwidth; shared with the other streams' transfers


@dataclass
class StepState:
    """What the host and stream processes of one step share: the clock, the kernels and their times, the
    events linking them, and the start and end of every kernel as it runs."""

    env: simpy.Environment
    kernels: tuple[Kernel, ...]
    launch: LaunchParams
    times: KernelTimes
    host_costs_s: np.ndarray  # per kernel: host time before its issue (eager)
    issued: list[simpy.Event]
    done: list[simpy.Event]
    deps: list[list[int]]
    bandwidth: SharedBandwidth
    by_stream: dict[int, list[int]]
    starts: np.ndarray
    ends: np.ndarray

    @classmethod
    def start(
        cls, kernels: tuple[Kernel, ...], launch: LaunchParams, times: KernelTimes, is_gemm: np.ndarray
    ) -> StepState:
        import simpy  # only plans with side streams need the event loop (see `serial_schedule`)

        env = simpy.Environment()
        n = len(kernels)
        by_stream: dict[int, list[int]] = {}
        for i, kernel in enumerate(kernels):
            by_stream.setdefault(kernel.stream, []).append(i)
        return cls(
            env=env,
            kernels=kernels,
            launch=launch,
            times=times,
            host_costs_s=launch.host_costs_s(n, is_gemm),
            issued=[env.event() for _ in range(n)],
            done=[env.event() for _ in range(n)],
            deps=_dependencies(kernels),
            bandwidth=SharedBandwidth(env),
            by_stream=by_stream,
            starts=np.zeros(n),
            ends=np.zeros(n),
        )

    @property
    def shares_bandwidth(self) -> bool:
        """More than one stream: transfers running at the same time split the memory bandwidth."""
        return len(self.by_stream) > 1


def host_process(state: StepState) -> simpy.events.ProcessGenerator:
    """The host: the first issue after the launch's start-up, then one kernel per host cost (eager), or the
    whole step at once (graph replay)."""
    env = state.env
    yield env.timeout(state.launch.first_issue_s)
    if state.launch.per_kernel_issue_s == 0.0:  # graph replay: the one launch issues everything
        for event in state.issued:
            event.succeed()
        return
    for i, event in enumerate(state.issued):
        if i:
            yield env.timeout(state.host_costs_s[i])
        event.succeed()


def stream_process(state: StepState, indices: list[int]) -> simpy.events.ProcessGenerator:
    """One device stream: its kernels in issue order, each after its issue, its cross-stream waits and the
    launch gap; memory time on the shared bandwidth server when other streams run beside it."""
    env, times = state.env, state.times
    for i in indices:
        yield state.issued[i]
        if state.deps[i]:
            yield env.all_of([state.done[j] for j in state.deps[i]])
        yield env.timeout(state.launch.gap_s)
        state.starts[i] = env.now
        if times.memory_s[i] > 0 and state.shares_bandwidth:
            yield env.timeout(times.fixed_s[i])
            yield env.all_of([env.timeout(times.compute_s[i]), state.bandwidth.transfer(times.memory_s[i])])
        else:  # alone on the device: the bandwidth is all its own
            yield env.timeout(times.total_s[i])
        state.ends[i] = env.now
        state.done[i].succeed()


def event_schedule(
    kernels: tuple[Kernel, ...], launch: LaunchParams, times: KernelTimes, is_gemm: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) of each kernel from the simpy processes: the host, one process per stream, the shared
    memory bandwidth."""
    state = StepState.start(kernels, launch, times, is_gemm)
    state.env.process(host_process(state))
    for indices in state.by_stream.values():
        state.env.process(stream_process(state, indices))
    state.env.run()
    return state.starts, state.ends


def serial_schedule(
    launch: LaunchParams, total_s: np.ndarray, is_gemm: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) of each kernel of a plan on one stream, as `host_process` and `stream_process` give them.

    With one stream no kernel waits for another stream and none shares the bandwidth, so each kernel starts
    `gap` after the later of its issue and its predecessor's end and runs its time alone. The clock is
    advanced by the same additions, in the same order, as the processes' timeouts advance simpy's clock, so
    every start and end is bit for bit the event loop's.
    """
    n = len(total_s)
    host_costs_s = launch.host_costs_s(n, is_gemm)
    eager = launch.per_kernel_issue_s != 0.0
    starts, ends = np.zeros(n), np.zeros(n)
    issue = 0 + launch.first_issue_s  # the host's first timeout, from time 0
    now: Any = 0
    for i in range(n):
        if eager and i:
            issue = issue + host_costs_s[i]
        if issue > now:  # the stream waits for the issue; an earlier one has already happened
            now = issue
        now = now + launch.gap_s
        starts[i] = now
        now = now + total_s[i]
        ends[i] = now
    return starts, ends


def run_events(
    plan: StepPlan,
    hardware: HardwareProfile,
    launch: str = "graph",
    *,
    warm_cache: bool = True,
    include_launch_and_sync: bool = True,
    external_time_s: Callable[[Kernel], float | None] | None = None,
    params: CostParams | None = None,
) -> StepResult:
    """Simulate one step of `plan` on `hardware`; returns the time, breakdown and timeline."""
    params = params or CostParams.from_hardware(hardware)
    launch_params = LaunchParams.from_hardware(hardware, launch)
    kernels = plan.kernels
    n = len(kernels)
    cache, hbm = cache_pass(kernels, params.cache_capacity_bytes, warm_cache)
    peaks = np.array([params.peak(k.dtype) for k in kernels])
    flops = np.array([k.flops for k in kernels])
    m = np.array([k.m_tokens for k in kernels], dtype=float)
    grouped = params.grouped_terms(np.array([k.experts for k in kernels]), [k.dtype for k in kernels])
    units = attention_units_by_kind(kernels)
    attention = params.attention_extra_s(units)
    curve = params.gemm_curve_index([k.dtype for k in kernels])
    fraction = params.attention_fractions(units)
    transcendental = params.transcendental_s(transcendental_elements_by_op(kernels))
    total, fixed, compute, memory = kernel_parts_s(
        flops, m, peaks, hbm, cache, params, grouped, attention, curve, fraction, transcendental
    )
    if external_time_s is not None:
        for i, kernel in enumerate(kernels):
            given = external_time_s(kernel)
            if given is not None:
                total[i], fixed[i], compute[i], memory[i] = float(given), 0.0, float(given), 0.0

    if not include_launch_and_sync:
        launch_params = launch_params.without_launch_and_sync()
    if len({k.stream for k in kernels}) <= 1:
        starts, ends = serial_schedule(launch_params, total, m > 0)
    else:
        starts, ends = event_schedule(
            kernels, launch_params, KernelTimes(total, fixed, compute, memory), m > 0
        )
    first_issue = launch_params.first_issue_s
    device_end = float(ends.max()) if n else first_issue
    step_s = device_end + launch_params.sync_s
    timeline = [(k.name, k.stream, float(starts[i]), float(ends[i])) for i, k in enumerate(kernels)]
    breakdown = breakdown_from_timeline(timeline, [k.category for k in kernels], step_s)
    return StepResult(
        step_s=step_s,
        breakdown_s=breakdown,
        timeline=timeline,
        kernel_times_s=ends - starts,
        hbm_bytes=float(hbm.sum()),
        cache_bytes=float(cache.sum()),
        plan=plan,
        launch=launch,
    )
