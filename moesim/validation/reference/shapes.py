"""The model shapes validation measures: catalogue models cut to fewer layers (and, on a CPU, narrower).

One ModelSpec drives both the torch build and the prediction. Three families are covered:
fine-grained many-expert (Qwen3-30B-A3B), coarse few-expert (Mixtral-8x7B) and shared experts
(Qwen2-57B-A14B, whose shared expert is 8× a routed one). The reference runs no biases and no
shared-expert gate, so the validation specs switch those off (they are a few vector ops per layer).

On a GPU the widths are the real ones and only the layer count shrinks. On a CPU every width (hidden,
heads, expert and shared widths, vocabulary) is divided by the same factor so a step takes milliseconds
instead of seconds; head_dim and the expert count / top-k stay real, so the routing and attention shapes
are the real ones.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from moesim.errors import MoesimError
from moesim.simulator.models.catalogue import load_model
from moesim.simulator.models.overrides import apply_overrides
from moesim.simulator.models.spec import ModelSpec


@dataclass(frozen=True)
class ValidationShape:
    """A catalogue model and how to shrink it for a CPU."""

    key: str
    catalogue_name: str
    kind: str  # what the shape stands for, printed in reports
    cpu_width_divisor: int


SHAPES: dict[str, ValidationShape] = {
    "fine": ValidationShape("fine", "qwen3-30b-a3b", "fine-grained, 128 experts top-8", 4),
    "coarse": ValidationShape("coarse", "mixtral-8x7b", "coarse, 8 experts top-2", 8),
    "shared": ValidationShape("shared", "qwen2-57b-a14b", "64 experts top-8 + a shared expert 8x wider", 7),
}
GPU_LAYERS = 4
CPU_LAYERS = 2


def _round_to(value: float, multiple: int) -> int:
    return max(multiple, round(value / multiple) * multiple)


def validation_model(key: str, device: str, dtype: str, layers: int | None = None) -> ModelSpec:
    """The spec measured and predicted for shape `key` on `device` ('cpu' or 'cuda') in `dtype`."""
    if key not in SHAPES:
        raise MoesimError("--models", f"unknown validation model {key!r}", f"choose from {', '.join(SHAPES)}")
    shape = SHAPES[key]
    base = load_model(shape.catalogue_name)
    overrides: dict[str, object] = {
        "layers": layers or (CPU_LAYERS if device == "cpu" else GPU_LAYERS),
        "weight_format": dtype,
        "bias": False,
        "output_bias": False,
        "shared_expert_gate": False,
        "expert_bias": False,
        "router_bias": False,
        "mtp_layers": 0,
    }
    if device == "cpu":
        d = shape.cpu_width_divisor
        att = base.attention
        overrides.update(
            hidden=_round_to(base.hidden / d, 64),
            num_heads=max(1, round(att.num_heads / d)),
            num_kv_heads=max(1, round(att.num_kv_heads / d)),
            expert_width=_round_to(base.expert_width / d, 16),
            vocab=_round_to(base.vocab / d, 64),
        )
        if base.n_shared_experts:
            overrides["shared_expert_width"] = _round_to(base.shared_expert_width / d, 16)
        if base.dense_ffn_width:
            overrides["dense_ffn_width"] = _round_to(base.dense_ffn_width / d, 16)
    spec = apply_overrides(base, overrides)
    suffix = "cpu" if device == "cpu" else "gpu"
    return replace(
        spec,
        name=f"{base.name}-{spec.n_layers}L-{suffix}",
        notes=f"validation shape '{key}': {shape.kind}",
        published_total_params=None,
        published_active_params=None,
    )


__all__ = ["CPU_LAYERS", "GPU_LAYERS", "SHAPES", "ValidationShape", "validation_model"]
