"""Speculative decoding: expected tokens per step, drafter cost, speedup, best draft length, peak batch.

    speedup(B, K) = E[tokens per step] × T_decode(B) ÷ (T_draft(B, K) + T_verify(B, K))

E[tokens per step] = (1 − α^(K+1)) ÷ (1 − α) for a per-token acceptance rate α (accepted draft tokens plus
the one the target always adds), or a given mean acceptance length L, capped at K + 1. The acceptance
kernel (comparing draft and target tokens) is part of the verification plan, so T_verify includes it.

Drafters (`--draft`):
- `model:NAME`  a catalogue model run K times at batch B (its decode step simulated like the target's);
- `eagle`       an EAGLE-style head: one dense decoder layer at the target's hidden size, a 2h → h fusion
                projection and the target's LM head, K passes;
- `mtp`         the model's own multi-token-prediction layer (a full layer of the target + 2h → h
                projection + the shared LM head), K passes;
- `ngram`       prompt-lookup drafting on the host: NGRAM_BASE_US + NGRAM_PER_SEQUENCE_US × B per step;
- `fraction:F`  F × T_decode(B) per draft token.
The K passes of a drafter run back to back (captured in one graph in graph mode): one launch and one sync.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from moesim.errors import MoesimError
from moesim.simulator.hardware.profile import HardwareProfile
from moesim.simulator.models.spec import AttentionSpec, ModelSpec
from moesim.simulator.plan.step import (
    Matrix,
    PlanContext,
    Segment,
    StepPlan,
    build_plan,
    gemm_kernel,
)
from moesim.simulator.routing.base import RoutingModel

DEFAULT_DRAFTER = "eagle"
DEFAULT_ACCEPTANCE = 0.8
# Prompt-lookup (n-gram) drafting is a host-side suffix match: a few microseconds per sequence.
NGRAM_BASE_US = 10.0
NGRAM_PER_SEQUENCE_US = 1.0
DRAFTER_KINDS = ("eagle", "mtp", "ngram", "model:NAME", "fraction:F")


def tokens_per_step(acceptance: float | np.ndarray, draft_len: int | np.ndarray) -> np.ndarray:
    """E[tokens per verification step] = (1 − α^(K+1)) / (1 − α); K + 1 when α = 1."""
    alpha = np.asarray(acceptance, dtype=float)
    k = np.asarray(draft_len, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_alpha = np.log(alpha)
        geometric = np.expm1((k + 1.0) * log_alpha) / np.expm1(log_alpha)  # accurate as α → 1
    return np.where(alpha == 1.0, k + 1.0, geometric)


def expected_tokens(
    draft_len: int, acceptance: float = DEFAULT_ACCEPTANCE, acceptance_length: float | None = None
) -> float:
    """Tokens one verification step yields, from α or from a mean acceptance length (capped at K + 1)."""
    if acceptance_length is not None:
        if not (math.isfinite(acceptance_length) and acceptance_length >= 1.0):
            raise MoesimError(
                "acceptance_length", f"must be a finite number ≥ 1 token per step, got {acceptance_length}"
            )
        return float(min(acceptance_length, draft_len + 1))
    check_acceptance(acceptance)
    return float(tokens_per_step(acceptance, draft_len))


def check_acceptance(acceptance: float) -> None:
    if not 0.0 <= acceptance <= 1.0:
        raise MoesimError("acceptance", f"must be a probability in [0, 1], got {acceptance}")


def speedup(
    tokens: np.ndarray | float,
    t_decode: np.ndarray | float,
    t_draft: np.ndarray | float,
    t_verify: np.ndarray | float,
) -> np.ndarray:
    """Tokens per second with SD over tokens per second without it."""
    return (
        np.asarray(tokens, dtype=float)
        * np.asarray(t_decode, dtype=float)
        / (np.asarray(t_draft, dtype=float) + np.asarray(t_verify, dtype=float))
    )


def _first_best(values: list[int], speedups: list[float]) -> tuple[int, float]:
    """The value with the highest speedup, the first one on ties."""
    index = int(np.argmax(np.asarray(speedups)))
    return values[index], float(speedups[index])


def best_draft_len(draft_lens: list[int], speedups: list[float]) -> tuple[int, float]:
    """The draft length with the highest speedup (the shorter one on ties)."""
    return _first_best(draft_lens, speedups)


def peak_batch(batches: list[int], speedups: list[float]) -> tuple[int, float]:
    """The batch size at which SD helps most (the smaller one on ties)."""
    return _first_best(batches, speedups)


# --- Drafters ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Drafter:
    """A parsed `--draft` value."""

    kind: str  # eagle | mtp | ngram | model | fraction
    model_name: str = ""
    fraction: float = 0.0

    @property
    def label(self) -> str:
        if self.kind == "model":
            return f"model:{self.model_name}"
        if self.kind == "fraction":
            return f"fraction:{self.fraction:g}"
        return self.kind


def parse_drafter(text: str) -> Drafter:
    """Parse 'eagle', 'mtp', 'ngram', 'model:NAME' or 'fraction:F'."""
    value = text.strip()
    if value in ("eagle", "mtp", "ngram"):
        return Drafter(value)
    if value.startswith("model:") and len(value) > len("model:"):
        return Drafter("model", model_name=value[len("model:") :])
    if value.startswith("fraction:"):
        try:
            fraction = float(value[len("fraction:") :])
        except ValueError:
            fraction = -1.0
        if not (fraction >= 0.0 and math.isfinite(fraction)):
            raise MoesimError(
                "draft", f"fraction must be a non-negative number, got {value!r}", "e.g. --draft fraction:0.1"
            )
        return Drafter("fraction", fraction=fraction)
    raise MoesimError("draft", f"unknown drafter {text!r}", f"choose one of {', '.join(DRAFTER_KINDS)}")


def eagle_head(target: ModelSpec) -> ModelSpec:
    """An EAGLE-style draft head: one dense layer at the target's hidden size, bf16, the target's vocabulary."""
    a = target.attention
    if a.is_mla or a.num_heads * a.head_dim == 0:
        heads = max(1, target.hidden // 128)
        attention = AttentionSpec(num_heads=heads, num_kv_heads=max(1, heads // 4), head_dim=128)
    else:
        attention = replace(a, sliding_window=None)
    width = target.dense_ffn_width or 3 * target.hidden
    return replace(
        target,
        name=f"{target.name}-eagle-head",
        layer_attention=("full",),
        layer_ffn=("dense",),
        attention=attention,
        dense_ffn_width=width,
        n_experts=0,
        top_k=0,
        expert_width=0,
        n_shared_experts=0,
        shared_expert_width=0,
        mtp_layers=0,
        weight_format="bf16",
        expert_weight_format=None,
    )


def mtp_module(target: ModelSpec) -> ModelSpec:
    """The target's multi-token-prediction layer as a one-layer model sharing its LM head."""
    if target.mtp_layers < 1:
        raise MoesimError(
            "draft", f"{target.name} has no MTP layer", "use --draft eagle, ngram or model:NAME"
        )
    return replace(
        target,
        name=f"{target.name}-mtp",
        layer_attention=("full",),
        layer_ffn=("moe" if target.is_moe else "dense",),
        mtp_layers=0,
    )


