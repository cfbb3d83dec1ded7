"""Attention layers as kernels: one builder per attention kind (grouped-query, multi-head latent, linear),
the attention kernel over each sequence's cache, and the sparse-attention indexer.

Each builder returns a layer's kernels from its input norm's output to the output projection into the
residual; `attention_kernels` picks the builder of a layer kind.
"""

from __future__ import annotations

from collections.abc import Callable

from moesim.simulator.models.sequence_state import (
    attended_tokens,
    index_key_bytes_per_token,
    indexed_tokens,
    linear_state_bytes,
)
from moesim.simulator.models.spec import AttentionLayerKind, ModelSpec, attention_for
from moesim.simulator.plan.blocks import (
    ACT_BYTES,
    INDEX_BYTES,
    LAYER_PREFIX,
    PlanContext,
    activation_read,
    elementwise_kernel,
    gemm_kernel,
    make_kernel,
    norm_kernel,
)
from moesim.simulator.plan.kernels import Category, Kernel, TensorRead
from moesim.simulator.plan.shapes import KV_BYTES, Matrix, attention_matrices, kv_bytes_per_token

# Query rows one attention-kernel tile holds for one KV head: the engines pack a sequence's q new tokens ×
# the query heads sharing a KV head into the tile's M dimension, and each tile streams its sequence's cache.
# MLA (one latent KV head): the device's `mla_query_tile_rows` (64: FlashMLA, FA3; see hardware.defaults);
# a verification runs as a decode with q_len > 1 (vLLM 0.33.0 v1/attention/backends/mla/flashmla.py:
# query_len_support UNIFORM). Grouped-query attention: FlashAttention-3's 128-row tiles for head dim 128 with
# pack_gqa (SGLang's default on Hopper unless a tree is verified, then FlashInfer's prefill with a custom
# mask, whose largest query tile is 128 rows too; vLLM's FA3 backend runs a chain verification as varlen
# attention, q_len = K + 1 per sequence).
GQA_QUERY_TILE_ROWS = 128


def mla_prefill_runs_mha(model: ModelSpec, kind: AttentionLayerKind) -> bool:
    """Whether prompt tokens of this MLA layer run as multi-head attention over the decompressed keys and
    values (not absorbed): what SGLang 0.5.23 and vLLM 0.33.0 do for dense MLA prefill — SGLang's
    MHA_ONE_SHOT / MHA_CHUNKED_KV (`models/deepseek_common/attention_forward_methods/forward_mha.py`:
    `kv_b_proj` over the prefix and chunk latents, K = [k_nope, k_pe], attention with q/k head dim
    nope + rope = 192 and v 128, the output straight into `o_proj`), vLLM's `forward_mha`
    (`model_executor/layers/attention/mla_attention.py`, the same steps, the prefix through
    `_compute_prefill_context`). Sparse MLA (an indexer: DeepSeek-V3.2 / GLM-5 DSA) keeps the absorbed
    kernel over its top-k entries, as SGLang's DSA backend does for all but short prompts."""
    a = attention_for(model, kind)
    return a.is_mla and not a.index_topk


