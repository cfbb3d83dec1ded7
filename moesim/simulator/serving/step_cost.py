"""What one serving step costs: a step shape in, seconds out, from the step model of a scenario.

A step of a serving run is described by its shape: how many running sequences it decodes (or verifies),
with how many tokens each (1, or K + 1 with speculative decoding), at what mean cached context, and which
prompt chunks it prefills beside them. `StepCost` is the small interface the serving loop needs;
`ScenarioStepCost` answers it for a resolved `Scenario` (model, hardware, kernel style, launch, routing,
layout, drafter) with a `StepTimer` (the closed-form fast path by default): a step without prefill is the
speculative point's own step (`speculative.point.time_step`), a verification step adds the drafter's K
passes as the point does (`speculative.drafters`), and a step with prefill chunks is the mixed plan
(`plan.mixed.build_mixed_plan`).

Shapes are bucketed before they are costed, so that a long run evaluates a few hundred plans, not one per
step: contexts, prefill tokens, prefill KV and query–key pairs are rounded to a grid of 1/32 of their power
of two (at most ±1.6%; exact below 16); the decode batch is kept exact. Attention over the mean context is
exact for the KV bytes and FLOPs (both linear in the sum of contexts).

On a tensor-parallel group (`layout` with ep = 1: attention, dense layers and every expert split over the
`tp` GPUs, as `vllm serve -tp N` and SGLang `--tp N` run by default) a decode or verification step is the
slowest rank's parallel plan with its all-reduces; a step with prefill chunks adds to it what the chunks
add on one rank (the mixed plan of the rank's slice of the model minus its decode plan) and to the two
all-reduces per layer (after attention and after the FFN). Expert-parallel layouts are not modelled here.

The serving engine's own per-step host work (scheduling, input preparation, CUDA-graph padding) is not part
of this cost yet: an engine-aware cost wraps `StepCost` (the serving-engines issue).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Protocol

from moesim.errors import MoesimError
from moesim.simulator.execution.collectives import all_reduce_s, node_link
from moesim.simulator.execution.launch import LaunchParams
from moesim.simulator.execution.timer import FastTimer, StepTimer
from moesim.simulator.plan.layout import ParallelLayout
from moesim.simulator.plan.mixed import MIXED_APPROXIMATIONS, PrefillChunks, build_mixed_plan
from moesim.simulator.plan.parallel import rank_model
from moesim.simulator.plan.step import ACT_BYTES
from moesim.simulator.plan.styles import build_plan
from moesim.simulator.scenario import ResolvedScenario
from moesim.simulator.speculative.drafters import draft_pass_s, draft_time_s, handoff_s
from moesim.simulator.speculative.point import time_step

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
    """Seconds one serving step takes (drafter passes included for a verification step)."""

    @property
    def description(self) -> str: ...

    def __call__(self, shape: StepShape) -> float: ...


def check_serving_layout(layout: ParallelLayout) -> None:
    """Refuse layouts the serving cost does not model: only one GPU or one tensor-parallel group."""
    if not layout.is_single and layout.ep != 1:
        raise MoesimError(
            "layout",
            f"serving runs on one GPU or a tensor-parallel group; {layout.describe()} is expert-parallel",
            "use --tp N alone (experts split over the N GPUs)",
        )


class ScenarioStepCost:
    """The step model of a resolved scenario (one GPU or a TP group), cached by bucketed step shape."""

    def __init__(self, resolved: ResolvedScenario, timer: StepTimer | None = None) -> None:
        check_serving_layout(resolved.layout)
        self.resolved = resolved
        self.timer = timer or FastTimer(resolved.hardware)
        self.rank = rank_model(resolved.model, resolved.layout)
        self._launch_overhead_s = LaunchParams.from_hardware(resolved.hardware, resolved.launch).overhead_s
        self._costs: dict[StepShape, float] = {}
        self._drafts: dict[tuple[int, int, int], float] = {}

    @property
    def description(self) -> str:
        r = self.resolved
        return (
            f"{type(self.timer).__name__} on {r.layout.describe()}, {r.engine} kernels, {r.launch} launch, "
            f"{r.routing.description}, drafter {r.drafter.label} (its passes cover the decoding sequences, "
            f"not the prompt tokens of prefill chunks); {MIXED_APPROXIMATIONS}; shapes bucketed to ±1.6%"
        )

    @property
    def evaluated_shapes(self) -> int:
        """How many distinct (bucketed) shapes were costed so far."""
        return len(self._costs)

    def _at(self, batch: int, context_len: int) -> ResolvedScenario:
        r = self.resolved
        return replace(r, scenario=r.scenario.replace(batch=batch, context_len=context_len))

    def decode_s(self, decode_seqs: int, tokens_per_seq: int, context_len: int) -> float:
        """One decode (T = 1) or verification (T = K + 1) step of the target alone, as the speculative
        point times it."""
        return time_step(self._at(decode_seqs, context_len), self.timer, tokens_per_seq).step_s

    def draft_s(self, decode_seqs: int, draft_len: int, context_len: int) -> float:
        """The drafter's K passes for `decode_seqs` sequences, as the speculative point times them."""
        key = (decode_seqs, draft_len, int(bucket(context_len)))
        if key not in self._drafts:
            r = self.resolved
            t_decode = self.decode_s(decode_seqs, 1, key[2]) if r.drafter.kind == "fraction" else 0.0
            pass_s = draft_pass_s(
                r.drafter, r.model, r.layout, decode_seqs, key[2], r.engine, r.routing, self.timer, r.launch
            )
            handoff = handoff_s(r.drafter, r.model, self.timer, r.layout, decode_seqs, draft_len)
            self._drafts[key] = draft_time_s(
                r.drafter, decode_seqs, draft_len, t_decode, pass_s, self._launch_overhead_s, handoff
            )
        return self._drafts[key]

    def _rank_s(self, shape: StepShape) -> float:
        """A step of `shape` on one rank's slice of the model (the whole model on one GPU)."""
        r = self.resolved
        if shape.chunks is None:
            plan = build_plan(
                self.rank,
                shape.decode_seqs,
                shape.tokens_per_seq,
                shape.context_len,
                r.engine,
                r.routing,
                r.hardware,
            )
        else:
            plan = build_mixed_plan(
                self.rank,
                shape.decode_seqs,
                shape.tokens_per_seq,
                shape.context_len,
                shape.chunks,
                r.engine,
                r.routing,
                r.hardware,
            )
        return self.timer.step(plan, r.launch).step_s

    def _all_reduces_s(self, tokens: int) -> float:
        """The two all-reduces per layer of a tensor-parallel step over `tokens` tokens."""
        layout, model = self.resolved.layout, self.resolved.model
        if tokens == 0 or layout.is_single:
            return 0.0
        link = node_link(self.resolved.hardware.node, layout.tp)
        message = tokens * model.hidden * ACT_BYTES
        return 2 * model.n_layers * float(all_reduce_s(message, layout.tp, link))

    def mixed_s(self, shape: StepShape) -> float:
        """A step with prefill chunks (see the module docstring for a tensor-parallel group)."""
        assert shape.chunks is not None
        if self.resolved.layout.is_single:
            return self._rank_s(shape)
        decode_tokens = shape.decode_seqs * shape.tokens_per_seq
        added_comm = self._all_reduces_s(decode_tokens + shape.chunks.tokens) - self._all_reduces_s(
            decode_tokens
        )
        if not shape.decode_seqs:
            return self._rank_s(shape) + added_comm
        decode_only = StepShape(shape.decode_seqs, shape.tokens_per_seq, shape.context_len)
        decode = self.decode_s(shape.decode_seqs, shape.tokens_per_seq, shape.context_len)
        return decode + self._rank_s(shape) - self._rank_s(decode_only) + added_comm

    def __call__(self, shape: StepShape) -> float:
        key = shape.bucketed()
        cost = self._costs.get(key)
        if cost is None:
            if key.chunks is None:
                cost = self.decode_s(key.decode_seqs, key.tokens_per_seq, key.context_len)
            else:
                cost = self.mixed_s(key)
            if key.decode_seqs and key.tokens_per_seq > 1:
                cost += self.draft_s(key.decode_seqs, key.tokens_per_seq - 1, key.context_len)
            self._costs[key] = cost
        return cost
