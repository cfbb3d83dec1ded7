"""Check each datasheet profile against the measured kernel tables of its GPU, the `derive_check` way.

    python benchmarks/silicon_check.py [--framework sglang] [--json]
    python benchmarks/silicon_check.py --all-to-all h200_sxm     # needs aiconfigurator-core

For every bundled silicon profile of the framework (`silicon/<system>-<framework>`), prints per fitted term
the held-out MAPE of the datasheet profile it was fitted onto (`provenance.software.datasheet_profile`:
its documented defaults, or the roofline alone where the datasheet has no such term) beside the fitted
term's, on the same held-out shapes of the same table. Both come from the profile's `[fit_quality]`, written
by `moesim calibrate --from-silicon` (`calibrate/fits/silicon/build.py`), so this reads files and fits
nothing. Terms the profile reports but does not store are marked.

`--all-to-all SYSTEM` checks the scale-up link against a table it was not fitted to: TensorRT-LLM's DeepEP
MoE dispatch / combine (`comm/trtllm/<version>/moe_a2a_perf`, EP 8 on one node; its latency is in µs). Each
row sends `num_tokens` tokens per rank, each to the distinct remote ranks its top-k experts live on (the
expectation under uniform routing, as moesim's `routing.per_rank` counts them), `hidden_size` values of the
row's dtype each; moesim prices that as a direct all-to-all (`execution.collectives.all_to_all_s`) on the
datasheet profile's link and on the silicon profile's fitted link. Printed: MAPE per backend and phase.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from moesim.simulator.execution.collectives import all_to_all_s
from moesim.simulator.hardware.profile import SILICON_PREFIX, list_profiles, load_profile


def rows(framework: str) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for name in list_profiles():
        if not (name.startswith(SILICON_PREFIX) and name.endswith(f"-{framework}")):
            continue
        profile = load_profile(name)
        for term, q in sorted(profile.fit_quality.items()):
            if "datasheet_mape_held_out_percent" not in q:
                continue
            out.append(
                {
                    "profile": name,
                    "datasheet_profile": profile.provenance.software.get("datasheet_profile", ""),
                    "term": term,
                    "stored": bool(q.get("stored", 1.0)),
                    "rows_held_out": int(q["rows_held_out"]),
                    "datasheet_held_out_percent": q["datasheet_mape_held_out_percent"],
                    "fitted_held_out_percent": q["mape_held_out_percent"],
                }
            )
    return out


DTYPE_BYTES = {"bfloat16": 2.0, "fp8": 1.0, "nvfp4": 0.5625, "fp4": 0.5}  # nvfp4: 4 bits + a byte per 16


def remote_ranks(experts: np.ndarray, top_k: np.ndarray, ranks: int) -> np.ndarray:
    """Expected distinct other ranks a token's top-k experts (uniform, without replacement) live on."""
    per_rank = experts // ranks
    none_on_rank = np.array(
        [
            math.comb(int(e - p), int(k)) / math.comb(int(e), int(k))
            for e, p, k in zip(experts, per_rank, top_k, strict=True)
        ]
    )
    return (ranks - 1) * (1.0 - none_on_rank)


def all_to_all_rows(system: str) -> list[dict[str, object]]:
    from moesim.calibrate.fits.silicon import tables
    from moesim.calibrate.fits.silicon.build import SYSTEM_PROFILES
    from moesim.simulator.execution.collectives import node_link

    collections = [
        c for c in tables.scan(tables.database_root()) if c.system == system and c.table == "moe_a2a_perf"
    ]
    if not collections:
        return []
    newest = max(collections, key=lambda c: tables.version_key(c.version))
    import pyarrow.parquet as pq

    t = {k: np.asarray(v) for k, v in pq.read_table(newest.path).to_pydict().items()}
    ranks = t["ep_size"]
    sent = t["num_tokens"] * remote_ranks(t["num_experts"], t["topk"], int(ranks.max())) * t["hidden_size"]
    sent = sent * np.array([DTYPE_BYTES.get(str(d), np.nan) for d in t["comm_dtype"]])
    measured_s = t["latency"] * 1e-6
    out = []
    for label, name in (("datasheet", SYSTEM_PROFILES[system]), ("silicon", f"silicon/{system}-trtllm")):
        node = load_profile(name).node
        for backend in sorted(set(t["comm_backend"])):
            for phase in sorted(set(t["phase"])):
                rows = (t["comm_backend"] == backend) & (t["phase"] == phase) & np.isfinite(sent)
                n = int(ranks[rows].max())
                predicted = all_to_all_s(sent[rows], n, node_link(node, n))
                error = float(np.mean(np.abs(predicted - measured_s[rows]) / measured_s[rows]) * 100)
                bias = float(np.median(predicted / measured_s[rows]))
                out.append(
                    {
                        "table": newest.label,
                        "profile": name,
                        "kind": label,
                        "backend": str(backend),
                        "phase": str(phase),
                        "rows": int(rows.sum()),
                        "mape_percent": round(error, 1),
                        "median_predicted_over_measured": round(bias, 2),
                    }
                )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", default="sglang")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--all-to-all", dest="all_to_all", metavar="SYSTEM", default="")
    args = parser.parse_args()
    if args.all_to_all:
        checks = all_to_all_rows(args.all_to_all)
        if args.json:
            print(json.dumps(checks, indent=2))
            return 0
        for c in checks:
            print(
                f"{c['table']} {c['kind']:<9} {c['backend']:<18} {c['phase']:<8} {c['rows']:4d} rows  "
                f"MAPE {c['mape_percent']:6.1f}%  median predicted/measured {c['median_predicted_over_measured']}"
            )
        return 0
    table = rows(args.framework)
    if args.json:
        print(json.dumps(table, indent=2))
        return 0
    print(f"held-out MAPE on the {args.framework} tables: datasheet profile -> fitted (rows held out)")
    for row in table:
        mark = "" if row["stored"] else "  (reported, not stored)"
        print(
            f"{row['datasheet_profile']!s:<14} {row['term']!s:<20} {row['datasheet_held_out_percent']:6.1f}% "
            f"-> {row['fitted_held_out_percent']:5.1f}%  ({row['rows_held_out']}){mark}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
