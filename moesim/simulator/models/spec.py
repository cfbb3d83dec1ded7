"""An MoE (or dense) transformer architecture as data, with exact parameter, byte and FLOP counts.

Field names follow the conventions of Hugging Face configs where one exists. Everything here is pure:
a ModelSpec is frozen, and counts are derived from it, never stored beside it.

Conventions of the counting functions below:
- A matrix is (name, rows, cols) with rows = output features and cols = input features (torch's
  `nn.Linear.weight` shape), so group scales along the input dimension run along `cols`.
- Linear-layer weights are stored in the model's formats: attention, dense FFN and shared-expert matrices
  in `dense_format`, routed experts in `expert_format`. Embeddings, the LM head, the router, norms, biases
  and other vectors stay 16-bit (`high_precision_format`), as in the published FP8 and MXFP4 checkpoints
  (DeepSeek-V3, Kimi-K2 and gpt-oss quantise only the transformer blocks' linear layers).
- FLOPs are per token: 2 per multiply-accumulate.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass, fields, replace
from typing import Any, Literal

from moesim.errors import MoesimError
from moesim.simulator.bounds import MAX_COUNT, MAX_EXPERTS, check_count, check_finite

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


OVERRIDABLE_FIELDS: tuple[str, ...] = tuple(
    f.name
    for f in fields(ModelSpec)
    if f.name
    not in ("layer_attention", "layer_ffn", "attention", "full_attention", "assumptions", "ignored_keys")
)


def attention_for(spec: ModelSpec, kind: AttentionLayerKind) -> AttentionSpec:
    """The softmax-attention spec of layers of `kind` (full layers may have their own)."""
    if kind == "full" and spec.full_attention is not None:
        return spec.full_attention
    return spec.attention


# ---------------------------------------------------------------------------------------------------
# Validation


def _require(ok: bool, field: str, problem: str, fix: str) -> None:
    if not ok:
        raise MoesimError(field, problem, fix)


def _positive(value: int | None, field: str, what: str = "", high: int = MAX_COUNT) -> None:
    _require(
        isinstance(value, int) and not isinstance(value, bool) and value > 0,
        field,
        f"must be a positive integer, got {value!r}",
        f"give {what or field} as a whole number above 0",
    )
    _at_most(value, field, high)


def _non_negative(value: int, field: str, high: int = MAX_COUNT) -> None:
    _require(
        isinstance(value, int) and not isinstance(value, bool) and value >= 0,
        field,
        f"must be a non-negative integer, got {value!r}",
        f"give {field} as a whole number ≥ 0",
    )
    _at_most(value, field, high)


def _at_most(value: Any, field: str, high: int) -> None:
    _require(
        value <= high,
        field,
        f"is {value:,}, above the {high:,} any model here can have",
        f"give {field} as a whole number ≤ {high:,}",
    )


def _validate_softmax_attention(att: AttentionSpec, prefix: str) -> None:
    _positive(att.num_heads, f"{prefix}.num_heads")
    _positive(att.num_kv_heads, f"{prefix}.num_kv_heads")
    _positive(att.head_dim, f"{prefix}.head_dim")
    if att.is_mla:
        for name in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            _positive(getattr(att, name), f"{prefix}.{name}", f"{name} (MLA needs all latent dims)")
    else:
        _require(
            att.num_heads % att.num_kv_heads == 0,
            f"{prefix}.num_kv_heads",
            f"{att.num_heads} query heads are not a multiple of {att.num_kv_heads} KV heads",
            "choose num_kv_heads dividing num_heads",
        )
    for name in ("q_lora_rank", "o_lora_rank", "index_topk", "v_head_dim"):
        if getattr(att, name) is not None:
            _positive(getattr(att, name), f"{prefix}.{name}")
    for name in ("o_groups", "kv_compress_ratio", "compressed_ratio"):
        _positive(getattr(att, name), f"{prefix}.{name}")
    _require(
        att.attention_experts == 0 or att.attention_experts >= att.num_heads // att.num_kv_heads,
        f"{prefix}.attention_experts",
        f"{att.attention_experts} attention experts but each token uses {att.num_heads // att.num_kv_heads}",
        "give at least num_heads ÷ num_kv_heads attention experts (0: none)",
    )
    if att.o_lora_rank is not None:
        _require(
            (att.num_heads * att.value_head_dim) % att.o_groups == 0,
            f"{prefix}.o_groups",
            f"{att.num_heads} heads × {att.value_head_dim} do not split into {att.o_groups} groups",
            "choose o_groups dividing the output width",
        )
    if att.index_topk is not None:
        _positive(att.index_heads, f"{prefix}.index_heads", "the indexer heads (sparse attention needs them)")
        _positive(att.index_head_dim, f"{prefix}.index_head_dim", "the indexer head width")


def _validate_attention(spec: ModelSpec) -> None:
    att = spec.attention
    if any(kind != "linear" for kind in spec.layer_attention):
        _validate_softmax_attention(att, "attention")
    if spec.full_attention is not None:
        _validate_softmax_attention(spec.full_attention, "full_attention")
    if "compressed" in spec.layer_attention:
        _require(
            att.compressed_ratio > 1,
            "attention.compressed_ratio",
            f"compressed layers need a compression ratio above 1, got {att.compressed_ratio}",
            "set compressed_ratio (tokens per cached entry) or make those layers full attention",
        )
    if "sliding" in spec.layer_attention:
        _positive(att.sliding_window, "attention.sliding_window", "the window (sliding layers need one)")
    if "linear" in spec.layer_attention:
        lin = spec.linear_attention
        _require(
            lin is not None,
            "linear_attention",
            "the layer pattern has linear-attention layers but no linear_attention section",
            "add linear_attention (key/value heads and head dims) or make those layers full attention",
        )
        assert lin is not None
        for name in ("num_key_heads", "num_value_heads", "key_head_dim", "value_head_dim", "conv_kernel"):
            _positive(getattr(lin, name), f"linear_attention.{name}")


def validate_spec(spec: ModelSpec) -> ModelSpec:
    """Check that `spec` describes a buildable model; return it unchanged or raise MoesimError.

    The error names the offending field and how to fix it (top-k above the expert count, non-positive
    sizes, inconsistent layer pattern, MoE layers without experts, bad grouping, unknown weight format).
    """
    _require(bool(spec.name), "name", "is empty", "give the model a name")
    _positive(spec.hidden, "hidden")
    _positive(spec.vocab, "vocab")
    _require(
        len(spec.layer_attention) == len(spec.layer_ffn),
        "layer_attention",
        f"has {len(spec.layer_attention)} entries but layer_ffn has {len(spec.layer_ffn)}",
        "give one attention kind and one FFN kind per layer",
    )
    _require(spec.n_layers > 0, "layers", "the model has no layers", "give at least one layer")
    for i, kind in enumerate(spec.layer_attention):
        _require(
            kind in ATTENTION_KINDS,
            "layer_attention",
            f"layer {i} has unknown kind {kind!r}",
            f"use one of {', '.join(ATTENTION_KINDS)}",
        )
    for i, ffn_kind in enumerate(spec.layer_ffn):
        _require(
            ffn_kind in FFN_KINDS,
            "layer_ffn",
            f"layer {i} has unknown kind {ffn_kind!r}",
            "use 'dense' or 'moe'",
        )
    _validate_attention(spec)
    for name in ("n_experts", "top_k", "expert_width", "n_shared_experts", "shared_expert_width"):
        _non_negative(getattr(spec, name), name, MAX_EXPERTS if name in ("n_experts", "top_k") else MAX_COUNT)
    _non_negative(spec.dense_ffn_width, "dense_ffn_width")
    _non_negative(spec.mtp_layers, "mtp_layers")
    _non_negative(spec.norms_per_layer, "norms_per_layer")
    if spec.n_dense_layers:
        _positive(spec.dense_ffn_width, "dense_ffn_width", "the dense FFN width (the model has dense layers)")
    if spec.is_moe or spec.n_experts:
        _require(
            spec.n_experts > 0,
            "n_experts",
            f"{spec.n_moe_layers} MoE layers but no routed experts",
            "set --experts above 0, or make those layers dense",
        )
        _positive(spec.top_k, "top_k", "top-k (experts per token)")
        _positive(spec.expert_width, "expert_width", "the expert width")
        _require(
            spec.top_k <= spec.n_experts,
            "top_k",
            f"top-k {spec.top_k} exceeds the {spec.n_experts} routed experts",
            "choose top_k ≤ n_experts",
        )
        _positive(spec.n_groups, "n_groups")
        _positive(spec.topk_groups, "topk_groups")
        _require(
            spec.n_experts % spec.n_groups == 0,
            "n_groups",
            f"{spec.n_experts} experts do not split evenly into {spec.n_groups} groups",
            "choose n_groups dividing n_experts (1 for no grouping)",
        )
        _require(
            spec.topk_groups <= spec.n_groups,
            "topk_groups",
            f"topk_groups {spec.topk_groups} exceeds n_groups {spec.n_groups}",
            "choose topk_groups ≤ n_groups",
        )
        per_group = spec.n_experts // spec.n_groups
        _require(
            spec.top_k <= spec.topk_groups * per_group,
            "top_k",
            f"top-k {spec.top_k} exceeds the {spec.topk_groups * per_group} experts in the chosen groups",
            "raise topk_groups or lower top_k",
        )
    if spec.n_shared_experts:
        _positive(spec.shared_expert_width, "shared_expert_width", "the shared expert width")
    _require(
        spec.published_active_counts in ("embedding_and_lm_head", "lm_head", "neither"),
        "published_active_counts",
        f"unknown convention {spec.published_active_counts!r}",
        "use embedding_and_lm_head, lm_head or neither",
    )
    _require(
        spec.router_score in ("softmax", "sigmoid"),
        "router_score",
        f"unknown router score {spec.router_score!r}",
        "use 'softmax' or 'sigmoid'",
    )
    weight_format(spec.weight_format)
    if spec.expert_weight_format is not None:
        try:
            weight_format(spec.expert_weight_format)
        except MoesimError as err:
            raise MoesimError("expert_weight_format", err.problem, err.fix) from None
    return spec


def with_overrides(spec: ModelSpec, **changes: object) -> ModelSpec:
    """A hypothetical design: `spec` with some fields replaced, validated again."""
    unknown = sorted(set(changes) - set(OVERRIDABLE_FIELDS))
    if unknown:
        raise MoesimError(
            "override",
            f"unknown model field(s) {', '.join(unknown)}",
            f"choose from {', '.join(OVERRIDABLE_FIELDS)}",
        )
    return validate_spec(replace(spec, **changes))  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------------
# Matrix shapes


def high_precision_format(spec: ModelSpec) -> WeightFormat:
    """Format of embeddings, LM head, router, norms and biases: the dense format if 16-bit or wider, else bf16."""
    fmt = spec.dense_format
    return fmt if fmt.value_bits >= 16 else WEIGHT_FORMATS["bf16"]


def _vector_bytes(spec: ModelSpec, n_values: int) -> int:
    return math.ceil(n_values * high_precision_format(spec).value_bits / 8)


def attention_projections(spec: ModelSpec, kind: AttentionLayerKind) -> list[Matrix]:
    """The weight matrices of one attention layer of `kind`, as (name, rows=out, cols=in).

    MLA lists its down/up projections (q_a, q_b, kv_a, kv_b, o); at decode with absorbed MLA the
    per-token work of kv_b's key and value halves (W_UK, W_UV) equals a matmul of kv_b's shape.
    MHA/GQA lists q (or q_a, q_b), k and v (or one kv), o (or o_a, o_b). A sparse-attention indexer adds
    index_q (from the query latent, or from the hidden state without one), index_k and index_weights.
    Linear attention (Gated DeltaNet) lists in_proj_qkvz, in_proj_ba, the depthwise conv1d weight
    (conv_dim × kernel) and out_proj.
    """
    h = spec.hidden
    if kind == "linear":
        lin = spec.linear_attention
        if lin is None:
            raise MoesimError("linear_attention", "linear layers need a linear_attention section")
        key_dim = lin.num_key_heads * lin.key_head_dim
        value_dim = lin.num_value_heads * lin.value_head_dim
        return [
            ("in_proj_qkvz", 2 * key_dim + 2 * value_dim, h),
            ("in_proj_ba", 2 * lin.num_value_heads, h),
            ("conv1d", 2 * key_dim + value_dim, lin.conv_kernel),
            ("out_proj", h, value_dim),
        ]
    att = attention_for(spec, kind)
    if att.is_mla:
        nope, rope = att.qk_nope_head_dim or 0, att.qk_rope_head_dim or 0
        v_dim, kv_lora = att.v_head_dim or 0, att.kv_lora_rank or 0
        q_out = att.num_heads * (nope + rope)
        mats = [*_query_matrices(att, q_out, h), ("kv_a", kv_lora + rope, h)]
        mats.append(("kv_b", att.num_heads * (nope + v_dim), kv_lora))
        mats += _output_matrices(att, att.num_heads * v_dim, h)
    else:
        q_width = att.num_heads * att.head_dim
        k_width = att.num_kv_heads * att.head_dim
        v_width = att.num_kv_heads * att.value_head_dim
        mats = _query_matrices(att, q_width * (2 if att.output_gate else 1), h)
        mats += [("kv", k_width, h)] if att.shared_kv else [("k", k_width, h), ("v", v_width, h)]
        mats += _output_matrices(att, att.num_heads * att.value_head_dim, h)
        idle = att.attention_experts - att.num_heads // att.num_kv_heads
        if att.attention_experts and idle > 0:
            mats += [("idle_q", idle * k_width, h), ("idle_o", h, idle * v_width)]
    if att.index_topk is not None and kind == "full":
        index_in = att.q_lora_rank or h
        mats += [
            ("index_q", att.index_heads * att.index_head_dim, index_in),
            ("index_k", att.index_head_dim, h),
            ("index_weights", att.index_heads, h),
        ]
    return mats


def _query_matrices(att: AttentionSpec, q_out: int, hidden: int) -> list[Matrix]:
    if att.q_lora_rank:
        return [("q_a", att.q_lora_rank, hidden), ("q_b", q_out, att.q_lora_rank)]
    return [("q", q_out, hidden)]


def _output_matrices(att: AttentionSpec, o_in: int, hidden: int) -> list[Matrix]:
    """The output projection: one matrix, or DeepSeek-V4's grouped low rank (o_a per group, then o_b).

    o_a is listed as one block-diagonal matrix of the groups' total size (rows o_groups·rank, cols the
    per-group input), so its parameter count and bytes are exact.
    """
    if att.o_lora_rank:
        rank_total = att.o_groups * att.o_lora_rank
        return [("o_a", rank_total, o_in // att.o_groups), ("o_b", hidden, rank_total)]
    return [("o", hidden, o_in)]


def attention_vector_params(spec: ModelSpec, kind: AttentionLayerKind) -> int:
    """Parameters of one attention layer outside its matrices: biases, QK-norms, MLA norms, sinks, gates."""
    if kind == "linear":
        lin = spec.linear_attention
        assert lin is not None
        # dt_bias and A_log per value head, plus the gated RMSNorm over one value head.
        return 2 * lin.num_value_heads + lin.value_head_dim
    att = attention_for(spec, kind)
    n = 2 * att.index_head_dim if att.index_topk is not None and kind == "full" else 0  # index-key LayerNorm
    if att.attention_sinks:
        n += att.num_heads
    if att.is_mla:
        return n + (att.q_lora_rank or 0) + (att.kv_lora_rank or 0)  # q_a_layernorm, kv_a_layernorm
    n += att.q_lora_rank or 0
    q_width = att.num_heads * att.head_dim
    kv_width = att.num_kv_heads * (att.head_dim + (0 if att.shared_kv else att.value_head_dim))
    if att.bias:
        n += q_width * (2 if att.output_gate else 1) + kv_width
    if att.output_bias:
        n += spec.hidden
    if att.qk_norm:
        n += 2 * att.head_dim if att.qk_norm_per_head else q_width + att.num_kv_heads * att.head_dim
    return n


def expert_matrices(spec: ModelSpec) -> list[Matrix]:
    """One routed expert's gated FFN: gate and up (width × hidden), down (hidden × width)."""
    return _gated_ffn(spec.hidden, spec.expert_width)