def query_tiles(rows_per_kv_head: int, tile_rows: int) -> int:
    """Tiles one sequence's queries take per KV head: each reads that sequence's cache once (when several
    run side by side the repeats are served by L2 while the sequence's cache fits there)."""
    return max(1, -(-rows_per_kv_head // tile_rows))


def attention_work_units(sequences: int, kv_heads: int, tiles: int) -> int:
    """Blocks of work an attention kernel over the KV cache schedules: one per (sequence, KV head, query
    tile), each streaming its sequence's cache for that head (MLA: one latent head). The profile's attention
    terms charge each a fixed device time (`hardware.sections.AttentionTerms`)."""
    return sequences * max(1, kv_heads) * max(1, tiles)


def attention_core_kernel(
    ctx: PlanContext, kind: AttentionLayerKind, q_tensor: str, q_elems: float, out: tuple[str, float]
) -> Kernel:
    """Paged / flash decoding attention: every sequence's T new queries against its cached context, the
    cache read once per query tile (`query_tiles`: once per sequence unless T × the heads per KV head
    outgrow a tile, e.g. MLA with all 128 heads on one GPU, where a verification of T tokens reads it 2T
    times, the repeats from L2 while a sequence's cache fits there).

    MLA's absorbed attention costs 2·(2·kv_lora_rank + rope) FLOPs per key per query row, computed in whole
    tiles of the device's `mla_query_tile_rows` (64): with 16 heads per rank (TP 8) a decode already pays a full tile, so a verification of up
    to 4 tokens costs the same maths; with 128 heads it is 2T tiles, compute-bound on long contexts from a
    few tokens on. Whole tiles carry their own waste, so the kernel's GEMM dimension for the efficiency
    curve is the keys it streams per sequence, not its few query rows. Grouped-query attention keeps its
    useful FLOPs at the efficiency of its query rows (decode kernels for small groups are not tiled this way).
    The kernel carries its work units (`attention_work_units`) and kind for the profile's attention terms.
    """
    model, b, t = ctx.model, ctx.batch, ctx.tokens_per_seq
    a = attention_for(model, kind)
    length = attended_tokens(model, kind, ctx.context_len + t)
    per_sequence = length * kv_bytes_per_token(model, kind)
    cache = b * per_sequence
    if a.is_mla:
        latent, rope = a.kv_lora_rank or 0, a.qk_rope_head_dim or 0
        tile_rows = ctx.device.mla_query_tile_rows
        if tile_rows:
            tiles = query_tiles(t * a.num_heads, tile_rows)
            flops = 2.0 * b * tiles * tile_rows * length * (2 * latent + rope)
            m_rows = max(1, length)
        else:  # not modelled (profiles that predate the term): the useful rows at their GEMM efficiency
            tiles, m_rows = 1, t * a.num_heads
            flops = 2.0 * b * t * a.num_heads * length * (2 * latent + rope)
    else:
        flops = 2.0 * b * t * a.num_heads * (a.head_dim + a.value_head_dim) * length
        m_rows = t * max(1, a.num_heads // max(1, a.num_kv_heads))
        tiles = query_tiles(m_rows, GQA_QUERY_TILE_ROWS)
    units = attention_work_units(b, 1 if a.is_mla else a.num_kv_heads, tiles)
    intensity = flops / max(cache, 1.0)
    category: Category = "attention" if intensity > ctx.device.ridge_flops_per_byte else "kv_cache"
    kv_read = TensorRead(LAYER_PREFIX + "kv", cache, tiles, per_sequence if tiles > 1 else 0.0)
    return make_kernel(
        "attention",
        category,
        flops=flops,
        reads=(kv_read, activation_read(q_tensor, q_elems)),
        write=(out[0], out[1] * ACT_BYTES),
        m=m_rows,
        attention_units=units,
        attention_kind="mla" if a.is_mla else "gqa",
    )


def indexer_kernels(
    ctx: PlanContext, kind: AttentionLayerKind, mats: dict[str, Matrix], latent: str
) -> list[Kernel]:
    """A sparse-attention indexer (DeepSeek-V3.2 / GLM-5 DSA, DeepSeek-V4 CSA): its projections, then a
    scan scoring every cached entry's fp8 index key for each query, whose top-k the attention reads."""
    if "index" not in mats:
        return []
    model, m, P = ctx.model, ctx.m_tokens, LAYER_PREFIX
    a = attention_for(model, kind)
    entries = indexed_tokens(model, kind, ctx.context_len + ctx.tokens_per_seq)
    keys = ctx.batch * entries * index_key_bytes_per_token(model, kind)
    flops = 2.0 * m * a.index_heads * a.index_head_dim * entries
    category: Category = (
        "attention" if flops / max(keys, 1.0) > ctx.device.ridge_flops_per_byte else "kv_cache"
    )
    out = [
        gemm_kernel(ctx, "index_proj", "dense_weights", P + "attn.index", mats["index"], m, "h", "index_k")
    ]
    if "index_q" in mats:
        out.append(
            gemm_kernel(
                ctx,
                "index_q_proj",
                "dense_weights",
                P + "attn.index_q",
                mats["index_q"],
                m,
                latent,
                "index_q",
            )
        )
    out.append(
        make_kernel(
            "index_scan",
            category,
            flops=flops,
            reads=(
                TensorRead(P + "index_keys", keys),
                activation_read("index_q", m * a.index_heads * a.index_head_dim),
            ),
            write=("index_topk", m * (a.index_topk or 0) * INDEX_BYTES),
            m=ctx.tokens_per_seq * a.index_heads,
        )
    )
    return out


def linear_attention_kernels(
    ctx: PlanContext, kind: AttentionLayerKind, mats: dict[str, Matrix]
) -> list[Kernel]:
    """Gated delta-rule linear attention (Qwen3-Next): input projection, causal conv1d over its state, the
    recurrent state update, gated norm, output projection; a fixed state per sequence, no KV cache."""
    model, m = ctx.model, ctx.m_tokens
    P = LAYER_PREFIX
    out: list[Kernel] = []
    la = model.linear_attention
    assert la is not None
    qk = la.num_key_heads * la.key_head_dim
    v = la.num_value_heads * la.value_head_dim
    conv_dim = 2 * qk + v
    conv_state = ctx.batch * conv_dim * (la.conv_kernel - 1) * KV_BYTES
    state = ctx.batch * linear_state_bytes(model, KV_BYTES) - conv_state
    out += [
        gemm_kernel(ctx, "in_proj", "dense_weights", P + "attn.in_proj", mats["in_proj"], m, "h", "qkvz"),
        make_kernel(
            "conv1d",
            "attention",
            flops=2.0 * m * conv_dim * la.conv_kernel,
            reads=(
                TensorRead(P + "attn.conv", mats["conv"].bytes),
                TensorRead(P + "conv_state", conv_state),
                activation_read("qkvz", m * conv_dim),
            ),
            write=(P + "conv_state", conv_state),
        ),
        make_kernel(
            "delta_rule",
            "kv_cache",
            flops=6.0 * m * la.num_value_heads * la.key_head_dim * la.value_head_dim,
            reads=(TensorRead(P + "ssm_state", state), activation_read("qkvz", m * conv_dim)),
            write=(P + "ssm_state", state),
        ),
        elementwise_kernel(
            "gated_norm", "attention", (("attn_core", m * v), ("qkvz", m * v)), ("attn_out", m * v)
        ),
        gemm_kernel(
            ctx,
            "out_proj",
            "dense_weights",
            P + "attn.out_proj",
            mats["out_proj"],
            m,
            "attn_out",
            "resid",
        ),
    ]
    return out


def mla_attention_kernels(
    ctx: PlanContext, kind: AttentionLayerKind, mats: dict[str, Matrix]
) -> list[Kernel]:
    """Multi-head latent attention in its absorbed form (DeepSeek): the query and KV latents, the query
    absorbed into the latent space, attention over the cached latents, the value up-projection, output.

    The absorption (q_absorb, v_up) runs for the decode and verification rows; prompt tokens of a mixed
    step (`plan.mixed`) skip it where their attention runs as multi-head attention over decompressed keys
    and values (`mla_prefill_runs_mha`): their query goes to attention as q_b_proj wrote it and their
    output straight into o_proj."""
    model, m = ctx.model, ctx.m_tokens
    absorbed = ctx.batch * ctx.tokens_per_seq if mla_prefill_runs_mha(model, kind) else m
    P = LAYER_PREFIX
    a = attention_for(model, kind)
    kv_token = kv_bytes_per_token(model, kind)
    out: list[Kernel] = []
    nope, rope, v_dim = a.qk_nope_head_dim or 0, a.qk_rope_head_dim or 0, a.v_head_dim or 0
    latent = a.kv_lora_rank or 0
    qa = mats["q_a_kv_a"]
    out.append(gemm_kernel(ctx, "q_a_kv_a_proj", "dense_weights", P + "attn.q_a_kv_a", qa, m, "h", "qkv_a"))
    out.append(
        elementwise_kernel("q_a_kv_a_norm", "attention", (("qkv_a", m * qa.rows),), ("qkv_a", m * qa.rows))
    )
    if "q_b" in mats:
        out.append(
            gemm_kernel(ctx, "q_b_proj", "dense_weights", P + "attn.q_b", mats["q_b"], m, "qkv_a", "q")
        )
    out += indexer_kernels(ctx, kind, mats, "qkv_a")
    kb = mats["kv_b_k"]
    if absorbed:
        out.append(
            make_kernel(
                "q_absorb",
                "dense_weights",
                flops=2.0 * absorbed * kb.params,
                reads=(
                    TensorRead(P + "attn.kv_b_k", kb.bytes),
                    activation_read("q", absorbed * a.num_heads * nope),
                ),
                write=("q_latent", absorbed * a.num_heads * (latent + rope) * ACT_BYTES),
                m=absorbed,
                dtype=kb.fmt.compute_dtype,
            )
        )
    out.append(
        elementwise_kernel(
            "rotary",
            "attention",
            (("q_latent", m * a.num_heads * rope), ("qkv_a", m * rope)),
            ("q_latent", m * a.num_heads * rope),
        )
    )
    out.append(
        make_kernel(
            "kv_store",
            "kv_cache",
            reads=(activation_read("qkv_a", m * (latent + rope)),),
            write=(P + "kv_new", m * kv_token),
        )
    )
    out.append(
        attention_core_kernel(
            ctx,
            kind,
            "q_latent",
            absorbed * a.num_heads * (latent + rope),
            ("attn_latent", absorbed * a.num_heads * latent),
        )
    )
    kv = mats["kv_b_v"]
    if absorbed:
        out.append(
            make_kernel(
                "v_up",
                "dense_weights",
                flops=2.0 * absorbed * kv.params,
                reads=(
                    TensorRead(P + "attn.kv_b_v", kv.bytes),
                    activation_read("attn_latent", absorbed * a.num_heads * latent),
                ),
                write=("attn_out", absorbed * a.num_heads * v_dim * ACT_BYTES),
                m=absorbed,
                dtype=kv.fmt.compute_dtype,
            )
        )
    out.append(gemm_kernel(ctx, "o_proj", "dense_weights", P + "attn.o", mats["o"], m, "attn_out", "resid"))
    return out


def gqa_attention_kernels(
    ctx: PlanContext, kind: AttentionLayerKind, mats: dict[str, Matrix]
) -> list[Kernel]:
    """Grouped-query attention (full, sliding-window or compressed layers): fused QKV projection (low-rank
    query and grouped low-rank output where the model has them), an optional indexer, q/k norm, rotary,
    KV store, attention over the cache, output projection."""
    model, m = ctx.model, ctx.m_tokens
    P = LAYER_PREFIX
    a = attention_for(model, kind)
    kv_token = kv_bytes_per_token(model, kind)
    out: list[Kernel] = []
    qkv = mats["qkv"]
    q_elems = m * a.num_heads * a.head_dim
    kv_elems = m * 2 * a.num_kv_heads * a.head_dim
    out.append(gemm_kernel(ctx, "qkv_proj", "dense_weights", P + "attn.qkv", qkv, m, "h", "qkv"))
    if "q_b" in mats:  # low-rank query: qkv_proj produced the query latent
        out.append(
            gemm_kernel(ctx, "q_b_proj", "dense_weights", P + "attn.q_b", mats["q_b"], m, "qkv", "qkv")
        )
    out += indexer_kernels(ctx, kind, mats, "qkv")
    if a.qk_norm:
        out.append(
            elementwise_kernel(
                "qk_norm",
                "attention",
                (("qkv", q_elems + kv_elems / 2),),
                ("qkv", q_elems + kv_elems / 2),
                weights=(TensorRead(P + "qk_norm", 2 * a.head_dim * ACT_BYTES),),
            )
        )
    out.append(
        elementwise_kernel(
            "rotary", "attention", (("qkv", q_elems + kv_elems / 2),), ("qkv", q_elems + kv_elems / 2)
        )
    )
    out.append(
        make_kernel(
            "kv_store",
            "kv_cache",
            reads=(activation_read("qkv", kv_elems),),
            write=(P + "kv_new", m * kv_token),
        )
    )
    out.append(attention_core_kernel(ctx, kind, "qkv", q_elems, ("attn_out", q_elems)))
    if "o_b" in mats:  # grouped low-rank output: o_a per group, then o_b
        out.append(
            gemm_kernel(ctx, "o_a_proj", "dense_weights", P + "attn.o", mats["o"], m, "attn_out", "o_latent")
        )
        out.append(
            gemm_kernel(ctx, "o_b_proj", "dense_weights", P + "attn.o_b", mats["o_b"], m, "o_latent", "resid")
        )
        return out
    out.append(gemm_kernel(ctx, "o_proj", "dense_weights", P + "attn.o", mats["o"], m, "attn_out", "resid"))
    return out


AttentionBuilder = Callable[[PlanContext, AttentionLayerKind, dict[str, Matrix]], list[Kernel]]


def attention_kernels(ctx: PlanContext, kind: AttentionLayerKind) -> list[Kernel]:
    """Norm through output projection of one attention layer, as fused serving engines launch them: the
    input norm, then the builder of the layer's attention kind (linear, MLA or grouped-query)."""
    mats = attention_matrices(ctx.model, kind)
    out: list[Kernel] = [norm_kernel(ctx, "input_norm", LAYER_PREFIX + "ln1")]
    if kind == "linear":
        builder: AttentionBuilder = linear_attention_kernels
    elif attention_for(ctx.model, kind).is_mla:
        builder = mla_attention_kernels
    else:
        builder = gqa_attention_kernels
    return out + builder(ctx, kind, mats)
