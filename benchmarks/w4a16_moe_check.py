"""4-bit experts computed in bf16: the datasheet profiles' fused MoE block against the measured one.

    python benchmarks/w4a16_moe_check.py [--max-tokens 4096]      # needs aiconfigurator-core

Reads every `w4a16_mxfp4` row of aiconfigurator-core 0.12.0's MoE tables (`moe_perf`, balanced routing, one
GPU: moe_tp 1, moe_ep 1; the gpt-oss shapes) for H100, H200 and B200 under TensorRT-LLM, vLLM (the OAI Triton
MXFP4 experts, which SGLang also runs for gpt-oss on Hopper: 0.5.23 `arg_groups/model_overrides/gpt_oss.py`
sets `moe_runner_backend = triton_kernel`) and SGLang (its `fused_moe_triton`), and prices each as
`moesim layer` does (`simulate_expert_block` on the datasheet profile, gpt-oss-120b with the row's shape,
distinct experts min(N, tokens × k) as balanced routing gives). Prints the MAPE and median error per table.
A report of the datasheet defaults on kernels no fit saw, not a test.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from moesim.calibrate.fits.silicon import tables
from moesim.calibrate.fits.silicon.build import SYSTEM_PROFILES
from moesim.simulator.models.catalogue import load_model
from moesim.simulator.simulate import simulate_expert_block

SYSTEMS = ("h100_sxm", "h200_sxm", "b200_sxm")


def errors(path: Path, datasheet: str, max_tokens: int) -> list[float]:
    """Relative error of the datasheet block on each w4a16 row of one table."""
    import pyarrow.parquet as pq

    frame = pq.read_table(path).to_pandas()
    chosen = frame[
        (frame.moe_dtype == "w4a16_mxfp4")
        & (frame.distribution == "balanced")
        & (frame.moe_tp_size == 1)
        & (frame.moe_ep_size == 1)
        & (frame.num_tokens <= max_tokens)
    ]
    base = load_model("gpt-oss-120b")
    out = []
    for (hidden, width, experts, top_k), shape in chosen.groupby(
        ["hidden_size", "inter_size", "num_experts", "topk"]
    ):
        spec = replace(
            base, hidden=int(hidden), expert_width=int(width), n_experts=int(experts), top_k=int(top_k)
        )
        for tokens, latency_ms in zip(shape.num_tokens, shape.latency, strict=True):
            distinct = min(int(experts), int(tokens) * int(top_k))
            predicted_s = simulate_expert_block(spec, datasheet, int(tokens), distinct)
            out.append(predicted_s / (latency_ms * 1e-3) - 1.0)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-tokens", type=int, default=4096)
    args = parser.parse_args()
    collections = tables.scan(tables.database_root())
    for system in SYSTEMS:
        for framework in ("trtllm", "vllm", "sglang"):
            chosen = tables.select(collections, f"{system}/{framework}").tables.get("moe_perf")
            if chosen is None:
                continue
            found = errors(chosen.path, SYSTEM_PROFILES[system], args.max_tokens)
            if not found:
                continue
            mape = 100 * statistics.mean(abs(e) for e in found)
            median = 100 * statistics.median(found)
            print(
                f"{system}/{framework} {chosen.version} on {SYSTEM_PROFILES[system]}: {len(found)} rows, "
                f"MAPE {mape:.1f}%, median error {median:+.1f}%"
            )


if __name__ == "__main__":
    main()
