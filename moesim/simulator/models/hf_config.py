"""Import a Hugging Face `config.json` into a ModelSpec, for each supported architecture family.

Field names and defaults follow the transformers configuration classes (configuration_<family>.py) and the
layer rules of the matching modeling code (which layers are MoE, which attention kind each layer uses).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from moesim.errors import MoesimError
from moesim.reading import read_json_table
from moesim.simulator.models.spec import (
    AttentionLayerKind,
    AttentionSpec,
    FfnLayerKind,
    LinearAttentionSpec,
    ModelSpec,
    validate_spec,
)

_MISSING = object()
_LAYER_TYPES: dict[str, AttentionLayerKind] = {
    "full_attention": "full",
    "sliding_attention": "sliding",
    "chunked_attention": "sliding",  # Llama-4: attends within its chunk, at most chunk-size tokens back
    "linear_attention": "linear",
}
_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "bf16", None: "bf16"}


class _Config:
    """A config dict with error messages that name the file and the missing or malformed field."""

    def __init__(self, data: dict[str, Any], origin: str, prefix: str = "") -> None:
        self.data, self.origin, self.prefix = data, origin, prefix

    def get(self, key: str, default: Any = _MISSING) -> Any:
        value = self.data.get(key)
        if value is None:
            if default is _MISSING:
                raise MoesimError(
                    f"{self.origin}:{self.prefix}{key}", "is missing", "the config must give this field"
                )
            return default
        return value

    def integer(self, key: str, default: Any = _MISSING) -> Any:
        """An integer field; `default` (which may be None) when absent."""
        value = self.get(key, default)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
            raise MoesimError(f"{self.origin}:{self.prefix}{key}", f"expects an integer, got {value!r}")
        return int(value)

    def first_integer(self, keys: tuple[str, ...], default: Any = _MISSING) -> Any:
        """The first of several alias fields that is present."""
        for key in keys:
            if self.data.get(key) is not None:
                return self.integer(key)
        return self.integer(keys[0], default)

    def sub(self, key: str) -> _Config:
        value = self.data.get(key) or {}
        if not isinstance(value, dict):
            raise MoesimError(f"{self.origin}:{self.prefix}{key}", f"must be an object, got {value!r}")
        return _Config(value, self.origin, f"{self.prefix}{key}.")


def _weight_formats(cfg: _Config) -> tuple[str, str | None]:
    """(weight_format, expert_weight_format) from quantization_config, else from the checkpoint dtype.

    fp32 checkpoints map to bf16: serving engines load them in 16-bit.
    """
    dtype = cfg.data.get("torch_dtype", cfg.data.get("dtype"))
    base = _DTYPES.get(dtype, "bf16")
    quant = cfg.data.get("quantization_config")
    if not quant:
        return base, None
    method = str(quant.get("quant_method", "")).lower()
    if method == "fp8":
        block = quant.get("weight_block_size")
        if block is not None and list(block) != [128, 128]:
            raise MoesimError(
                f"{cfg.origin}:quantization_config.weight_block_size",
                f"fp8 with block {block} is not supported",
                "moesim's fp8 format uses 128×128 block scales; override with --weight-format",
            )
        return "fp8", None
    if method == "mxfp4":
        return base, "mxfp4"
    if method in ("gptq", "awq", "compressed-tensors") and quant.get("bits", 4) == 4:
        return "int4", None
    raise MoesimError(
        f"{cfg.origin}:quantization_config.quant_method",
        f"unsupported quantisation {method!r}",
        "supported: fp8 (128×128 blocks), mxfp4, 4-bit gptq/awq; or override with --weight-format",
    )


def _layer_kinds(cfg: _Config, n_layers: int, default: Callable[[int], AttentionLayerKind]) -> list[Any]:
    """Attention kind per layer: an explicit `layer_types` list wins over the family's rule."""
    types = cfg.data.get("layer_types")
    if not types:
        return [default(i) for i in range(n_layers)]
    if len(types) != n_layers:
        raise MoesimError(
            f"{cfg.origin}:{cfg.prefix}layer_types",
            f"has {len(types)} entries for {n_layers} layers",
            "give one entry per layer",
        )
    kinds = []
    for kind in types:
        if kind not in _LAYER_TYPES:
            raise MoesimError(
                f"{cfg.origin}:{cfg.prefix}layer_types",
                f"unknown layer type {kind!r}",
                f"known: {', '.join(_LAYER_TYPES)}",
            )
        kinds.append(_LAYER_TYPES[kind])
    return kinds


