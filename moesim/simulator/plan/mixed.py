"""The plan of a mixed step: decode (or verification) sequences and prefill chunks in one forward pass.

Serving engines with chunked prefill (vLLM, SGLang) put the chunks of prompts being prefilled into the same
forward pass as the running sequences' decode or verification tokens. The plan is the usual layer plan
(`step.py`'s builders, `styles.plan_from_context`) over all M = B·T + P tokens, with three differences:

- attention: the B sequences attend to their cached context as in a decode step; the prefill chunks get one
  more kernel, causal attention of their P queries over their prefix and themselves
  (FLOPs from Σ P_i·(prefix_i + (P_i + 1)/2) query–key pairs, their KV read once);
- routed experts: distinct experts are the union of the decode tokens' (the routing model) and the prefill
  tokens' (independent uniform routing, whose closed form needs no sampling: with the hundreds of tokens of
  a chunk every routing model is close to all experts), assuming the two groups route independently;
- head and tail: the LM head and sampling run for the decode tokens and one position per prefill chunk only.

Approximations, stated in every result that uses this plan: the prefill chunks' recurrent (linear-attention)
state is not read, and MLA prefill attention is costed with the absorbed (latent) kernel's FLOP count per
query–key pair of the full heads.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from moesim.simulator.models.sequence_state import attended_tokens
from moesim.simulator.models.spec import AttentionLayerKind, FfnLayerKind, ModelSpec, attention_for
from moesim.simulator.plan.attention import GQA_QUERY_TILE_ROWS, attention_work_units
from moesim.simulator.plan.blocks import ACT_BYTES, GENERIC_DEVICE, LAYER_PREFIX, PlanContext, PlanDevice
from moesim.simulator.plan.kernels import Kernel, TensorRead
from moesim.simulator.plan.shapes import kv_bytes_per_token
from moesim.simulator.plan.step import PlanBuilder, StepPlan, distinct_experts_by_layer
from moesim.simulator.plan.styles import kernel_style_builder, plan_from_context
from moesim.simulator.routing.base import RoutingModel
from moesim.simulator.routing.independent import IndependentRouting, expected_distinct_uniform

MIXED_APPROXIMATIONS = (
    "mixed steps: prefill chunks' distinct experts from independent routing, united with the decode tokens' "
    "assuming the two groups route independently; prefill attention over each chunk's prefix and itself "
    "(causal), its KV read once"
)


@dataclass(frozen=True)
class PrefillChunks:
    """The prompt chunks of one step, summed over the requests being prefilled."""

    tokens: int  # P: prompt tokens run this step
    chunks: int  # how many requests contribute a chunk
    kv_tokens: int  # Σ (prefix_i + P_i): keys the chunks attend to, read once
    query_key_pairs: float  # Σ P_i · (prefix_i + (P_i + 1) / 2), causal

    @classmethod
    def of(cls, chunk_prefix_pairs: list[tuple[int, int]]) -> PrefillChunks:
        """From (chunk tokens, tokens already prefilled before the chunk) per request."""
        return cls(
            tokens=sum(p for p, _ in chunk_prefix_pairs),
            chunks=len(chunk_prefix_pairs),
            kv_tokens=sum(p + prefix for p, prefix in chunk_prefix_pairs),
            query_key_pairs=sum(p * (prefix + (p + 1) / 2) for p, prefix in chunk_prefix_pairs),
        )


@dataclass(frozen=True)
class MixedContext(PlanContext):
    """A step of `batch` sequences × `tokens_per_seq` tokens plus `prefill_tokens` prompt tokens."""

    prefill_tokens: int = 0

    @property
    def m_tokens(self) -> int:
        return self.batch * self.tokens_per_seq + self.prefill_tokens


def prefill_attention_kernel(model: ModelSpec, kind: AttentionLayerKind, chunks: PrefillChunks) -> Kernel:
    """Causal (flash) attention of the prefill chunks' queries over their prefixes and themselves.

    Grouped-query prefill carries its work units for the profile's `gqa_prefill` attention terms: per KV
    head, the 128-row query tiles of the chunks' tokens × the query heads sharing it, at least one per chunk
    (`plan.attention.attention_work_units`). MLA prefill carries none: no such term is fitted (see
    `calibrate/fits/silicon/attention_fit.py`)."""
    a = attention_for(model, kind)  # full layers may have their own heads (as in the decode kernel)
    mean_keys = chunks.query_key_pairs / max(1, chunks.tokens)
    pairs = chunks.tokens * attended_tokens(model, kind, round(mean_keys))
    if a.is_mla:
        qk = (a.qk_nope_head_dim or 0) + (a.qk_rope_head_dim or 0)
        flops = 2.0 * pairs * a.num_heads * (qk + (a.v_head_dim or 0))
        q_elems = chunks.tokens * a.num_heads * qk
        out_elems = chunks.tokens * a.num_heads * (a.v_head_dim or 0)
        q_tensor, out_tensor = "q_latent", "attn_latent"
        units, kind_name = 0, ""
    else:
        flops = 2.0 * pairs * a.num_heads * (a.head_dim + a.value_head_dim)
        q_elems = chunks.tokens * a.num_heads * a.head_dim
        out_elems = chunks.tokens * a.num_heads * a.value_head_dim
        q_tensor, out_tensor = "qkv", "attn_out"
        group = max(1, a.num_heads // max(1, a.num_kv_heads))
        tiles_per_chunk = -(-chunks.tokens * group // max(1, chunks.chunks) // GQA_QUERY_TILE_ROWS)
        units, kind_name = attention_work_units(chunks.chunks, a.num_kv_heads, tiles_per_chunk), "gqa_prefill"
    return Kernel(
        name="prefill_attention",
        category="attention",
        flops=flops,
        reads=(
            TensorRead(LAYER_PREFIX + "kv_prefill", chunks.kv_tokens * kv_bytes_per_token(model, kind)),
            TensorRead(q_tensor, q_elems * ACT_BYTES),
        ),
        write_bytes=out_elems * ACT_BYTES,
        write_tensor=out_tensor,
        m_tokens=chunks.tokens,
        attention_units=float(units),
        attention_kind=kind_name,
    )


def with_prefill_attention(builder: PlanBuilder, chunks: PrefillChunks, decode_seqs: int) -> PlanBuilder:
    """`builder` whose attention layers also run the prefill chunks' attention (alone when no decode)."""
    base_layer = builder.layer

    def layer(
        ctx: PlanContext, attention: AttentionLayerKind, ffn: FfnLayerKind, distinct: float
    ) -> list[Kernel]:
        kernels = base_layer(ctx, attention, ffn, distinct)
        if attention == "linear":
            return kernels
        at = next(i for i, k in enumerate(kernels) if k.name == "attention")
        prefill = prefill_attention_kernel(ctx.model, attention, chunks)
        return [*kernels[: at + (1 if decode_seqs else 0)], prefill, *kernels[at + 1 :]]

    return replace(builder, layer=layer)