def with_fusion_projection(plan: StepPlan, model: ModelSpec, context: PlanContext) -> StepPlan:
    """Prepend the 2h → h projection that fuses the target's hidden state with the token embedding."""
    fc = Matrix(model.hidden, 2 * model.hidden, model.dense_format)
    kernel = gemm_kernel("draft_fc", "dense_weights", "draft.fc", fc, context.m_tokens, "h", "resid")
    return plan.with_segments((Segment((kernel,)), *plan.segments))


StepTime = Callable[[StepPlan, bool], float]  # (plan, include launch and sync) -> seconds


def draft_time_s(
    drafter: Drafter,
    target: ModelSpec,
    hardware: HardwareProfile,
    batch: int,
    draft_len: int,
    context_len: int,
    engine: str,
    routing: RoutingModel | None,
    t_decode_s: float,
    step_time: StepTime,
    launch_overhead_s: float,
    load_model: Callable[[str], ModelSpec] | None = None,
) -> float:
    """Seconds the drafter takes to propose `draft_len` tokens for each of `batch` sequences.

    `step_time(plan, with_launch)` times one pass (engine or fast path); `launch_overhead_s` is the one
    launch + sync the K back-to-back passes share.
    """
    if draft_len < 1:
        raise MoesimError("draft_len", f"must be ≥ 1, got {draft_len}")
    if drafter.kind == "fraction":
        return draft_len * drafter.fraction * t_decode_s
    if drafter.kind == "ngram":
        return (NGRAM_BASE_US + NGRAM_PER_SEQUENCE_US * batch) * 1e-6
    plan = drafter_pass_plan(drafter, target, hardware, batch, context_len, engine, routing, load_model)
    return draft_len * step_time(plan, False) + launch_overhead_s


def drafter_model(
    drafter: Drafter, target: ModelSpec, load_model: Callable[[str], ModelSpec] | None = None
) -> ModelSpec | None:
    """The model a drafter runs (None for n-gram and fraction drafters)."""
    if drafter.kind == "eagle":
        return eagle_head(target)
    if drafter.kind == "mtp":
        return mtp_module(target)
    if drafter.kind == "model":
        if load_model is None:
            from moesim.simulator.models.catalogue import load_model as catalogue_load

            load_model = catalogue_load
        return load_model(drafter.model_name)
    return None


def drafter_pass_plan(
    drafter: Drafter,
    target: ModelSpec,
    hardware: HardwareProfile,
    batch: int,
    context_len: int,
    engine: str,
    routing: RoutingModel | None,
    load_model: Callable[[str], ModelSpec] | None = None,
) -> StepPlan:
    """The plan of one drafter pass: B sequences, one token each."""
    model = drafter_model(drafter, target, load_model)
    assert model is not None
    style = engine if engine in ("fused", "per-token") else "fused"
    plan = build_plan(model, batch, 1, context_len, style, routing, hardware)
    if drafter.kind in ("eagle", "mtp"):
        plan = with_fusion_projection(plan, model, PlanContext(model, batch, 1, context_len, hardware))
    return plan
