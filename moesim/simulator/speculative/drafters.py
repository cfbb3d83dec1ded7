"""Drafters: what proposes the K draft tokens, the model it runs, and what it costs under a layout.

`--draft` values:
- `model:NAME`  a catalogue model run K times at batch B (its decode step simulated like the target's);
- `eagle`       an EAGLE-style head: one dense decoder layer at the target's hidden size, a 2h → h fusion
                projection and the target's LM head, K passes;
- `mtp`         the model's own multi-token-prediction layer (a full layer of the target + 2h → h
                projection + the shared LM head), K passes;
- `ngram`       prompt-lookup drafting on the host: NGRAM_BASE_US + NGRAM_PER_SEQUENCE_US × B per step;
- `fraction:F`  F × T_decode(B) per draft token.
A device drafter's round is K passes run back to back (captured in one graph in graph mode: one launch and
one sync). The first runs over the q positions each sequence just verified (K + 1 for a chain, a tree's
draft tokens): it puts the accepted tokens into the drafter's KV cache, conditioned on the target's hidden
states, and proposes the first draft token; the K − 1 others run one token per sequence (per candidate for a
tree). Every engine read does it so: vLLM 0.33.0 `v1/spec_decode/llm_base_proposer.py` `propose` (a first
pass over all the step's target tokens, `set_inputs_first_pass`, then `num_speculative_tokens − 1` one-token
passes); SGLang 0.5.23 `speculative/eagle_worker_v2.py` (`_draft_extend_for_decode` over
`speculative_num_draft_tokens` per request after verification, then `speculative_num_steps − 1` passes in
`draft_forward`). TensorRT-LLM's sources are not available here (unverified; aiconfigurator-core 0.12.0
`sdk/speculative.py` prices its MTP modules at B·(K+1) tokens, like this first pass).

The drafter proposes K tokens, *then* the target verifies them; the two never overlap, whichever GPUs they
run on, because verification needs the drafts and the next draft needs the verified tokens.
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
- n-gram and `fraction:F` drafters have no device pass.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from moesim.errors import MoesimError
from moesim.simulator.execution.collectives import node_link
from moesim.simulator.execution.timer import StepTimer, time_parallel
from moesim.simulator.models.sequence_state import kv_cache_bytes, sequence_state_bytes
from moesim.simulator.models.spec import AttentionSpec, ModelSpec
from moesim.simulator.models.weights import attention_weight_bytes, dense_ffn_weight_bytes, mtp_weight_bytes
from moesim.simulator.plan.blocks import PlanContext, PlanDevice, gemm_kernel
from moesim.simulator.plan.layout import ParallelLayout
from moesim.simulator.plan.memory import drafter_memory_bytes
from moesim.simulator.plan.parallel import build_parallel_plan, rank_model
from moesim.simulator.plan.shapes import Matrix
from moesim.simulator.plan.step import Segment, StepPlan
from moesim.simulator.plan.styles import build_plan
from moesim.simulator.routing.base import RoutingModel

# Prompt-lookup (n-gram) drafting is a host-side suffix match: a few microseconds per sequence.
NGRAM_BASE_US = 10.0
NGRAM_PER_SEQUENCE_US = 1.0
DRAFTER_KINDS = ("eagle", "mtp", "ngram", "model:NAME", "fraction:F")
TOKEN_ID_BYTES = 8  # int64 token ids, as the engines pass them
HIDDEN_BYTES = 2  # bf16 hidden states


# --- Drafters ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Drafter:
    """A parsed `--draft` value."""

    kind: str  # eagle | mtp | ngram | model | fraction
    model_name: str = ""
    fraction: float = 0.0

    @property
    def label(self) -> str:
        if self.kind == "model":
            return f"model:{self.model_name}"
        if self.kind == "fraction":
            return f"fraction:{self.fraction:g}"
        return self.kind


def parse_drafter(text: str) -> Drafter:
    """Parse 'eagle', 'mtp', 'ngram', 'model:NAME' or 'fraction:F'."""
    value = text.strip()
    if value in ("eagle", "mtp", "ngram"):
        return Drafter(value)
    if value.startswith("model:") and len(value) > len("model:"):
        return Drafter("model", model_name=value[len("model:") :])
    if value.startswith("fraction:"):
        try:
            fraction = float(value[len("fraction:") :])
        except ValueError:
            fraction = -1.0
        if not (fraction >= 0.0 and math.isfinite(fraction)):
            raise MoesimError(
                "draft", f"fraction must be a non-negative number, got {value!r}", "e.g. --draft fraction:0.1"
            )
        return Drafter("fraction", fraction=fraction)
    raise MoesimError("draft", f"unknown drafter {text!r}", f"choose one of {', '.join(DRAFTER_KINDS)}")


def eagle_head(target: ModelSpec) -> ModelSpec:
    """An EAGLE-style draft head: one dense layer at the target's hidden size, bf16, the target's vocabulary."""
    a = target.attention
    if a.is_mla or a.num_heads * a.head_dim == 0:
        heads = max(1, target.hidden // 128)
        attention = AttentionSpec(num_heads=heads, num_kv_heads=max(1, heads // 4), head_dim=128)
    else:
        attention = replace(a, sliding_window=None)
    width = target.dense_ffn_width or 3 * target.hidden
    return replace(
        target,
        name=f"{target.name}-eagle-head",
        layer_attention=("full",),
        layer_ffn=("dense",),
        attention=attention,
        dense_ffn_width=width,
        n_experts=0,
        top_k=0,
        expert_width=0,
        n_shared_experts=0,
        shared_expert_width=0,
        mtp_layers=0,
        weight_format="bf16",
        expert_weight_format=None,
    )


def mtp_module(target: ModelSpec) -> ModelSpec:
    """The target's multi-token-prediction layer as a one-layer model sharing its LM head."""
    if target.mtp_layers < 1:
        raise MoesimError(
            "draft", f"{target.name} has no MTP layer", "use --draft eagle, ngram or model:NAME"
        )
    return replace(
        target,
        name=f"{target.name}-mtp",
        layer_attention=("full",),
        layer_ffn=("moe" if target.is_moe else "dense",),
        mtp_layers=0,
    )


