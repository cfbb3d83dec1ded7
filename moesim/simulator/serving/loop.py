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

State lives only here, in `ServingState` and the per-request `RequestState`. While the run goes, the
numbers every step touches (tokens computed, prefill targets, tokens generated, KV coverage, last token
times) are arrays over the requests in `ServingState`, so from `ARRAY_FROM` running requests a step in
which every running request decodes is worked out in a few numpy operations, whatever the batch; a handful
of requests, steps with prompt chunks to place in the running set and a KV shortage go request by request,
by the same rules in the same order.
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
# From this many running requests a step's per-request work goes over arrays (a few numpy calls, whatever
# the batch); below it, request by request in Python, which is cheaper for a handful.
ARRAY_FROM = 12


@dataclass(slots=True)
class RequestState:
    """One request: what the engine computed for it and when its tokens came out (the counts are the
    run's arrays, written back when it ends)."""

    index: int
    spec: RequestSpec
    sent_s: float = math.nan
    first_token_s: float = math.nan
    last_token_s: float = math.nan
    finish_s: float = math.nan
    computed: int = 0  # tokens whose KV is cached
    prefill_target: int = 0  # tokens to prefill before decoding (the prompt, or all known after preemption)
    generated: int = 0
    preemptions: int = 0
    kv_covered: int = 0  # tokens its KV blocks cover (`KvBlocks.covered_tokens`); 0 while it holds none
    itls_s: np.ndarray = field(default_factory=lambda: np.zeros(0))  # gaps between streamed chunks

    @property
    def prefilling(self) -> bool:
        return self.computed < self.prefill_target


class ServingState:
    """Everything the scheduler shares with the request processes: the queues (request indices), the KV
    pool, and per request (arrays indexed by request) the counts every step reads and writes."""

    def __init__(
        self,
        env: simpy.Environment,
        kv: KvBlocks,
        step_cost: StepCost,
        limits: SchedulerLimits,
        acceptance: AcceptanceDraws | None,
        requests: list[RequestState],
    ) -> None:
        self.env, self.kv, self.step_cost = env, kv, step_cost
        self.limits, self.acceptance = limits, acceptance
        self.requests = requests
        n = len(requests)
        self.input_len = np.array([r.spec.input_len for r in requests], dtype=np.int64)
        self.output_len = np.array([r.spec.output_len for r in requests], dtype=np.int64)
        self.computed = np.zeros(n, dtype=np.int64)
        self.prefill_target = np.zeros(n, dtype=np.int64)
        self.generated = np.zeros(n, dtype=np.int64)
        self.kv_covered = np.zeros(n, dtype=np.int64)
        self.last_token_s = np.full(n, math.nan)
        self.waiting: deque[int] = deque()
        self.running: list[int] = []  # in admission order
        self.prefilling: set[int] = set()  # of the running, those whose prompt is not all computed
        self._running_array: np.ndarray | None = None
        self.done: dict[int, simpy.Event] = {}
        self.wakeup: simpy.Event | None = None
        self.finished = 0
        self.steps = 0
        self.decode_rows = 0
        self.preemptions = 0
        self.in_system = 0
        self.in_system_area = 0.0  # ∫ requests in the system dt, kept apart from the latencies
        self.last_change_s = 0.0
        # every streamed chunk after a request's first: (requests, gaps) in the order they came out, in
        # array chunks and, between them, one at a time
        self._gap_owners: list[np.ndarray] = []
        self._gaps_s: list[np.ndarray] = []
        self._owners_one: list[int] = []
        self._gaps_one: list[float] = []

    @property
    def tokens_per_seq(self) -> int:
        return 1 if self.acceptance is None else self.acceptance.draft_len + 1

    def running_array(self) -> np.ndarray:
        """The running requests as an index array (rebuilt only when the set changes)."""
        if self._running_array is None:
            self._running_array = np.array(self.running, dtype=np.intp)
        return self._running_array

    def running_changed(self) -> None:
        self._running_array = None

    def count(self, delta: int) -> None:
        now = self.env.now
        self.in_system_area += self.in_system * (now - self.last_change_s)
        self.last_change_s = now
        self.in_system += delta

    def submit(self, index: int) -> None:
        self.prefill_target[index] = self.input_len[index]
        self.waiting.append(index)
        self.count(+1)
        if self.wakeup is not None and not self.wakeup.triggered:
            self.wakeup.succeed()

    def record_gaps(self, owners: np.ndarray, gaps_s: np.ndarray) -> None:
        self._flush_gaps()
        self._gap_owners.append(owners)
        self._gaps_s.append(gaps_s)

    def record_gap(self, owner: int, gap_s: float) -> None:
        self._owners_one.append(owner)
        self._gaps_one.append(gap_s)

    def _flush_gaps(self) -> None:
        if self._owners_one:
            self._gap_owners.append(np.array(self._owners_one, dtype=np.intp))
            self._gaps_s.append(np.array(self._gaps_one))
            self._owners_one, self._gaps_one = [], []

    def write_back(self) -> None:
        """Copy the run's arrays into the `RequestState`s: counts, last token times, each one's gaps."""
        self._flush_gaps()
        owners = np.concatenate(self._gap_owners) if self._gap_owners else np.zeros(0, dtype=np.intp)
        gaps = np.concatenate(self._gaps_s) if self._gaps_s else np.zeros(0)
        order = np.argsort(owners, kind="stable")  # per request, in the order they came out
        ends = np.cumsum(np.bincount(owners, minlength=len(self.requests)))
        per_request = np.split(gaps[order], ends[:-1]) if len(self.requests) else []
        columns = (self.computed, self.prefill_target, self.generated, self.kv_covered)
        rows = zip(*(c.tolist() for c in columns), self.last_token_s.tolist(), per_request, strict=True)
        for r, (computed, target, generated, covered, last, itls) in zip(self.requests, rows, strict=True):
            r.computed, r.prefill_target, r.generated, r.kv_covered = computed, target, generated, covered
            r.last_token_s, r.itls_s = last, itls


