"""The plan of a mixed step: decode (or verification) sequences and prefill chunks in one forward pass.

Serving engines with chunked prefill (vLLM, SGLang) put the chunks of prompts being prefilled into the same
forward pass as the running sequences' decode or verification tokens. The plan is the usual layer plan
(`step.py`'s builders, `styles.plan_from_context`) over all M = B·T + P tokens, with three differences:

- attention: the B sequences attend to their cached context as in a decode step; the prefill chunks get one
  more kernel, causal attention of their P queries over their prefix and themselves
  (FLOPs from Σ P_i·(prefix_i + (P_i + 1)/2) query–key pairs, their KV read once). Dense MLA prefill runs
  as the engines run it (`plan.attention.mla_prefill_runs_mha`): the latents of every prefix and chunk
  token are decompressed by kv_b_proj (one GEMM of Σ (prefix_i + P_i) rows), the keys assembled from
  k_nope and the shared rope part, then multi-head attention with q/k head dim nope + rope and v head
  dim v_head_dim, its output straight into o_proj (the absorption runs for the decode rows only);
- routed experts: distinct experts are the union of the decode tokens' (the routing model) and the prefill
  tokens' (independent uniform routing, whose closed form needs no sampling: with the hundreds of tokens of
  a chunk every routing model is close to all experts), assuming the two groups route independently;
- head and tail: the LM head and sampling run for the decode tokens and one position per prefill chunk only.

Approximations, stated in every result that uses this plan: the prefill chunks' recurrent (linear-attention)
state is not read, and sparse MLA prefill (an indexer) keeps the absorbed kernel over its top-k entries.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from moesim.simulator.models.sequence_state import attended_tokens
from moesim.simulator.models.spec import AttentionLayerKind, FfnLayerKind, ModelSpec, attention_for
from moesim.simulator.plan.attention import (
    GQA_QUERY_TILE_ROWS,
    attention_work_units,
    mla_prefill_runs_mha,
)
from moesim.simulator.plan.blocks import (
    ACT_BYTES,
    GENERIC_DEVICE,
    LAYER_PREFIX,
    PlanContext,
    PlanDevice,
    elementwise_kernel,
    make_kernel,
    weight_read,
)
from moesim.simulator.plan.kernels import Kernel, TensorRead
from moesim.simulator.plan.shapes import attention_matrices, kv_bytes_per_token
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


def _query_tiles_per_chunk(chunks: PrefillChunks, rows_per_token: int) -> int:
    """128-row query tiles of a mean chunk, per KV head: its tokens × the query heads sharing the head."""
    return -(-chunks.tokens * rows_per_token // max(1, chunks.chunks) // GQA_QUERY_TILE_ROWS)


def prefill_attention_kernel(model: ModelSpec, kind: AttentionLayerKind, chunks: PrefillChunks) -> Kernel:
    """Causal (flash) attention of the prefill chunks' queries over their prefixes and themselves.

    Grouped-query prefill carries its work units for the profile's `gqa_prefill` attention terms: per KV
    head, the 128-row query tiles of the chunks' tokens × the query heads sharing it, at least one per chunk
    (`plan.attention.attention_work_units`). Dense MLA prefill (`mla_prefill_runs_mha`) is multi-head
    attention over the keys and values `mla_decompression_kernels` wrote — q/k head dim nope + rope, v head
    dim v_head_dim, every head its own keys — with `mla_prefill` work units (per head, the chunk's 128-row
    query tiles); sparse MLA prefill keeps the absorbed kernel's count over the latents and carries none."""
    a = attention_for(model, kind)  # full layers may have their own heads (as in the decode kernel)
    mean_keys = chunks.query_key_pairs / max(1, chunks.tokens)
    pairs = chunks.tokens * attended_tokens(model, kind, round(mean_keys))
    units, kind_name = 0, ""
    kv_reads: tuple[TensorRead, ...]
    if a.is_mla:
        qk, v_dim = (a.qk_nope_head_dim or 0) + (a.qk_rope_head_dim or 0), a.v_head_dim or 0
        flops = 2.0 * pairs * a.num_heads * (qk + v_dim)
        q_elems = chunks.tokens * a.num_heads * qk
        out_elems = chunks.tokens * a.num_heads * v_dim
        if mla_prefill_runs_mha(model, kind):
            kv = chunks.kv_tokens * a.num_heads * ACT_BYTES
            kv_reads = (
                TensorRead(MLA_PREFILL_K, kv * qk),
                TensorRead(MLA_PREFILL_KV, kv * v_dim),  # V: the second half of kv_b_proj's output
            )
            q_tensor, out_tensor = "q", "attn_out"
            tiles_per_chunk = _query_tiles_per_chunk(chunks, 1)
            units = attention_work_units(chunks.chunks, a.num_heads, tiles_per_chunk)
            kind_name = "mla_prefill"
        else:
            kv_reads = (
                TensorRead(LAYER_PREFIX + "kv_prefill", chunks.kv_tokens * kv_bytes_per_token(model, kind)),
            )
            q_tensor, out_tensor = "q_latent", "attn_latent"
    else:
        flops = 2.0 * pairs * a.num_heads * (a.head_dim + a.value_head_dim)
        q_elems = chunks.tokens * a.num_heads * a.head_dim
        out_elems = chunks.tokens * a.num_heads * a.value_head_dim
        kv_reads = (
            TensorRead(LAYER_PREFIX + "kv_prefill", chunks.kv_tokens * kv_bytes_per_token(model, kind)),
        )
        q_tensor, out_tensor = "qkv", "attn_out"
        group = max(1, a.num_heads // max(1, a.num_kv_heads))
        tiles_per_chunk = _query_tiles_per_chunk(chunks, group)
        units, kind_name = attention_work_units(chunks.chunks, a.num_kv_heads, tiles_per_chunk), "gqa_prefill"
    return Kernel(
        name="prefill_attention",
        category="attention",
        flops=flops,
        reads=(*kv_reads, TensorRead(q_tensor, q_elems * ACT_BYTES)),
        write_bytes=out_elems * ACT_BYTES,
        write_tensor=out_tensor,
        m_tokens=chunks.tokens,
        attention_units=float(units),
        attention_kind=kind_name,
    )


MLA_PREFILL_KV = "mla_prefill_kv"  # kv_b_proj's output over the prefill keys: [k_nope | v] per head
MLA_PREFILL_K = "mla_prefill_k"  # the keys MHA reads: [k_nope | k_pe] per head


def mla_decompression_kernels(
    model: ModelSpec, kind: AttentionLayerKind, chunks: PrefillChunks, device: PlanDevice
) -> list[Kernel]:
    """What dense MLA prefill runs before its attention (`mla_prefill_runs_mha`): kv_b_proj over the
    normalised latents of every key the chunks attend to (Σ (prefix_i + P_i) rows, gathered from the cache
    for the prefix), writing k_nope and v for every head; then the keys assembled as [k_nope | k_pe], the
    rope part shared by all heads (SGLang's `_concat_and_cast_mha_k`, vLLM's `_concat_k_nope_k_pe`)."""
    a = attention_for(model, kind)
    mats = attention_matrices(model, kind)
    kb, kv = mats["kv_b_k"], mats["kv_b_v"]
    rows = chunks.kv_tokens
    nope, rope, v_dim = a.qk_nope_head_dim or 0, a.qk_rope_head_dim or 0, a.v_head_dim or 0
    latent = a.kv_lora_rank or 0
    expanded = rows * a.num_heads * (nope + v_dim)
    decompress = make_kernel(
        "prefill_kv_b_proj",
        "dense_weights",
        flops=2.0 * rows * (kb.params + kv.params),
        reads=(
            weight_read(device, LAYER_PREFIX + "attn.kv_b_k", kb, rows),
            weight_read(device, LAYER_PREFIX + "attn.kv_b_v", kv, rows),
            TensorRead(LAYER_PREFIX + "kv_prefill", rows * latent * ACT_BYTES),
        ),
        write=(MLA_PREFILL_KV, expanded * ACT_BYTES),
        m=rows,
        dtype=kb.fmt.compute_dtype,
    )
    keys = elementwise_kernel(
        "prefill_k_concat",
        "attention",
        ((MLA_PREFILL_KV, rows * a.num_heads * nope), ("qkv_a", rows * rope)),
        (MLA_PREFILL_K, rows * a.num_heads * (nope + rope)),
        flops_per_element=0.0,
    )
    return [decompress, keys]


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
        prefill = [prefill_attention_kernel(ctx.model, attention, chunks)]
        if mla_prefill_runs_mha(ctx.model, attention):
            prefill = mla_decompression_kernels(ctx.model, attention, chunks, ctx.device) + prefill
        return [*kernels[: at + (1 if decode_seqs else 0)], *prefill, *kernels[at + 1 :]]

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
