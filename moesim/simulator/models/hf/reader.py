"""Reading a Hugging Face `config.json`: key aliases, layer lists, weight formats, and what was not read.

`HfConfig` wraps the parsed dict; every read marks its key, so after import the keys nobody read are
reported (`ignored_keys`), minus `NO_SHAPE_KEYS` (keys that change neither weights nor step time). Errors
name the file and the key. The helpers here are the general reader: family modules combine them with
the defaults and rules of their transformers configuration class and modelling file.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from moesim.errors import MoesimError
from moesim.simulator.bounds import MAX_LAYERS, check_count
from moesim.simulator.models.spec import AttentionLayerKind, AttentionSpec, FfnLayerKind, LinearAttentionSpec

_MISSING = object()

# Keys with no effect on weight shapes, bytes or per-step work: token ids, positions and rope, numerics,
# training-only settings, routing scale factors (they rescale outputs, not work), bookkeeping.
NO_SHAPE_KEYS = frozenset(
    [
        "_name_or_path",
        "architectures",
        "auto_map",
        "transformers_version",
        "model_type",
        "torch_dtype",
        "dtype",
        "use_cache",
        "bos_token_id",
        "eos_token_id",
        "pad_token_id",
        "sep_token_id",
        "decoder_start_token_id",
        "eod_token_id",
        "image_token_id",
        "video_token_id",
        "image_token_index",
        "audio_token_id",
        "vision_start_token_id",
        "vision_end_token_id",
        "boi_token_index",
        "eoi_token_index",
        "boi_token_id",
        "eoi_token_id",
        "boa_token_id",
        "eoa_token_index",
        "image_start_token_id",
        "image_end_token_id",
        "video_start_token_id",
        "video_end_token_id",
        "audio_start_token_id",
        "user_token_id",
        "position_id_per_seconds",
        "max_position_embeddings",
        "max_seq_len",
        "model_max_length",
        "seq_length",
        "rope_theta",
        "rope_scaling",
        "rope_parameters",
        "rope_interleave",
        "partial_rotary_factor",
        "rotary_dim",
        "rope_type",
        "compress_rope_theta",
        "layer_rope_theta",
        "rms_norm_eps",
        "layer_norm_eps",
        "layer_norm_epsilon",
        "norm_eps",
        "norm_epsilon",
        "initializer_range",
        "hidden_act",
        "hidden_activation",
        "activation_function",
        "mlp_hidden_act",
        "mamba_hidden_act",
        "attention_dropout",
        "hidden_dropout",
        "resid_pdrop",
        "emb_pdrop",
        "embd_pdrop",
        "residual_dropout",
        "dropout",
        "attn_pdrop",
        "output_router_logits",
        "router_aux_loss_coef",
        "aux_loss_coef",
        "router_z_loss_coef",
        "router_jitter_noise",
        "input_jitter_noise",
        "moe_jitter_eps",
        "moe_loss_weight",
        "seq_aux",
        "mtp_loss_scaling_factor",
        "norm_topk_prob",
        "moe_renormalize",
        "routed_scaling_factor",
        "route_scale",
        "router_scaling_factor",
        "moe_router_scaling_factor",
        "moe_normalize_expert_weights",
        "moe_norm_min",
        "embedding_multiplier",
        "logits_scaling",
        "residual_multiplier",
        "attention_multiplier",
        "logit_scale",
        "mup_enabled",
        "full_attn_alpha_factor",
        "full_attn_beta_factor",
        "linear_attn_alpha_factor",
        "linear_attn_beta_factor",
        "mlp_alpha_factor",
        "mlp_beta_factor",
        "attention_value_scale",
        "attn_temperature_tuning",
        "floor_scale",
        "attn_scale",
        "query_pre_attn_scalar",
        "final_logit_softcapping",
        "attn_logit_softcapping",
        "swiglu_limit",
        "swiglu_alpha",
        "swiglu_limits",
        "swiglu_limits_shared",
        "clip_qkv",
        "pretraining_tp",
        "use_mamba_kernels",
        "use_mambapy",
        "use_associative_scan",
        "time_step_limit",
        "time_step_min",
        "time_step_max",
        "time_step_floor",
        "chunk_size",
        "mamba_chunk_size",
        "block_size",
        "num_logits_to_keep",
        "residual_in_fp32",
        "rescale_prenorm_residual",
        "enable_moe_fp32_combine",
        "kda_safe_gate",
        "kda_lower_bound",
        "linear_lower_bound",
        "hc_eps",
        "hc_sinkhorn_iters",
        "return_dict",
        "output_hidden_states",
        "output_attentions",
        "torchscript",
        "chunk_size_feed_forward",
        "is_encoder_decoder",
        "id2label",
        "label2id",
        "problem_type",
        "tokenizer_class",
        "task_specific_params",
        "tie_encoder_decoder",
        "is_decoder",
        "add_cross_attention",
        "cross_attention_hidden_size",
        "prefix",
        "finetuning_task",
        "tf_legacy_loss",
        "use_bfloat16",
        "pruned_heads",
        "bad_words_ids",
        "num_labels",
        "ffn_act_fn",
        "moe_aux_loss_coeff",
        "moe_z_loss_coeff",
        "topk_method",
        "expert_selection_fn",
        "use_bidirectional_attention",
    ]
)

# Attention kinds of transformers' `layer_types` values (and vendor spellings).
LAYER_TYPES: dict[str, AttentionLayerKind] = {
    "full_attention": "full",
    "attention": "full",
    "global": "full",
    "indexed_attention": "full",  # sparse: AttentionSpec.index_topk caps the attended entries
    "compressed_sparse_attention": "full",  # DeepSeek-V4 CSA: compressed cache + indexer
    "heavily_compressed_attention": "compressed",  # DeepSeek-V4 HCA
    "sliding_attention": "sliding",
    "local": "sliding",
    "chunked_attention": "sliding",  # Llama-4: attends within its chunk, at most chunk-size tokens back
    "linear_attention": "linear",
    "mamba": "linear",
    "conv": "linear",
}
MOE_LAYER_TYPES = frozenset({"sparse", "moe", "hash_moe"})
DENSE_LAYER_TYPES = frozenset({"dense", "mlp"})
_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "bf16", None: "bf16"}


class HfConfig:
    """A config dict that remembers the keys read (for the ignored-keys report) and names them in errors.

    `sub(key)` gives the nested config with the same bookkeeping; `assume(text)` records an
    approximation the importer made, shown with the imported model.
    """

    def __init__(
        self,
        data: dict[str, Any],
        origin: str,
        prefix: str = "",
        used: set[str] | None = None,
        assumptions: list[str] | None = None,
        entered: set[str] | None = None,
        not_modelled: set[str] | None = None,
    ) -> None:
        self.data, self.origin, self.prefix = data, origin, prefix
        self.used: set[str] = set() if used is None else used
        self.entered: set[str] = set() if entered is None else entered  # sub-configs read key by key
        self.assumptions: list[str] = [] if assumptions is None else assumptions
        self.not_modelled: set[str] = set() if not_modelled is None else not_modelled  # towers, stated

    def field(self, key: str) -> str:
        return f"{self.origin}:{self.prefix}{key}"

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def get(self, key: str, default: Any = _MISSING) -> Any:
        self.used.add(self.prefix + key)
        value = self.data.get(key)
        if value is None:
            if default is _MISSING:
                raise MoesimError(self.field(key), "is missing", "the config must give this key")
            return default
        return value

    def integer(self, key: str, default: Any = _MISSING) -> Any:
        """An integer key; `default` (which may be None) when absent.

        A per-layer list (Hunyuan's `moe_topk`, `moe_intermediate_size`, `num_shared_expert`) gives its
        common value; a list whose values differ gives their rounded mean, stated as an assumption
        (the model keeps one value per field for all its layers).
        """
        value = self.get(key, default)
        if value is None:
            return None
        if isinstance(value, list) and value and all(isinstance(v, (int, float)) for v in value):
            for item in value:
                check_count(item, self.field(key), low=0, fix="write whole numbers ≥ 0 a model can have")
            if len(set(value)) > 1:
                mean = round(sum(value) / len(value))
                self.assume(
                    f"{self.prefix}{key}: per-layer values {min(value)}–{max(value)} modelled as their mean {mean}"
                )
                return mean
            value = value[0]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise MoesimError(self.field(key), f"expects an integer, got {value!r}", "write a whole number")
        if key in LAYER_KEYS:  # the layers are built one by one: bounded before any is
            return check_count(
                value, self.field(key), low=0, high=MAX_LAYERS, fix="write the model's layer count"
            )
        return check_count(value, self.field(key), low=0, fix="write a whole number ≥ 0 a model can have")

    def boolean(self, key: str, default: bool) -> bool:
        value = self.get(key, default)
        if not isinstance(value, (bool, int)):
            raise MoesimError(self.field(key), f"expects true or false, got {value!r}", "write true or false")
        return bool(value)

    def first_integer(self, keys: Iterable[str], default: Any = _MISSING) -> Any:
        """The first present of several alias keys; a missing value is reported under the first name. Every
        alias present is checked as a count (a later one is not read, but it must not be nonsense either)."""
        keys = tuple(keys)
        self.used.update(self.prefix + key for key in keys[1:])
        present = [key for key in keys if self.has(key)]
        for key in present[1:]:
            value = self.data[key]
            if not isinstance(value, list):
                check_count(value, self.field(key), low=0, fix="write a whole number ≥ 0 a model can have")
        if present:
            return self.integer(present[0])
        if default is _MISSING:
            raise MoesimError(
                self.field(keys[0]), "is missing", f"the config must give one of {', '.join(keys)}"
            )
        return self.integer(keys[0], default)

    def sequence(self, key: str, length: int | None = None) -> list[Any] | None:
        """A list key (None when absent), checked to hold one entry per layer when `length` is given
        (an empty per-layer list means absent, as transformers reads it)."""
        value = self.get(key, None)
        if value is None or (value == [] and length is not None):
            return None
        if not isinstance(value, list):
            raise MoesimError(self.field(key), f"expects a list, got {value!r}", "write a JSON list")
        if length is not None and len(value) != length:
            raise MoesimError(
                self.field(key), f"has {len(value)} entries for {length} layers", "give one entry per layer"
            )
        return value

    def mapping(self, key: str, default: dict[str, Any]) -> dict[str, Any]:
        """An object-valued key read whole (e.g. per-layer overrides), checked to be an object."""
        value = self.get(key, default)
        if not isinstance(value, dict):
            raise MoesimError(self.field(key), f"must be an object, got {value!r}", "write a JSON object")
        return value

    def sub(self, key: str) -> HfConfig:
        value = self.get(key, {})
        if not isinstance(value, dict):
            raise MoesimError(self.field(key), f"must be an object, got {value!r}", "write a JSON object")
        self.entered.add(self.prefix + key)
        return HfConfig(
            value,
            self.origin,
            f"{self.prefix}{key}.",
            self.used,
            self.assumptions,
            self.entered,
            self.not_modelled,
        )

    def assume(self, text: str) -> None:
        if text not in self.assumptions:
            self.assumptions.append(text)

    def keys_read(self) -> frozenset[str]:
        """Every key (dotted within sub-configs) a reader looked at: the keys whose values reach the model."""
        return frozenset(self.used - self.not_modelled)

    def ignored_keys(self) -> tuple[str, ...]:
        """Keys present (top level and inside the sub-configs read) that no reader looked at; keys set
        to false, zero, null or empty (a feature switched off) are not listed."""
        out: list[str] = []

        def walk(data: dict[str, Any], prefix: str) -> None:
            for key, value in data.items():
                name = prefix + key
                if name in self.entered:
                    walk(value, name + ".")
                elif (
                    name not in self.used
                    and key not in NO_SHAPE_KEYS
                    and not key.endswith(("_token_id", "_token_index"))
                    and value not in (None, False, 0, [], {})
                ):
                    out.append(name)

        walk(self.data, self.prefix)
        return tuple(sorted(out))


# --- Common keys ---------------------------------------------------------------------------------------------

HIDDEN_KEYS = ("hidden_size", "d_model", "n_embd", "dim", "model_dim")
LAYER_KEYS = ("num_hidden_layers", "n_layers", "num_layers", "n_layer")
HEAD_KEYS = ("num_attention_heads", "n_heads", "n_head", "num_heads")
KV_HEAD_KEYS = ("num_key_value_heads", "num_kv_heads", "n_kv_heads", "multi_query_group_num", "kv_n_heads")
EXPERT_KEYS = (
    "num_experts",
    "n_routed_experts",
    "num_local_experts",
    "moe_num_experts",
    "n_experts",
    "num_routed_experts",
)
TOP_K_KEYS = (
    "num_experts_per_tok",
    "num_experts_per_token",
    "top_k_experts",
    "moe_topk",
    "moe_k",
    "moe_top_k",
    "experts_per_token",
    "num_selected_experts",
    "top_k",
)
EXPERT_WIDTH_KEYS = (
    "moe_intermediate_size",
    "expert_ffn_hidden_size",
    "expert_intermediate_size",
    "moe_ffn_hidden_size",
)
SHARED_COUNT_KEYS = (
    "n_shared_experts",
    "num_shared_experts",
    "moe_num_shared_experts",
    "shared_expert_count",
)
SHARED_WIDTH_KEYS = (
    "shared_expert_intermediate_size",
    "shared_intermediate_size",
    "moe_shared_expert_intermediate_size",
    "share_expert_dim",
)
MTP_KEYS = ("num_nextn_predict_layers", "num_mtp_layers", "mtp_num_hidden_layers")


def weight_formats(cfg: HfConfig) -> tuple[str, str | None]:
    """(weight_format, expert_weight_format) from `quantization_config`, else from the checkpoint dtype.

    fp8 with 128×128 blocks (DeepSeek), per-channel or per-tensor scales; MXFP4 on the experts (gpt-oss);
    NVFP4 (one fp8 scale per 16 values); 4-bit GPTQ/AWQ with their group size. Checkpoints that keep
    attention unquantised (an ignore list naming attention) quantise the experts only. fp32 checkpoints
    map to bf16: serving engines load them in 16-bit.
    """
    base = _DTYPES.get(cfg.get("torch_dtype", None) or cfg.get("dtype", None), "bf16")
    if not cfg.has("quantization_config"):
        return base, None
    quant = cfg.sub("quantization_config")
    quant.used.update(quant.prefix + key for key in quant.data)  # the keys below decide; the rest is detail
    method = str(quant.data.get("quant_method", "")).lower()
    fmt = _quantised_format(quant, method)
    skipped = " ".join(
        str(item)
        for key in ("ignore", "modules_to_not_convert", "ignored_layers")
        for item in quant.data.get(key) or []
    )
    if fmt == "mxfp4" or "attn" in skipped:
        return base, fmt
    return fmt, None


def _quantised_format(quant: HfConfig, method: str) -> str:
    if method == "fp8":
        block = quant.data.get("weight_block_size")
        if block is None:
            quant.assume("fp8 without weight_block_size: one scale per output channel assumed")
            return "fp8-channel"
        if list(block) != [128, 128]:
            raise MoesimError(
                quant.field("weight_block_size"),
                f"fp8 with block {block} is not supported",
                "moesim's fp8 format uses 128×128 block scales; override with --weight-format",
            )
        return "fp8"
    if method == "mxfp4":
        return "mxfp4"
    if method in ("modelopt", "nvfp4") or "nvfp4" in str(quant.data.get("quant_algo", "")).lower():
        return "nvfp4"
    if method == "compressed-tensors":
        groups = quant.data.get("config_groups") or {}
        weights = [g.get("weights") or {} for g in groups.values() if isinstance(g, dict)]
        if any(w.get("num_bits") == 4 and w.get("type") == "float" for w in weights):
            return "nvfp4"
        if any(w.get("num_bits") == 4 for w in weights):
            return _int4_format(quant, weights[0].get("group_size"))
        if any(w.get("num_bits") == 8 for w in weights):
            if any(w.get("type") == "int" for w in weights):
                quant.assume("int8 weights modelled as fp8 with per-channel scales (same bytes, same peak)")
            return "fp8-channel"
    if method in ("gptq", "awq", "autoround") and quant.data.get("bits", 4) == 4:
        return _int4_format(quant, quant.data.get("group_size"))
    raise MoesimError(
        quant.field("quant_method"),
        f"unsupported quantisation {method!r}",
        "supported: fp8, mxfp4, nvfp4, 4-bit gptq/awq/compressed-tensors; or override with --weight-format",
    )


def _int4_format(quant: HfConfig, group_size: Any) -> str:
    names = {128: "int4", 64: "int4-g64", 32: "int4-g32", None: "int4"}
    if group_size not in names:
        raise MoesimError(
            quant.field("group_size"),
            f"int4 with group size {group_size} is not supported",
            "supported group sizes: 32, 64, 128; or override with --weight-format",
        )
    return names[group_size]


def attention_kinds(
    cfg: HfConfig, n_layers: int, default: Callable[[int], AttentionLayerKind], key: str = "layer_types"
) -> list[AttentionLayerKind]:
    """Attention kind per layer: an explicit `layer_types` list wins over the family's rule."""
    types = cfg.sequence(key, n_layers)
    if not types:
        return [default(i) for i in range(n_layers)]
    unknown = sorted({str(kind) for kind in types if kind not in LAYER_TYPES})
    if unknown:
        raise MoesimError(
            cfg.field(key), f"unknown layer type {unknown[0]!r}", f"known: {', '.join(LAYER_TYPES)}"
        )
    return [LAYER_TYPES[kind] for kind in types]


def ffn_kinds_from_list(cfg: HfConfig, key: str, n_layers: int) -> list[FfnLayerKind] | None:
    """FFN kind per layer from a per-layer list (`mlp_layer_types`: dense / sparse / moe / hash_moe)."""
    types = cfg.sequence(key, n_layers)
    if types is None:
        return None
    unknown = sorted({str(t) for t in types if t not in MOE_LAYER_TYPES | DENSE_LAYER_TYPES})
    if unknown:
        raise MoesimError(
            cfg.field(key),
            f"unknown MLP layer type {unknown[0]!r}",
            f"known: {', '.join(sorted(MOE_LAYER_TYPES | DENSE_LAYER_TYPES))}",
        )
    return ["moe" if t in MOE_LAYER_TYPES else "dense" for t in types]


def ffn_kinds(
    cfg: HfConfig, n_layers: int, n_experts: int, first_dense_default: int = 0
) -> list[FfnLayerKind]:
    """FFN kind per layer from whichever layer rule the config carries, in this order:
    `mlp_layer_types`; `moe_layers`; `first_k_dense_replace` / `num_dense_layers` with `moe_layer_freq`;
    `decoder_sparse_step` with `mlp_only_layers`; `moe_layer_start_index`..`moe_layer_end_index` every
    `moe_layer_interval`; `interleave_moe_layer_step`; `expert_layer_period` / `expert_layer_offset`;
    else every layer MoE (when the model has experts)."""
    if not n_experts:
        return ["dense"] * n_layers
    listed = ffn_kinds_from_list(cfg, "mlp_layer_types", n_layers)
    if listed is not None:
        return listed
    moe_layers = cfg.sequence("moe_layers")
    if moe_layers is not None:
        return ["moe" if i in set(moe_layers) else "dense" for i in range(n_layers)]
    rules: list[Callable[[int], bool]] = []
    first_dense = cfg.first_integer(("first_k_dense_replace", "num_dense_layers"), first_dense_default)
    rules.append(lambda i: i >= first_dense)
    freq = cfg.integer("moe_layer_freq", 1)
    if isinstance(freq, int) and freq > 1:
        rules.append(lambda i: i % freq == 0)
    step = cfg.integer("decoder_sparse_step", 1)
    if step > 1:
        rules.append(lambda i: (i + 1) % step == 0)
    only_dense = set(cfg.sequence("mlp_only_layers") or [])
    rules.append(lambda i: i not in only_dense)
    if cfg.has("moe_layer_start_index"):
        start = cfg.integer("moe_layer_start_index")
        end = cfg.integer("moe_layer_end_index", n_layers - 1)
        interval = cfg.integer("moe_layer_interval", 1)
        rules.append(
            lambda i: start <= i <= (end if end >= 0 else n_layers - 1) and (i - start) % interval == 0
        )
    interleave = cfg.integer("interleave_moe_layer_step", 1)
    if interleave > 1:
        rules.append(lambda i: (i + 1) % interleave == 0)
    if cfg.has("expert_layer_period"):
        period, offset = cfg.integer("expert_layer_period"), cfg.integer("expert_layer_offset", 0)
        rules.append(lambda i: i % period == offset)
    return ["moe" if all(rule(i) for rule in rules) else "dense" for i in range(n_layers)]


def sliding_rule(cfg: HfConfig) -> Callable[[int], AttentionLayerKind]:
    """Qwen/Mixtral: sliding attention only when the config turns it on (Qwen: from max_window_layers)."""
    window = cfg.get("sliding_window", None)
    use = (
        cfg.boolean("use_sliding_window", window is not None) if "use_sliding_window" in cfg.data else window
    )
    start = cfg.integer("max_window_layers", 0) if "use_sliding_window" in cfg.data else 0
    return lambda i: "sliding" if use and window and i >= start else "full"


def pattern_rule(every: int, full_at: int = 0) -> Callable[[int], AttentionLayerKind]:
    """Sliding layers with one full layer every `every` (at index `full_at` modulo `every`)."""
    return lambda i: "full" if i % every == full_at % every else "sliding"


def window(cfg: HfConfig, kinds: list[AttentionLayerKind], key: str = "sliding_window") -> int | None:
    return cfg.integer(key, None) if "sliding" in kinds else None


def gqa(cfg: HfConfig, hidden: int, **extra: Any) -> AttentionSpec:
    """MHA/GQA from the common keys; head_dim defaults to hidden ÷ heads as in transformers."""
    heads = cfg.first_integer(HEAD_KEYS)
    if heads < 1:
        raise MoesimError(
            cfg.field(HEAD_KEYS[0]), f"must be a positive integer, got {heads}", "give the head count"
        )
    head_dim = cfg.first_integer(("head_dim", "kv_channels", "attention_head_dim"), None)
    if head_dim == 0:  # transformers reads `head_dim or hidden // heads`
        cfg.assume(
            f"{cfg.prefix}head_dim: 0 read as hidden ÷ heads = {hidden // heads}, as transformers does"
        )
    return AttentionSpec(
        num_heads=heads,
        num_kv_heads=cfg.first_integer(KV_HEAD_KEYS, heads),
        head_dim=head_dim if head_dim else hidden // heads,
        **extra,
    )


def softmax_attention(
    cfg: HfConfig,
    rule: Callable[[int], AttentionLayerKind] | None = None,
    *,
    bias_key: str = "attention_bias",
    bias_default: bool = False,
    output_bias: bool = True,
    **extra: Any,
) -> tuple[int, list[AttentionLayerKind], AttentionSpec]:
    """(layer count, attention kind per layer, GQA spec) of a model whose layers all run softmax attention:
    kinds from `layer_types` or `rule` (default: the Qwen/Mixtral sliding rule), q/k/v biases from
    `bias_key` (the output projection too when `output_bias`), the sliding window when any layer slides."""
    n = cfg.first_integer(LAYER_KEYS)
    kinds = attention_kinds(cfg, n, rule or sliding_rule(cfg))
    bias = cfg.boolean(bias_key, bias_default)
    attention = gqa(
        cfg,
        cfg.first_integer(HIDDEN_KEYS),
        bias=bias,
        output_bias=bias and output_bias,
        sliding_window=window(cfg, kinds),
        **extra,
    )
    return n, kinds, attention


def mla(cfg: HfConfig, **extra: Any) -> AttentionSpec:
    """Multi-head latent attention (DeepSeek-V2/V3 lineage) from its latent dimensions."""
    nope, rope = cfg.integer("qk_nope_head_dim"), cfg.integer("qk_rope_head_dim")
    heads = cfg.first_integer(HEAD_KEYS)
    return AttentionSpec(
        num_heads=heads,
        num_kv_heads=cfg.first_integer(KV_HEAD_KEYS, heads),
        head_dim=nope + rope,
        q_lora_rank=cfg.integer("q_lora_rank", None),
        kv_lora_rank=cfg.integer("kv_lora_rank"),
        qk_nope_head_dim=nope,
        qk_rope_head_dim=rope,
        v_head_dim=cfg.integer("v_head_dim"),
        **extra,
    )


def indexer(cfg: HfConfig) -> dict[str, Any]:
    """The sparse-attention indexer fields (DeepSeek-V3.2, GLM-5 DSA, DeepSeek-V4 CSA)."""
    return {
        "index_topk": cfg.integer("index_topk"),
        "index_heads": cfg.integer("index_n_heads"),
        "index_head_dim": cfg.integer("index_head_dim"),
    }


def gated_deltanet(cfg: HfConfig) -> LinearAttentionSpec:
    """Gated DeltaNet linear attention (Qwen3-Next, Qwen3.5); `linear_num_heads` / `linear_head_dim` give
    equal key and value shapes (Kimi-Linear's and Ling's delta-rule layers)."""
    heads, head_dim = ("linear_num_heads",), ("linear_head_dim",)
    return LinearAttentionSpec(
        num_key_heads=cfg.first_integer(("linear_num_key_heads", *heads)),
        num_value_heads=cfg.first_integer(("linear_num_value_heads", *heads)),
        key_head_dim=cfg.first_integer(("linear_key_head_dim", *head_dim)),
        value_head_dim=cfg.first_integer(("linear_value_head_dim", *head_dim)),
        conv_kernel=cfg.integer("linear_conv_kernel_dim", 4),
    )


def experts(
    cfg: HfConfig, width_keys: tuple[str, ...] = EXPERT_WIDTH_KEYS, shared_default: int | None = None
) -> dict[str, Any]:
    """Routed and shared experts from the common spellings.

    The expert width falls back to `intermediate_size` (Mixtral-style configs carry it there). A null
    or absent shared-expert count means none; a shared width without a count means one shared expert;
    a count without a width means shared experts as wide as the routed ones (DeepSeek convention).
    """
    n_experts = cfg.first_integer(EXPERT_KEYS, 0)
    if not n_experts:
        return {}
    top_k = cfg.first_integer(TOP_K_KEYS)
    width = cfg.first_integer((*width_keys, "intermediate_size"))
    shared = cfg.first_integer(SHARED_COUNT_KEYS, shared_default)
    shared_width = cfg.first_integer(SHARED_WIDTH_KEYS, None)
    if shared is None:
        shared = 1 if shared_width else 0
    return {
        "n_experts": n_experts,
        "top_k": top_k,
        "expert_width": width,
        "n_shared_experts": shared,
        "shared_expert_width": (shared_width or width) if shared else 0,
    }


def routing(cfg: HfConfig, scoring_default: str | None = None) -> dict[str, Any]:
    """Group-limited routing (`n_group` / `num_expert_group`, `topk_group`) and the score function
    (`scoring_func`: softmax, sigmoid; others are routed like sigmoid scores, stated)."""
    fields: dict[str, Any] = {
        "n_groups": cfg.first_integer(("n_group", "num_expert_group"), None) or 1,
        "topk_groups": cfg.integer("topk_group", None) or 1,
    }
    scoring = cfg.get("scoring_func", scoring_default)
    if scoring is not None:
        if scoring not in ("softmax", "sigmoid"):
            cfg.assume(
                f"scoring_func {scoring!r}: routed like sigmoid scores (independent per expert, then top-k)"
            )
        fields["router_score"] = "softmax" if scoring == "softmax" else "sigmoid"
    return fields


def moe_block(
    cfg: HfConfig,
    n_layers: int,
    first_dense: int = 0,
    shared_default: int | None = None,
    scoring_default: str | None = None,
) -> dict[str, Any]:
    """Experts (common spellings), the FFN kind of each layer, the dense layers' width and the routing."""
    found = experts(cfg, shared_default=shared_default)
    ffn = ffn_kinds(cfg, n_layers, found.get("n_experts", 0), first_dense)
    return {
        **found,
        "layer_ffn": tuple(ffn),
        "dense_ffn_width": dense_width(cfg, ffn),
        **routing(cfg, scoring_default),
    }


def base(cfg: HfConfig, family: str, **fields: Any) -> dict[str, Any]:
    """The fields every family shares: widths, vocabulary, tied embeddings, weight formats, MTP layers."""
    fmt, expert_fmt = weight_formats(cfg)
    return {
        "family": family,
        "hidden": cfg.first_integer(HIDDEN_KEYS),
        "vocab": cfg.first_integer(("vocab_size", "padded_vocab_size")),
        "tied_embeddings": cfg.boolean("tie_word_embeddings", False),
        "weight_format": fmt,
        "expert_weight_format": expert_fmt,
        "mtp_layers": cfg.first_integer(MTP_KEYS, 0),
        **fields,
    }


def dense_width(
    cfg: HfConfig, ffn: list[FfnLayerKind], keys: tuple[str, ...] = ("intermediate_size",)
) -> int:
    """The dense layers' FFN width (0 when every layer is MoE)."""
    return cfg.first_integer(keys) if "dense" in ffn else 0