def shared_expert_matrices(spec: ModelSpec) -> list[Matrix]:
    """One shared expert's gated FFN (a layer has `n_shared_experts` of them)."""
    return _gated_ffn(spec.hidden, spec.shared_expert_width)


def dense_ffn_matrices(spec: ModelSpec) -> list[Matrix]:
    """The gated FFN of one dense layer."""
    return _gated_ffn(spec.hidden, spec.dense_ffn_width)


def router_matrix(spec: ModelSpec) -> Matrix:
    """The router (gate) of one MoE layer: one logit per routed expert."""
    return ("router", spec.n_experts, spec.hidden)


def lm_head_matrix(spec: ModelSpec) -> Matrix:
    return ("lm_head", spec.vocab, spec.hidden)


def _gated_ffn(hidden: int, width: int) -> list[Matrix]:
    return [("gate", width, hidden), ("up", width, hidden), ("down", hidden, width)]


def _params(matrices: list[Matrix]) -> int:
    return sum(rows * cols for _, rows, cols in matrices)


def _bytes(fmt: WeightFormat, matrices: list[Matrix]) -> int:
    return sum(fmt.matrix_bytes(rows, cols) for _, rows, cols in matrices)


# ---------------------------------------------------------------------------------------------------
# Parameter counts per component


def attention_params(spec: ModelSpec, kind: AttentionLayerKind) -> int:
    """Parameters of one attention layer of `kind` (matrices plus biases/norms)."""
    return _params(attention_projections(spec, kind)) + attention_vector_params(spec, kind)


