"""What one serving step costs: a step shape in, seconds out, from the step model on the fast path.

A step of a serving run is described by its shape: how many running sequences it decodes (or verifies),
with how many tokens each (1, or K + 1 with speculative decoding), at what mean cached context, and which
prompt chunks it prefills beside them. `StepCost` is the small interface the serving loop needs;
`FastPathStepCost` answers it with the closed-form fast path (`execution.fastpath.fast_step`) on the plan
of that shape (`plan.step.build_plan`, or `plan.mixed.build_mixed_plan` when prefill chunks share the step),
plus the drafter's K passes for a verification step (`speculative.drafters.draft_time_s`).

Shapes are bucketed before they are costed, so that a long run evaluates a few hundred plans, not one per
step: contexts, prefill tokens, prefill KV and query–key pairs are rounded to a grid of 1/32 of their power
of two (at most ±1.6%; exact below 16); the decode batch is kept exact. Attention over the mean context is
exact for the KV bytes and FLOPs (both linear in the sum of contexts).

On a tensor-parallel group (`layout` with ep = 1: attention, dense layers and every expert split over the
`tp` GPUs, as `vllm serve -tp N` and SGLang `--tp N` run by default) a decode or verification step is the
slowest rank's parallel plan with its all-reduces (`plan.parallel`); a step with prefill chunks adds to it
what the chunks add on one rank (the mixed plan of the rank's slice of the model minus its decode plan)
and to the two all-reduces per layer (after attention and after the FFN). Expert-parallel layouts are not
modelled here yet.

The serving engine's own per-step host work (scheduling, input preparation, CUDA-graph padding) is not part
of this cost yet: an engine-aware cost wraps `StepCost` (the serving-engines issue).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from moesim.errors import MoesimError
from moesim.simulator.execution.collectives import all_reduce_s, node_link
from moesim.simulator.execution.cost import CostParams
from moesim.simulator.execution.fastpath import LaunchParams, check_launch, fast_step
from moesim.simulator.hardware.profile import HardwareProfile
from moesim.simulator.models.spec import ModelSpec
from moesim.simulator.plan.layout import ParallelLayout
from moesim.simulator.plan.mixed import MIXED_APPROXIMATIONS, PrefillChunks, build_mixed_plan
from moesim.simulator.plan.parallel import ParallelStep, build_parallel_plan, fast_parallel_step, rank_model
from moesim.simulator.plan.step import ACT_BYTES, StepPlan, build_plan, engine_style
from moesim.simulator.routing.base import RoutingModel
from moesim.simulator.routing.independent import IndependentRouting
from moesim.simulator.speculative.drafters import DEFAULT_DRAFTER, parse_drafter
from moesim.simulator.speculative.parallel_draft import parallel_draft_time_s

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


def check_serving_layout(layout: ParallelLayout, model: ModelSpec) -> None:
    """Refuse layouts the serving cost does not model: only one GPU or one tensor-parallel group."""
    if not layout.is_single and layout.ep != 1:
        raise MoesimError(
            "layout",
            f"serving runs on one GPU or a tensor-parallel group; {layout.describe()} is expert-parallel",
            "use --tp N alone (experts split over the N GPUs)",
        )
    layout.check_model(model)


class FastPathStepCost:
    """The step model on the closed-form fast path (one GPU or a TP group), cached by bucketed step shape."""

    def __init__(
        self,
        model: ModelSpec,
        hardware: HardwareProfile,
        *,
        engine: str = "fused",
        launch: str = "graph",
        routing: RoutingModel | None = None,
        drafter: str = DEFAULT_DRAFTER,
        layout: ParallelLayout | None = None,
    ) -> None:
        check_launch(launch)
        engine_style(engine)
        self.layout = layout or ParallelLayout()
        check_serving_layout(self.layout, model)
        self.rank = rank_model(model, self.layout)
        self.model = model
        self.hardware = hardware
        self.engine = engine
        self.launch = launch
        self.routing = routing or IndependentRouting()
        self.drafter = parse_drafter(drafter)
        self._params = CostParams.from_hardware(hardware)
        self._launch_overhead_s = LaunchParams.from_hardware(hardware, launch).overhead_s
        self._costs: dict[StepShape, float] = {}
        self._drafts: dict[tuple[int, int, int], float] = {}

    @property
    def description(self) -> str:
        return (
            f"fast path on {self.layout.describe()}, {self.engine} kernels, {self.launch} launch, "
            f"{self.routing.description}, "
            f"drafter {self.drafter.label} (its passes cover the decoding sequences, not the prompt tokens of "
            f"prefill chunks); {MIXED_APPROXIMATIONS}; shapes bucketed to ±1.6%"
        )

    @property
    def evaluated_shapes(self) -> int:
        """How many distinct (bucketed) shapes were costed so far."""
        return len(self._costs)

    def _plan_s(self, plan: StepPlan, with_launch: bool = True) -> float:
        return fast_step(plan, self.hardware, self.launch, self._params, with_launch).step_s

    def _parallel_s(self, step: ParallelStep, with_launch: bool = True) -> float:
        return fast_parallel_step(step, self.hardware, self.launch, self._params, with_launch).step_s

    def decode_s(self, decode_seqs: int, tokens_per_seq: int, context_len: int) -> float:
        """One decode (T = 1) or verification (T = K + 1) step of the target alone, no prefill."""
        if self.layout.is_single:
            plan = build_plan(
                self.model, decode_seqs, tokens_per_seq, context_len, self.engine, self.routing, self.hardware
            )
            return self._plan_s(plan)
        step = build_parallel_plan(
            self.model,
            decode_seqs,
            tokens_per_seq,
            self.layout,
            self.hardware,
            context_len,
            self.engine,
            self.routing,
        )
        return self._parallel_s(step)

    def _mixed_rank_s(self, shape: StepShape) -> float:
        assert shape.chunks is not None
        plan = build_mixed_plan(
            self.rank,
            shape.decode_seqs,
            shape.tokens_per_seq,
            shape.context_len,
            shape.chunks,
            self.engine,
            self.routing,
            self.hardware,
        )
        return self._plan_s(plan)

    def _all_reduces_s(self, tokens: int) -> float:
        """The two all-reduces per layer of a tensor-parallel step over `tokens` tokens."""
        if tokens == 0 or self.layout.is_single:
            return 0.0
        link = node_link(self.hardware.node, self.layout.tp)
        message = tokens * self.model.hidden * ACT_BYTES
        return 2 * self.model.n_layers * float(all_reduce_s(message, self.layout.tp, link))

    def mixed_s(self, shape: StepShape) -> float:
        """A step with prefill chunks (see the module docstring for a tensor-parallel group)."""
        if self.layout.is_single:
            return self._mixed_rank_s(shape)
        assert shape.chunks is not None
        decode_tokens = shape.decode_seqs * shape.tokens_per_seq
        added_comm = self._all_reduces_s(decode_tokens + shape.chunks.tokens) - self._all_reduces_s(
            decode_tokens
        )
        if not shape.decode_seqs:
            return self._mixed_rank_s(shape) + added_comm
        rank_decode = self._plan_s(
            build_plan(
                self.rank,
                shape.decode_seqs,
                shape.tokens_per_seq,
                shape.context_len,
                self.engine,
                self.routing,
                self.hardware,
            )
        )
        decode = self.decode_s(shape.decode_seqs, shape.tokens_per_seq, shape.context_len)
        return decode + self._mixed_rank_s(shape) - rank_decode + added_comm

    def draft_s(self, decode_seqs: int, draft_len: int, context_len: int) -> float:
        """The drafter's K passes for `decode_seqs` sequences (cached by bucketed context)."""
        key = (decode_seqs, draft_len, int(bucket(context_len)))
        if key not in self._drafts:
            t_decode = self.decode_s(decode_seqs, 1, key[2]) if self.drafter.kind == "fraction" else 0.0
            self._drafts[key] = parallel_draft_time_s(
                self.drafter,
                self.model,
                self.hardware,
                self.layout,
                decode_seqs,
                draft_len,
                key[2],
                self.engine,
                self.routing,
                t_decode,
                self._plan_s,
                self._parallel_s,
                self._launch_overhead_s,
            )
        return self._drafts[key]

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
