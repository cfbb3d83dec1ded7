"""An MoE (or dense) transformer architecture as data, with exact parameter and byte counts.

Field names follow the conventions of Hugging Face configs where one exists. Everything here is pure:
a ModelSpec is frozen, and counts are derived from it, never stored beside it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Literal

from moesim.errors import MoesimError

AttentionLayerKind = Literal["full", "sliding", "linear"]
FfnLayerKind = Literal["dense", "moe"]


@dataclass(frozen=True)
class WeightFormat:
    """How weights are stored: value bits plus per-group (or per-block) scales.

    `scale_block` is (rows, cols) of one scale's block: (128, 128) for DeepSeek-style FP8 block scales,
    (1, 32) for MXFP4 (one scale per 32 values along the input dimension), (1, 128) for int4 group scales.
    A format with no scales has scale_bits 0.
    """

    name: str
    value_bits: int
    scale_bits: int = 0
    scale_block: tuple[int, int] = (1, 1)
    compute_dtype: str = "bf16"

    def matrix_bytes(self, rows: int, cols: int) -> int:
        """Exact bytes of one rows × cols weight matrix in this format, scales included."""
        value_bytes = math.ceil(rows * cols * self.value_bits / 8)
        if self.scale_bits == 0:
            return value_bytes
        block_rows, block_cols = self.scale_block
        n_scales = math.ceil(rows / block_rows) * math.ceil(cols / block_cols)
        return value_bytes + math.ceil(n_scales * self.scale_bits / 8)


WEIGHT_FORMATS: dict[str, WeightFormat] = {
    "bf16": WeightFormat("bf16", 16),
    "fp16": WeightFormat("fp16", 16, compute_dtype="fp16"),
    "fp8": WeightFormat("fp8", 8, scale_bits=32, scale_block=(128, 128), compute_dtype="fp8"),
    "mxfp4": WeightFormat("mxfp4", 4, scale_bits=8, scale_block=(1, 32)),
    "int4": WeightFormat("int4", 4, scale_bits=16, scale_block=(1, 128)),
}


def weight_format(name: str) -> WeightFormat:
    """Look a weight format up by name, with a clear error for an unknown one."""
    try:
        return WEIGHT_FORMATS[name]
    except KeyError:
        raise MoesimError(
            "weight_format", f"unknown format {name!r}", f"choose one of {', '.join(WEIGHT_FORMATS)}"
        ) from None


@dataclass(frozen=True)
class AttentionSpec:
    """Softmax attention of the full / sliding-window layers (MHA and GQA, or MLA when kv_lora_rank is set)."""

    num_heads: int
    num_kv_heads: int
    head_dim: int
    qk_norm: bool = False
    sliding_window: int | None = None
    # Multi-head latent attention (DeepSeek-V3 / Kimi-K2); all None for MHA/GQA.
    q_lora_rank: int | None = None
    kv_lora_rank: int | None = None
    qk_nope_head_dim: int | None = None
    qk_rope_head_dim: int | None = None
    v_head_dim: int | None = None
    bias: bool = False

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None


@dataclass(frozen=True)
class LinearAttentionSpec:
    """Linear-attention layers (Gated DeltaNet in Qwen3-Next): a fixed-size recurrent state, no KV cache."""

    num_key_heads: int
    num_value_heads: int
    key_head_dim: int
    value_head_dim: int
    conv_kernel: int = 4


@dataclass(frozen=True)
class ModelSpec:
    """One transformer language model: geometry, layer pattern, MoE routing shape and weight formats.

    `layer_attention[i]` and `layer_ffn[i]` give the kind of layer i; their length is the layer count.
    Widths are per expert (`expert_width` = moe_intermediate_size); shared experts are counted
    as `n_shared_experts` experts of `shared_expert_width` each.
    """

    name: str
    hidden: int
    vocab: int
    layer_attention: tuple[AttentionLayerKind, ...]
    layer_ffn: tuple[FfnLayerKind, ...]
    attention: AttentionSpec
    linear_attention: LinearAttentionSpec | None = None
    dense_ffn_width: int = 0
    n_experts: int = 0
    top_k: int = 0
    expert_width: int = 0
    n_shared_experts: int = 0
    shared_expert_width: int = 0
    n_groups: int = 1
    topk_groups: int = 1
    router_score: Literal["softmax", "sigmoid"] = "softmax"
    tied_embeddings: bool = False
    mtp_layers: int = 0
    weight_format: str = "bf16"
    expert_weight_format: str | None = None  # None: same as weight_format
    published_total_params: float | None = None
    published_active_params: float | None = None
    family: str = ""
    notes: str = ""

    @property
    def n_layers(self) -> int:
        return len(self.layer_ffn)

    @property
    def n_moe_layers(self) -> int:
        return sum(1 for kind in self.layer_ffn if kind == "moe")

    @property
    def is_moe(self) -> bool:
        return self.n_moe_layers > 0

    @property
    def expert_format(self) -> WeightFormat:
        return weight_format(self.expert_weight_format or self.weight_format)

    @property
    def dense_format(self) -> WeightFormat:
        return weight_format(self.weight_format)


OVERRIDABLE_FIELDS: tuple[str, ...] = tuple(
    f.name for f in fields(ModelSpec) if f.name not in ("layer_attention", "layer_ffn", "attention")
)


def with_overrides(spec: ModelSpec, **changes: object) -> ModelSpec:
    """A hypothetical design: `spec` with some fields replaced, validated again."""
    unknown = sorted(set(changes) - set(OVERRIDABLE_FIELDS))
    if unknown:
        raise MoesimError("override", f"unknown model field(s) {', '.join(unknown)}")
    return replace(spec, **changes)  # type: ignore[arg-type]


__all__ = [
    "WEIGHT_FORMATS",
    "AttentionSpec",
    "LinearAttentionSpec",
    "ModelSpec",
    "WeightFormat",
    "weight_format",
    "with_overrides",
]