def expert_params(spec: ModelSpec) -> int:
    """Parameters of ONE routed expert (gate + up + down, plus biases where the model has them)."""
    bias = 2 * spec.expert_width + spec.hidden if spec.expert_bias else 0
    return _params(expert_matrices(spec)) + bias


def shared_expert_params(spec: ModelSpec) -> int:
    """Parameters of ALL shared experts of one MoE layer, including a shared-expert gate."""
    gate = spec.hidden if spec.shared_expert_gate and spec.n_shared_experts else 0
    return spec.n_shared_experts * _params(shared_expert_matrices(spec)) + gate


def dense_ffn_params(spec: ModelSpec) -> int:
    return _params(dense_ffn_matrices(spec))


def router_params(spec: ModelSpec) -> int:
    """Router parameters of one MoE layer (weights plus bias or score-correction bias)."""
    _, rows, cols = router_matrix(spec)
    return rows * cols + (spec.n_experts if spec.router_bias else 0)


def layer_norm_params(spec: ModelSpec) -> int:
    """Norm weights of one transformer block (pre-attention, pre-FFN, and any sandwich norms)."""
    return spec.norms_per_layer * spec.hidden


def mtp_layer_params(spec: ModelSpec) -> int:
    """One multi-token-prediction module: a full-attention block (MoE if the model is) + fusion projection.

    As in DeepSeek-V3, GLM-4.5 and Qwen3-Next: norms on the embedding and hidden inputs, a 2h → h
    projection, one transformer block and a final norm; embedding and LM head are shared with the model.
    """
    h = spec.hidden
    block = attention_params(spec, "full") + layer_norm_params(spec)
    if spec.is_moe:
        block += spec.n_experts * expert_params(spec) + shared_expert_params(spec) + router_params(spec)
    else:
        block += dense_ffn_params(spec)
    return block + 2 * h * h + 3 * h


