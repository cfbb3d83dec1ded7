"""The `torch-reference` kernel style: exactly the kernels `moesim/validation/reference/torch_model.py` launches.

One plain-torch aten call is one kernel here, in the same order, with the bytes it reads and writes and
its FLOPs. Per layer: RMSNorm as six element-wise kernels (pow, mean, add, rsqrt, mul, mul), one fused
QKV GEMM, optional per-head QK-norm (six more), rotary embedding (roll, mul, addcmul), three layout
copies (queries; new keys and values into the cache), scores (baddbmm with the causal mask), softmax,
weighted values (bmm), a layout copy and the output projection fused with the residual add (addmm_).
The MoE block: RMSNorm, router GEMM, softmax, top-k, gather of the forced experts' gates, their
normalisation (sum, div), two index_selects that sort tokens and gates by expert, then for every
*distinct* expert hit a gate-up GEMM, SiLU, multiply and down GEMM, then gate scaling and an index_add
combine into the residual; shared experts are one gated MLP (GEMM, SiLU, multiply, addmm_). Finally
RMSNorm, the LM head GEMM and an argmax.

Everything runs in the model's dense dtype (the reference has no quantised kernels). Activations are
named after the reference's workspace buffers, which every layer reuses. If you change the torch code,
change this file: `tests/test_validation_reference.py` checks that the two agree op by op.

One kernel per aten op is exact on a CPU (each op is one dispatch). On a GPU a few ops launch more than one
CUDA kernel: top-k (gather + bitonic sort), `baddbmm` with a broadcast mask (mask copy + GEMM), and cuBLAS
GEMMs it runs split-K (GEMM + reduce, chosen by cuBLAS heuristics from shape and GPU, so not predictable
from the shape here); on the 4-layer check step that is 14 of 595 kernels, about 1% of a graph step. The
plan keeps one kernel per op; validation reports both counts (`plan_matches_torch`).

Two entry points: the registered kernel style (`--kernel-style torch-reference`), which spreads the expected
distinct experts' tokens evenly, and `reference_step_plan`, which takes the exact per-expert loads of a
measured run (what validation predicts).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from moesim.errors import MoesimError
from moesim.simulator.models.spec import AttentionLayerKind, FfnLayerKind, ModelSpec
from moesim.simulator.plan.blocks import GENERIC_DEVICE, LAYER_PREFIX, PlanContext
from moesim.simulator.plan.kernels import Category, Kernel, TensorRead
from moesim.simulator.plan.step import (
    PlanBuilder,
    Segment,
    StepPlan,
    check_step_inputs,
)

STYLE_NAME = "torch-reference"
INDEX_BYTES = 8  # torch.long
P = LAYER_PREFIX


def element_bytes(model: ModelSpec) -> float:
    """Bytes per element of every tensor of the reference (weights, activations, KV cache)."""
    fmt = model.dense_format
    if (model.expert_weight_format or model.weight_format) != model.weight_format or fmt.scale_bits:
        raise MoesimError(
            "kernel_style",
            f"the {STYLE_NAME} style runs unquantised weights in one dtype, not "
            f"{model.weight_format!r}/{model.expert_weight_format!r}",
            "use bf16, fp16 or fp32 weights, or another kernel style",
        )
    return fmt.value_bits / 8


def check_reference_model(model: ModelSpec) -> None:
    """The reference runs MHA/GQA full attention only, in one unquantised dtype, with no biases, sinks
    or gates (it would silently skip them, and the plan would then describe different work)."""
    att = model.attention
    if att.is_mla or any(kind != "full" for kind in model.layer_attention):
        raise MoesimError(
            "kernel_style",
            f"{model.name}: the {STYLE_NAME} style covers full MHA/GQA attention only",
            "use --kernel-style fused",
        )
    extras = {
        "attention.bias": att.bias,
        "attention.output_bias": att.output_bias,
        "attention.output_gate": att.output_gate,
        "attention.attention_sinks": att.attention_sinks,
        "attention.qk_norm_per_head=false": att.qk_norm and not att.qk_norm_per_head,
        "expert_bias": model.expert_bias,
        "router_bias": model.router_bias,
        "shared_expert_gate": model.shared_expert_gate,
        "router_score=sigmoid": model.router_score != "softmax",
        "n_groups>1": model.n_groups > 1,
    }
    present = [name for name, on in extras.items() if on]
    if present:
        raise MoesimError(
            "kernel_style",
            f"{model.name}: the {STYLE_NAME} style does not run {', '.join(present)}",
            "switch them off for the validation model, or use --kernel-style fused",
        )
    element_bytes(model)


class _Kernels:
    """Accumulates kernels with the shared conventions (dtype, element size)."""

    def __init__(self, model: ModelSpec) -> None:
        self.elem = element_bytes(model)
        self.dtype = model.dense_format.compute_dtype
        self.out: list[Kernel] = []

    def add(
        self,
        name: str,
        category: Category,
        reads: Sequence[tuple[str, float] | TensorRead],
        write: tuple[str, float],
        flops: float = 0.0,
        m_tokens: float = 0.0,
        transcendental: tuple[str, float] = ("", 0.0),
    ) -> None:
        """One kernel; `transcendental`: (op, elements) of an element-wise kernel evaluating that function."""
        tensor_reads = tuple(
            r if isinstance(r, TensorRead) else TensorRead(r[0], float(r[1])) for r in reads if _size(r) > 0
        )
        self.out.append(
            Kernel(
                name=name,
                category=category,
                flops=float(flops),
                reads=tensor_reads,
                write_bytes=float(write[1]),
                write_tensor=write[0],
                m_tokens=m_tokens,
                dtype=self.dtype,
                transcendental_op=transcendental[0],
                transcendental_elements=float(transcendental[1]),
            )
        )

    def rms_norm(
        self, name: str, x: str, rows: int, width: int, weight: str, weight_elems: int, category: Category
    ) -> str:
        """Six element-wise kernels (pow, mean, add_, rsqrt_, mul, mul_); returns the output tensor."""
        e, n = self.elem, rows * width
        sq, ms, out = ("qk_sq", "qk_ms", "qk_n") if name == "qk_norm" else ("sq", "ms", "xn")
        self.add(f"{name}.pow", category, [(x, n * e)], (sq, n * e), n)
        self.add(f"{name}.mean", category, [(sq, n * e)], (ms, rows * e), n)
        self.add(f"{name}.add_", category, [(ms, rows * e)], (ms, rows * e), rows)
        self.add(
            f"{name}.rsqrt_", category, [(ms, rows * e)], (ms, rows * e), rows, transcendental=("rsqrt", rows)
        )
        self.add(f"{name}.mul", category, [(x, n * e), (ms, rows * e)], (out, n * e), n)
        self.add(f"{name}.mul_", category, [(out, n * e), (weight, weight_elems * e)], (out, n * e), n)
        return out

    def gemm(
        self,
        name: str,
        category: Category,
        x: str,
        weight: str,
        m: int,
        k: int,
        n: int,
        out: str,
        accumulate: str = "",
    ) -> None:
        """y[m, n] = x[m, k] · W[k, n] (+ y in place when `accumulate` names it); W re-read per M-tile."""
        e = self.elem
        tiles = max(1.0, math.ceil(m / GENERIC_DEVICE.gemm_tile_m_dense))
        reads: list[tuple[str, float] | TensorRead] = [TensorRead(weight, k * n * e, tiles), (x, m * k * e)]
        if accumulate:
            reads.append((accumulate, m * n * e))
        self.add(name, category, reads, (out, m * n * e), 2.0 * m * k * n, m_tokens=m)

    def swiglu(
        self,
        name: str,
        category: Category,
        x: str,
        w13: str,
        w2: str,
        m: int,
        hidden: int,
        width: int,
        out: str,
        accumulate: str = "",
    ) -> None:
        """GEMM into [gate | up], SiLU on the gate half in place, multiply, down GEMM."""
        e = self.elem
        half = m * width * e
        gu, act = (
            ("sgu", "sact")
            if category == "shared_experts"
            else ("dgu", "dact")
            if category == "dense_weights"
            else ("gu", "act")
        )
        self.gemm(f"{name}.gate_up", category, x, w13, m, hidden, 2 * width, gu)
        self.add(
            f"{name}.silu_",
            category,
            [(gu, half)],
            (gu, half),
            4.0 * m * width,
            transcendental=("silu", m * width),
        )
        self.add(f"{name}.mul", category, [(gu, 2 * half)], (act, half), m * width)
        self.gemm(f"{name}.down", category, act, w2, m, width, hidden, out, accumulate=accumulate)


def _size(r: tuple[str, float] | TensorRead) -> float:
    return r.size_bytes if isinstance(r, TensorRead) else r[1]


def prologue(model: ModelSpec, m: int) -> list[Kernel]:
    """Embedding rows of the step's tokens (index_select)."""
    k = _Kernels(model)
    e = k.elem
    k.add(
        "embed",
        "other",
        [("embedding", m * model.hidden * e), ("ids", m * INDEX_BYTES)],
        ("h", m * model.hidden * e),
    )
    return k.out