def request_process(
    state: ServingState, request: RequestState, send_s: float, slots: simpy.Resource | None
) -> simpy.events.ProcessGenerator:
    """Wait until the client sends the request (and a concurrency slot frees), submit it, await the end."""
    env = state.env
    yield env.timeout(send_s)
    done = state.done[request.index] = env.event()
    if slots is None:
        request.sent_s = env.now
        state.submit(request.index)
        yield done
        return
    with slots.request() as slot:
        yield slot
        request.sent_s = env.now
        state.submit(request.index)
        yield done


def _preempt(state: ServingState, victim: int) -> None:
    state.kv.release(victim)
    state.prefilling.discard(victim)
    state.kv_covered[victim] = 0
    state.computed[victim] = 0
    state.prefill_target[victim] = state.input_len[victim] + state.generated[victim]
    state.requests[victim].preemptions += 1
    state.preemptions += 1
    state.waiting.appendleft(victim)


def _all_decode(state: ServingState, running: np.ndarray, budget: int) -> int | None:
    """When the step decodes every running request and `reserve` succeeds for each (none prefilling, their
    tokens within the budget, the blocks they miss all free), takes their blocks and returns the sum of
    their cached tokens (what the step's mean context is worked out from); else None."""
    t = state.tokens_per_seq
    if running.size * t > budget or state.prefilling:
        return None
    computed = state.computed[running]
    need = computed + t
    short = need > state.kv_covered[running]
    if short.any():
        owners = running[short]
        covered = state.kv.extend_all(owners, need[short])  # each misses a block: its need passes its cover
        if covered is None:
            return None
        state.kv_covered[owners] = covered
    return int(np.add.reduce(computed))  # `.sum()` without its Python wrapper (a decode step's)


def schedule_step(state: ServingState) -> tuple[np.ndarray | list[int], list[tuple[int, int]], int]:
    """The requests one step decodes (an index array, or a list below `ARRAY_FROM` running), the
    (request, chunk tokens) it prefills (vLLM V1's policy) and the decoded requests' cached tokens."""
    budget = state.limits.max_num_batched_tokens
    t = state.tokens_per_seq
    kv, computed, covered = state.kv, state.computed, state.kv_covered
    running, reserve = state.running, kv.reserve
    prefill: list[tuple[int, int]] = []
    preempted = False
    decode: np.ndarray | list[int]
    array = state.running_array() if len(running) >= ARRAY_FROM else None
    cached = None if array is None else _all_decode(state, array, budget)
    if array is not None and cached is not None:  # the common step: one pass over arrays
        decode = array
        budget -= array.size * t
    else:  # request by request, in admission order
        decoding: list[int] = []
        targets = state.prefill_target
        i = 0
        while i < len(running) and budget > 0:
            request = running[i]
            done = computed.item(request)
            remaining = targets.item(request) - done  # > 0 while the request is prefilling
            n = min(remaining, budget) if remaining > 0 else t
            if n > budget:
                break
            need = done + n
            if need > covered.item(request):  # within its blocks `reserve` would take nothing: not called
                placed = True
                while not reserve(request, need):
                    victim = running.pop()
                    state.running_changed()
                    _preempt(state, victim)
                    preempted = True
                    if victim == request:
                        placed = False
                        break
                if not placed:
                    continue
                covered[request] = kv.covered_tokens(request)
            (prefill.append((request, n)) if remaining > 0 else decoding.append(request))
            budget -= n
            i += 1
        decode = np.array(decoding, dtype=np.intp) if len(decoding) >= ARRAY_FROM else decoding
        cached = sum(computed.item(r) for r in decoding)
    waiting = state.waiting
    while not preempted and waiting and budget > 0 and len(running) < state.limits.max_num_seqs:
        request = waiting[0]
        done = computed.item(request)
        n = min(state.prefill_target.item(request) - done, budget)
        if not reserve(request, done + n):
            break
        covered[request] = kv.covered_tokens(request)
        waiting.popleft()
        running.append(request)
        if state.prefill_target.item(request) > done:
            state.prefilling.add(request)
        state.running_changed()
        prefill.append((request, n))
        budget -= n
    return decode, prefill, cached