def mixed_distinct_by_layer(
    model: ModelSpec, decode_seqs: int, tokens_per_seq: int, prefill_tokens: int, routing: RoutingModel
) -> tuple[float, ...]:
    """Per MoE layer: N·(1 − (1 − U_decode/N)(1 − U_prefill/N)), bounded by the token-expert pairs."""
    n, k = model.n_experts, model.top_k
    n_moe = model.n_moe_layers
    decode = (
        distinct_experts_by_layer(model, decode_seqs, tokens_per_seq, routing)
        if decode_seqs
        else (0.0,) * n_moe
    )
    prefill = float(expected_distinct_uniform(n, k, prefill_tokens)) if prefill_tokens else 0.0
    cap = min(n, (decode_seqs * tokens_per_seq + prefill_tokens) * k)
    return tuple(min(cap, max(k, n * (1.0 - (1.0 - u / n) * (1.0 - prefill / n)))) for u in decode)


def build_mixed_plan(
    model: ModelSpec,
    decode_seqs: int,
    tokens_per_seq: int,
    context_len: int,
    chunks: PrefillChunks,
    kernel_style: str = "fused",
    routing: RoutingModel | None = None,
    device: PlanDevice | None = None,
) -> StepPlan:
    """The plan of one step of `decode_seqs` × `tokens_per_seq` tokens at `context_len` cached tokens each,
    plus the prefill `chunks` (`device` as for `styles.build_plan`)."""
    routing = routing or IndependentRouting()
    device = device or GENERIC_DEVICE
    builder = with_prefill_attention(kernel_style_builder(kernel_style), chunks, decode_seqs)
    ctx = MixedContext(model, decode_seqs, tokens_per_seq, context_len, device, chunks.tokens)
    tail = MixedContext(model, decode_seqs, tokens_per_seq, context_len, device, chunks.chunks)
    distinct = (
        mixed_distinct_by_layer(model, decode_seqs, tokens_per_seq, chunks.tokens, routing)
        if model.is_moe
        else ()
    )
    description = f"{routing.description}; prefill chunks: independent uniform routing"
    return plan_from_context(ctx, builder, distinct, description, epilogue_ctx=tail)