def epilogue(model: ModelSpec, m: int) -> list[Kernel]:
    """Final RMSNorm, LM head GEMM, argmax."""
    k = _Kernels(model)
    e, h, v = k.elem, model.hidden, model.vocab
    xn = k.rms_norm("final_norm", "h", m, h, "final_norm.w", h, "other")
    k.gemm("lm_head", "lm_head", xn, "lm_head.w", m, h, v, "logits")
    k.add("argmax", "other", [("logits", m * v * e)], ("next_ids", m * INDEX_BYTES), m * v)
    return k.out


def layer_kernels(
    model: ModelSpec,
    batch: int,
    tokens_per_seq: int,
    context_len: int,
    ffn: FfnLayerKind,
    loads: np.ndarray | None,
    experts: ExpertKernels | None = None,
) -> list[Kernel]:
    """One layer's template kernels (per-layer tensors named "L*."); `loads`: tokens per expert (MoE);
    `experts` adds the routed experts' kernels (default: this style's loop over the distinct experts)."""
    k = _Kernels(model)
    e = k.elem
    att = model.attention
    H = model.hidden
    hd, nq, nkv = att.head_dim, att.num_heads, att.num_kv_heads
    group = nq // nkv
    B, T, L = batch, tokens_per_seq, context_len
    M, S = B * T, L + T
    # --- attention
    xn = k.rms_norm("attn_norm", "h", M, H, P + "attn_norm.w", H, "other")
    k.gemm("qkv", "dense_weights", xn, P + "wqkv", M, H, (nq + 2 * nkv) * hd, "qkv")
    n_qk = M * (nq + nkv) * hd
    qk = "qkv"
    if att.qk_norm:
        qk = k.rms_norm("qk_norm", "qkv", M * (nq + nkv), hd, P + "qk_norm.w", (nq + nkv) * hd, "attention")
    k.add("rope.roll", "attention", [(qk, n_qk * e)], ("rolled", n_qk * e))
    k.add("rope.mul", "attention", [(qk, n_qk * e), ("rope.cos", T * hd * e)], ("qk_r", n_qk * e), n_qk)
    k.add(
        "rope.addcmul_",
        "attention",
        [("qk_r", n_qk * e), ("rolled", n_qk * e), ("rope.sin", T * hd * e)],
        ("qk_r", n_qk * e),
        2 * n_qk,
    )
    q_bytes, new_kv_bytes = M * nq * hd * e, M * nkv * hd * e
    k.add("q_layout", "attention", [("qk_r", q_bytes)], ("q_heads", q_bytes))
    k.add("k_write", "kv_cache", [("qk_r", new_kv_bytes)], (P + "k_new", new_kv_bytes))
    k.add("v_write", "kv_cache", [("qkv", new_kv_bytes)], (P + "v_new", new_kv_bytes))
    old_kv_bytes = B * nkv * L * hd * e
    score_bytes = B * nq * T * S * e
    attn_flops = 2.0 * B * nq * T * S * hd
    k.add(
        "scores",
        "kv_cache",
        [
            ("q_heads", q_bytes),
            (P + "k_cache", old_kv_bytes),
            (P + "k_new", new_kv_bytes),
            ("mask", group * T * S * e),
        ],
        ("scores", score_bytes),
        attn_flops + B * nq * T * S,
        m_tokens=group * T,
    )
    k.add(
        "softmax",
        "attention",
        [("scores", score_bytes)],
        ("probs", score_bytes),
        5.0 * B * nq * T * S,
        transcendental=("exp", B * nq * T * S),
    )
    k.add(
        "values",
        "kv_cache",
        [("probs", score_bytes), (P + "v_cache", old_kv_bytes), (P + "v_new", new_kv_bytes)],
        ("attn", q_bytes),
        attn_flops,
        m_tokens=group * T,
    )
    k.add("o_layout", "attention", [("attn", q_bytes)], ("o_in", q_bytes))
    k.gemm("o_proj", "dense_weights", "o_in", P + "wo", M, nq * hd, H, "h", accumulate="h")
    # --- feed-forward
    xn = k.rms_norm("ffn_norm", "h", M, H, P + "ffn_norm.w", H, "other")
    if ffn == "dense":
        k.swiglu(
            "dense_ffn",
            "dense_weights",
            xn,
            P + "dense.w13",
            P + "dense.w2",
            M,
            H,
            model.dense_ffn_width,
            "h",
            accumulate="h",
        )
        return k.out
    if loads is None:
        raise MoesimError("routing", "an MoE layer of the reference plan needs its expert loads")
    _moe_block(k, model, M, xn, loads, experts or expert_loop_kernels)
    if model.n_shared_experts:
        width = model.n_shared_experts * model.shared_expert_width
        k.swiglu(
            "shared",
            "shared_experts",
            xn,
            P + "shared.w13",
            P + "shared.w2",
            M,
            H,
            width,
            "h",
            accumulate="h",
        )
    return k.out