def _gqa(cfg: _Config, hidden: int, **extra: Any) -> AttentionSpec:
    heads = cfg.integer("num_attention_heads")
    return AttentionSpec(
        num_heads=heads,
        num_kv_heads=cfg.integer("num_key_value_heads", heads),
        head_dim=cfg.integer("head_dim", hidden // heads if heads else 0),
        **extra,
    )


def _mtp_layers(cfg: _Config) -> int:
    return cfg.first_integer(("num_nextn_predict_layers", "num_mtp_layers", "mtp_num_hidden_layers"), 0)


def _sliding_rule(cfg: _Config) -> Callable[[int], AttentionLayerKind]:
    """Qwen/Mixtral: sliding attention only when the config turns it on (Qwen: from max_window_layers)."""
    window = cfg.data.get("sliding_window")
    use = cfg.data.get("use_sliding_window", window is not None)
    start = cfg.integer("max_window_layers", 0) if "use_sliding_window" in cfg.data else 0
    return lambda i: "sliding" if use and window and i >= start else "full"


def _window(cfg: _Config, attention: list[Any]) -> int | None:
    return cfg.integer("sliding_window", None) if "sliding" in attention else None


def _base(cfg: _Config, name: str, family: str, **fields: Any) -> dict[str, Any]:
    weight_format, expert_format = _weight_formats(cfg)
    return {
        "name": name,
        "family": family,
        "hidden": cfg.integer("hidden_size"),
        "vocab": cfg.integer("vocab_size"),
        "tied_embeddings": bool(cfg.get("tie_word_embeddings", False)),
        "weight_format": weight_format,
        "expert_weight_format": expert_format,
        "mtp_layers": _mtp_layers(cfg),
        **fields,
    }


def _qwen_moe_ffn(cfg: _Config, n_layers: int) -> list[FfnLayerKind]:
    """Qwen2/3-MoE and Qwen3-Next: MoE unless listed in mlp_only_layers, every decoder_sparse_step-th layer."""
    only_dense = set(cfg.get("mlp_only_layers", []))
    step = cfg.integer("decoder_sparse_step", 1)
    experts = cfg.integer("num_experts", 0)
    return [
        "moe" if i not in only_dense and experts > 0 and (i + 1) % step == 0 else "dense"
        for i in range(n_layers)
    ]


def _qwen_moe(cfg: _Config, name: str, family: str) -> ModelSpec:
    n = cfg.integer("num_hidden_layers")
    hidden = cfg.integer("hidden_size")
    attention = _layer_kinds(cfg, n, _sliding_rule(cfg))
    ffn = _qwen_moe_ffn(cfg, n)
    fields: dict[str, Any] = {}
    if family == "qwen2_moe":
        bias = bool(cfg.get("qkv_bias", True))
        att = _gqa(cfg, hidden, bias=bias, sliding_window=_window(cfg, attention))
        shared_width = cfg.integer("shared_expert_intermediate_size", 0)
        fields = {"n_shared_experts": 1 if shared_width else 0, "shared_expert_width": shared_width}
        fields["shared_expert_gate"] = bool(shared_width)
    else:
        bias = bool(cfg.get("attention_bias", False))
        att = _gqa(
            cfg, hidden, bias=bias, output_bias=bias, qk_norm=True, sliding_window=_window(cfg, attention)
        )
    return ModelSpec(
        **_base(cfg, name, family, **fields),
        layer_attention=tuple(attention),
        layer_ffn=tuple(ffn),
        attention=att,
        dense_ffn_width=cfg.integer("intermediate_size") if "dense" in ffn else 0,
        n_experts=cfg.integer("num_experts"),
        top_k=cfg.integer("num_experts_per_tok"),
        expert_width=cfg.integer("moe_intermediate_size"),
    )


def _qwen3_next(cfg: _Config, name: str, family: str) -> ModelSpec:
    n = cfg.integer("num_hidden_layers")
    hidden = cfg.integer("hidden_size")
    interval = cfg.integer("full_attention_interval", 4)
    attention = _layer_kinds(cfg, n, lambda i: "linear" if (i + 1) % interval else "full")
    ffn = _qwen_moe_ffn(cfg, n)
    bias = bool(cfg.get("attention_bias", False))
    shared_width = cfg.integer("shared_expert_intermediate_size", 0)
    return ModelSpec(
        **_base(cfg, name, family),
        layer_attention=tuple(attention),
        layer_ffn=tuple(ffn),
        attention=_gqa(cfg, hidden, bias=bias, output_bias=bias, qk_norm=True, output_gate=True),
        linear_attention=LinearAttentionSpec(
            num_key_heads=cfg.integer("linear_num_key_heads"),
            num_value_heads=cfg.integer("linear_num_value_heads"),
            key_head_dim=cfg.integer("linear_key_head_dim"),
            value_head_dim=cfg.integer("linear_value_head_dim"),
            conv_kernel=cfg.integer("linear_conv_kernel_dim", 4),
        ),
        dense_ffn_width=cfg.integer("intermediate_size") if "dense" in ffn else 0,
        n_experts=cfg.integer("num_experts"),
        top_k=cfg.integer("num_experts_per_tok"),
        expert_width=cfg.integer("moe_intermediate_size"),
        n_shared_experts=1 if shared_width else 0,
        shared_expert_width=shared_width,
        shared_expert_gate=bool(shared_width),
    )


def _grouped_moe_fields(cfg: _Config, shared: int) -> dict[str, Any]:
    """Routed and shared expert fields of DeepSeek-style configs (DeepSeek-V3, Kimi-K2, GLM-4.5)."""
    top_k = cfg.integer("num_experts_per_tok")  # read in this order so a missing key is named as before
    width = cfg.integer("moe_intermediate_size")
    return {
        "top_k": top_k,
        "expert_width": width,
        "n_shared_experts": shared,
        "shared_expert_width": width if shared else 0,
        "n_groups": cfg.integer("n_group", 1),
        "topk_groups": cfg.integer("topk_group", 1),
    }


def _deepseek(cfg: _Config, name: str, family: str) -> ModelSpec:
    """DeepSeek-V3 / R1 and Kimi-K2 (DeepseekV3 architecture): MLA, dense prefix, grouped sigmoid routing."""
    n = cfg.integer("num_hidden_layers")
    first_dense = cfg.integer("first_k_dense_replace", 0)
    freq = cfg.integer("moe_layer_freq", 1)
    experts = cfg.integer("n_routed_experts")
    ffn = ["moe" if experts and i >= first_dense and i % freq == 0 else "dense" for i in range(n)]
    nope, rope = cfg.integer("qk_nope_head_dim"), cfg.integer("qk_rope_head_dim")
    heads = cfg.integer("num_attention_heads")
    attention = AttentionSpec(
        num_heads=heads,
        num_kv_heads=cfg.integer("num_key_value_heads", heads),
        head_dim=nope + rope,
        q_lora_rank=cfg.integer("q_lora_rank", None),
        kv_lora_rank=cfg.integer("kv_lora_rank"),
        qk_nope_head_dim=nope,
        qk_rope_head_dim=rope,
        v_head_dim=cfg.integer("v_head_dim"),
    )
    shared = cfg.integer("n_shared_experts", 0)
    return ModelSpec(
        **_base(cfg, name, family),
        layer_attention=tuple("full" for _ in range(n)),
        layer_ffn=tuple(ffn),  # type: ignore[arg-type]
        attention=attention,
        dense_ffn_width=cfg.integer("intermediate_size") if "dense" in ffn else 0,
        n_experts=experts,
        **_grouped_moe_fields(cfg, shared),
        router_score="softmax" if cfg.get("scoring_func", "sigmoid") == "softmax" else "sigmoid",
        router_bias=cfg.get("topk_method", "noaux_tc") == "noaux_tc",
    )


def _glm4_moe(cfg: _Config, name: str, family: str) -> ModelSpec:
    n = cfg.integer("num_hidden_layers")
    first_dense = cfg.integer("first_k_dense_replace", 1)
    ffn = ["moe" if i >= first_dense else "dense" for i in range(n)]
    shared = cfg.integer("n_shared_experts", 1)
    return ModelSpec(
        **_base(cfg, name, family),
        layer_attention=tuple("full" for _ in range(n)),
        layer_ffn=tuple(ffn),  # type: ignore[arg-type]
        attention=_gqa(
            cfg,
            cfg.integer("hidden_size"),
            bias=bool(cfg.get("attention_bias", False)),
            qk_norm=bool(cfg.get("use_qk_norm", False)),
        ),
        dense_ffn_width=cfg.integer("intermediate_size") if "dense" in ffn else 0,
        n_experts=cfg.integer("n_routed_experts"),
        **_grouped_moe_fields(cfg, shared),
        router_score="sigmoid",
        router_bias=True,
    )


def _gpt_oss(cfg: _Config, name: str, family: str) -> ModelSpec:
    n = cfg.integer("num_hidden_layers")
    attention = _layer_kinds(cfg, n, lambda i: "sliding" if (i + 1) % 2 else "full")
    bias = bool(cfg.get("attention_bias", True))
    return ModelSpec(
        **_base(cfg, name, family, expert_bias=True, router_bias=True),
        layer_attention=tuple(attention),
        layer_ffn=tuple("moe" for _ in range(n)),
        attention=_gqa(
            cfg,
            cfg.integer("hidden_size"),
            bias=bias,
            output_bias=bias,
            attention_sinks=True,
            sliding_window=_window(cfg, attention),
        ),
        n_experts=cfg.first_integer(("num_local_experts", "num_experts")),
        top_k=cfg.first_integer(("num_experts_per_tok", "experts_per_token")),
        expert_width=cfg.integer("intermediate_size"),
    )


def _llama4(cfg: _Config, name: str, family: str) -> ModelSpec:
    text = cfg.sub("text_config") if "text_config" in cfg.data else cfg
    for key in ("tie_word_embeddings", "torch_dtype", "dtype", "quantization_config"):
        if key in cfg.data and key not in text.data:
            text.data = {**text.data, key: cfg.data[key]}
    n = text.integer("num_hidden_layers")
    step = text.integer("interleave_moe_layer_step", 1)
    moe_layers = set(text.get("moe_layers", None) or range(step - 1, n, step))
    ffn = ["moe" if i in moe_layers else "dense" for i in range(n)]
    chunk = text.integer("attention_chunk_size", None)
    interval = text.integer("no_rope_layer_interval", 4)
    uses_rope = text.get("no_rope_layers", None) or [int((i + 1) % interval != 0) for i in range(n)]
    attention = _layer_kinds(text, n, lambda i: "sliding" if uses_rope[i] and chunk else "full")
    return ModelSpec(
        **_base(text, name, "llama4"),
        layer_attention=tuple(attention),
        layer_ffn=tuple(ffn),  # type: ignore[arg-type]
        attention=_gqa(
            text,
            text.integer("hidden_size"),
            bias=bool(text.get("attention_bias", False)),
            output_bias=bool(text.get("attention_bias", False)),
            sliding_window=chunk if "sliding" in attention else None,
        ),
        dense_ffn_width=text.integer("intermediate_size_mlp") if "dense" in ffn else 0,
        n_experts=text.integer("num_local_experts"),
        top_k=text.integer("num_experts_per_tok"),
        expert_width=text.integer("intermediate_size"),
        n_shared_experts=1,
        shared_expert_width=text.integer("intermediate_size"),
        router_score="sigmoid",
    )


def _olmoe(cfg: _Config, name: str, family: str) -> ModelSpec:
    n = cfg.integer("num_hidden_layers")
    bias = bool(cfg.get("attention_bias", False))
    return ModelSpec(
        **_base(cfg, name, family),
        layer_attention=tuple("full" for _ in range(n)),
        layer_ffn=tuple("moe" for _ in range(n)),
        attention=_gqa(
            cfg, cfg.integer("hidden_size"), bias=bias, output_bias=bias, qk_norm=True, qk_norm_per_head=False
        ),
        n_experts=cfg.first_integer(("num_experts", "num_local_experts")),
        top_k=cfg.integer("num_experts_per_tok"),
        expert_width=cfg.integer("intermediate_size"),
    )


def _dbrx(cfg: _Config, name: str, family: str) -> ModelSpec:
    attn, ffn_cfg = cfg.sub("attn_config"), cfg.sub("ffn_config")
    hidden, heads, n = cfg.integer("d_model"), cfg.integer("n_heads"), cfg.integer("n_layers")
    flat = _Config({**cfg.data, "hidden_size": hidden}, cfg.origin)
    return ModelSpec(
        **_base(flat, name, family),
        layer_attention=tuple("full" for _ in range(n)),
        layer_ffn=tuple("moe" for _ in range(n)),
        attention=AttentionSpec(
            num_heads=heads, num_kv_heads=attn.integer("kv_n_heads", 1), head_dim=hidden // heads
        ),
        n_experts=ffn_cfg.integer("moe_num_experts", 4),
        top_k=ffn_cfg.integer("moe_top_k", 1),
        expert_width=ffn_cfg.integer("ffn_hidden_size", 3584),
    )


def _grok(cfg: _Config, name: str, family: str) -> ModelSpec:
    """Grok-1 in the community Hugging Face format (no official config exists): tied embedding, 4 norms/block."""
    n = cfg.integer("num_hidden_layers")
    flat = _Config({"tie_word_embeddings": True, **cfg.data}, cfg.origin)
    return ModelSpec(
        **_base(flat, name, "grok-1", norms_per_layer=4),
        layer_attention=tuple("full" for _ in range(n)),
        layer_ffn=tuple("moe" for _ in range(n)),
        attention=_gqa(cfg, cfg.integer("hidden_size")),
        n_experts=cfg.first_integer(("num_experts", "num_local_experts")),
        top_k=cfg.integer("num_experts_per_tok"),
        expert_width=cfg.integer("intermediate_size"),
    )


def _mixtral(cfg: _Config, name: str, family: str) -> ModelSpec:
    n = cfg.integer("num_hidden_layers")
    attention = _layer_kinds(cfg, n, _sliding_rule(cfg))
    return ModelSpec(
        **_base(cfg, name, family),
        layer_attention=tuple(attention),
        layer_ffn=tuple("moe" for _ in range(n)),
        attention=_gqa(cfg, cfg.integer("hidden_size"), sliding_window=_window(cfg, attention)),
        n_experts=cfg.integer("num_local_experts"),
        top_k=cfg.integer("num_experts_per_tok"),
        expert_width=cfg.integer("intermediate_size"),
    )


def _dense(cfg: _Config, name: str, family: str) -> ModelSpec:
    """Dense Qwen2 (QKV bias), Qwen3 (QK-norm), Llama and Mistral."""
    n = cfg.integer("num_hidden_layers")
    attention = _layer_kinds(cfg, n, _sliding_rule(cfg))
    window = _window(cfg, attention)
    hidden = cfg.integer("hidden_size")
    if family == "qwen2":
        att = _gqa(cfg, hidden, bias=True, sliding_window=window)
    else:
        bias = bool(cfg.get("attention_bias", False))
        att = _gqa(cfg, hidden, bias=bias, output_bias=bias, qk_norm=family == "qwen3", sliding_window=window)
    return ModelSpec(
        **_base(cfg, name, family),
        layer_attention=tuple(attention),
        layer_ffn=tuple("dense" for _ in range(n)),
        attention=att,
        dense_ffn_width=cfg.integer("intermediate_size"),
    )


_FAMILIES: dict[str, Callable[[_Config, str, str], ModelSpec]] = {
    "mixtral": _mixtral,
    "qwen2_moe": _qwen_moe,
    "qwen3_moe": _qwen_moe,
    "qwen3_next": _qwen3_next,
    "deepseek_v3": _deepseek,
    "kimi_k2": _deepseek,
    "gpt_oss": _gpt_oss,
    "glm4_moe": _glm4_moe,
    "llama4": _llama4,
    "llama4_text": _llama4,
    "olmoe": _olmoe,
    "dbrx": _dbrx,
    "grok-1": _grok,
    "grok1": _grok,
    "qwen2": _dense,
    "qwen3": _dense,
    "llama": _dense,
    "mistral": _dense,
}
SUPPORTED_MODEL_TYPES: tuple[str, ...] = tuple(sorted(_FAMILIES))


def spec_from_hf_config(config: dict[str, Any], name: str, origin: str = "config.json") -> ModelSpec:
    """The ModelSpec of a Hugging Face `config.json` (already parsed), named `name`, validated.

    Errors name `origin` and the field; an unsupported `model_type` lists the supported ones.
    """
    if not isinstance(config, dict):
        raise MoesimError(origin, "is not a JSON object", "point at a model's config.json")
    model_type = config.get("model_type")
    if model_type not in _FAMILIES:
        raise MoesimError(
            f"{origin}:model_type",
            f"unsupported model_type {model_type!r}",
            f"supported: {', '.join(SUPPORTED_MODEL_TYPES)}",
        )
    spec = _FAMILIES[model_type](_Config(config, origin), name, model_type)
    try:
        return validate_spec(spec)
    except MoesimError as err:
        raise MoesimError(f"{origin}:{err.field}", err.problem, err.fix) from None


def load_hf_config(path: str | Path, name: str | None = None) -> ModelSpec:
    """Read a Hugging Face config.json (or a directory holding one) into a ModelSpec.

    The name defaults to the directory name for `.../config.json`, else the file stem.
    """
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    config = read_json_table(str(path), path, "Hugging Face config.json")
    if name is None:
        name = path.parent.name if path.stem == "config" and path.parent.name else path.stem
    return spec_from_hf_config(config, name=name, origin=str(path))


__all__ = ["SUPPORTED_MODEL_TYPES", "load_hf_config", "spec_from_hf_config"]
