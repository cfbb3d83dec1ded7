"""The simpy model of a serving run: a benchmark client, requests as processes, one scheduler process.

- `client`: sends the workload's requests at their send times (`workload.send_times_s`); each request
  process first takes one of `max_concurrency` slots (vLLM's client semaphore; unlimited when None), and its
  latencies are measured from then, as `vllm bench serve` measures them.
- `scheduler`: continuous batching as vLLM's V1 scheduler does it. Every step has a token budget
  (`max_num_batched_tokens`); running requests are scheduled first, in arrival order — decoding ones with
  1 token, or K + 1 under speculative decoding, those still prefilling with the next chunk of their prompt
  that fits the budget — then waiting requests are admitted (up to `max_num_seqs` running) with a first
  chunk while the KV cache has blocks for it. When a running request needs a block and none is free, the
  most recently admitted request is preempted: its blocks are freed and it goes back to the front of the
  queue, to recompute its prompt and the tokens generated so far (vLLM's recompute preemption); no request
  is admitted in a step that preempted. Prefill chunks and decode tokens share the step.
- A step lasts what the `StepCost` says for its shape. At its end, each decoding request gets its tokens
  (1, or the seeded `AcceptanceDraws`, never past its output length) as one streamed chunk, and a request
  whose prompt is now complete gets its first token.

State lives only here, in `ServingState` and the per-request `RequestState`.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import simpy

from moesim.errors import MoesimError
from moesim.simulator.plan.mixed import PrefillChunks
from moesim.simulator.serving.draws import AcceptanceDraws
from moesim.simulator.serving.kv import KvBlocks
from moesim.simulator.serving.options import SchedulerLimits
from moesim.simulator.serving.step_cost import StepCost, StepShape
from moesim.simulator.serving.workload import RequestSpec

# A run stops with an error rather than loop: no workload needs more steps than tokens it generates plus
# prefill chunks, times this margin for preemptions.
STEP_LIMIT_FACTOR = 20


@dataclass(slots=True)
class RequestState:
    """One request in flight: what the engine has computed for it and when its tokens came out."""

    index: int
    spec: RequestSpec
    output_len: int = field(init=False, default=0)  # the spec's, read on every step
    sent_s: float = math.nan
    first_token_s: float = math.nan
    last_token_s: float = math.nan
    finish_s: float = math.nan
    computed: int = 0  # tokens whose KV is cached
    prefill_target: int = 0  # tokens to prefill before decoding (the prompt, or all known after preemption)
    generated: int = 0
    preemptions: int = 0
    kv_covered: int = 0  # tokens its KV blocks cover (`KvBlocks.covered_tokens`); 0 while it holds none
    itls_s: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.output_len = self.spec.output_len

    @property
    def prefilling(self) -> bool:
        return self.computed < self.prefill_target


@dataclass
class ServingState:
    """Everything the scheduler shares with the request processes."""

    env: simpy.Environment
    kv: KvBlocks
    step_cost: StepCost
    limits: SchedulerLimits
    acceptance: AcceptanceDraws | None
    waiting: deque[RequestState] = field(default_factory=deque)
    running: list[RequestState] = field(default_factory=list)
    done: dict[int, simpy.Event] = field(default_factory=dict)
    wakeup: simpy.Event | None = None
    finished: int = 0
    steps: int = 0
    decode_rows: int = 0
    preemptions: int = 0
    in_system: int = 0
    in_system_area: float = 0.0  # ∫ requests in the system dt, kept apart from the latencies
    last_change_s: float = 0.0

    @property
    def tokens_per_seq(self) -> int:
        return 1 if self.acceptance is None else self.acceptance.draft_len + 1

    def count(self, delta: int) -> None:
        now = self.env.now
        self.in_system_area += self.in_system * (now - self.last_change_s)
        self.last_change_s = now
        self.in_system += delta

    def submit(self, request: RequestState) -> None:
        request.prefill_target = request.spec.input_len
        self.waiting.append(request)
        self.count(+1)
        if self.wakeup is not None and not self.wakeup.triggered:
            self.wakeup.succeed()


def request_process(
    state: ServingState, request: RequestState, send_s: float, slots: simpy.Resource | None
) -> simpy.events.ProcessGenerator:
    """Wait until the client sends the request (and a concurrency slot frees), submit it, await the end."""
    env = state.env
    yield env.timeout(send_s)
    done = state.done[request.index] = env.event()
    if slots is None:
        request.sent_s = env.now
        state.submit(request)
        yield done
        return
    with slots.request() as slot:
        yield slot
        request.sent_s = env.now
        state.submit(request)
        yield done


def _preempt(state: ServingState, victim: RequestState) -> None:
    state.kv.release(victim.index)
    victim.kv_covered = 0
    victim.computed = 0
    victim.prefill_target = victim.spec.input_len + victim.generated
    victim.preemptions += 1
    state.preemptions += 1
    state.waiting.appendleft(victim)


def schedule_step(state: ServingState) -> tuple[list[RequestState], list[tuple[RequestState, int]]]:
    """The requests one step decodes and the (request, chunk tokens) it prefills (vLLM V1's policy)."""
    budget = state.limits.max_num_batched_tokens
    t = state.tokens_per_seq
    kv = state.kv
    running, reserve = state.running, kv.reserve  # the hot loop: one lookup each per step
    decode: list[RequestState] = []
    prefill: list[tuple[RequestState, int]] = []
    preempted = False
    i = 0
    while i < len(running) and budget > 0:
        request = running[i]
        remaining = request.prefill_target - request.computed  # > 0 while the request is prefilling
        n = min(remaining, budget) if remaining > 0 else t
        if n > budget:
            break
        need = request.computed + n
        if need > request.kv_covered:  # within its blocks `reserve` would take nothing: not called
            placed = True
            while not reserve(request.index, need):
                victim = running.pop()
                _preempt(state, victim)
                preempted = True
                if victim is request:
                    placed = False
                    break
            if not placed:
                continue
            request.kv_covered = kv.covered_tokens(request.index)
        (prefill.append((request, n)) if remaining > 0 else decode.append(request))
        budget -= n
        i += 1
    while not preempted and state.waiting and budget > 0 and len(running) < state.limits.max_num_seqs:
        request = state.waiting[0]
        n = min(request.prefill_target - request.computed, budget)
        if not reserve(request.index, request.computed + n):
            break
        request.kv_covered = kv.covered_tokens(request.index)
        state.waiting.popleft()
        running.append(request)
        prefill.append((request, n))
        budget -= n
    return decode, prefill


def _emit(state: ServingState, request: RequestState, tokens: int) -> None:
    """`request` streams `tokens` tokens now; it finishes (frees its blocks) once it has all its output."""
    now = state.env.now
    if request.generated == 0:
        request.first_token_s = now
    else:
        request.itls_s.append(now - request.last_token_s)
    request.last_token_s = now
    request.generated += tokens
    if request.generated >= request.output_len:
        _finish(state, request, now)


def _finish(state: ServingState, request: RequestState, now: float) -> None:
    request.finish_s = now
    state.kv.release(request.index)
    request.kv_covered = 0
    state.running.remove(request)
    state.finished += 1
    state.count(-1)
    state.done[request.index].succeed()


def _emit_decoded(state: ServingState, decode: list[RequestState], gained: list[int]) -> None:
    """`_emit` of every decoded request and its accepted tokens (never past its output length), with the
    step's clock read once: the per-request work of every step."""
    now = state.env.now
    for request, tokens in zip(decode, gained, strict=True):
        generated = request.generated
        tokens = min(tokens, request.output_len - generated)
        request.computed += tokens
        if generated == 0:
            request.first_token_s = now
        else:
            request.itls_s.append(now - request.last_token_s)
        request.last_token_s = now
        request.generated = generated = generated + tokens
        if generated >= request.output_len:
            _finish(state, request, now)


def scheduler(state: ServingState, n_requests: int, step_limit: int) -> simpy.events.ProcessGenerator:
    """Run steps until every request has finished."""
    env = state.env
    while state.finished < n_requests:
        if not state.running and not state.waiting:
            state.wakeup = env.event()
            yield state.wakeup
            continue
        decode, prefill = schedule_step(state)
        if not decode and not prefill:
            raise MoesimError(
                "kv_cache_tokens", "the scheduler could place no token in the KV cache", "raise the capacity"
            )
        contexts = [r.computed for r in decode]
        shape = StepShape(
            len(decode),
            state.tokens_per_seq,
            round(sum(contexts) / len(contexts)) if contexts else 0,
            PrefillChunks.of([(n, r.computed) for r, n in prefill]) if prefill else None,
        )
        yield env.timeout(state.step_cost(shape))
        state.steps += 1
        state.decode_rows += len(decode)
        if state.steps > step_limit:
            raise MoesimError("workload", f"the run needed more than {step_limit} steps", "report this")
        if decode:
            if state.acceptance is None:
                gained = [1] * len(decode)
            else:
                gained = state.acceptance.draw(len(decode)).tolist()
            _emit_decoded(state, decode, gained)
        for request, n in prefill:
            request.computed += n
            if not request.prefilling:
                _emit(state, request, 1)


def run_serving_loop(
    requests: tuple[RequestSpec, ...],
    send_times_s: np.ndarray,
    step_cost: StepCost,
    kv: KvBlocks,
    limits: SchedulerLimits,
    acceptance: AcceptanceDraws | None,
    max_concurrency: int | None,
    progress: Callable[[int], None] | None = None,
) -> tuple[list[RequestState], ServingState]:
    """Simulate the whole run; every request finishes (a full KV cache makes requests wait, never fail)."""
    t = 1 if acceptance is None else acceptance.draft_len + 1
    limits.check(t)
    if max_concurrency is not None and max_concurrency < 1:
        raise MoesimError("max_concurrency", f"must be ≥ 1, got {max_concurrency}")
    for index, spec in enumerate(requests):
        if not kv.fits_alone(spec.input_len + spec.output_len + t):
            raise MoesimError(
                "kv_cache_tokens",
                f"request {index} needs {spec.input_len + spec.output_len} tokens of KV cache but the whole "
                f"cache holds {kv.total_blocks * kv.block_tokens}",
                "use shorter requests, a larger device or a higher --gpu-memory-utilization",
            )
    env = simpy.Environment()
    state = ServingState(env, kv, step_cost, limits, acceptance)
    slots = simpy.Resource(env, capacity=max_concurrency) if max_concurrency else None
    states = [RequestState(index, spec) for index, spec in enumerate(requests)]
    for request, send_s in zip(states, send_times_s.tolist(), strict=True):
        env.process(request_process(state, request, send_s, slots))
    if progress is not None:
        env.process(_report(state, progress, len(states)))
    tokens = sum(s.input_len + s.output_len for s in requests)
    step_limit = STEP_LIMIT_FACTOR * (tokens // max(1, limits.max_num_batched_tokens) + tokens)
    env.run(until=env.process(scheduler(state, len(states), step_limit)))
    state.count(0)
    return states, state


PROGRESS_EVERY_S = 1.0  # simulated seconds between progress reports


def _report(state: ServingState, progress: Callable[[int], None], n: int) -> simpy.events.ProcessGenerator:
    reported = 0
    while reported < n:
        yield state.env.timeout(PROGRESS_EVERY_S)
        if state.finished > reported:
            progress(state.finished - reported)
            reported = state.finished