def _moe_block(
    k: _Kernels, model: ModelSpec, m: int, xn: str, loads: np.ndarray, experts: ExpertKernels
) -> None:
    e = k.elem
    H, N, top_k = model.hidden, model.n_experts, model.top_k
    loads = np.asarray(loads)
    if loads.shape != (N,) or int(loads.sum()) != m * top_k or np.any(loads < 0) or loads.max() > m:
        raise MoesimError(
            "routing", f"expert loads must be {N} counts ≤ {m} summing to tokens × top_k = {m * top_k}"
        )
    pairs = m * top_k
    k.gemm("router", "other", xn, P + "router.w", m, H, N, "router_logits")
    k.add(
        "router_softmax",
        "other",
        [("router_logits", m * N * e)],
        ("router_probs", m * N * e),
        5.0 * m * N,
        transcendental=("exp", m * N),
    )
    k.add("topk", "other", [("router_probs", m * N * e)], ("topk", pairs * (e + INDEX_BYTES)), m * N)
    k.add(
        "gather",
        "other",
        [("router_probs", pairs * e), ("forced_ids", pairs * INDEX_BYTES)],
        ("gate", pairs * e),
    )
    k.add("gate_sum", "other", [("gate", pairs * e)], ("gsum", m * e), pairs)
    k.add("gate_div_", "other", [("gate", pairs * e), ("gsum", m * e)], ("gate", pairs * e), pairs)
    k.add(
        "dispatch_x",
        "routed_experts",
        [(xn, pairs * H * e), (P + "sorted_tokens", pairs * INDEX_BYTES)],
        ("x_sorted", pairs * H * e),
    )
    k.add(
        "dispatch_w",
        "routed_experts",
        [("gate", pairs * e), (P + "sorted_pairs", pairs * INDEX_BYTES)],
        ("w_sorted", pairs * e),
    )
    experts(k, model, loads)
    y_bytes = pairs * H * e
    k.add(
        "scale_",
        "routed_experts",
        [("y_sorted", y_bytes), ("w_sorted", pairs * e)],
        ("y_sorted", y_bytes),
        pairs * H,
    )
    k.add(
        "combine",
        "routed_experts",
        [("y_sorted", y_bytes), (P + "sorted_tokens", pairs * INDEX_BYTES), ("h", m * H * e)],
        ("h", m * H * e),
        pairs * H,
    )


