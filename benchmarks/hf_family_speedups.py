"""Every transformers MoE family's test config through `moesim simulate --json`: counts, layout, speedup.

Usage: python3 benchmarks/hf_family_speedups.py [--hardware h200] [--batch 1] [--draft-len 3] [--json]
Runs the CLI command itself (`moesim simulate --model-config tests/data/hf_configs/families/X.json`) for
each family on the smallest layout whose memory fits, and prints total / active parameters, the layout,
distinct experts per MoE layer (decode, verify) and the SD speedup as a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from click.testing import CliRunner  # noqa: E402

from moesim.cli import cli  # noqa: E402

FAMILIES = ROOT / "tests" / "data" / "hf_configs" / "families"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hardware", default="h200")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--draft-len", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args()
    rows = []
    for path in sorted(FAMILIES.glob("*.json")):
        common = ["--model-config", str(path), "--json"]
        summary = json.loads(CliRunner().invoke(cli, ["models", *common]).stdout)
        result = CliRunner().invoke(
            cli,
            [
                "simulate",
                *common,
                "--hardware",
                args.hardware,
                "--batch",
                str(args.batch),
                "--draft-len",
                str(args.draft_len),
            ],
        )
        if result.exit_code:
            rows.append({"family": path.stem, "error": result.stderr.strip()})
            continue
        out = json.loads(result.stdout)
        rows.append(
            {
                "family": path.stem,
                "total_params": summary["params"]["total"],
                "active_params": summary["params"]["active"],
                "gpus": out.get("parallel", {}).get("layout", {}).get("gpus", 1),
                "distinct_decode": out["decode"]["distinct_experts_per_layer"],
                "distinct_verify": out["verify"]["distinct_experts_per_layer"],
                "speedup": out["speedup"],
            }
        )
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"{args.hardware}, B={args.batch}, K={args.draft_len}, typical routing, eagle drafter, α=0.8\n")
    print("| family | total | active | GPUs | distinct experts decode → verify | speedup |")
    print("|---|---:|---:|---:|---:|---:|")
    for row in rows:
        if "error" in row:
            print(f"| {row['family']} | error: {row['error']} | | | | |")
            continue
        print(
            f"| {row['family']} | {row['total_params'] / 1e9:.1f}B | {row['active_params'] / 1e9:.2f}B | "
            f"{row['gpus']} | {row['distinct_decode']:.1f} → {row['distinct_verify']:.1f} | {row['speedup']:.2f}× |"
        )


if __name__ == "__main__":
    main()