def _emit(state: ServingState, request: int, tokens: int) -> None:
    """`request` streams `tokens` tokens now; it finishes (frees its blocks) once it has all its output."""
    now = state.env.now
    generated = state.generated.item(request)
    if generated == 0:
        state.requests[request].first_token_s = now
    else:
        state.record_gap(request, now - state.last_token_s.item(request))
    state.last_token_s[request] = now
    state.generated[request] = generated = generated + tokens
    if generated >= state.output_len.item(request):
        _finish(state, request, now)


def _finish(state: ServingState, request: int, now: float) -> None:
    state.requests[request].finish_s = now
    state.kv.release(request)
    state.kv_covered[request] = 0
    state.running.remove(request)
    state.running_changed()
    state.finished += 1
    state.count(-1)
    state.done[request].succeed()


def _emit_each(state: ServingState, decode: list[int], gained: list[int]) -> None:
    """`_emit_decoded` one request at a time (a handful of them: cheaper than array calls)."""
    now = state.env.now
    computed, generated, output, last = state.computed, state.generated, state.output_len, state.last_token_s
    for request, tokens in zip(decode, gained, strict=True):
        done = generated.item(request)
        left = output.item(request) - done
        tokens = min(tokens, left)
        computed[request] = computed.item(request) + tokens
        generated[request] = done + tokens
        state.record_gap(request, now - last.item(request))
        last[request] = now
        if tokens == left:
            _finish(state, request, now)


def _emit_decoded(state: ServingState, decode: np.ndarray, gained: np.ndarray) -> None:
    """`_emit` of every decoded request and its accepted tokens (never past its output length), with the
    step's clock read once: the per-request work of every step, over arrays. A decoding request has streamed
    its first token already (the end of its prefill did), so each of these chunks is a gap after one."""
    now = state.env.now
    generated = state.generated[decode]
    left = state.output_len[decode] - generated
    tokens = np.minimum(gained, left)
    state.computed[decode] += tokens
    state.generated[decode] = generated + tokens
    state.record_gaps(decode, now - state.last_token_s[decode])
    state.last_token_s[decode] = now
    for request in decode[tokens == left].tolist():  # in admission order, as the slots free
        _finish(state, request, now)


def scheduler(state: ServingState, n_requests: int, step_limit: int) -> simpy.events.ProcessGenerator:
    """Run steps until every request has finished."""
    env = state.env
    t = state.tokens_per_seq
    decode_costs: dict[tuple[int, int], float] = {}
    while state.finished < n_requests:
        if not state.running and not state.waiting:
            state.wakeup = env.event()
            yield state.wakeup
            continue
        decode, prefill, cached = schedule_step(state)
        rows = len(decode)
        if not rows and not prefill:
            raise MoesimError(
                "kv_cache_tokens", "the scheduler could place no token in the KV cache", "raise the capacity"
            )
        computed = state.computed
        context = round(cached / rows) if rows else 0
        if prefill:
            chunks = PrefillChunks.of([(n, computed.item(r)) for r, n in prefill])
            seconds = state.step_cost(StepShape(rows, t, context, chunks))
        else:  # a step cost is a function of the shape: the loop remembers decode-only shapes itself
            known = decode_costs.get((rows, context))
            if known is None:
                known = decode_costs[rows, context] = state.step_cost(StepShape(rows, t, context))
            seconds = known
        yield env.timeout(seconds)
        state.steps += 1
        state.decode_rows += rows
        if state.steps > step_limit:
            raise MoesimError("workload", f"the run needed more than {step_limit} steps", "report this")
        if isinstance(decode, list):
            if rows:
                draws = [1] * rows if state.acceptance is None else state.acceptance.draw(rows).tolist()
                _emit_each(state, decode, draws)
        else:
            gained = (
                np.ones(rows, dtype=np.int64) if state.acceptance is None else state.acceptance.draw(rows)
            )
            _emit_decoded(state, decode, gained)
        for request, n in prefill:
            computed[request] = done = computed.item(request) + n
            if done >= state.prefill_target.item(request):
                state.prefilling.discard(request)
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
    states = [RequestState(index, spec) for index, spec in enumerate(requests)]
    state = ServingState(env, kv, step_cost, limits, acceptance, states)
    slots = simpy.Resource(env, capacity=max_concurrency) if max_concurrency else None
    for request, send_s in zip(states, send_times_s.tolist(), strict=True):
        env.process(request_process(state, request, send_s, slots))
    if progress is not None:
        env.process(_report(state, progress, len(states)))
    tokens = sum(s.input_len + s.output_len for s in requests)
    step_limit = STEP_LIMIT_FACTOR * (tokens // max(1, limits.max_num_batched_tokens) + tokens)
    env.run(until=env.process(scheduler(state, len(states), step_limit)))
    state.count(0)
    state.write_back()
    return states, state


PROGRESS_EVERY_S = 1.0  # simulated seconds between progress reports


def _report(state: ServingState, progress: Callable[[int], None], n: int) -> simpy.events.ProcessGenerator:
    reported = 0
    while reported < n:
        yield state.env.timeout(PROGRESS_EVERY_S)
        if state.finished > reported:
            progress(state.finished - reported)
            reported = state.finished