def expert_loop_kernels(k: _Kernels, model: ModelSpec, loads: np.ndarray) -> None:
    """For every distinct expert hit: gate-up GEMM, SiLU, multiply, down GEMM on its slice of the sorted rows."""
    for expert in np.flatnonzero(loads):
        # x_sorted and y_sorted are read / written one slice per expert
        k.swiglu(
            f"e{expert}",
            "routed_experts",
            "x_sorted",
            f"{P}e{expert}.w13",
            f"{P}e{expert}.w2",
            int(loads[expert]),
            model.hidden,
            model.expert_width,
            "y_sorted",
        )


# Adds the routed experts' kernels (rows sorted by expert in x_sorted → y_sorted) for these loads.
ExpertKernels = Callable[[_Kernels, ModelSpec, np.ndarray], None]


def even_loads(model: ModelSpec, m_tokens: int, distinct: float) -> np.ndarray:
    """Loads of U = round(distinct) experts sharing the M·k token-expert pairs as evenly as possible."""
    n, top_k = model.n_experts, model.top_k
    u = int(min(max(round(distinct), top_k), n, m_tokens * top_k))
    pairs = m_tokens * top_k
    loads = np.zeros(n, dtype=np.int64)
    loads[:u] = pairs // u
    loads[: pairs % u] += 1
    return loads


