"""The drafter's time when the target is spread over several GPUs, or when the drafter has a GPU of its own.

What we model (standard speculative decoding, as vLLM and SGLang run it): the drafter proposes K tokens,
*then* the target verifies them — the two never overlap, whichever GPUs they run on, because verification
needs the drafts and the next draft needs the verified tokens.

- `draft_on="shared"` on G > 1 GPUs: the drafter runs on the target's GPUs with the target's parallelism, as
  the engines' draft workers do — a drafter with routed experts (an MTP layer, an MoE draft model) under the
  target's own layout (expert-parallel, with its all-to-alls); a dense one (an EAGLE head, a dense draft
  model) tensor-parallel over an attention group, each data-parallel group drafting its own sequences. Its
  passes are the slowest rank's, collectives included. (The memory check counts the drafter whole on every
  rank, which is conservative.)
- `draft_on="separate"`: the drafter runs unsplit on one more GPU, for all B sequences. Per SD step two
  messages cross the link between it and the target (scale-up when the extra GPU is in the target's node,
  else scale-out): the target's hidden states of the K+1 verified positions (EAGLE / MTP drafters condition
  on them; a separate draft model only needs the tokens), and the K draft tokens back. The gain is memory
  (and no contention for the target's HBM); the step does not get shorter.
- n-gram and `fraction:F` drafters have no device pass and cost what `speculative.draft_time_s` says.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from moesim.errors import MoesimError
from moesim.simulator.execution.collectives import node_link
from moesim.simulator.hardware.profile import HardwareProfile
from moesim.simulator.models.spec import ModelSpec
from moesim.simulator.plan import step as pl
from moesim.simulator.plan.layout import ParallelLayout
from moesim.simulator.plan.parallel import ParallelStep, build_parallel_plan, rank_model
from moesim.simulator.routing.base import RoutingModel
from moesim.simulator.speculative.drafters import (
    Drafter,
    StepTime,
    draft_time_s,
    drafter_model,
    drafter_pass_plan,
    with_fusion_projection,
)

TOKEN_ID_BYTES = 8  # int64 token ids, as the engines pass them
HIDDEN_BYTES = 2  # bf16 hidden states

ParallelStepTime = Callable[[ParallelStep, bool], float]  # (step, include launch and sync) -> seconds


def drafter_layout(draft: ModelSpec, layout: ParallelLayout) -> ParallelLayout:
    """The layout a drafter sharing the target's GPUs runs under (see the module docstring)."""
    if layout.is_single or layout.draft_on == "separate":
        return ParallelLayout(draft_on=layout.draft_on)
    if draft.is_moe:
        try:
            layout.check_model(draft)
            return layout
        except MoesimError:
            pass
    tp = layout.tp
    while tp > 1 and tp > draft.attention.num_heads:
        tp //= 2
    return ParallelLayout(gpus=tp, tp=tp, ep=1, shared_experts=layout.shared_experts)


def handoff_s(
    drafter: Drafter,
    target: ModelSpec,
    hardware: HardwareProfile,
    layout: ParallelLayout,
    batch: int,
    draft_len: int,
) -> float:
    """Per SD step, the two messages between the target's GPUs and a drafter on its own GPU (0 when shared)."""
    if layout.draft_on != "separate" or drafter.kind in ("ngram", "fraction"):
        return 0.0
    link = node_link(hardware.node, layout.gpus + 1)
    positions = batch * (draft_len + 1)
    to_drafter = positions * (
        target.hidden * HIDDEN_BYTES if drafter.kind in ("eagle", "mtp") else TOKEN_ID_BYTES
    )
    back = batch * draft_len * TOKEN_ID_BYTES
    return 2 * link.latency_s + (to_drafter + back) / link.bytes_per_s


def parallel_draft_time_s(
    drafter: Drafter,
    target: ModelSpec,
    hardware: HardwareProfile,
    layout: ParallelLayout,
    batch: int,
    draft_len: int,
    context_len: int,
    engine: str,
    routing: RoutingModel | None,
    t_decode_s: float,
    step_time: StepTime,
    parallel_step_time: ParallelStepTime,
    launch_overhead_s: float,
    load_model: Callable[[str], ModelSpec] | None = None,
) -> float:
    """Seconds the drafter takes to propose `draft_len` tokens for `batch` sequences under `layout`.

    `step_time` times a single-GPU pass (as for `speculative.draft_time_s`), `parallel_step_time` a parallel
    one; the K passes share one launch and sync (`launch_overhead_s`). On one shared GPU this is exactly
    `speculative.draft_time_s`.
    """
    (seconds,) = parallel_draft_times_s(
        drafter,
        target,
        hardware,
        layout,
        batch,
        (draft_len,),
        context_len,
        engine,
        routing,
        t_decode_s,
        step_time,
        parallel_step_time,
        launch_overhead_s,
        load_model,
    )
    return seconds


def parallel_draft_times_s(
    drafter: Drafter,
    target: ModelSpec,
    hardware: HardwareProfile,
    layout: ParallelLayout,
    batch: int,
    draft_lens: Sequence[int],
    context_len: int,
    engine: str,
    routing: RoutingModel | None,
    t_decode_s: float,
    step_time: StepTime,
    parallel_step_time: ParallelStepTime,
    launch_overhead_s: float,
    load_model: Callable[[str], ModelSpec] | None = None,
) -> list[float]:
    """`parallel_draft_time_s` for each of `draft_lens`; a parallel drafter pass is planned and timed once."""
    single = layout.is_single or layout.draft_on == "separate" or drafter.kind in ("ngram", "fraction")
    if single:
        return [
            draft_time_s(
                drafter,
                target,
                hardware,
                batch,
                draft_len,
                context_len,
                engine,
                routing,
                t_decode_s,
                step_time,
                launch_overhead_s,
                load_model,
            )
            + handoff_s(drafter, target, hardware, layout, batch, draft_len)
            for draft_len in draft_lens
        ]
    draft = drafter_model(drafter, target, load_model)
    assert draft is not None
    draft_layout = drafter_layout(draft, layout)
    if draft_layout.is_single:  # nothing to split: every rank drafts its group's sequences whole
        plan = drafter_pass_plan(
            drafter,
            target,
            hardware,
            layout.sequences_per_group(batch),
            context_len,
            engine,
            routing,
            load_model,
        )
        pass_s = step_time(plan, False)
    else:
        draft_batch = batch if draft_layout is layout else layout.sequences_per_group(batch)
        step = build_parallel_plan(
            draft, draft_batch, 1, draft_layout, hardware, context_len, engine, routing
        )
        if drafter.kind in ("eagle", "mtp"):
            rank = rank_model(draft, draft_layout)
            context = pl.PlanContext(
                rank, draft_layout.sequences_per_group(draft_batch), 1, context_len, hardware
            )
            step = replace(step, plan=with_fusion_projection(step.plan, rank, context))
        pass_s = parallel_step_time(step, False)
    return [draft_len * pass_s + launch_overhead_s for draft_len in draft_lens]


__all__ = ["drafter_layout", "handoff_s", "parallel_draft_time_s", "parallel_draft_times_s"]
