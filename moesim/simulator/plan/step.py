"""The kernel plan of one forward step: what each launch computes and which tensors it reads, per kernel style.

A decode step runs M = B tokens (one per sequence), a verification step M = B·(K+1). Per layer, in order:
norm, attention projections, rotary, KV-cache store, attention over each sequence's cache, output
projection, norm, then the dense FFN or the MoE block (router, top-k, expert alignment, grouped expert GEMMs
over the *distinct* experts hit, activation, combine, shared experts); then the final norm, the LM head and
sampling (plus acceptance in a verification step).

The kernels come from one builder per part: `plan.attention` (one per attention kind), `plan.ffn` (dense
FFN, MoE block), `plan.head` (embedding; LM head, sampling, acceptance), on the shared building blocks of
`plan.blocks` and the weight shapes of `plan.shapes`. This module holds the plan itself and how a kernel
style composes a layer from them.

Identical layers share one template (built once per attention kind, FFN kind and distinct-expert count),
which keeps plan building fast enough for sweeps; `StepPlan.kernels` expands them for the event timer.
Kernel styles live in a registry (`KERNEL_STYLES`); others register theirs with `register_kernel_style`.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from moesim.errors import MoesimError
from moesim.simulator.memo import by_identity
from moesim.simulator.models.spec import AttentionLayerKind, FfnLayerKind, ModelSpec
from moesim.simulator.plan.attention import attention_kernels
from moesim.simulator.plan.blocks import LAYER_PREFIX, PlanContext
from moesim.simulator.plan.ffn import (
    combine_kernel,
    dense_ffn_kernels,
    fused_expert_kernels,
    per_token_expert_kernels,
    router_kernels,
    shared_expert_kernels,
)
from moesim.simulator.plan.head import epilogue_kernels, prologue_kernels
from moesim.simulator.plan.kernels import Kernel
from moesim.simulator.routing.base import RoutingModel

# --- Plan data --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Segment:
    """A run of kernels: a layer template (`layer` ≥ 0, names with "L*.") or the prologue/epilogue (-1)."""

    kernels: tuple[Kernel, ...]
    layer: int = -1


def new_segment(kernels: tuple[Kernel, ...], layer: int) -> Segment:
    """`Segment(kernels, layer)`, built faster (a plan makes one per layer; see `kernels.new_kernel`)."""
    segment = object.__new__(Segment)
    segment.__dict__.update(kernels=kernels, layer=layer)
    return segment


LayerBuilder = Callable[[PlanContext, AttentionLayerKind, FfnLayerKind, float], list[Kernel]]
SegmentBuilder = Callable[[PlanContext], list[Kernel]]


@dataclass(frozen=True)
class PlanBuilder:
    """A kernel style: how it turns one layer (and the step's head and tail) into kernels.

    `layer(ctx, attention_kind, ffn_kind, distinct_experts)` returns one layer's template kernels; it is
    called once per distinct (attention kind, FFN kind, distinct experts) and reused for identical layers.
    """

    name: str
    description: str
    layer: LayerBuilder
    prologue: SegmentBuilder = field(default_factory=lambda: prologue_kernels)
    epilogue: SegmentBuilder = field(default_factory=lambda: epilogue_kernels)
    max_launches: int | None = None  # refuse plans with more launches than this (None: no limit)


@dataclass(frozen=True)
class StepPlan:
    """The kernels of one forward step, with what they were built from."""

    model_name: str
    kernel_style: str
    batch: int
    tokens_per_seq: int
    context_len: int
    segments: tuple[Segment, ...]
    distinct_experts_by_layer: tuple[float, ...]  # mean distinct experts of each MoE layer, in layer order
    routing_description: str
    n_experts: int = 0
    top_k: int = 0

    @property
    def m_tokens(self) -> int:
        return self.batch * self.tokens_per_seq

    @property
    def mean_distinct_experts(self) -> float:
        """Mean over MoE layers of the expected distinct experts per layer (0 for a dense model)."""
        values = self.distinct_experts_by_layer
        return sum(values) / len(values) if values else 0.0

    @property
    def cache_reads_per_sequence(self) -> float:
        """How many times the step reads each sequence's KV cache per attention layer (its query tiles,
        `plan.attention.query_tiles`), averaged over the attention layers that read one (0 without any)."""
        reads = [
            r.reads
            for segment in self.segments
            for k in segment.kernels
            if k.name.endswith("attention")
            for r in k.reads
            if r.tensor.endswith(".kv")
        ]
        return sum(reads) / len(reads) if reads else 0.0

    @property
    def n_kernels(self) -> int:
        return sum(len(s.kernels) for s in self.segments)

    @functools.cached_property
    def kernels(self) -> tuple[Kernel, ...]:
        """Every launch in issue order, per-layer tensor names made concrete."""
        out: list[Kernel] = []
        for segment in self.segments:
            if segment.layer < 0:
                out.extend(segment.kernels)
            else:
                out.extend(_expand(segment.kernels, segment.layer))
        return tuple(out)

    def with_segments(self, segments: tuple[Segment, ...]) -> StepPlan:
        """The same plan with other segments (e.g. communication kernels inserted by a parallel layout)."""
        return replace(self, segments=segments)


def layer_tensor(name: str, layer: int) -> str:
    """The concrete name of a template tensor in `layer` (global names are unchanged)."""
    return f"L{layer}.{name[len(LAYER_PREFIX) :]}" if name.startswith(LAYER_PREFIX) else name


@functools.lru_cache(maxsize=4096)
def _expand_one(kernel: Kernel, layer: int) -> Kernel:
    reads = tuple(replace(r, tensor=layer_tensor(r.tensor, layer)) for r in kernel.reads)
    return replace(
        kernel,
        name=f"L{layer}.{kernel.name}",
        reads=reads,
        layer=layer,
        write_tensor=layer_tensor(kernel.write_tensor, layer),
    )


def _expand(kernels: tuple[Kernel, ...], layer: int) -> list[Kernel]:
    return [_expand_one(k, layer) for k in kernels]


# --- Kernel styles ---------------------------------------------------------------------------------------------


class WorkFreeKernels:
    """The kernels of one step's layers that do not depend on the layer's distinct experts (attention,
    dense FFN, shared experts, combine), each built once per step: a model's layer templates differ in
    their MoE block's work (early and main routing parameters), and each template would build these again."""

    def __init__(self, ctx: PlanContext) -> None:
        self.ctx = ctx
        self._attention: dict[AttentionLayerKind, tuple[Kernel, ...]] = {}
        self._shared: dict[int, tuple[Kernel, ...]] = {}
        self._combine: dict[bool, Kernel] = {}

    def attention(self, kind: AttentionLayerKind) -> tuple[Kernel, ...]:
        if kind not in self._attention:
            self._attention[kind] = tuple(attention_kernels(self.ctx, kind))
        return self._attention[kind]

    @functools.cached_property
    def dense_ffn(self) -> tuple[Kernel, ...]:
        return tuple(dense_ffn_kernels(self.ctx))

    def shared(self, stream: int) -> tuple[Kernel, ...]:
        if stream not in self._shared:
            self._shared[stream] = tuple(shared_expert_kernels(self.ctx, stream=stream))
        return self._shared[stream]

    def combine(self, join: bool) -> Kernel:
        if join not in self._combine:
            self._combine[join] = combine_kernel(self.ctx, join=join)
        return self._combine[join]


