"""An MoE (or dense) transformer architecture as data: `ModelSpec`, its attention and weight formats.

Field names follow the conventions of Hugging Face configs where one exists. A ModelSpec is frozen;
its counts are derived from it, never stored beside it (`weights`, `sequence_state`, `flops`), its checks
are in `validate`, its layer pattern in `layers` and the override flags for hypothetical designs in
`overrides`.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Literal

from moesim.errors import MoesimError

AttentionLayerKind = Literal["full", "sliding", "linear", "compressed"]
FfnLayerKind = Literal["dense", "moe"]
ATTENTION_KINDS: tuple[str, ...] = ("full", "sliding", "linear", "compressed")
FFN_KINDS: tuple[str, ...] = ("dense", "moe")
Matrix = tuple[str, int, int]


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
    "fp32": WeightFormat("fp32", 32, compute_dtype="fp32"),  # CPU runs (validation's torch reference)
    "fp8": WeightFormat("fp8", 8, scale_bits=32, scale_block=(128, 128), compute_dtype="fp8"),
    "mxfp4": WeightFormat("mxfp4", 4, scale_bits=8, scale_block=(1, 32)),
    "int4": WeightFormat("int4", 4, scale_bits=16, scale_block=(1, 128)),
    "int4-g64": WeightFormat("int4-g64", 4, scale_bits=16, scale_block=(1, 64)),
    "int4-g32": WeightFormat("int4-g32", 4, scale_bits=16, scale_block=(1, 32)),
    # NVFP4: e2m1 values with one e4m3 scale per 16 (the one fp32 scale per tensor is negligible).
    "nvfp4": WeightFormat("nvfp4", 4, scale_bits=8, scale_block=(1, 16)),
    # fp8 with one fp32 scale per output row, or one per matrix (a block as large as any matrix).
    "fp8-channel": WeightFormat("fp8-channel", 8, scale_bits=32, scale_block=(1, 2**31), compute_dtype="fp8"),
    "fp8-tensor": WeightFormat(
        "fp8-tensor", 8, scale_bits=32, scale_block=(2**31, 2**31), compute_dtype="fp8"
    ),
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
    """Softmax attention of the full / sliding-window layers (MHA and GQA, or MLA when kv_lora_rank is set).

    `bias`: q/k/v projections carry biases (Qwen2, GLM-4.5, gpt-oss); `output_bias`: so does the output
    projection (gpt-oss). `qk_norm`: learned RMSNorm on q and k, per head (Qwen3) or over the whole
    projection when `qk_norm_per_head` is False (OLMoE); parameter-free L2 norms (Llama-4) are not counted.
    `output_gate`: the query projection also emits a sigmoid gate of the same width (Qwen3-Next).
    `attention_sinks`: one learned logit per head (gpt-oss). For MLA, `head_dim` is the query/key head
    dimension (qk_nope_head_dim + qk_rope_head_dim); the latent dimensions define the shapes.
    For MHA/GQA, `v_head_dim` (when set) is the value head width if it differs from `head_dim` (MiMo-V2),
    `q_lora_rank` a low-rank query (q_a, q_b; DeepSeek-V4), `o_lora_rank` a grouped low-rank output
    projection in `o_groups` groups (DeepSeek-V4), and `shared_kv` one tensor serving as key and value.

    Sparse and compressed attention (DeepSeek-V3.2 / GLM-5 DSA, DeepSeek-V4): `index_topk` caps the cached
    entries each query of a full layer attends to, chosen by a lightning indexer with `index_heads` heads of
    `index_head_dim` that scans every cached entry's index key. `kv_compress_ratio` tokens share one cached
    entry in full layers (DeepSeek-V4 CSA: 4), `compressed_ratio` in "compressed" layers (HCA: 128); with
    compression, `sliding_window` is the uncompressed local window those layers attend to besides.
    `attention_experts` (JetMoE's mixture of attention): per layer this many query/output projection pairs
    of `num_kv_heads` heads each are stored, of which a token uses num_heads ÷ num_kv_heads; the unused
    ones are listed as `idle_q` / `idle_o` (stored, never read by a step's plan).
    """

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
    output_bias: bool = False
    qk_norm_per_head: bool = True
    output_gate: bool = False
    attention_sinks: bool = False
    o_lora_rank: int | None = None
    o_groups: int = 1
    shared_kv: bool = False
    index_topk: int | None = None
    index_heads: int = 0
    index_head_dim: int = 0
    kv_compress_ratio: int = 1
    compressed_ratio: int = 1
    attention_experts: int = 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def value_head_dim(self) -> int:
        """Width of one value head (MHA/GQA): `v_head_dim` when it differs from `head_dim`."""
        return self.v_head_dim or self.head_dim


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
    `expert_bias` / `router_bias`: biases on the expert matrices (gpt-oss) and on the router (gpt-oss's
    router bias, DeepSeek/GLM's score-correction bias). `shared_expert_gate`: a hidden → 1 sigmoid gate on
    the shared expert output (Qwen2-MoE, Qwen3-Next). `norms_per_layer`: RMSNorm/LayerNorm weight vectors
    of width `hidden` in each block (2 for pre-norm blocks; 4 for Grok-1's sandwich norms).
    `full_attention`: the attention of the full layers when it differs from the others' (Gemma-4's global
    layers use wider heads than its sliding ones); None: `attention` serves every softmax layer.
    The `published_*`, `params_tolerance_reason`, `source` and `notes` fields are catalogue metadata;
    `published_active_counts` says which vocabulary matrices the publisher's active figure includes.
    `assumptions` and `ignored_keys` record, for a model imported from a Hugging Face config, every
    approximation the importer made and every config key it did not read.
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
    expert_bias: bool = False
    router_bias: bool = False
    shared_expert_gate: bool = False
    norms_per_layer: int = 2
    published_total_includes_mtp: bool = False
    published_active_counts: Literal["embedding_and_lm_head", "lm_head", "neither"] = "embedding_and_lm_head"
    params_tolerance_reason: str = ""
    source: str = ""
    full_attention: AttentionSpec | None = None
    assumptions: tuple[str, ...] = ()
    ignored_keys: tuple[str, ...] = ()

    @property
    def n_layers(self) -> int:
        return len(self.layer_ffn)

    @functools.cached_property
    def n_moe_layers(self) -> int:
        return sum(1 for kind in self.layer_ffn if kind == "moe")

    @property
    def n_dense_layers(self) -> int:
        return self.n_layers - self.n_moe_layers

    @property
    def is_moe(self) -> bool:
        return self.n_moe_layers > 0

    @property
    def expert_format(self) -> WeightFormat:
        return weight_format(self.expert_weight_format or self.weight_format)

    @property
    def dense_format(self) -> WeightFormat:
        return weight_format(self.weight_format)


def attention_for(spec: ModelSpec, kind: AttentionLayerKind) -> AttentionSpec:
    """The softmax-attention spec of layers of `kind` (full layers may have their own)."""
    if kind == "full" and spec.full_attention is not None:
        return spec.full_attention
    return spec.attention


def high_precision_format(spec: ModelSpec) -> WeightFormat:
    """Format of embeddings, LM head, router, norms and biases: the dense format if 16-bit or wider, else bf16."""
    fmt = spec.dense_format
    return fmt if fmt.value_bits >= 16 else WEIGHT_FORMATS["bf16"]


__all__ = [
    "ATTENTION_KINDS",
    "FFN_KINDS",
    "WEIGHT_FORMATS",
    "AttentionLayerKind",
    "AttentionSpec",
    "FfnLayerKind",
    "LinearAttentionSpec",
    "ModelSpec",
    "WeightFormat",
    "attention_for",
    "high_precision_format",
    "weight_format",
]
