"""Weight shapes as the step's GEMMs read them: matrices (rows × cols, exact bytes as stored), the attention
and FFN matrices of one layer grouped as fused kernels launch them, KV-cache bytes per token.

Pure functions of the model spec; the kernel builders (`plan.attention`, `plan.ffn`, `plan.head`) read them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from moesim.simulator.models.sequence_state import kv_cache_bytes_per_token
from moesim.simulator.models.spec import (
    AttentionLayerKind,
    ModelSpec,
    WeightFormat,
    attention_for,
    high_precision_format,
    weight_format,
)
from moesim.simulator.models.weights import (
    attention_projections,
    dense_ffn_matrices,
    expert_matrices,
    router_weight_bytes,
    shared_expert_matrices,
)

KV_BYTES = 2  # KV cache in bf16 (engines' default; an fp8 KV cache would halve it)
BF16 = weight_format("bf16")


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


def combined_matrix(fmt: WeightFormat, mats: list[tuple[str, int, int]], names: tuple[str, ...]) -> Matrix:
    """Matrices with the same input launched as one GEMM (e.g. q, k, v): rows add up, bytes stay exact."""
    chosen = [(rows, cols) for name, rows, cols in mats if name in names]
    if not chosen:
        return Matrix(0, 0, fmt)
    exact = sum(fmt.matrix_bytes(rows, cols) for rows, cols in chosen)
    return Matrix(sum(r for r, _ in chosen), chosen[0][1], fmt, exact)


_MATRICES: dict[tuple[int, str], tuple[ModelSpec, dict[str, Matrix]]] = {}
_MAX_MATRICES = 512


def _per_model(model: ModelSpec, what: str, compute: Callable[[], dict[str, Matrix]]) -> dict[str, Matrix]:
    """`compute()`, remembered per model object (every plan of a model asks for its matrices, once per
    layer template): the entry keeps the model alive, so its id cannot be reused while remembered."""
    key = (id(model), what)
    entry = _MATRICES.get(key)
    if entry is None or entry[0] is not model:
        while len(_MATRICES) >= _MAX_MATRICES:
            _MATRICES.pop(next(iter(_MATRICES)))
        entry = _MATRICES[key] = (model, compute())
    return dict(entry[1])


def attention_matrices(model: ModelSpec, kind: AttentionLayerKind) -> dict[str, Matrix]:
    """The weight matrices of one attention layer of `kind`, grouped as the fused kernels read them.

    Low-rank query (q_b), grouped low-rank output (o_b) and a sparse-attention indexer ("index": its key
    and weight projections from the hidden state; "index_q" from the query latent) get their own GEMMs.
    """
    return _per_model(model, kind, lambda: _attention_matrices(model, kind))


def _attention_matrices(model: ModelSpec, kind: AttentionLayerKind) -> dict[str, Matrix]:
    fmt = model.dense_format
    mats = attention_projections(model, kind)
    if kind == "linear":
        return {
            "in_proj": combined_matrix(fmt, mats, ("in_proj_qkvz", "in_proj_ba")),
            "conv": combined_matrix(BF16, mats, ("conv1d",)),
            "out_proj": combined_matrix(fmt, mats, ("out_proj",)),
        }
    a = attention_for(model, kind)
    extra = {
        group: combined_matrix(fmt, mats, names)
        for group, names in (
            ("q_b", ("q_b",)),
            ("o_b", ("o_b",)),
            ("index", ("index_k", "index_weights")),
            ("index_q", ("index_q",)),
        )
        if any(name in names for name, _, _ in mats)
    }
    if a.is_mla:
        out = {"q_a_kv_a": combined_matrix(fmt, mats, ("q_a", "q", "kv_a"))}
        kv_b = combined_matrix(fmt, mats, ("kv_b",))
        nope, v_dim = a.qk_nope_head_dim or 0, a.v_head_dim or 0
        k_share = nope / max(1, nope + v_dim)
        out["kv_b_k"] = Matrix(a.num_heads * nope, kv_b.cols, fmt, kv_b.bytes * k_share)
        out["kv_b_v"] = Matrix(a.num_heads * v_dim, kv_b.cols, fmt, kv_b.bytes * (1 - k_share))
        out["o"] = combined_matrix(fmt, mats, ("o", "o_a"))
        return out | extra
    qkv = combined_matrix(fmt, mats, ("q", "q_a", "k", "v", "kv"))
    return {"qkv": qkv, "o": combined_matrix(fmt, mats, ("o", "o_a"))} | extra


def kv_bytes_per_token(model: ModelSpec, kind: AttentionLayerKind) -> float:
    """KV-cache bytes one token adds to one layer of `kind` (0 for linear attention: it keeps a fixed state)."""
    return kv_cache_bytes_per_token(model, kind, KV_BYTES)


def shared_width(model: ModelSpec) -> int:
    """Total width of the shared experts (they run as one gated MLP)."""
    if model.n_shared_experts <= 0:
        return 0
    return model.n_shared_experts * (model.shared_expert_width or model.expert_width)


def ffn_matrices(model: ModelSpec) -> dict[str, Matrix]:
    """Dense-FFN, routed-expert (one expert) and shared-expert (all of them) matrices, plus the router."""
    return _per_model(model, "ffn", lambda: _ffn_matrices(model))


def _ffn_matrices(model: ModelSpec) -> dict[str, Matrix]:
    dense, experts = model.dense_format, model.expert_format
    h = model.hidden
    ws = shared_width(model)
    n_shared = max(1, model.n_shared_experts)
    shared = shared_expert_matrices(model)
    expert = expert_matrices(model)
    dense_ffn = dense_ffn_matrices(model)
    w13 = combined_matrix(experts, expert, ("gate", "up"))
    w2 = combined_matrix(experts, expert, ("down",))
    if model.expert_bias:  # biases ride along with their matrices, 16-bit
        vector_bytes = high_precision_format(model).value_bits / 8
        w13 = replace(w13, exact_bytes=w13.bytes + math.ceil(2 * model.expert_width * vector_bytes))
        w2 = replace(w2, exact_bytes=w2.bytes + math.ceil(h * vector_bytes))
    return {
        "dense_w13": combined_matrix(dense, dense_ffn, ("gate", "up")),
        "dense_w2": combined_matrix(dense, dense_ffn, ("down",)),
        "expert_w13": w13,
        "expert_w2": w2,
        "shared_w13": Matrix(
            2 * ws, h, dense, n_shared * combined_matrix(dense, shared, ("gate", "up")).bytes if ws else 0
        ),
        "shared_w2": Matrix(
            h, ws, dense, n_shared * combined_matrix(dense, shared, ("down",)).bytes if ws else 0
        ),
        "router": Matrix(model.n_experts, h, BF16, router_weight_bytes(model)),
    }