@by_identity(64)  # a plan build makes one context and passes it to each of its layer templates
def work_free_kernels(ctx: PlanContext) -> WorkFreeKernels:
    """The step's `WorkFreeKernels`, shared by every layer template built from the same context object."""
    return WorkFreeKernels(ctx)


def fused_layer(
    ctx: PlanContext, attention: AttentionLayerKind, ffn: FfnLayerKind, distinct: float
) -> list[Kernel]:
    """SGLang/vLLM-style layer: fused MoE kernels, shared experts overlapped on a second stream."""
    parts = work_free_kernels(ctx)
    kernels = list(parts.attention(attention))
    if ffn == "dense":
        return kernels + list(parts.dense_ffn)
    shared = parts.shared(1)
    kernels += router_kernels(ctx, distinct)
    kernels += shared
    kernels += fused_expert_kernels(ctx, distinct)
    kernels.append(parts.combine(bool(shared)))
    return kernels


def per_token_layer(
    ctx: PlanContext, attention: AttentionLayerKind, ffn: FfnLayerKind, distinct: float
) -> list[Kernel]:
    """A naive per-token expert loop on one stream (everything else as in the fused style)."""
    kernels = attention_kernels(ctx, attention)
    if ffn == "dense":
        return kernels + dense_ffn_kernels(ctx)
    kernels += router_kernels(ctx, distinct)[:3]  # norm, router, top-k: a loop needs no alignment
    kernels += shared_expert_kernels(ctx, stream=0)
    kernels += per_token_expert_kernels(ctx, distinct)
    kernels.append(combine_kernel(ctx, join=False))
    return kernels


