"""Drafters: what proposes the K draft tokens, the model it runs, and what it costs under a layout.

`--draft` values:
- `model:NAME`  a catalogue model run K times at batch B (its decode step simulated like the target's);
- `eagle`       an EAGLE-style head: one dense decoder layer at the target's hidden size, a 2h → h fusion
                projection and the target's LM head, K passes;
- `mtp`         the model's own multi-token-prediction layer (a full layer of the target + 2h → h
                projection + the shared LM head), K passes;
- `ngram`       prompt-lookup drafting on the host, costed by the serving-engine profile alone
                (`[host] ngram_base_us + ngram_per_sequence_us × B` per round, `engines.overheads.ngram_draft_s`);
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
  rank, which is conservative.) A serving engine may instead run it unsplit on one of the target's GPUs
  (`[drafter] draft_tp` / `head_tp = "one"`: vLLM 0.6.3 runs EAGLE so; `drafter_tp` says which).
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
from dataclasses import dataclass, fields, replace
from typing import ClassVar

from moesim.errors import MoesimError
from moesim.simulator.execution.collectives import messages_s
from moesim.simulator.execution.timer import StepTimer, time_parallel
from moesim.simulator.memo import by_identity
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

DRAFTER_KINDS = ("eagle", "mtp", "ngram", "model:NAME", "fraction:F")
MAX_DECODE_FRACTION = 1.0
"""The largest `fraction:F`: at F = 1 each draft token costs a target decode step, so K drafts and a verify
cost at least K + 1 steps for at most K + 1 tokens — no speedup is possible past it."""
TOKEN_ID_BYTES = 8  # int64 token ids, as the engines pass them
HIDDEN_BYTES = 2  # bf16 hidden states


# --- Drafters ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Drafter:
    """A drafter kind (a parsed `--draft` value): the model it runs, the memory it adds beside the target and
    how its K proposals are timed. One subclass per kind; the class attributes say what the kind does."""

    kind: ClassVar[str]
    runs_on_device: ClassVar[bool] = (
        True  # runs passes on the device (n-gram lookup and fixed fractions do not)
    )
    reads_hidden_states: ClassVar[bool] = False  # conditions on the target's hidden states (EAGLE, MTP)
    drafts_on_host: ClassVar[bool] = False  # proposes on the host, costed by the serving engine (n-gram)
    needs_decode_step: ClassVar[bool] = False  # priced in target decode steps (fraction:F)

    @property
    def label(self) -> str:
        return self.kind

    def model(
        self, target: ModelSpec, load_model: Callable[[str], ModelSpec] | None = None
    ) -> ModelSpec | None:
        """The model the drafter runs (None when it runs none)."""
        return None

    def pass_target(self, target: ModelSpec, draft_vocab_size: int) -> ModelSpec:
        """The target as the drafter's passes see it (an EAGLE head may draft over a reduced vocabulary)."""
        return target

    def memory_bytes(self, target: ModelSpec, batch: int, context_len: int) -> float:
        """Device memory the drafter adds beside the target (weights and its own KV cache)."""
        return 0.0

    def own_time_s(
        self,
        batch: int,
        draft_len: int,
        t_decode_s: float,
        first_pass_s: float,
        pass_s: float,
        launch_overhead_s: float,
    ) -> float:
        """Seconds of K proposals for `batch` sequences: the first pass over the verified positions and K − 1
        one-token passes, sharing one launch + sync."""
        return first_pass_s + (draft_len - 1) * pass_s + launch_overhead_s


@dataclass(frozen=True)
class EagleHead(Drafter):
    """`eagle`: an EAGLE-style head (one dense layer at the target's hidden size, 2h → h fusion, LM head)."""

    kind: ClassVar[str] = "eagle"
    reads_hidden_states: ClassVar[bool] = True

    def model(self, target: ModelSpec, load_model: Callable[[str], ModelSpec] | None = None) -> ModelSpec:
        return eagle_head(target)

    def pass_target(self, target: ModelSpec, draft_vocab_size: int) -> ModelSpec:
        return replace(target, vocab=draft_vocab_size) if draft_vocab_size else target

    def memory_bytes(self, target: ModelSpec, batch: int, context_len: int) -> float:
        head = self.model(target)
        layer = attention_weight_bytes(head, "full") + dense_ffn_weight_bytes(head)
        fusion = head.dense_format.matrix_bytes(head.hidden, 2 * head.hidden)
        return layer + fusion + batch * sequence_state_bytes(head, context_len)


@dataclass(frozen=True)
class MtpModule(Drafter):
    """`mtp`: the target's own multi-token-prediction layer, with the 2h → h projection and the shared LM head."""

    kind: ClassVar[str] = "mtp"
    reads_hidden_states: ClassVar[bool] = True

    def model(self, target: ModelSpec, load_model: Callable[[str], ModelSpec] | None = None) -> ModelSpec:
        return mtp_module(target)

    def memory_bytes(self, target: ModelSpec, batch: int, context_len: int) -> float:
        return target.mtp_layers * mtp_weight_bytes(target) + batch * kv_cache_bytes(
            self.model(target), context_len
        )