def _kinds(spec: ModelSpec) -> dict[AttentionLayerKind, int]:
    counts: dict[AttentionLayerKind, int] = {}
    for kind in spec.layer_attention:
        counts[kind] = counts.get(kind, 0) + 1
    return counts


@dataclass(frozen=True)
class ParamCounts:
    """Parameter counts of a model, by component.

    `total`: every stored parameter except MTP modules (`total_with_mtp` adds them).
    `active`: parameters touched per token = everything except unchosen routed experts and MTP
    modules, counting the whole embedding table and the LM head. This is how most publishers count
    (Mistral, Qwen, DeepSeek, Meta, AI2, Databricks, Zhipu; e.g. Qwen3-30B-A3B 3.3B, DeepSeek-V3 37B).
    `active_excl_embedding`: the same without the input embedding table (a token reads only one row of
    it; a tied table still counts, as LM head) — OpenAI's convention for gpt-oss, and what a decode
    step actually reads. `active_non_embedding`: without embedding table and LM head (Zhipu's GLM-4.5).
    """

    total: int
    active: int
    active_excl_embedding: int
    active_non_embedding: int
    embedding: int
    lm_head: int  # extra storage: 0 when tied to the embedding
    attention: int
    norms: int
    dense_ffn: int
    routed_experts: int
    routed_experts_active: int
    shared_experts: int
    router: int
    mtp: int
    total_with_mtp: int


def param_counts(spec: ModelSpec) -> ParamCounts:
    """Count every parameter of `spec`: matrices, biases, norms, router, QK-norms, MLA norms, MTP."""
    kinds = _kinds(spec)
    attention = sum(n * attention_params(spec, kind) for kind, n in kinds.items())
    norms = spec.n_layers * layer_norm_params(spec) + spec.hidden
    embedding = spec.vocab * spec.hidden
    lm_head = 0 if spec.tied_embeddings else spec.vocab * spec.hidden
    dense_ffn = spec.n_dense_layers * dense_ffn_params(spec)
    n_moe = spec.n_moe_layers
    routed = n_moe * spec.n_experts * expert_params(spec)
    routed_active = n_moe * spec.top_k * expert_params(spec)
    shared = n_moe * shared_expert_params(spec)
    router = n_moe * router_params(spec) if n_moe else 0
    mtp = spec.mtp_layers * mtp_layer_params(spec)
    common = attention + norms + dense_ffn + shared + router
    total = common + routed + embedding + lm_head
    active = common + routed_active + embedding + lm_head
    return ParamCounts(
        total=total,
        active=active,
        active_excl_embedding=active - (0 if spec.tied_embeddings else embedding),
        active_non_embedding=active - embedding - lm_head,
        embedding=embedding,
        lm_head=lm_head,
        attention=attention,
        norms=norms,
        dense_ffn=dense_ffn,
        routed_experts=routed,
        routed_experts_active=routed_active,
        shared_experts=shared,
        router=router,
        mtp=mtp,
        total_with_mtp=total + mtp,
    )


def params_as_published(spec: ModelSpec) -> tuple[int, int]:
    """(total, active) counted the way the publisher counts them, to compare with `published_*_params`:
    MTP modules in the total only when `published_total_includes_mtp`; the vocabulary matrices in the
    active count as `published_active_counts` says."""
    counts = param_counts(spec)
    total = counts.total_with_mtp if spec.published_total_includes_mtp else counts.total
    active = {
        "embedding_and_lm_head": counts.active,
        "lm_head": counts.active_excl_embedding,
        "neither": counts.active_non_embedding,
    }[spec.published_active_counts]
    return total, active


# ---------------------------------------------------------------------------------------------------
# Exact weight bytes per component (in the model's formats)


def attention_weight_bytes(spec: ModelSpec, kind: AttentionLayerKind) -> int:
    """Bytes of one attention layer of `kind`: projections in the dense format, vectors 16-bit."""
    matrices = _bytes(spec.dense_format, attention_projections(spec, kind))
    return matrices + _vector_bytes(spec, attention_vector_params(spec, kind))


