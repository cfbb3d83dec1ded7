"""The kernel plan of one forward step: what each launch computes and which tensors it reads, per kernel style.

A decode step runs M = B tokens (one per sequence), a verification step M = B·(K+1). Per layer, in order:
norm, attention projections, rotary, KV-cache store, attention over each sequence's cache, output
projection, norm, then the dense FFN or the MoE block (router, top-k, expert alignment, grouped expert GEMMs
over the *distinct* experts hit, activation, combine, shared experts); then the final norm, the LM head and
sampling (plus acceptance in a verification step).

Tensor names: per-layer tensors (weights, KV cache, recurrent state) start with "L*." in a layer template and
become "L<i>." when the plan is expanded; activations have global names, as serving engines reuse the same
workspace buffers in every layer, so a layer's input can still be in L2 from the previous kernel.

Identical layers share one template (built once per attention kind, FFN kind and distinct-expert count),
which keeps plan building fast enough for sweeps; `StepPlan.kernels` expands them for the event timer.
Kernel styles live in a registry (`KERNEL_STYLES`); others register theirs with `register_kernel_style`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Protocol

from moesim.errors import MoesimError
from moesim.simulator.models import spec as ms
from moesim.simulator.models.spec import (
    AttentionLayerKind,
    FfnLayerKind,
    ModelSpec,
    WeightFormat,
    weight_format,
)
from moesim.simulator.plan.kernels import Category, Kernel, TensorRead
from moesim.simulator.routing.base import RoutingModel

ACT_BYTES = 2  # activations in bf16
KV_BYTES = 2  # KV cache in bf16 (engines' default; an fp8 KV cache would halve it)
LOGIT_BYTES = 4  # logits in fp32 for sampling
INDEX_BYTES = 4
# A per-token plan launches several kernels per (token, expert) pair; beyond this the event timer would take
# minutes, and no serving engine runs that way at such sizes anyway.
MAX_PER_TOKEN_LAUNCHES = 400_000
LAYER_PREFIX = "L*."
BF16 = weight_format("bf16")


# --- Shapes ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Matrix:
    """A weight matrix as one GEMM reads it: rows (outputs) × cols (inputs), and its exact bytes."""

    rows: int
    cols: int
    fmt: WeightFormat
    exact_bytes: float | None = None  # bytes as stored (scales included); None: computed from the shape

    @property
    def bytes(self) -> float:
        if self.exact_bytes is not None:
            return self.exact_bytes
        return self.fmt.matrix_bytes(self.rows, self.cols) if self.rows and self.cols else 0

    @property
    def params(self) -> int:
        return self.rows * self.cols


def _combined(fmt: WeightFormat, mats: list[tuple[str, int, int]], names: tuple[str, ...]) -> Matrix:
    """Matrices with the same input launched as one GEMM (e.g. q, k, v): rows add up, bytes stay exact."""
    chosen = [(rows, cols) for name, rows, cols in mats if name in names]
    if not chosen:
        return Matrix(0, 0, fmt)
    exact = sum(fmt.matrix_bytes(rows, cols) for rows, cols in chosen)
    return Matrix(sum(r for r, _ in chosen), chosen[0][1], fmt, exact)


def attention_matrices(model: ModelSpec, kind: AttentionLayerKind) -> dict[str, Matrix]:
    """The weight matrices of one attention layer of `kind`, grouped as the fused kernels read them.

    Low-rank query (q_b), grouped low-rank output (o_b) and a sparse-attention indexer ("index": its key
    and weight projections from the hidden state; "index_q" from the query latent) get their own GEMMs.
    """
    fmt = model.dense_format
    mats = ms.attention_projections(model, kind)
    if kind == "linear":
        return {
            "in_proj": _combined(fmt, mats, ("in_proj_qkvz", "in_proj_ba")),
            "conv": _combined(BF16, mats, ("conv1d",)),
            "out_proj": _combined(fmt, mats, ("out_proj",)),
        }
    a = ms.attention_for(model, kind)
    extra = {
        group: _combined(fmt, mats, names)
        for group, names in (
            ("q_b", ("q_b",)),
            ("o_b", ("o_b",)),
            ("index", ("index_k", "index_weights")),
            ("index_q", ("index_q",)),
        )
        if any(name in names for name, _, _ in mats)
    }
    if a.is_mla:
        out = {"q_a_kv_a": _combined(fmt, mats, ("q_a", "q", "kv_a"))}
        kv_b = _combined(fmt, mats, ("kv_b",))
        nope, v_dim = a.qk_nope_head_dim or 0, a.v_head_dim or 0
        k_share = nope / max(1, nope + v_dim)
        out["kv_b_k"] = Matrix(a.num_heads * nope, kv_b.cols, fmt, kv_b.bytes * k_share)
        out["kv_b_v"] = Matrix(a.num_heads * v_dim, kv_b.cols, fmt, kv_b.bytes * (1 - k_share))
        out["o"] = _combined(fmt, mats, ("o", "o_a"))
        return out | extra
    qkv = _combined(fmt, mats, ("q", "q_a", "k", "v", "kv"))
    return {"qkv": qkv, "o": _combined(fmt, mats, ("o", "o_a"))} | extra


def kv_bytes_per_token(model: ModelSpec, kind: AttentionLayerKind) -> float:
    """KV-cache bytes one token adds to one layer of `kind` (0 for linear attention: it keeps a fixed state)."""
    return ms.kv_cache_bytes_per_token(model, kind, KV_BYTES)


def shared_width(model: ModelSpec) -> int:
    """Total width of the shared experts (they run as one gated MLP)."""
    if model.n_shared_experts <= 0:
        return 0
    return model.n_shared_experts * (model.shared_expert_width or model.expert_width)


def ffn_matrices(model: ModelSpec) -> dict[str, Matrix]:
    """Dense-FFN, routed-expert (one expert) and shared-expert (all of them) matrices, plus the router."""
    dense, experts = model.dense_format, model.expert_format
    h = model.hidden
    ws = shared_width(model)
    n_shared = max(1, model.n_shared_experts)
    shared = ms.shared_expert_matrices(model)
    expert = ms.expert_matrices(model)
    dense_ffn = ms.dense_ffn_matrices(model)
    w13 = _combined(experts, expert, ("gate", "up"))
    w2 = _combined(experts, expert, ("down",))
    if model.expert_bias:  # biases ride along with their matrices, 16-bit
        vector_bytes = ms.high_precision_format(model).value_bits / 8
        w13 = replace(w13, exact_bytes=w13.bytes + math.ceil(2 * model.expert_width * vector_bytes))
        w2 = replace(w2, exact_bytes=w2.bytes + math.ceil(h * vector_bytes))
    return {
        "dense_w13": _combined(dense, dense_ffn, ("gate", "up")),
        "dense_w2": _combined(dense, dense_ffn, ("down",)),
        "expert_w13": w13,
        "expert_w2": w2,
        "shared_w13": Matrix(
            2 * ws, h, dense, n_shared * _combined(dense, shared, ("gate", "up")).bytes if ws else 0
        ),
        "shared_w2": Matrix(h, ws, dense, n_shared * _combined(dense, shared, ("down",)).bytes if ws else 0),
        "router": Matrix(model.n_experts, h, BF16, ms.router_weight_bytes(model)),
    }


# --- The device, as a plan sees it -------------------------------------------------------------------------------


class PlanDevice(Protocol):
    """What a plan needs to know of the device, as plain numbers. A `HardwareProfile` provides them (its
    documented execution facts); plan never imports the hardware room.

    A GEMM re-reads its weights once per M-tile of `gemm_tile_m_*` rows, the repeats' working set one
    panel of `gemm_panel_rows` weight rows; attention above `ridge_flops_per_byte` counts as compute.
    """

    @property
    def ridge_flops_per_byte(self) -> float: ...
    @property
    def gemm_panel_rows(self) -> int: ...
    @property
    def gemm_tile_m_expert(self) -> int: ...
    @property
    def gemm_tile_m_dense(self) -> int: ...


@dataclass(frozen=True)
class GenericDevice:
    """The device facts of a plan built for no particular device (the torch reference's replayed plan, which
    is costed later): the documented NVIDIA datacenter defaults (hardware.defaults) and an H100-class ridge."""

    ridge_flops_per_byte: float = 300.0
    gemm_panel_rows: int = 4096
    gemm_tile_m_expert: int = 64
    gemm_tile_m_dense: int = 128


GENERIC_DEVICE = GenericDevice()


# --- Plan data --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Segment:
    """A run of kernels: a layer template (`layer` ≥ 0, names with "L*.") or the prologue/epilogue (-1)."""

    kernels: tuple[Kernel, ...]
    layer: int = -1


@dataclass(frozen=True)
class PlanContext:
    """What a plan builder needs to know about one step."""

    model: ModelSpec
    batch: int
    tokens_per_seq: int
    context_len: int
    device: PlanDevice = GENERIC_DEVICE

    @property
    def m_tokens(self) -> int:
        return self.batch * self.tokens_per_seq

    @property
    def is_verify(self) -> bool:
        return self.tokens_per_seq > 1

    @functools.cached_property
    def ffn(self) -> dict[str, Matrix]:
        return ffn_matrices(self.model)


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


# --- Kernel building blocks (usable by other kernel styles) -----------------------------------------------------


def _k(
    name: str,
    category: Category,
    *,
    flops: float = 0.0,
    reads: tuple[TensorRead, ...] = (),
    write: tuple[str, float] = ("", 0.0),
    m: float = 0.0,
    dtype: str = "bf16",
    stream: int = 0,
    join: bool = False,
) -> Kernel:
    return Kernel(
        name=name,
        category=category,
        flops=float(flops),
        reads=reads,
        write_bytes=float(write[1]),
        write_tensor=write[0],
        m_tokens=m,
        dtype=dtype,
        stream=stream,
        join=join,
    )


def _act(name: str, elements: float) -> TensorRead:
    return TensorRead(name, elements * ACT_BYTES)


def weight_read(
    device: PlanDevice,
    tensor: str,
    matrix: Matrix,
    m_tokens: float,
    tile_m: int | None = None,
    copies: float = 1.0,
) -> TensorRead:
    """A GEMM's weight read: once per M-tile (dense tiles unless `tile_m` says otherwise), the repeats'
    working set one panel of one copy (expert)."""
    tiles = max(1.0, math.ceil(m_tokens / (tile_m or device.gemm_tile_m_dense)))
    panel = matrix.bytes * min(1.0, device.gemm_panel_rows / max(1, matrix.rows))
    return TensorRead(tensor, copies * matrix.bytes, tiles, panel)


def gemm_kernel(
    ctx: PlanContext,
    name: str,
    category: Category,
    weight_tensor: str,
    matrix: Matrix,
    m_tokens: int,
    input_tensor: str,
    output_tensor: str,
    stream: int = 0,
) -> Kernel:
    """A dense GEMM of M tokens through one weight matrix (re-read once per M-tile)."""
    return _k(
        name,
        category,
        flops=2.0 * m_tokens * matrix.params,
        reads=(
            weight_read(ctx.device, weight_tensor, matrix, m_tokens),
            _act(input_tensor, m_tokens * matrix.cols),
        ),
        write=(output_tensor, m_tokens * matrix.rows * ACT_BYTES),
        m=m_tokens,
        dtype=matrix.fmt.compute_dtype,
        stream=stream,
    )


def elementwise_kernel(
    name: str,
    category: Category,
    inputs: tuple[tuple[str, float], ...],
    output: tuple[str, float],
    flops_per_element: float = 4.0,
    weights: tuple[TensorRead, ...] = (),
    stream: int = 0,
    join: bool = False,
) -> Kernel:
    """A memory-bound kernel over activations: (name, elements) in, (name, elements) out."""
    elements = sum(n for _, n in inputs)
    return _k(
        name,
        category,
        flops=flops_per_element * elements,
        reads=(*weights, *(_act(t, n) for t, n in inputs)),
        write=(output[0], output[1] * ACT_BYTES),
        stream=stream,
        join=join,
    )


def norm_kernel(ctx: PlanContext, name: str, weight: str) -> Kernel:
    """Fused residual add + RMSNorm over M tokens."""
    m, h = ctx.m_tokens, ctx.model.hidden
    return elementwise_kernel(
        name, "other", (("resid", m * h),), ("h", m * h), weights=(TensorRead(weight, h * ACT_BYTES),)
    )


def attention_core_kernel(
    ctx: PlanContext, kind: AttentionLayerKind, q_tensor: str, q_elems: float, out: tuple[str, float]
) -> Kernel:
    """Paged / flash decoding attention: every sequence's T new queries against its cached context."""
    model, b, t = ctx.model, ctx.batch, ctx.tokens_per_seq
    a = ms.attention_for(model, kind)
    length = ms.attended_tokens(model, kind, ctx.context_len + t)
    cache = b * length * kv_bytes_per_token(model, kind)
    if a.is_mla:
        latent, rope = a.kv_lora_rank or 0, a.qk_rope_head_dim or 0
        flops = 2.0 * b * t * a.num_heads * length * (2 * latent + rope)
        m_rows = t * a.num_heads
    else:
        flops = 2.0 * b * t * a.num_heads * (a.head_dim + a.value_head_dim) * length
        m_rows = t * max(1, a.num_heads // max(1, a.num_kv_heads))
    intensity = flops / max(cache, 1.0)
    category: Category = "attention" if intensity > ctx.device.ridge_flops_per_byte else "kv_cache"
    return _k(
        "attention",
        category,
        flops=flops,
        reads=(TensorRead(LAYER_PREFIX + "kv", cache), _act(q_tensor, q_elems)),
        write=(out[0], out[1] * ACT_BYTES),
        m=m_rows,
    )


def indexer_kernels(
    ctx: PlanContext, kind: AttentionLayerKind, mats: dict[str, Matrix], latent: str
) -> list[Kernel]:
    """A sparse-attention indexer (DeepSeek-V3.2 / GLM-5 DSA, DeepSeek-V4 CSA): its projections, then a
    scan scoring every cached entry's fp8 index key for each query, whose top-k the attention reads."""
    if "index" not in mats:
        return []
    model, m, P = ctx.model, ctx.m_tokens, LAYER_PREFIX
    a = ms.attention_for(model, kind)
    entries = ms.indexed_tokens(model, kind, ctx.context_len + ctx.tokens_per_seq)
    keys = ctx.batch * entries * ms.index_key_bytes_per_token(model, kind)
    flops = 2.0 * m * a.index_heads * a.index_head_dim * entries
    category: Category = (
        "attention" if flops / max(keys, 1.0) > ctx.device.ridge_flops_per_byte else "kv_cache"
    )
    out = [
        gemm_kernel(ctx, "index_proj", "dense_weights", P + "attn.index", mats["index"], m, "h", "index_k")
    ]
    if "index_q" in mats:
        out.append(
            gemm_kernel(
                ctx,
                "index_q_proj",
                "dense_weights",
                P + "attn.index_q",
                mats["index_q"],
                m,
                latent,
                "index_q",
            )
        )
    out.append(
        _k(
            "index_scan",
            category,
            flops=flops,
            reads=(TensorRead(P + "index_keys", keys), _act("index_q", m * a.index_heads * a.index_head_dim)),
            write=("index_topk", m * (a.index_topk or 0) * INDEX_BYTES),
            m=ctx.tokens_per_seq * a.index_heads,
        )
    )
    return out


def attention_kernels(ctx: PlanContext, kind: AttentionLayerKind) -> list[Kernel]:
    """Norm through output projection of one attention layer, as fused serving engines launch them."""
    model, m = ctx.model, ctx.m_tokens
    mats = attention_matrices(model, kind)
    P = LAYER_PREFIX
    out: list[Kernel] = [norm_kernel(ctx, "input_norm", P + "ln1")]
    if kind == "linear":
        la = model.linear_attention
        assert la is not None
        qk = la.num_key_heads * la.key_head_dim
        v = la.num_value_heads * la.value_head_dim
        conv_dim = 2 * qk + v
        conv_state = ctx.batch * conv_dim * (la.conv_kernel - 1) * KV_BYTES
        state = ctx.batch * ms.linear_state_bytes(model, KV_BYTES) - conv_state
        out += [
            gemm_kernel(ctx, "in_proj", "dense_weights", P + "attn.in_proj", mats["in_proj"], m, "h", "qkvz"),
            _k(
                "conv1d",
                "attention",
                flops=2.0 * m * conv_dim * la.conv_kernel,
                reads=(
                    TensorRead(P + "attn.conv", mats["conv"].bytes),
                    TensorRead(P + "conv_state", conv_state),
                    _act("qkvz", m * conv_dim),
                ),
                write=(P + "conv_state", conv_state),
            ),
            _k(
                "delta_rule",
                "kv_cache",
                flops=6.0 * m * la.num_value_heads * la.key_head_dim * la.value_head_dim,
                reads=(TensorRead(P + "ssm_state", state), _act("qkvz", m * conv_dim)),
                write=(P + "ssm_state", state),
            ),
            elementwise_kernel(
                "gated_norm", "attention", (("attn_core", m * v), ("qkvz", m * v)), ("attn_out", m * v)
            ),
            gemm_kernel(
                ctx,
                "out_proj",
                "dense_weights",
                P + "attn.out_proj",
                mats["out_proj"],
                m,
                "attn_out",
                "resid",
            ),
        ]
        return out
    a = ms.attention_for(model, kind)
    kv_token = kv_bytes_per_token(model, kind)
    if a.is_mla:
        nope, rope, v_dim = a.qk_nope_head_dim or 0, a.qk_rope_head_dim or 0, a.v_head_dim or 0
        latent = a.kv_lora_rank or 0
        qa = mats["q_a_kv_a"]
        out.append(
            gemm_kernel(ctx, "q_a_kv_a_proj", "dense_weights", P + "attn.q_a_kv_a", qa, m, "h", "qkv_a")
        )
        out.append(
            elementwise_kernel(
                "q_a_kv_a_norm", "attention", (("qkv_a", m * qa.rows),), ("qkv_a", m * qa.rows)
            )
        )
        if "q_b" in mats:
            out.append(
                gemm_kernel(ctx, "q_b_proj", "dense_weights", P + "attn.q_b", mats["q_b"], m, "qkv_a", "q")
            )
        out += indexer_kernels(ctx, kind, mats, "qkv_a")
        kb = mats["kv_b_k"]
        out.append(
            _k(
                "q_absorb",
                "dense_weights",
                flops=2.0 * m * kb.params,
                reads=(TensorRead(P + "attn.kv_b_k", kb.bytes), _act("q", m * a.num_heads * nope)),
                write=("q_latent", m * a.num_heads * (latent + rope) * ACT_BYTES),
                m=m,
                dtype=kb.fmt.compute_dtype,
            )
        )
        out.append(
            elementwise_kernel(
                "rotary",
                "attention",
                (("q_latent", m * a.num_heads * rope), ("qkv_a", m * rope)),
                ("q_latent", m * a.num_heads * rope),
            )
        )
        out.append(
            _k(
                "kv_store",
                "kv_cache",
                reads=(_act("qkv_a", m * (latent + rope)),),
                write=(P + "kv_new", m * kv_token),
            )
        )
        out.append(
            attention_core_kernel(
                ctx,
                kind,
                "q_latent",
                m * a.num_heads * (latent + rope),
                ("attn_latent", m * a.num_heads * latent),
            )
        )
        kv = mats["kv_b_v"]
        out.append(
            _k(
                "v_up",
                "dense_weights",
                flops=2.0 * m * kv.params,
                reads=(
                    TensorRead(P + "attn.kv_b_v", kv.bytes),
                    _act("attn_latent", m * a.num_heads * latent),
                ),
                write=("attn_out", m * a.num_heads * v_dim * ACT_BYTES),
                m=m,
                dtype=kv.fmt.compute_dtype,
            )
        )
        out.append(
            gemm_kernel(ctx, "o_proj", "dense_weights", P + "attn.o", mats["o"], m, "attn_out", "resid")
        )
        return out
    qkv = mats["qkv"]
    q_elems = m * a.num_heads * a.head_dim
    kv_elems = m * 2 * a.num_kv_heads * a.head_dim
    out.append(gemm_kernel(ctx, "qkv_proj", "dense_weights", P + "attn.qkv", qkv, m, "h", "qkv"))
    if "q_b" in mats:  # low-rank query: qkv_proj produced the query latent
        out.append(
            gemm_kernel(ctx, "q_b_proj", "dense_weights", P + "attn.q_b", mats["q_b"], m, "qkv", "qkv")
        )
    out += indexer_kernels(ctx, kind, mats, "qkv")
    if a.qk_norm:
        out.append(
            elementwise_kernel(
                "qk_norm",
                "attention",
                (("qkv", q_elems + kv_elems / 2),),
                ("qkv", q_elems + kv_elems / 2),
                weights=(TensorRead(P + "qk_norm", 2 * a.head_dim * ACT_BYTES),),
            )
        )
    out.append(
        elementwise_kernel(
            "rotary", "attention", (("qkv", q_elems + kv_elems / 2),), ("qkv", q_elems + kv_elems / 2)
        )
    )
    out.append(_k("kv_store", "kv_cache", reads=(_act("qkv", kv_elems),), write=(P + "kv_new", m * kv_token)))
    out.append(attention_core_kernel(ctx, kind, "qkv", q_elems, ("attn_out", q_elems)))
    if "o_b" in mats:  # grouped low-rank output: o_a per group, then o_b
        out.append(
            gemm_kernel(ctx, "o_a_proj", "dense_weights", P + "attn.o", mats["o"], m, "attn_out", "o_latent")
        )
        out.append(
            gemm_kernel(ctx, "o_b_proj", "dense_weights", P + "attn.o_b", mats["o_b"], m, "o_latent", "resid")
        )
        return out
    out.append(gemm_kernel(ctx, "o_proj", "dense_weights", P + "attn.o", mats["o"], m, "attn_out", "resid"))
    return out


def dense_ffn_kernels(ctx: PlanContext) -> list[Kernel]:
    """Norm, gate/up GEMM, activation, down GEMM of a dense layer."""
    m, f = ctx.m_tokens, ctx.model.dense_ffn_width
    P = LAYER_PREFIX
    return [
        norm_kernel(ctx, "post_attention_norm", P + "ln2"),
        gemm_kernel(
            ctx, "mlp_gate_up", "dense_weights", P + "mlp.w13", ctx.ffn["dense_w13"], m, "h", "mlp_in"
        ),
        elementwise_kernel("mlp_act", "dense_weights", (("mlp_in", 2 * m * f),), ("mlp_mid", m * f)),
        gemm_kernel(
            ctx, "mlp_down", "dense_weights", P + "mlp.w2", ctx.ffn["dense_w2"], m, "mlp_mid", "resid"
        ),
    ]


def router_kernels(ctx: PlanContext, distinct: float) -> list[Kernel]:
    """Norm, router GEMM, top-k selection and the expert alignment (sort tokens by expert)."""
    model, m = ctx.model, ctx.m_tokens
    n, k = model.n_experts, model.top_k
    P = LAYER_PREFIX
    assignments = m * k
    return [
        norm_kernel(ctx, "post_attention_norm", P + "ln2"),
        gemm_kernel(ctx, "router", "other", P + "router", ctx.ffn["router"], m, "h", "router_logits"),
        _k(
            "topk",
            "other",
            flops=8.0 * m * n,
            reads=(TensorRead("router_logits", m * n * ACT_BYTES),),
            write=("topk", assignments * (INDEX_BYTES + LOGIT_BYTES)),
        ),
        _k(
            "moe_align",
            "other",
            flops=4.0 * assignments,
            reads=(TensorRead("topk", assignments * INDEX_BYTES),),
            write=("sorted_ids", (assignments + distinct * ctx.device.gemm_tile_m_expert) * INDEX_BYTES),
        ),
    ]


def shared_expert_kernels(ctx: PlanContext, stream: int) -> list[Kernel]:
    """The shared experts as one gated MLP over all M tokens."""
    w = shared_width(ctx.model)
    if w == 0:
        return []
    m = ctx.m_tokens
    P = LAYER_PREFIX
    return [
        gemm_kernel(
            ctx,
            "shared_gate_up",
            "shared_experts",
            P + "shared.w13",
            ctx.ffn["shared_w13"],
            m,
            "h",
            "shared_in",
            stream,
        ),
        elementwise_kernel(
            "shared_act", "shared_experts", (("shared_in", 2 * m * w),), ("shared_mid", m * w), stream=stream
        ),
        gemm_kernel(
            ctx,
            "shared_down",
            "shared_experts",
            P + "shared.w2",
            ctx.ffn["shared_w2"],
            m,
            "shared_mid",
            "shared_out",
            stream,
        ),
    ]


def fused_expert_kernels(
    ctx: PlanContext,
    distinct: float,
    assignments: float | None = None,
    input_tensor: tuple[str, float] | None = None,
) -> list[Kernel]:
    """Grouped GEMMs over the distinct experts: each one's weights read once (repeats per M-tile hit L2).

    `assignments` token-expert pairs (default: every token's top-k) over `distinct` experts, reading the
    tokens from `input_tensor` (name, elements; default: the step's hidden states). An expert-parallel
    rank passes its own share and the tokens dispatch delivered to it.
    """
    model, m = ctx.model, ctx.m_tokens
    k, w, h = model.top_k, model.expert_width, model.hidden
    w13, w2 = ctx.ffn["expert_w13"], ctx.ffn["expert_w2"]
    assignments = m * k if assignments is None else assignments
    source, source_elements = ("h", m * h) if input_tensor is None else input_tensor
    distinct = max(distinct, 1e-9)
    per_expert = assignments / distinct
    tile_m = ctx.device.gemm_tile_m_expert
    dtype = model.expert_format.compute_dtype
    P = LAYER_PREFIX
    return [
        _k(
            "experts_gate_up",
            "routed_experts",
            flops=2.0 * assignments * w13.params,
            reads=(
                weight_read(ctx.device, P + "experts.w13", w13, per_expert, tile_m, distinct),
                _act(source, source_elements),
                TensorRead("sorted_ids", assignments * INDEX_BYTES),
            ),
            write=("experts_in", assignments * 2 * w * ACT_BYTES),
            m=per_expert,
            dtype=dtype,
        ),
        elementwise_kernel(
            "experts_act",
            "routed_experts",
            (("experts_in", assignments * 2 * w),),
            ("experts_mid", assignments * w),
        ),
        _k(
            "experts_down",
            "routed_experts",
            flops=2.0 * assignments * w2.params,
            reads=(
                weight_read(ctx.device, P + "experts.w2", w2, per_expert, tile_m, distinct),
                _act("experts_mid", assignments * w),
            ),
            write=("experts_out", assignments * h * ACT_BYTES),
            m=per_expert,
            dtype=dtype,
        ),
    ]


def combine_kernel(ctx: PlanContext, join: bool) -> Kernel:
    """Weighted sum of each token's k expert outputs (plus the shared experts' output) into the residual."""
    m, h, k = ctx.m_tokens, ctx.model.hidden, ctx.model.top_k
    inputs: tuple[tuple[str, float], ...] = (("experts_out", m * k * h),)
    if shared_width(ctx.model):
        inputs += (("shared_out", m * h),)
    return elementwise_kernel(
        "moe_combine", "routed_experts", inputs, ("resid", m * h), flops_per_element=2.0, join=join
    )


def per_token_expert_kernels(ctx: PlanContext, distinct: float) -> list[Kernel]:
    """A naive loop: for each token, for each expert it chose, gate/up GEMM, activation, down GEMM.

    Expert e of pair q = t·k + j is (q mod U) over U distinct experts, so every expert is reused every U
    pairs: its weights come back from L2 while U experts' weights fit in it.
    """
    model, m = ctx.model, ctx.m_tokens
    k, w, h = model.top_k, model.expert_width, model.hidden
    w13, w2 = ctx.ffn["expert_w13"], ctx.ffn["expert_w2"]
    launches = 3 * m * k * model.n_moe_layers
    if launches > MAX_PER_TOKEN_LAUNCHES:
        raise MoesimError(
            "kernel_style",
            f"the per-token plan would launch {launches} expert kernels in one step",
            f"use --kernel-style fused, or a smaller batch / draft length (limit {MAX_PER_TOKEN_LAUNCHES})",
        )
    u = max(k, min(round(distinct), m * k))
    dtype = model.expert_format.compute_dtype
    P = LAYER_PREFIX
    out: list[Kernel] = []
    for t in range(m):
        for j in range(k):
            e = (t * k + j) % u
            out += [
                _k(
                    "expert_gate_up",
                    "routed_experts",
                    flops=2.0 * w13.params,
                    reads=(TensorRead(f"{P}expert{e}.w13", w13.bytes), _act("h", h)),
                    write=("tok_in", 2 * w * ACT_BYTES),
                    m=1,
                    dtype=dtype,
                ),
                elementwise_kernel("expert_act", "routed_experts", (("tok_in", 2 * w),), ("tok_mid", w)),
                _k(
                    "expert_down",
                    "routed_experts",
                    flops=2.0 * w2.params,
                    reads=(
                        TensorRead(f"{P}expert{e}.w2", w2.bytes),
                        _act("tok_mid", w),
                        _act("experts_out", h),
                    ),
                    write=("experts_out", h * ACT_BYTES),
                    m=1,
                    dtype=dtype,
                ),
            ]
    return out


def prologue_kernels(ctx: PlanContext) -> list[Kernel]:
    """Embedding lookup of the step's M tokens."""
    m, h = ctx.m_tokens, ctx.model.hidden
    return [
        _k(
            "embedding",
            "other",
            reads=(TensorRead("embed.rows", m * h * ACT_BYTES),),
            write=("resid", m * h * ACT_BYTES),
        )
    ]


def epilogue_kernels(ctx: PlanContext) -> list[Kernel]:
    """Final norm, LM head, sampling; a verification step also compares draft and target tokens."""
    model, m = ctx.model, ctx.m_tokens
    h, v = model.hidden, model.vocab
    head = Matrix(v, h, BF16, ms.lm_head_read_bytes(model))
    out = [
        norm_kernel(ctx, "final_norm", "final_norm"),
        _k(
            "lm_head",
            "lm_head",
            flops=2.0 * m * head.params,
            reads=(
                weight_read(ctx.device, "lm_head", head, m),
                _act("h", m * h),
            ),
            write=("logits", m * v * LOGIT_BYTES),
            m=m,
        ),
        _k(
            "sampling",
            "other",
            flops=5.0 * m * v,
            reads=(TensorRead("logits", m * v * LOGIT_BYTES),),
            write=("next_tokens", m * INDEX_BYTES),
        ),
    ]
    if ctx.is_verify:
        out.append(
            _k(
                "accept",
                "other",
                flops=4.0 * m,
                reads=(
                    TensorRead("next_tokens", m * INDEX_BYTES),
                    TensorRead("draft_tokens", m * INDEX_BYTES),
                ),
                write=("accepted", ctx.batch * INDEX_BYTES),
            )
        )
    return out


# --- Kernel styles ---------------------------------------------------------------------------------------------


def fused_layer(
    ctx: PlanContext, attention: AttentionLayerKind, ffn: FfnLayerKind, distinct: float
) -> list[Kernel]:
    """SGLang/vLLM-style layer: fused MoE kernels, shared experts overlapped on a second stream."""
    kernels = attention_kernels(ctx, attention)
    if ffn == "dense":
        return kernels + dense_ffn_kernels(ctx)
    shared = shared_expert_kernels(ctx, stream=1)
    kernels += router_kernels(ctx, distinct)
    kernels += shared
    kernels += fused_expert_kernels(ctx, distinct)
    kernels.append(combine_kernel(ctx, join=bool(shared)))
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


def distinct_experts_by_layer(
    model: ModelSpec, batch: int, tokens_per_seq: int, routing: RoutingModel
) -> tuple[float, ...]:
    """Expected distinct experts of each MoE layer (bounded by N and by the token-expert pairs).

    Layers whose routing parameters are equal (`layer_params`, where the routing model has them) share
    one value, computed once.
    """
    out = []
    cap = min(model.n_experts, batch * tokens_per_seq * model.top_k)
    layer_key = getattr(routing, "layer_params", lambda layer: layer)
    by_params: dict[object, float] = {}
    for layer, kind in enumerate(model.layer_ffn):
        if kind == "moe":
            key = layer_key(layer)
            if key not in by_params:
                value = routing.expected_distinct(model.n_experts, model.top_k, batch, tokens_per_seq, layer)
                by_params[key] = float(min(max(value, model.top_k), cap))
            out.append(by_params[key])
    return tuple(out)