def with_fusion_projection(plan: StepPlan, model: ModelSpec, context: PlanContext) -> StepPlan:
    """Prepend the 2h → h projection that fuses the target's hidden state with the token embedding."""
    fc = Matrix(model.hidden, 2 * model.hidden, model.dense_format)
    kernel = gemm_kernel(context, "draft_fc", "dense_weights", "draft.fc", fc, context.m_tokens, "h", "resid")
    return plan.with_segments((Segment((kernel,)), *plan.segments))


def drafter_model(
    drafter: Drafter, target: ModelSpec, load_model: Callable[[str], ModelSpec] | None = None
) -> ModelSpec | None:
    """The model a drafter runs (None for n-gram and fraction drafters)."""
    if drafter.kind == "eagle":
        return eagle_head(target)
    if drafter.kind == "mtp":
        return mtp_module(target)
    if drafter.kind == "model":
        if load_model is None:
            from moesim.simulator.models.catalogue import load_model as catalogue_load

            load_model = catalogue_load
        return load_model(drafter.model_name)
    return None


def drafter_bytes(drafter: Drafter, target: ModelSpec, batch: int, context_len: int) -> float:
    """Device memory a drafter adds beside the target (weights and its own KV cache)."""
    if drafter.kind == "model":
        draft = drafter_model(drafter, target)
        assert draft is not None
        return drafter_memory_bytes(draft, batch, context_len)
    if drafter.kind == "eagle":
        head = drafter_model(drafter, target)
        assert head is not None
        layer = attention_weight_bytes(head, "full") + dense_ffn_weight_bytes(head)
        fusion = head.dense_format.matrix_bytes(head.hidden, 2 * head.hidden)
        return layer + fusion + batch * sequence_state_bytes(head, context_len)
    if drafter.kind == "mtp":
        return target.mtp_layers * mtp_weight_bytes(target) + batch * kv_cache_bytes(
            drafter_model(drafter, target) or target, context_len
        )
    return 0.0


def drafter_pass_plan(
    drafter: Drafter,
    target: ModelSpec,
    device: PlanDevice,
    batch: int,
    context_len: int,
    kernel_style: str,
    routing: RoutingModel | None,
    load_model: Callable[[str], ModelSpec] | None = None,
    *,
    tokens_per_seq: int = 1,
) -> StepPlan:
    """The plan of one drafter pass on one GPU: B sequences, `tokens_per_seq` tokens each."""
    model = drafter_model(drafter, target, load_model)
    assert model is not None
    style = kernel_style if kernel_style in ("fused", "per-token") else "fused"
    plan = build_plan(model, batch, tokens_per_seq, context_len, style, routing, device)
    if drafter.kind in ("eagle", "mtp"):
        context = PlanContext(model, batch, tokens_per_seq, context_len, device)
        plan = with_fusion_projection(plan, model, context)
    return plan


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
    tp, heads = layout.tp, draft.attention.num_heads
    while tp > 1 and (tp > heads or heads % tp):
        tp //= 2  # the widest power-of-two TP the drafter's heads split evenly over
    return ParallelLayout(gpus=tp, tp=tp, ep=1, shared_experts=layout.shared_experts)