def expert_weight_bytes(spec: ModelSpec) -> int:
    """Bytes of ONE routed expert (gate + up + down) in the expert format, biases 16-bit."""
    bias = 2 * spec.expert_width + spec.hidden if spec.expert_bias else 0
    return _bytes(spec.expert_format, expert_matrices(spec)) + _vector_bytes(spec, bias)


def shared_expert_weight_bytes(spec: ModelSpec) -> int:
    """Bytes of ALL shared experts of one MoE layer (dense format), plus a shared-expert gate."""
    gate = spec.hidden if spec.shared_expert_gate and spec.n_shared_experts else 0
    one = _bytes(spec.dense_format, shared_expert_matrices(spec))
    return spec.n_shared_experts * one + _vector_bytes(spec, gate)


def dense_ffn_weight_bytes(spec: ModelSpec) -> int:
    """Bytes of one dense layer's FFN in the dense format."""
    return _bytes(spec.dense_format, dense_ffn_matrices(spec)) if spec.dense_ffn_width else 0


def router_weight_bytes(spec: ModelSpec) -> int:
    """Bytes of one MoE layer's router (kept 16-bit in quantised checkpoints)."""
    return _vector_bytes(spec, router_params(spec)) if spec.n_experts else 0


def layer_norm_bytes(spec: ModelSpec) -> int:
    """Bytes of one block's norm weights."""
    return _vector_bytes(spec, layer_norm_params(spec))


def embedding_bytes(spec: ModelSpec) -> int:
    """Bytes of the input embedding table (16-bit)."""
    return _vector_bytes(spec, spec.vocab * spec.hidden)


def lm_head_bytes(spec: ModelSpec) -> int:
    """Extra storage of the LM head: 0 when tied to the embedding (see `lm_head_read_bytes`)."""
    return 0 if spec.tied_embeddings else lm_head_read_bytes(spec)


def lm_head_read_bytes(spec: ModelSpec) -> int:
    """Bytes the LM head reads at every step, tied or not (16-bit)."""
    return _vector_bytes(spec, spec.vocab * spec.hidden)


def mtp_weight_bytes(spec: ModelSpec) -> int:
    """Bytes of one MTP module (its embedding and LM head are the model's own, not counted)."""
    h = spec.hidden
    block = attention_weight_bytes(spec, "full") + layer_norm_bytes(spec)
    if spec.is_moe:
        block += spec.n_experts * expert_weight_bytes(spec) + shared_expert_weight_bytes(spec)
        block += router_weight_bytes(spec)
    else:
        block += dense_ffn_weight_bytes(spec)
    return block + spec.dense_format.matrix_bytes(h, 2 * h) + _vector_bytes(spec, 3 * h)


def total_weight_bytes(spec: ModelSpec, include_mtp: bool = False) -> int:
    """Bytes of every weight of the model as stored (MTP modules only when `include_mtp`)."""
    kinds = _kinds(spec)
    total = sum(n * attention_weight_bytes(spec, kind) for kind, n in kinds.items())
    total += spec.n_layers * layer_norm_bytes(spec) + _vector_bytes(spec, spec.hidden)
    total += spec.n_dense_layers * dense_ffn_weight_bytes(spec)
    if spec.n_moe_layers:
        per_layer = spec.n_experts * expert_weight_bytes(spec) + shared_expert_weight_bytes(spec)
        total += spec.n_moe_layers * (per_layer + router_weight_bytes(spec))
    total += embedding_bytes(spec) + lm_head_bytes(spec)
    if include_mtp:
        total += spec.mtp_layers * mtp_weight_bytes(spec)
    return total


# ---------------------------------------------------------------------------------------------------
# KV cache and recurrent state


# An indexer key is cached in fp8 with one fp32 scale per key (DeepSeek-V3.2's lightning indexer).
INDEX_KEY_SCALE_BYTES = 4


def kv_cache_bytes_per_token(spec: ModelSpec, kind: AttentionLayerKind, dtype_bytes: float = 2) -> float:
    """KV-cache bytes one cached entry adds to one layer of `kind` (the attention core reads these).

    GQA/MHA: K and V for each KV head (one tensor when `shared_kv`). MLA caches the compressed latent
    plus the shared rope key (kv_lora_rank + qk_rope_head_dim). Linear-attention layers have no
    per-token cache (see `linear_state_bytes`); indexer keys are apart (`index_key_bytes_per_token`).
    """
    if kind == "linear":
        return 0.0
    att = attention_for(spec, kind)
    if att.is_mla:
        return ((att.kv_lora_rank or 0) + (att.qk_rope_head_dim or 0)) * dtype_bytes
    if att.shared_kv:
        return att.num_kv_heads * att.head_dim * dtype_bytes
    return att.num_kv_heads * (att.head_dim + att.value_head_dim) * dtype_bytes


def index_key_bytes_per_token(spec: ModelSpec, kind: AttentionLayerKind) -> float:
    """Bytes of the indexer key one cached entry adds to a sparse-attention layer (0 without an indexer)."""
    att = attention_for(spec, kind)
    if kind != "full" or att.index_topk is None:
        return 0.0
    return att.index_head_dim + INDEX_KEY_SCALE_BYTES


def cached_tokens(spec: ModelSpec, kind: AttentionLayerKind, context_len: int) -> int:
    """Entries one sequence keeps in a layer of `kind`: a window for sliding layers; for compressed caches
    one entry per `ratio` tokens plus the uncompressed local window; otherwise every token."""
    if kind == "linear":
        return 0
    att = attention_for(spec, kind)
    if kind == "sliding" and att.sliding_window:
        return min(context_len, att.sliding_window)
    ratio = att.compressed_ratio if kind == "compressed" else att.kv_compress_ratio
    if ratio > 1:
        return math.ceil(context_len / ratio) + min(context_len, att.sliding_window or 0)
    return context_len