def check_step_inputs(model: ModelSpec, batch: int, tokens_per_seq: int, context_len: int) -> None:
    """Refuse impossible sizes with a message naming the field."""
    if not isinstance(batch, int) or batch < 1:
        raise MoesimError("batch", f"must be a positive integer, got {batch!r}")
    if not isinstance(tokens_per_seq, int) or tokens_per_seq < 1:
        raise MoesimError("tokens_per_seq", f"must be a positive integer, got {tokens_per_seq!r}")
    if not isinstance(context_len, int) or context_len < 0:
        raise MoesimError("context_len", f"must be a non-negative integer, got {context_len!r}")
    if model.is_moe:
        if model.n_experts < 1:
            raise MoesimError("experts", f"{model.name} has MoE layers but {model.n_experts} experts")
        if not 1 <= model.top_k <= model.n_experts:
            raise MoesimError(
                "top_k", f"must be between 1 and the expert count {model.n_experts}, got {model.top_k}"
            )
        if model.expert_width < 1:
            raise MoesimError("expert_width", f"must be positive, got {model.expert_width}")
    if any(kind == "dense" for kind in model.layer_ffn) and model.dense_ffn_width < 1:
        raise MoesimError(
            "dense_ffn_width", f"{model.name} has dense layers but dense_ffn_width {model.dense_ffn_width}"
        )
    if model.hidden < 1 or model.vocab < 1 or model.n_layers < 1:
        raise MoesimError("model", f"{model.name}: hidden, vocab and layer count must be positive")


def layer_kinds(model: ModelSpec) -> tuple[tuple[AttentionLayerKind, FfnLayerKind, int], ...]:
    """Each layer's (attention kind, FFN kind, index among the MoE layers or −1), remembered per layer
    pattern: every plan of a model walks it."""
    return _layer_kinds(model.layer_attention, model.layer_ffn)


@functools.lru_cache(maxsize=1024)
def _layer_kinds(
    attention: tuple[AttentionLayerKind, ...], ffn: tuple[FfnLayerKind, ...]
) -> tuple[tuple[AttentionLayerKind, FfnLayerKind, int], ...]:
    moe_index = itertools.accumulate((kind == "moe" for kind in ffn), initial=-1)
    return tuple(
        (a, f, index if f == "moe" else -1)
        for a, f, index in zip(attention, ffn, itertools.islice(moe_index, 1, None), strict=True)
    )


def distinct_experts_by_layer(
    model: ModelSpec, batch: int, tokens_per_seq: int, routing: RoutingModel
) -> tuple[float, ...]:
    """Expected distinct experts of each MoE layer (bounded by N and by the token-expert pairs).

    Layers whose routing parameters are equal (`layer_params`, where the routing model has them) share
    one value, computed once.
    """
    first_layers, group_of_layer = moe_layer_groups(routing, model.layer_ffn)
    cap = min(model.n_experts, batch * tokens_per_seq * model.top_k)
    values = [
        float(
            min(
                max(
                    routing.expected_distinct(model.n_experts, model.top_k, batch, tokens_per_seq, layer),
                    model.top_k,
                ),
                cap,
            )
        )
        for layer in first_layers
    ]
    return tuple([values[group] for group in group_of_layer])


_LAYER_GROUPS: dict[tuple[int, tuple[str, ...]], tuple[object, tuple[int, ...], tuple[int, ...]]] = {}
_MAX_LAYER_GROUPS = 4096


def moe_layer_groups(
    routing: RoutingModel, layer_ffn: tuple[str, ...]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The MoE layers grouped by equal routing parameters (`layer_params`, where the routing model has
    them; else every layer its own group): the first layer of each group, and each MoE layer's group (in
    layer order). Remembered per routing model and layer pattern: a sweep asks it for every step."""
    key = (id(routing), layer_ffn)
    cached = _LAYER_GROUPS.get(key)
    if cached is not None and cached[0] is routing:
        return cached[1], cached[2]
    layer_key = getattr(routing, "layer_params", lambda layer: layer)
    first: dict[object, int] = {}
    groups = []
    for layer, kind in enumerate(layer_ffn):
        if kind == "moe":
            params = layer_key(layer)
            if params not in first:
                first[params] = len(first)
                groups.append(layer)
    group_of_layer = tuple(first[layer_key(layer)] for layer, kind in enumerate(layer_ffn) if kind == "moe")
    if len(_LAYER_GROUPS) >= _MAX_LAYER_GROUPS:
        _LAYER_GROUPS.pop(next(iter(_LAYER_GROUPS)))
    _LAYER_GROUPS[key] = (routing, tuple(groups), group_of_layer)  # holds the routing: its id stays its own
    return tuple(groups), group_of_layer