def reference_step_plan(
    model: ModelSpec,
    batch: int,
    tokens_per_seq: int,
    context_len: int,
    expert_loads: Sequence[np.ndarray],
    experts: ExpertKernels | None = None,
    kernel_style: str = STYLE_NAME,
) -> StepPlan:
    """The exact plan of one reference step; `expert_loads[j]` = tokens per expert of the j-th MoE layer;
    `experts` and `kernel_style` name another reference's expert kernels (see plan/reference_fused.py)."""
    check_step_inputs(model, batch, tokens_per_seq, context_len)
    check_reference_model(model)
    if len(expert_loads) != model.n_moe_layers:
        raise MoesimError(
            "routing", f"need expert loads for {model.n_moe_layers} MoE layers, got {len(expert_loads)}"
        )
    m = batch * tokens_per_seq
    segments = [Segment(tuple(prologue(model, m)))]
    moe_index = 0
    distinct: list[float] = []
    for layer, ffn in enumerate(model.layer_ffn):
        loads = None
        if ffn == "moe":
            loads = np.asarray(expert_loads[moe_index])
            distinct.append(float(np.count_nonzero(loads)))
            moe_index += 1
        segments.append(
            Segment(
                tuple(layer_kernels(model, batch, tokens_per_seq, context_len, ffn, loads, experts)), layer
            )
        )
    segments.append(Segment(tuple(epilogue(model, m))))
    return StepPlan(
        model_name=model.name,
        kernel_style=kernel_style,
        batch=batch,
        tokens_per_seq=tokens_per_seq,
        context_len=context_len,
        segments=tuple(segments),
        distinct_experts_by_layer=tuple(distinct),
        routing_description="replayed routing of the measured run",
        n_experts=model.n_experts,
        top_k=model.top_k,
    )


def _registry_layer(
    ctx: PlanContext, attention: AttentionLayerKind, ffn: FfnLayerKind, distinct: float
) -> list[Kernel]:
    check_reference_model(ctx.model)
    loads = even_loads(ctx.model, ctx.m_tokens, distinct) if ffn == "moe" else None
    return layer_kernels(ctx.model, ctx.batch, ctx.tokens_per_seq, ctx.context_len, ffn, loads)


def _registry_prologue(ctx: PlanContext) -> list[Kernel]:
    return prologue(ctx.model, ctx.m_tokens)


def _registry_epilogue(ctx: PlanContext) -> list[Kernel]:
    return epilogue(ctx.model, ctx.m_tokens)


REFERENCE_STYLE = PlanBuilder(
    STYLE_NAME,
    "plain torch as moesim validation runs it: eager aten ops, one GEMM pair per distinct expert, index_add combine",
    _registry_layer,
    prologue=_registry_prologue,
    epilogue=_registry_epilogue,
)


__all__ = [
    "REFERENCE_STYLE",
    "STYLE_NAME",
    "ExpertKernels",
    "check_reference_model",
    "even_loads",
    "expert_loop_kernels",
    "layer_kernels",
    "reference_step_plan",
]