def attended_tokens(spec: ModelSpec, kind: AttentionLayerKind, context_len: int) -> int:
    """Cached entries one query attends to in a layer of `kind`: the window caps sliding layers, the
    indexer's top-k caps sparse layers (plus their local window), compression divides the context."""
    cached = cached_tokens(spec, kind, context_len)
    att = attention_for(spec, kind)
    if kind != "full" or att.index_topk is None:
        return cached
    local = min(context_len, att.sliding_window or 0) if att.kv_compress_ratio > 1 else 0
    return min(cached - local, att.index_topk) + local


def indexed_tokens(spec: ModelSpec, kind: AttentionLayerKind, context_len: int) -> int:
    """Cached entries the sparse-attention indexer scores for one query (0 without an indexer)."""
    if not index_key_bytes_per_token(spec, kind):
        return 0
    att = attention_for(spec, kind)
    return math.ceil(context_len / att.kv_compress_ratio)


def kv_cache_bytes(spec: ModelSpec, context_len: int, dtype_bytes: float = 2) -> float:
    """KV-cache bytes of one sequence of `context_len` tokens across all layers (linear layers excluded),
    indexer keys included."""
    return sum(
        cached_tokens(spec, kind, context_len) * kv_cache_bytes_per_token(spec, kind, dtype_bytes)
        + indexed_tokens(spec, kind, context_len) * index_key_bytes_per_token(spec, kind)
        for kind in spec.layer_attention
    )


def linear_state_bytes(spec: ModelSpec, dtype_bytes: float = 2) -> float:
    """Fixed state of ONE linear-attention layer for one sequence: the recurrent matrix per value head
    (key_head_dim × value_head_dim) plus the causal-conv tail (conv_dim × (kernel − 1))."""
    lin = spec.linear_attention
    if lin is None:
        return 0.0
    recurrent = lin.num_value_heads * lin.key_head_dim * lin.value_head_dim
    conv_dim = 2 * lin.num_key_heads * lin.key_head_dim + lin.num_value_heads * lin.value_head_dim
    return (recurrent + conv_dim * (lin.conv_kernel - 1)) * dtype_bytes


def sequence_state_bytes(spec: ModelSpec, context_len: int, dtype_bytes: float = 2) -> float:
    """Everything one sequence keeps between steps: KV cache plus all linear-attention states."""
    n_linear = sum(1 for kind in spec.layer_attention if kind == "linear")
    return kv_cache_bytes(spec, context_len, dtype_bytes) + n_linear * linear_state_bytes(spec, dtype_bytes)


# ---------------------------------------------------------------------------------------------------
# FLOPs per token


def matmul_flops(rows: int, cols: int, tokens: int = 1) -> int:
    """FLOPs of multiplying `tokens` vectors by a rows × cols matrix (2 per multiply-accumulate)."""
    return 2 * rows * cols * tokens


def attention_projection_flops_per_token(spec: ModelSpec, kind: AttentionLayerKind) -> int:
    """Matmul FLOPs of one attention layer's projections for one token."""
    return sum(matmul_flops(rows, cols) for _, rows, cols in attention_projections(spec, kind))


def attention_flops_per_token(
    spec: ModelSpec, kind: AttentionLayerKind, context_len: int, mla_absorbed: bool = True
) -> float:
    """Attention-core FLOPs (scores and weighted values, projections excluded) for one query token.

    GQA/MHA: 2·H·d for QKᵀ plus 2·H·d for AV per attended token. MLA absorbed (as decode kernels run
    it): scores over the latent plus rope key (kv_lora + rope) and values over the latent; MLA
    non-absorbed: over the decompressed per-head dims. A sparse-attention indexer adds 2·heads·dim per
    entry it scores (every cached entry). Linear attention (Gated DeltaNet): a fixed cost
    of about 7·dk·dv per value head (decay, delta-rule read, rank-1 update, output read), independent of
    the context length.
    """
    if kind == "linear":
        lin = spec.linear_attention
        assert lin is not None
        return 7.0 * lin.num_value_heads * lin.key_head_dim * lin.value_head_dim
    att = attention_for(spec, kind)
    tokens = attended_tokens(spec, kind, context_len)
    indexer = 2.0 * att.index_heads * att.index_head_dim * indexed_tokens(spec, kind, context_len)
    if att.is_mla:
        kv_lora, rope = att.kv_lora_rank or 0, att.qk_rope_head_dim or 0
        if mla_absorbed:
            per_token = 2 * att.num_heads * (kv_lora + rope) + 2 * att.num_heads * kv_lora
        else:
            nope, v_dim = att.qk_nope_head_dim or 0, att.v_head_dim or 0
            per_token = 2 * att.num_heads * (nope + rope) + 2 * att.num_heads * v_dim
        return float(per_token * tokens) + indexer
    return float(2 * att.num_heads * (att.head_dim + att.value_head_dim) * tokens) + indexer


def expert_flops_per_token(spec: ModelSpec) -> int:
    """Matmul FLOPs of ONE routed expert for one token."""
    return sum(matmul_flops(rows, cols) for _, rows, cols in expert_matrices(spec))


def shared_expert_flops_per_token(spec: ModelSpec) -> int:
    """Matmul FLOPs of all shared experts of one layer (and their gate) for one token."""
    one = sum(matmul_flops(rows, cols) for _, rows, cols in shared_expert_matrices(spec))
    gate = matmul_flops(1, spec.hidden) if spec.shared_expert_gate and spec.n_shared_experts else 0
    return spec.n_shared_experts * one + gate


def dense_ffn_flops_per_token(spec: ModelSpec) -> int:
    return sum(matmul_flops(rows, cols) for _, rows, cols in dense_ffn_matrices(spec))


def router_flops_per_token(spec: ModelSpec) -> int:
    _, rows, cols = router_matrix(spec)
    return matmul_flops(rows, cols)


def lm_head_flops_per_token(spec: ModelSpec) -> int:
    _, rows, cols = lm_head_matrix(spec)
    return matmul_flops(rows, cols)


# ---------------------------------------------------------------------------------------------------
# Layer patterns and overrides for hypothetical designs