@dataclass(frozen=True)
class DraftModel(Drafter):
    """`model:NAME`: a catalogue model run K times at batch B, its steps simulated like the target's."""

    kind: ClassVar[str] = "model"
    model_name: str = ""

    @property
    def label(self) -> str:
        return f"model:{self.model_name}"

    def model(self, target: ModelSpec, load_model: Callable[[str], ModelSpec] | None = None) -> ModelSpec:
        if load_model is None:
            from moesim.simulator.models.catalogue import load_model as catalogue_load

            load_model = catalogue_load
        return load_model(self.model_name)

    def memory_bytes(self, target: ModelSpec, batch: int, context_len: int) -> float:
        return drafter_memory_bytes(self.model(target), batch, context_len)


@dataclass(frozen=True)
class NgramLookup(Drafter):
    """`ngram`: prompt-lookup drafting on the host. It runs no device pass: its time is the serving engine's
    host cost, `engines.overheads.ngram_draft_s` (the profile's `ngram_base_us` + `ngram_per_sequence_us` × B
    per round), the one place it is priced."""

    kind: ClassVar[str] = "ngram"
    runs_on_device: ClassVar[bool] = False
    drafts_on_host: ClassVar[bool] = True


@dataclass(frozen=True)
class FractionOfDecode(Drafter):
    """`fraction:F`: F × T_decode(B) per draft token, no device pass of its own."""

    kind: ClassVar[str] = "fraction"
    runs_on_device: ClassVar[bool] = False
    needs_decode_step: ClassVar[bool] = True
    fraction: float = 0.0

    @property
    def label(self) -> str:
        return f"fraction:{self.fraction:g}"

    def own_time_s(
        self,
        batch: int,
        draft_len: int,
        t_decode_s: float,
        first_pass_s: float,
        pass_s: float,
        launch_overhead_s: float,
    ) -> float:
        return draft_len * self.fraction * t_decode_s


def parse_drafter(text: str) -> Drafter:
    """Parse 'eagle', 'mtp', 'ngram', 'model:NAME' or 'fraction:F'."""
    value = text.strip()
    by_name: dict[str, Drafter] = {"eagle": EagleHead(), "mtp": MtpModule(), "ngram": NgramLookup()}
    if value in by_name:
        return by_name[value]
    if value.startswith("model:") and len(value) > len("model:"):
        return DraftModel(model_name=value[len("model:") :])
    if value.startswith("fraction:"):
        try:
            fraction = float(value[len("fraction:") :])
        except ValueError:
            fraction = -1.0
        if not (fraction >= 0.0 and math.isfinite(fraction)):
            raise MoesimError(
                "draft", f"fraction must be a non-negative number, got {value!r}", "e.g. --draft fraction:0.1"
            )
        if fraction > MAX_DECODE_FRACTION:
            raise MoesimError(
                "draft",
                f"fraction must be ≤ {MAX_DECODE_FRACTION:g}, got {value!r}: a draft token costing a whole "
                "decode step or more can never speed decoding up (K drafts then cost more than K + 1 tokens)",
                "e.g. --draft fraction:0.1",
            )
        return FractionOfDecode(fraction=fraction)
    raise MoesimError("draft", f"unknown drafter {text!r}", f"choose one of {', '.join(DRAFTER_KINDS)}")


# A serving run asks for its drafter's model on every step shape, and a ModelSpec checks itself on each
# `replace`: both drafter models are remembered per target.
@by_identity(64)
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


@by_identity(64)
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


def drafter_routing(draft: ModelSpec, routing: RoutingModel | None) -> RoutingModel | None:
    """The routing of a drafter's MoE layers: the target's when it describes the same expert count and top-k
    (a model without per-count statistics, e.g. independent routing, describes any), else the documented
    typical preset for the drafter's own experts (an MoE drafter has no traces of its own here)."""
    if routing is None or not draft.is_moe:
        return routing
    counts = (getattr(routing, "n_experts", draft.n_experts), getattr(routing, "top_k", draft.top_k))
    if counts == (draft.n_experts, draft.top_k):
        return routing
    from moesim.simulator.routing.presets import typical_routing

    return typical_routing(draft.n_experts, draft.top_k, draft.n_groups, draft.topk_groups)


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
    model = drafter.model(target, load_model)
    assert model is not None
    style = kernel_style if kernel_style in ("fused", "per-token") else "fused"
    plan = build_plan(
        model, batch, tokens_per_seq, context_len, style, drafter_routing(model, routing), device
    )
    if drafter.reads_hidden_states:
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


