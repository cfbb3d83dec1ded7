"""What one serving step costs: a step shape in, seconds out, from the step model of a scenario.

A step of a serving run is described by its shape: how many running sequences it decodes (or verifies),
with how many tokens each (1, or K + 1 with speculative decoding), at what mean cached context, and which
prompt chunks it prefills beside them. `StepCost` is the small interface the serving loop needs;
`ScenarioStepCost` answers it for a resolved `Scenario` (model, hardware, kernel style, launch, routing,
layout, drafter, serving engine) with a `StepTimer` (the closed-form fast path by default). A step without
prefill is exactly the speculative point's under the scenario's serving engine (`speculative.point`): a
decode step (padded to the engine's captured size, in its launch mode, plus its exposed host time), or an
SD round (the drafter's passes, the chain's K + 1 or the tree's verified tokens, the acceptance sync). A
step with prefill chunks is the mixed plan (`plan.mixed.build_mixed_plan`), launched by the engine's
capture rule over its tokens (an engine capturing by sequences captures decode batches only, so such a
step runs its `graphs.uncaptured` mode: eager, or piecewise graphs), plus the engine's sampler passes over
its decode (or verified) rows and one row per prompt chunk (`point.engine_sampler_s`, as `engine_step`
prices a step's), its host time for its sequences and tokens (exposed per its overlap) and, under SD, the
acceptance bytes and the terms an SD round adds beside its verification (`point.round_extras`, the same
function `engine_round` adds: the drafter passes over the bonus rows too, the round's own ops, a tree's
attention metadata, the acceptance sync). With the `ideal` serving engine every engine term is 0: the
kernel stream alone.

Shapes are bucketed before they are costed, so that a long run evaluates a few hundred plans, not one per
step: contexts, prefill tokens, prefill KV and query–key pairs are rounded to a grid of 1/32 of their power
of two (at most ±1.6%; exact below 16); the decode batch is kept exact. Attention over the mean context is
exact for the KV bytes and FLOPs (both linear in the sum of contexts).

On a tensor-parallel group (`layout` with ep = 1: attention, dense layers and every expert split over the
`tp` GPUs, as `vllm serve -tp N` and SGLang `--tp N` run by default) a decode or verification step is the
slowest rank's parallel plan with its all-reduces; a step with prefill chunks adds to it what the chunks
add on one rank (the mixed plan of the rank's slice of the model minus its decode plan) and to the two
all-reduces per layer (after attention and after the FFN).

With expert parallelism (ep > 1) and data-parallel attention (tp < gpus: dp = gpus / tp attention groups,
as SGLang's `--tp G --enable-dp-attention --dp D --ep-size G` and vLLM's `--data-parallel-size D
--tensor-parallel-size T --enable-expert-parallel` lay them out) a decode or verification step is again the
slowest rank's parallel plan: its group's share of the sequences in attention, the all-to-all dispatch and
combine around every MoE layer, the busiest expert rank. A prefill chunk lands on one attention group, whose
ranks run its attention; its tokens' expert work spreads over the expert ranks like a TP rank's share (the
chunk's added work is priced on a rank holding 1/gpus of every expert's width: the same FLOPs and bytes as a
balanced EP rank), and it adds its tokens to the group's attention all-reduce and to every MoE layer's
dispatch and combine (each token sent once to each other rank its top-k experts live on).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Protocol

from moesim.simulator.engines import overheads as ov
from moesim.simulator.execution.collectives import collective_time_s
from moesim.simulator.execution.timer import FastTimer, StepTimer
from moesim.simulator.hardware.sections import AllToAllMode
from moesim.simulator.models.spec import ModelSpec
from moesim.simulator.plan.blocks import ACT_BYTES
from moesim.simulator.plan.kernels import AllToAllPhase, Collective
from moesim.simulator.plan.layout import ParallelLayout
from moesim.simulator.plan.mixed import MIXED_APPROXIMATIONS, PrefillChunks, build_mixed_plan
from moesim.simulator.plan.parallel import rank_model
from moesim.simulator.plan.styles import build_plan
from moesim.simulator.scenario import ResolvedScenario
from moesim.simulator.speculative.acceptance import expected_tokens
from moesim.simulator.speculative.point import (
    DraftTimes,
    LaunchCosts,
    StepTimes,
    engine_round,
    engine_sampler_s,
    engine_step,
    round_extras,
    scenario_timers,
)

BUCKET_FRACTION = 1 / 32
EXACT_BELOW = 16


def bucket(value: float) -> float:
    """`value` rounded to the nearest multiple of 1/32 of its power of two (exact below 16)."""
    if value < EXACT_BELOW:
        return float(value)
    quantum = 2.0 ** math.floor(math.log2(value)) * BUCKET_FRACTION
    return round(value / quantum) * quantum


@dataclass(frozen=True)
class StepShape:
    """One serving step: `decode_seqs` sequences × `tokens_per_seq` tokens at `context_len` mean cached
    tokens, plus the prefill `chunks` (None when the step prefills nothing)."""

    decode_seqs: int
    tokens_per_seq: int
    context_len: int
    chunks: PrefillChunks | None = None

    def bucketed(self) -> StepShape:
        chunks = self.chunks
        if chunks is not None:
            chunks = PrefillChunks(
                int(bucket(chunks.tokens)),
                chunks.chunks,
                int(bucket(chunks.kv_tokens)),
                bucket(chunks.query_key_pairs),
            )
        return StepShape(self.decode_seqs, self.tokens_per_seq, int(bucket(self.context_len)), chunks)


class StepCost(Protocol):
    """Seconds one serving step takes (drafter passes included for a verification step): a function of the
    shape alone, so a caller may remember its answers."""

    @property
    def description(self) -> str: ...

    def __call__(self, shape: StepShape) -> float: ...


def chunk_rank_model(model: ModelSpec, layout: ParallelLayout) -> ModelSpec:
    """The rank slice a prefill chunk's added work is priced on: attention and dense layers split over the
    attention group's `tp`, every routed expert over all the GPUs (a balanced expert-parallel rank does the
    same expert FLOPs and reads the same expert bytes as this tensor-parallel share)."""
    rank = rank_model(model, layout)
    if layout.ep == 1 or not model.expert_width:
        return rank
    return replace(rank, expert_width=math.ceil(model.expert_width / layout.gpus))


class ScenarioStepCost:
    """The step model of a resolved scenario (one GPU or a TP group), cached by bucketed step shape."""

    def __init__(self, resolved: ResolvedScenario, timer: StepTimer | None = None) -> None:
        self.resolved = resolved
        self.timer = timer or FastTimer(resolved.hardware)
        self.rank = chunk_rank_model(resolved.model, resolved.layout)
        self._costs: dict[StepShape, float] = {}
        self._timers: dict[int, tuple[StepTimes, DraftTimes, LaunchCosts]] = {}
        self._tokens_per_round: dict[int, float] = {}

    @property
    def description(self) -> str:
        r = self.resolved
        return (
            f"{type(self.timer).__name__} on {r.layout.describe()}, {r.kernel_style} kernels, {r.launch} launch, "
            f"serving engine {r.serving_engine.name} ({r.serving_engine.provenance.kind}), "
            f"{r.routing.description}, drafter {r.drafter.label} (its passes cover the decoding sequences, "
            f"not the prompt tokens of prefill chunks); {MIXED_APPROXIMATIONS}; shapes bucketed to ±1.6%"
        )

    @property
    def evaluated_shapes(self) -> int:
        """How many distinct (bucketed) shapes were costed so far."""
        return len(self._costs)

    def _timers_at(self, context_len: int) -> tuple[StepTimes, DraftTimes, LaunchCosts]:
        """The speculative point's memoised step and drafter times at one (bucketed) context."""
        if context_len not in self._timers:
            r = self.resolved
            at = replace(r, scenario=r.scenario.replace(batch=1, context_len=context_len))
            self._timers[context_len] = scenario_timers(at, self.timer)
        return self._timers[context_len]

    def decode_s(self, decode_seqs: int, context_len: int) -> float:
        """One decode step as the speculative point has the serving engine run it."""
        steps, _, launch_costs = self._timers_at(context_len)
        r = self.resolved
        return engine_step(r.serving_engine, decode_seqs, 1, r.launch, steps, launch_costs).step_s

    def tokens_per_round(self, draft_len: int) -> float:
        """The scenario's expected tokens per SD round of `draft_len` drafts (what sets the share of
        sequences whose previous round accepted every draft: the bonus rows of an engine that re-runs them)."""
        tokens = self._tokens_per_round.get(draft_len)
        if tokens is None:
            s = self.resolved.scenario
            tokens = self._tokens_per_round[draft_len] = expected_tokens(
                draft_len, s.acceptance, s.acceptance_length
            )
        return tokens

    def round_s(self, decode_seqs: int, draft_len: int, context_len: int) -> float:
        """One SD round (drafter passes, verification, acceptance sync), as the speculative point has it."""
        steps, drafts, launch_costs = self._timers_at(context_len)
        r = self.resolved
        # The round alone: a serving run never compares it with a decode step at this batch.
        sd = engine_round(
            r.serving_engine,
            r.drafter,
            decode_seqs,
            draft_len,
            self.tokens_per_round(draft_len),
            r.launch,
            steps,
            drafts,
            launch_costs,
        )
        return sd.round_s

    def _verify_tokens(self, shape: StepShape) -> int:
        """Tokens per sequence the step runs: 1, or what the engine verifies (a chain's K + 1, a tree's)."""
        if shape.tokens_per_seq == 1:
            return 1
        return ov.verify_tokens(self.resolved.serving_engine.drafter, shape.tokens_per_seq - 1)

    def _rank_s(self, shape: StepShape, launch: str) -> float:
        """A step of `shape` on one rank's slice of the model (the whole model on one GPU)."""
        r = self.resolved
        q = self._verify_tokens(shape)
        if shape.chunks is None:
            plan = build_plan(
                self.rank, shape.decode_seqs, q, shape.context_len, r.kernel_style, r.routing, r.hardware
            )
        else:
            plan = build_mixed_plan(
                self.rank,
                shape.decode_seqs,
                q,
                shape.context_len,
                shape.chunks,
                r.kernel_style,
                r.routing,
                r.hardware,
            )
        return self.timer.step(plan, launch).step_s

    def _communication_s(self, decode_tokens: int, chunk_tokens: int) -> float:
        """The collectives of a step's layers over `decode_tokens` decode tokens (spread over the attention
        groups) and `chunk_tokens` prompt tokens (on one group): a TP group's two all-reduces per layer;
        with expert parallelism, the group's attention all-reduce per layer and every MoE layer's dispatch
        and combine of the busiest group's tokens (each rank sends its 1/tp share), in the all-to-all mode of
        a step with prefill (`normal`) or without (`low_latency`)."""
        layout, model = self.resolved.layout, self.resolved.model
        tokens = decode_tokens + chunk_tokens
        if tokens == 0 or layout.is_single:
            return 0.0
        node = self.resolved.hardware.node
        if layout.ep == 1:
            all_reduce = Collective("all_reduce", layout.tp, tokens * model.hidden * ACT_BYTES)
            return 2 * model.n_layers * collective_time_s(all_reduce, node)
        group_tokens = math.ceil(decode_tokens / layout.dp) + chunk_tokens
        attention = 0.0
        if layout.tp > 1:
            all_reduce = Collective("all_reduce", layout.tp, group_tokens * model.hidden * ACT_BYTES)
            attention = model.n_layers * collective_time_s(all_reduce, node)
        moe_layers = sum(1 for ffn in model.layer_ffn if ffn == "moe")
        ranks_hit = layout.ep * (1.0 - (1.0 - 1.0 / layout.ep) ** model.top_k)  # E[ranks of k experts]
        copies = ranks_hit * (layout.ep - 1) / layout.ep  # copies that leave the rank
        send = math.ceil(group_tokens / layout.tp) * copies * model.hidden * ACT_BYTES
        mode: AllToAllMode = "normal" if chunk_tokens else "low_latency"
        phases: tuple[AllToAllPhase, AllToAllPhase] = (
            ("dispatch", "combine") if layout.expert_tp == 1 else ("", "")  # see Collective.phase
        )
        dispatch, combine = (
            collective_time_s(Collective("all_to_all", layout.gpus, send, phase=phase), node, mode)
            for phase in phases
        )
        return attention + moe_layers * (dispatch + combine)

    def _mixed_device_s(self, shape: StepShape, launch: str) -> float:
        """The kernel stream of a step with prefill chunks (see the module docstring for a TP group)."""
        assert shape.chunks is not None
        if self.resolved.layout.is_single:
            return self._rank_s(shape, launch)
        q = self._verify_tokens(shape)
        decode_tokens = shape.decode_seqs * q
        added_comm = self._communication_s(decode_tokens, shape.chunks.tokens) - self._communication_s(
            decode_tokens, 0
        )
        if not shape.decode_seqs:
            return self._rank_s(shape, launch) + added_comm
        steps, _, _ = self._timers_at(shape.context_len)
        decode = steps(shape.decode_seqs, q, launch).step_s
        decode_only = StepShape(shape.decode_seqs, shape.tokens_per_seq, shape.context_len)
        return decode + self._rank_s(shape, launch) - self._rank_s(decode_only, launch) + added_comm

    def _mixed_launch(self, tokens: int) -> str:
        """How the engine launches a step with prefill chunks of `tokens` tokens in all: by its capture rule
        when it captures by tokens (or captures every size); an engine that captures by sequences captures
        decode batches only, so such a step runs `graphs.uncaptured`."""
        r = self.resolved
        graphs = r.serving_engine.graphs
        if r.launch == "eager" or graphs.capture_unit == "tokens" or not graphs.sizes:
            return ov.launch_for(r.serving_engine, 1, tokens, r.launch)
        return graphs.uncaptured

    def mixed_s(self, shape: StepShape) -> float:
        """A step with prefill chunks, run as the serving engine runs an uncaptured step, plus its sampler
        passes and host time and, under SD, the round's drafter passes, own ops and acceptance sync."""
        assert shape.chunks is not None
        r = self.resolved
        profile = r.serving_engine
        q = self._verify_tokens(shape)
        launch = self._mixed_launch(shape.decode_seqs * q + shape.chunks.tokens)
        device = self._mixed_device_s(shape, "graph" if launch == "piecewise" else launch)
        _, _, launch_costs = self._timers_at(shape.context_len)
        if launch == "piecewise":
            device = ov.piecewise_step_s(
                device, launch_costs.layers, launch_costs.graph_launch_s, launch_costs.eager_launch_s
            )
        speculative = shape.decode_seqs > 0 and shape.tokens_per_seq > 1
        host = ov.host_time_s(
            profile,
            shape.decode_seqs + shape.chunks.chunks,
            shape.decode_seqs * q + shape.chunks.tokens,
            launch_costs.tp,
        )
        k = shape.tokens_per_seq - 1
        acceptance = 0.0
        if speculative:
            host += ov.sd_bookkeeping_s(
                profile, shape.decode_seqs, k, shape.context_len, self.tokens_per_round(k)
            )
            vocab, sampling = launch_costs.vocab, launch_costs.sampling
            acceptance = ov.acceptance_bytes(profile, shape.decode_seqs, k, vocab, sampling)
        rows = shape.decode_seqs * q
        sampler = engine_sampler_s(profile, launch_costs, rows, speculative, acceptance, shape.chunks.chunks)
        cost = device + sampler + ov.exposed_host_s(profile, host, device, speculative)
        if speculative:
            _, drafts, _ = self._timers_at(shape.context_len)
            tokens = self.tokens_per_round(k)
            extras = round_extras(
                profile, r.drafter, shape.decode_seqs, k, tokens, launch, launch, device, drafts, launch_costs
            )
            cost += extras.seconds
        return cost

    def __call__(self, shape: StepShape) -> float:
        key = shape.bucketed()
        cost = self._costs.get(key)
        if cost is None:
            if key.chunks is not None:
                cost = self.mixed_s(key)
            elif key.tokens_per_seq > 1:
                cost = self.round_s(key.decode_seqs, key.tokens_per_seq - 1, key.context_len)
            else:
                cost = self.decode_s(key.decode_seqs, key.context_len)
            self._costs[key] = cost
        return cost
