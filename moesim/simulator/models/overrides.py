"""Hypothetical designs: a ModelSpec with some fields replaced, and the override flags that set them."""

from __future__ import annotations

from dataclasses import fields, replace

from moesim.errors import MoesimError
from moesim.simulator.bounds import check_count, check_finite
from moesim.simulator.models.layers import with_layer_count
from moesim.simulator.models.spec import AttentionSpec, ModelSpec
from moesim.simulator.models.validate import validate_spec

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
    if not spec.is_moe and values.get("n_experts") and not values.get("top_k"):
        raise MoesimError(
            "top_k",
            f"{spec.name} is dense: routed experts need a top-k to route",
            "add --top-k K (experts per token), or drop --experts for this model",
        )
    if not spec.is_moe and values.get("n_experts"):
        values.setdefault("expert_width", spec.expert_width or spec.dense_ffn_width)
        spec = replace(spec, layer_ffn=tuple("moe" for _ in spec.layer_ffn))
    return with_overrides(spec, **values)


OVERRIDABLE_FIELDS: tuple[str, ...] = tuple(
    f.name
    for f in fields(ModelSpec)
    if f.name
    not in ("layer_attention", "layer_ffn", "attention", "full_attention", "assumptions", "ignored_keys")
)


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


__all__ = [
    "OVERRIDABLE_FIELDS",
    "OVERRIDE_OPTIONS",
    "apply_overrides",
    "scalar_type",
    "with_overrides",
]
