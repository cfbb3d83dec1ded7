"""Cut the small silicon-database fixture in tests/data/silicon/ from the real tables.

Source: NVIDIA aiconfigurator-core 0.12.0 (Apache-2.0), `aiconfigurator_core/systems/data/h200_sxm/...`;
the rows are copied unchanged (a subset of rows, every column), so the reader and the fits are tested on
the real schema and real timings. Run with aiconfigurator-core installed:

    python tests/data/generate_silicon_fixture.py
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq

from moesim.calibrate.fits.silicon.tables import database_root

OUT = Path(__file__).parent / "silicon"
MOE_SHAPES = [(2048, 768, 128, 8), (4096, 1536, 128, 8), (2880, 2880, 128, 4), (7168, 2048, 256, 8)]
GEMM_SHAPES = [
    (4096, 2048),
    (2048, 4096),
    (6144, 4096),
    (4096, 4096),
    (1536, 2048),
    (7168, 2048),
    (2048, 7168),
    (5120, 4096),
]


def _cut(src: Path, dst: Path, mask_fn) -> None:  # type: ignore[no-untyped-def]
    table = pq.read_table(src)
    table = table.filter(mask_fn(table))
    dst.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, dst, compression="zstd")
    print(dst, table.num_rows)


def moe_mask(table):  # type: ignore[no-untyped-def]
    mask = None
    for h, w, e, k in MOE_SHAPES:
        one = pc.and_(
            pc.and_(pc.equal(table["hidden_size"], h), pc.equal(table["inter_size"], w)),
            pc.and_(pc.equal(table["num_experts"], e), pc.equal(table["topk"], k)),
        )
        mask = one if mask is None else pc.or_(mask, one)
    small = pc.and_(pc.less_equal(table["moe_tp_size"], 2), pc.equal(table["moe_ep_size"], 1))
    dtypes = pc.is_in(table["moe_dtype"], value_set=__import__("pyarrow").array(["bfloat16", "fp8_block"]))
    return pc.and_(pc.and_(mask, small), dtypes)


def gemm_mask(table):  # type: ignore[no-untyped-def]
    mask = None
    for n, k in GEMM_SHAPES:
        one = pc.and_(pc.equal(table["n"], n), pc.equal(table["k"], k))
        mask = one if mask is None else pc.or_(mask, one)
    return mask


# Attention shapes: (query heads, KV heads, head dim) of grouped-query decode; query heads per rank of MLA.
GQA_SHAPES = [(32, 4, 128), (16, 2, 128), (64, 8, 128), (32, 8, 128), (8, 1, 128)]
MLA_HEADS = [128, 64, 16, 8, 32]


def gqa_mask(table):  # type: ignore[no-untyped-def]
    mask = None
    for h, kv, d in GQA_SHAPES:
        one = pc.and_(
            pc.and_(pc.equal(table["num_heads"], h), pc.equal(table["num_key_value_heads"], kv)),
            pc.equal(table["head_dim"], d),
        )
        mask = one if mask is None else pc.or_(mask, one)
    plain = pc.and_(pc.equal(table["window_size"], 0), pc.equal(table["kv_cache_dtype"], "bfloat16"))
    return pc.and_(pc.and_(mask, plain), pc.equal(table["kernel_source"], "fa3"))


def mla_mask(table):  # type: ignore[no-untyped-def]
    heads = pc.is_in(table["num_heads"], value_set=__import__("pyarrow").array(MLA_HEADS))
    return pc.and_(heads, pc.equal(table["kv_cache_dtype"], "bfloat16"))


def mla_context_mask(table):  # type: ignore[no-untyped-def]
    heads = pc.is_in(table["num_heads"], value_set=__import__("pyarrow").array(MLA_HEADS))
    return pc.and_(heads, pc.equal(table["mla_dtype"], "bfloat16"))


def main() -> None:
    root = database_root()
    h200 = root / "h200_sxm"
    _cut(
        h200 / "moe/sglang/0.5.14/moe_perf.parquet",
        OUT / "h200_sxm/moe/sglang/0.5.14/moe_perf.parquet",
        moe_mask,
    )
    _cut(
        h200 / "moe/sglang/0.5.10/moe_perf.parquet",
        OUT / "h200_sxm/moe/sglang/0.5.10/moe_perf.parquet",
        lambda t: pc.and_(moe_mask(t), pc.equal(t["hidden_size"], 2048)),
    )
    _cut(
        h200 / "gemm/sglang/0.5.14/gemm_perf.parquet",
        OUT / "h200_sxm/gemm/sglang/0.5.14/gemm_perf.parquet",
        gemm_mask,
    )
    _cut(
        h200 / "attention/sglang/0.5.14/generation_attention_perf.parquet",
        OUT / "h200_sxm/attention/sglang/0.5.14/generation_attention_perf.parquet",
        gqa_mask,
    )
    _cut(
        h200 / "attention/sglang/0.5.14/context_attention_perf.parquet",
        OUT / "h200_sxm/attention/sglang/0.5.14/context_attention_perf.parquet",
        lambda t: pc.and_(gqa_mask(t), pc.less_equal(t["isl"], 4096)),
    )
    _cut(
        h200 / "mla/sglang/0.5.14/generation_mla_perf.parquet",
        OUT / "h200_sxm/mla/sglang/0.5.14/generation_mla_perf.parquet",
        mla_mask,
    )
    _cut(
        h200 / "mla/sglang/0.5.14/context_mla_perf.parquet",
        OUT / "h200_sxm/mla/sglang/0.5.14/context_mla_perf.parquet",
        mla_context_mask,
    )
    everything = lambda t: pc.greater(t["latency"], 0)  # noqa: E731
    _cut(
        h200 / "comm/nccl/2.29.2/nccl_perf.parquet",
        OUT / "h200_sxm/comm/nccl/2.29.2/nccl_perf.parquet",
        everything,
    )
    _cut(
        h200 / "comm/sglang/0.5.14/custom_allreduce_perf.parquet",
        OUT / "h200_sxm/comm/sglang/0.5.14/custom_allreduce_perf.parquet",
        everything,
    )
    # SGLang's DeepEP dispatch / combine: every low-latency row; normal-mode rows at DeepEP's default 20 SMs
    _cut(
        h200 / "comm/sglang/0.5.12/wideep_deepep_ll_perf.parquet",
        OUT / "h200_sxm/comm/sglang/0.5.12/wideep_deepep_ll_perf.parquet",
        lambda t: pc.greater(t["dispatch_avg_t_us"], 0),
    )
    _cut(
        h200 / "comm/sglang/0.5.12/wideep_deepep_normal_perf.parquet",
        OUT / "h200_sxm/comm/sglang/0.5.12/wideep_deepep_normal_perf.parquet",
        lambda t: pc.or_(pc.equal(t["dispatch_sms"], 20), pc.equal(t["combine_sms"], 20)),
    )


if __name__ == "__main__":
    main()