def drafter_tp(
    drafter: Drafter,
    target: ModelSpec,
    layout: ParallelLayout,
    load_model: Callable[[str], ModelSpec] | None = None,
) -> int:
    """The tensor parallelism a drafter sharing the target's GPUs runs its passes at (`drafter_layout`):
    1 on one GPU, on its own GPU, or without device passes."""
    if not drafter.runs_on_device or layout.is_single or layout.draft_on == "separate":
        return 1
    draft = drafter.model(target, load_model)
    assert draft is not None
    return drafter_layout(draft, layout).tp


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
    memo: DraftPassMemo | None = None,
) -> float:
    """Device seconds of one drafter pass for `batch` sequences of `tokens_per_seq` tokens under `layout`
    (no launch, no sync); 0 for a drafter without device passes. With `memo`, computed once per distinct
    drafter model, shape and layout."""
    if not drafter.runs_on_device:
        return 0.0
    if memo is not None:
        draft_model = drafter.model(target, load_model)
        assert draft_model is not None
        shape = (layout, batch, context_len, kernel_style, launch, tokens_per_seq)
        key = (*memo.key(drafter, draft_model, routing, timer), *shape)
        if key not in memo.seconds:
            memo.seconds[key] = draft_pass_s(
                drafter, target, layout, batch, context_len, kernel_style, routing, timer, launch,
                load_model, tokens_per_seq=tokens_per_seq,
            )  # fmt: skip
        return memo.seconds[key]
    hardware = timer.hardware
    q = tokens_per_seq
    if layout.is_single or layout.draft_on == "separate":
        plan = drafter_pass_plan(
            drafter, target, hardware, batch, context_len, kernel_style, routing, load_model, tokens_per_seq=q
        )
        return timer.step(plan, launch, include_launch_and_sync=False).step_s
    draft = drafter.model(target, load_model)
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
        draft,
        draft_batch,
        q,
        draft_layout,
        hardware,
        context_len,
        kernel_style,
        drafter_routing(draft, routing),
    )
    if drafter.reads_hidden_states:
        rank = rank_model(draft, draft_layout)
        context = PlanContext(rank, draft_layout.sequences_per_group(draft_batch), q, context_len, hardware)
        step = replace(step, plan=with_fusion_projection(step.plan, rank, context))
    return time_parallel(timer, step, launch, include_launch_and_sync=False).step_s


_SPEC_FIELDS = tuple(f.name for f in fields(ModelSpec) if f.name != "name")


def spec_content(model: ModelSpec) -> tuple[object, ...]:
    """A model's fields but its name: what its plans are built from (two designs' EAGLE heads differ in name
    only when the designs differ in fields the head does not copy)."""
    return tuple(getattr(model, name) for name in _SPEC_FIELDS)


class DraftPassMemo:
    """`draft_pass_s` remembered across the models of one sweep (or a screen's chunk of designs): a pass
    depends on the target only through the drafter's own model, so designs whose drafter models are equal
    but for their names (an EAGLE head copies the target's hidden size, vocabulary and attention, not its
    experts or layer count) share their passes. The routing counts only for a drafter with routed experts;
    each routing and timer asked about is kept, so its id is not reused while remembered."""

    def __init__(self) -> None:
        self.seconds: dict[tuple[object, ...], float] = {}
        self._kept: dict[int, object] = {}

    def _id(self, obj: object) -> int:
        return id(self._kept.setdefault(id(obj), obj))

    def key(
        self, drafter: Drafter, draft: ModelSpec, routing: RoutingModel | None, timer: StepTimer
    ) -> tuple[object, ...]:
        """What a pass of `drafter` running `draft` depends on besides its shape and layout."""
        routing_id = self._id(routing) if draft.is_moe and routing is not None else None
        return drafter, spec_content(draft), routing_id, self._id(timer)


def handoff_s(
    drafter: Drafter,
    target: ModelSpec,
    timer: StepTimer,
    layout: ParallelLayout,
    batch: int,
    draft_len: int,
) -> float:
    """Per SD step, the two messages between the target's GPUs and a drafter on its own GPU (0 when shared)."""
    if layout.draft_on != "separate" or not drafter.runs_on_device:
        return 0.0
    positions = batch * (draft_len + 1)
    to_drafter = positions * (target.hidden * HIDDEN_BYTES if drafter.reads_hidden_states else TOKEN_ID_BYTES)
    back = batch * draft_len * TOKEN_ID_BYTES
    return messages_s(to_drafter + back, timer.hardware.node, layout.gpus + 1, messages=2)


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
    if drafter.drafts_on_host:
        raise TypeError(f"{drafter.label} drafts on the host: its time is engines.overheads.ngram_draft_s")
    own = drafter.own_time_s(batch, draft_len, t_decode_s, first_pass_s, pass_s, launch_overhead_s)
    return own + handoff