def runs_on_device(drafter: Drafter) -> bool:
    """Whether the drafter runs passes on the device (n-gram lookup and fixed fractions do not)."""
    return drafter.kind not in ("ngram", "fraction")


def draft_pass_s(
    drafter: Drafter,
    target: ModelSpec,
    layout: ParallelLayout,
    batch: int,
    context_len: int,
    kernel_style: str,
    routing: RoutingModel | None,
    timer: StepTimer,
    launch: str,
    load_model: Callable[[str], ModelSpec] | None = None,
    *,
    tokens_per_seq: int = 1,
) -> float:
    """Device seconds of one drafter pass for `batch` sequences of `tokens_per_seq` tokens under `layout`
    (no launch, no sync); 0 for a drafter without device passes."""
    if not runs_on_device(drafter):
        return 0.0
    hardware = timer.hardware
    q = tokens_per_seq
    if layout.is_single or layout.draft_on == "separate":
        plan = drafter_pass_plan(
            drafter, target, hardware, batch, context_len, kernel_style, routing, load_model, tokens_per_seq=q
        )
        return timer.step(plan, launch, include_launch_and_sync=False).step_s
    draft = drafter_model(drafter, target, load_model)
    assert draft is not None
    draft_layout = drafter_layout(draft, layout)
    if draft_layout.is_single:  # nothing to split: every rank drafts its group's sequences whole
        group = layout.sequences_per_group(batch)
        plan = drafter_pass_plan(
            drafter, target, hardware, group, context_len, kernel_style, routing, load_model, tokens_per_seq=q
        )
        return timer.step(plan, launch, include_launch_and_sync=False).step_s
    draft_batch = batch if draft_layout is layout else layout.sequences_per_group(batch)
    step = build_parallel_plan(
        draft, draft_batch, q, draft_layout, hardware, context_len, kernel_style, routing
    )
    if drafter.kind in ("eagle", "mtp"):
        rank = rank_model(draft, draft_layout)
        context = PlanContext(rank, draft_layout.sequences_per_group(draft_batch), q, context_len, hardware)
        step = replace(step, plan=with_fusion_projection(step.plan, rank, context))
    return time_parallel(timer, step, launch, include_launch_and_sync=False).step_s


def handoff_s(
    drafter: Drafter,
    target: ModelSpec,
    timer: StepTimer,
    layout: ParallelLayout,
    batch: int,
    draft_len: int,
) -> float:
    """Per SD step, the two messages between the target's GPUs and a drafter on its own GPU (0 when shared)."""
    if layout.draft_on != "separate" or not runs_on_device(drafter):
        return 0.0
    link = node_link(timer.hardware.node, layout.gpus + 1)
    positions = batch * (draft_len + 1)
    to_drafter = positions * (
        target.hidden * HIDDEN_BYTES if drafter.kind in ("eagle", "mtp") else TOKEN_ID_BYTES
    )
    back = batch * draft_len * TOKEN_ID_BYTES
    return 2 * link.latency_s + (to_drafter + back) / link.bytes_per_s


def draft_time_s(
    drafter: Drafter,
    batch: int,
    draft_len: int,
    t_decode_s: float,
    first_pass_s: float,
    pass_s: float,
    launch_overhead_s: float,
    handoff: float = 0.0,
) -> float:
    """Seconds the drafter takes to propose `draft_len` tokens for each of `batch` sequences: the first pass
    over the verified positions (`first_pass_s`) and K − 1 passes of `pass_s`, sharing one launch + sync
    (`launch_overhead_s`), plus the handoff to a drafter of its own (module docstring)."""
    if draft_len < 1:
        raise MoesimError("draft_len", f"must be ≥ 1, got {draft_len}")
    if drafter.kind == "fraction":
        own = draft_len * drafter.fraction * t_decode_s
    elif drafter.kind == "ngram":
        own = (NGRAM_BASE_US + NGRAM_PER_SEQUENCE_US * batch) * 1e-6
    else:
        own = first_pass_s + (draft_len - 1) * pass_s + launch_overhead_s
    return own + handoff
