"""Regular layer layouts (dense prefix, MoE interleave, attention cycle): read from a spec, rebuilt at another
layer count."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace

from moesim.errors import MoesimError
from moesim.simulator.bounds import MAX_LAYERS, check_count
from moesim.simulator.models.spec import AttentionLayerKind, FfnLayerKind, ModelSpec


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
        check_count(self.n_layers, "layers", high=MAX_LAYERS, fix="give the model's layer count")
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


__all__ = [
    "LayerPattern",
    "layer_pattern",
    "with_layer_count",
]