@dataclass(frozen=True)
class LayerPattern:
    """A regular layer layout: the first `dense_prefix` layers dense, then layer i is MoE when
    i % moe_every == moe_offset (moe_every 0: no MoE layers); attention kinds repeat `attention_cycle`.

    DeepSeek-V3: dense_prefix 3, moe_every 1. Llama-4-Maverick: moe_every 2, moe_offset 1.
    gpt-oss: attention_cycle (sliding, full). Qwen3-Next: (linear, linear, linear, full).
    """

    n_layers: int
    dense_prefix: int = 0
    moe_every: int = 1
    moe_offset: int = 0
    attention_cycle: tuple[AttentionLayerKind, ...] = ("full",)

    def build(self) -> tuple[tuple[AttentionLayerKind, ...], tuple[FfnLayerKind, ...]]:
        """The per-layer (attention kinds, FFN kinds) of this pattern."""
        if self.n_layers <= 0:
            raise MoesimError("layers", f"must be a positive integer, got {self.n_layers}")
        if not self.attention_cycle:
            raise MoesimError("layers.attention_cycle", "is empty", "give at least one attention kind")
        if self.moe_every < 0 or self.dense_prefix < 0 or not 0 <= self.moe_offset < max(self.moe_every, 1):
            raise MoesimError(
                "layers",
                f"bad MoE pattern (dense_prefix {self.dense_prefix}, moe_every {self.moe_every}, "
                f"moe_offset {self.moe_offset})",
                "use dense_prefix ≥ 0, moe_every ≥ 0 and 0 ≤ moe_offset < moe_every",
            )
        cycle = self.attention_cycle
        attention = tuple(cycle[i % len(cycle)] for i in range(self.n_layers))
        ffn: tuple[FfnLayerKind, ...] = tuple(
            "moe"
            if self.moe_every and i >= self.dense_prefix and i % self.moe_every == self.moe_offset
            else "dense"
            for i in range(self.n_layers)
        )
        return attention, ffn


def layer_pattern(spec: ModelSpec) -> LayerPattern | None:
    """The regular pattern that rebuilds `spec`'s layers exactly, or None if the layout is irregular."""
    attn = spec.layer_attention
    n = len(attn)
    period = next(p for p in range(1, n + 1) if all(attn[i] == attn[i % p] for i in range(n)))
    cycle = attn[:period]
    moe = [i for i, kind in enumerate(spec.layer_ffn) if kind == "moe"]
    if not moe:
        pattern = LayerPattern(n, moe_every=0, attention_cycle=cycle)
    else:
        every = math.gcd(*(b - a for a, b in itertools.pairwise(moe))) if len(moe) > 1 else 1
        offset = moe[0] % every
        below = [i for i in range(moe[0]) if i % every == offset]
        pattern = LayerPattern(n, (below[-1] + 1) if below else 0, every, offset, cycle)
    return pattern if pattern.build() == (spec.layer_attention, spec.layer_ffn) else None


def with_layer_count(spec: ModelSpec, n_layers: int) -> ModelSpec:
    """`spec` with `n_layers` layers, keeping its dense-prefix / interleave / attention-cycle rule."""
    pattern = layer_pattern(spec)
    if pattern is None:
        raise MoesimError(
            "layers",
            f"{spec.name}'s layer layout is irregular, so it cannot be stretched to {n_layers} layers",
            "edit layer_attention/layer_ffn in a catalogue-style TOML file instead",
        )
    if not isinstance(n_layers, int) or isinstance(n_layers, bool) or n_layers <= 0:
        raise MoesimError("layers", f"must be a positive integer, got {n_layers!r}", "give --layers ≥ 1")
    attention, ffn = replace(pattern, n_layers=n_layers).build()
    return replace(spec, layer_attention=attention, layer_ffn=ffn)


# (cli_flag, field, type, help). Bool options take true/false (click's BOOL type).
OVERRIDE_OPTIONS: tuple[tuple[str, str, type, str], ...] = (
    ("--experts", "n_experts", int, "routed experts per MoE layer (N)"),
    ("--top-k", "top_k", int, "routed experts chosen per token (k)"),
    ("--expert-width", "expert_width", int, "intermediate width of one routed expert"),
    ("--shared-experts", "n_shared_experts", int, "shared experts per MoE layer"),
    ("--shared-expert-width", "shared_expert_width", int, "intermediate width of one shared expert"),
    ("--dense-ffn-width", "dense_ffn_width", int, "intermediate width of the dense layers' FFN"),
    ("--hidden", "hidden", int, "model (residual) width"),
    ("--layers", "layers", int, "layer count; keeps the dense-prefix / interleave / attention pattern"),
    ("--vocab", "vocab", int, "vocabulary size"),
    ("--n-groups", "n_groups", int, "expert groups for group-limited routing (1: none)"),
    ("--topk-groups", "topk_groups", int, "groups a token may route into"),
    ("--router-score", "router_score", str, "router scoring: softmax or sigmoid"),
    (
        "--weight-format",
        "weight_format",
        str,
        "weight format of all layers (bf16, fp16, fp8, mxfp4, nvfp4, int4, ...)",
    ),
    ("--expert-weight-format", "expert_weight_format", str, "weight format of the routed experts only"),
    ("--mtp-layers", "mtp_layers", int, "multi-token-prediction modules"),
    ("--tied-embeddings", "tied_embeddings", bool, "tie the LM head to the embedding (true/false)"),
    ("--heads", "num_heads", int, "attention query heads"),
    ("--kv-heads", "num_kv_heads", int, "attention key/value heads"),
    ("--head-dim", "head_dim", int, "attention head dimension"),
    ("--sliding-window", "sliding_window", int, "window of the sliding-attention layers"),
)

_ATTENTION_FIELDS = {f.name for f in fields(AttentionSpec)}


def _coerce(field: str, value: object, expected: type | None) -> object:
    if value is None or expected is None:
        return value
    if expected is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "false", "1", "0", "yes", "no"):
            return value.strip().lower() in ("true", "1", "yes")
        raise MoesimError(field, f"expects true or false, got {value!r}", f"give {field} as true/false")
    if expected is int:
        if isinstance(value, bool):
            raise MoesimError(field, f"expects a whole number, got {value!r}")
        try:
            as_float = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise MoesimError(field, f"expects a whole number, got {value!r}") from None
        if not as_float.is_integer():
            raise MoesimError(field, f"expects a whole number, got {value!r}")
        return check_count(int(as_float), field, low=0, fix=f"give {field} as a whole number")
    if expected is float:
        return check_finite(value, field, fix=f"give {field} as a number")
    return str(value)


def _field_type(name: str) -> type | None:
    """The scalar type a field's value is coerced to; None for structured fields (passed through)."""
    for flag_field in OVERRIDE_OPTIONS:
        if flag_field[1] == name:
            return flag_field[2]
    sample = {f.name: f for f in fields(ModelSpec)} | {f.name: f for f in fields(AttentionSpec)}
    type_text = str(sample[name].type)
    if "Spec" in type_text or "tuple" in type_text:
        return None
    return scalar_type(type_text)


def scalar_type(type_text: str) -> type:
    """The scalar type (bool, float, int or str) a dataclass field's annotation text asks for."""
    if "bool" in type_text:
        return bool
    if "float" in type_text:
        return float
    if "int" in type_text and "Literal" not in type_text:
        return int
    return str


def apply_overrides(spec: ModelSpec, overrides: dict[str, object]) -> ModelSpec:
    """A hypothetical design: `spec` with `overrides` (field name → value; None values ignored) applied.

    Derived changes follow sensibly: `layers` rebuilds the layer pattern keeping the dense-prefix rule;
    `weight_format` sets both formats unless `expert_weight_format` is also given; attention fields
    (num_heads, num_kv_heads, head_dim, sliding_window, ...) change the attention spec; adding shared
    experts without a width uses the routed expert width; giving a dense model experts (with a top-k)
    turns all its layers into MoE layers, experts as wide as its dense FFN unless `expert_width` is
    given. Values may be strings (from the command line). The result is validated.
    """
    given = {key: value for key, value in overrides.items() if value is not None}
    known = set(OVERRIDABLE_FIELDS) | _ATTENTION_FIELDS | {"layers"}
    unknown = sorted(set(given) - known)
    if unknown:
        raise MoesimError(
            "override",
            f"unknown model field(s) {', '.join(unknown)}",
            f"choose from {', '.join(sorted(known))}",
        )
    values = {key: _coerce(key, value, _field_type(key)) for key, value in given.items()}
    if "layers" in values:
        spec = with_layer_count(spec, values.pop("layers"))  # type: ignore[arg-type]
    attention_changes = {key: values.pop(key) for key in list(values) if key in _ATTENTION_FIELDS}
    if attention_changes:
        spec = replace(spec, attention=replace(spec.attention, **attention_changes))  # type: ignore[arg-type]
    if "sliding_window" in attention_changes and not {"sliding", "compressed"} & set(spec.layer_attention):
        raise MoesimError(
            "sliding_window",
            f"{spec.name} has no sliding-window layers, so a window changes nothing",
            "drop --sliding-window for this model",
        )
    if "weight_format" in values and "expert_weight_format" not in values:
        values["expert_weight_format"] = None
    if "shared_expert_width" in values and not values.get("n_shared_experts", spec.n_shared_experts):
        raise MoesimError(
            "shared_expert_width",
            f"{spec.name} has no shared experts, so their width changes nothing",
            "add --shared-experts N, or drop --shared-expert-width",
        )
    if (
        values.get("n_shared_experts")
        and "shared_expert_width" not in values
        and not spec.shared_expert_width
    ):
        values["shared_expert_width"] = values.get("expert_width", spec.expert_width)
    if not spec.is_moe and values.get("n_experts"):
        values.setdefault("expert_width", spec.expert_width or spec.dense_ffn_width)
        spec = replace(spec, layer_ffn=tuple("moe" for _ in spec.layer_ffn))
    return with_overrides(spec, **values)


__all__ = [
    "ATTENTION_KINDS",
    "FFN_KINDS",
    "OVERRIDABLE_FIELDS",
    "OVERRIDE_OPTIONS",
    "WEIGHT_FORMATS",
    "AttentionSpec",
    "LayerPattern",
    "LinearAttentionSpec",
    "ModelSpec",
    "ParamCounts",
    "WeightFormat",
    "apply_overrides",
    "attended_tokens",
    "attention_flops_per_token",
    "attention_for",
    "attention_params",
    "attention_projection_flops_per_token",
    "attention_projections",
    "attention_vector_params",
    "attention_weight_bytes",
    "cached_tokens",
    "dense_ffn_flops_per_token",
    "dense_ffn_matrices",
    "dense_ffn_params",
    "dense_ffn_weight_bytes",
    "embedding_bytes",
    "expert_flops_per_token",
    "expert_matrices",
    "expert_params",
    "expert_weight_bytes",
    "high_precision_format",
    "index_key_bytes_per_token",
    "indexed_tokens",
    "kv_cache_bytes",
    "kv_cache_bytes_per_token",
    "layer_norm_bytes",
    "layer_norm_params",
    "layer_pattern",
    "linear_state_bytes",
    "lm_head_bytes",
    "lm_head_flops_per_token",
    "lm_head_matrix",
    "lm_head_read_bytes",
    "matmul_flops",
    "mtp_layer_params",
    "mtp_weight_bytes",
    "param_counts",
    "params_as_published",
    "router_flops_per_token",
    "router_matrix",
    "router_params",
    "router_weight_bytes",
    "scalar_type",
    "sequence_state_bytes",
    "shared_expert_flops_per_token",
    "shared_expert_matrices",
    "shared_expert_params",
    "shared_expert_weight_bytes",
    "total_weight_bytes",
    "validate_spec",
    "weight_format",
    "with_layer_count",
    "with_overrides",
]
