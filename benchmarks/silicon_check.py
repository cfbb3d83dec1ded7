"""Check each datasheet profile against the measured kernel tables of its GPU, the `derive_check` way.

    python benchmarks/silicon_check.py [--framework sglang] [--json]
    python benchmarks/silicon_check.py --all-to-all h200_sxm     # needs aiconfigurator-core

For every bundled silicon profile of the framework (`silicon/<system>-<framework>`), prints per fitted term
the held-out MAPE of the datasheet profile it was fitted onto (`provenance.software.datasheet_profile`:
its documented defaults, or the roofline alone where the datasheet has no such term) beside the fitted
term's, on the same held-out shapes of the same table. Both come from the profile's `[fit_quality]`, written
by `moesim calibrate --from-silicon` (`calibrate/fits/silicon/build.py`), so this reads files and fits
nothing. Terms the profile reports but does not store are marked.

`--all-to-all SYSTEM` checks the expert-parallel all-to-all against every framework's measured DeepEP
dispatch / combine of the system (SGLang's `wideep_deepep_ll_perf` / `wideep_deepep_normal_perf`, TensorRT-LLM's
and vLLM's `moe_a2a_perf`; one node, EP 8 or 4), read and priced as `calibrate/fits/silicon/a2a_fit.py` says:
each row's busiest-rank bytes in moesim's count, timed by `execution.collectives.collective_time_s` on the
datasheet profile's node (the direct all-to-all on its link) and on the framework's silicon profile's node
(its fitted `[node.all_to_all.<mode>]` terms where stored). Printed: MAPE per table, mode and phase (the
silicon terms were fitted to three shapes in four of the newest tables' rows: the fit's own held-out error
is in `[fit_quality.node.all_to_all.<mode>]`). Older collections add only their rows across nodes (SGLang
0.5.6.post2 on H100 / H200: EP 16-64 on 2-8 nodes), which no fit saw: they check the across-node rule.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

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


def all_to_all_rows(system: str) -> list[dict[str, object]]:
    """Per table, DeepEP mode, phase and EP size: MAPE of the datasheet and the silicon profile on the rows."""
    from moesim.calibrate.fits.silicon import tables
    from moesim.calibrate.fits.silicon.a2a_fit import A2A_TABLES, read_rows
    from moesim.calibrate.fits.silicon.build import SYSTEM_PROFILES
    from moesim.simulator.execution.collectives import collective_time_s
    from moesim.simulator.plan.kernels import Collective

    collections = tables.scan(tables.database_root())
    gpus_per_node = load_profile(SYSTEM_PROFILES[system]).node.gpus_per_node
    out = []
    for framework in sorted(
        {c.framework for c in collections if c.system == system and c.table in A2A_TABLES}
    ):
        selection = tables.select(collections, f"{system}/{framework}")
        chosen = [c for c in (selection.get(t) for t in A2A_TABLES) if c is not None]
        older = [  # older collections, read only for their rows across nodes (never fitted)
            c
            for c in collections
            if c.system == system and c.framework == framework and c.table in A2A_TABLES and c not in chosen
        ]
        for collection in chosen + older:
            a2a = read_rows(collection, system)
            if collection in older:
                a2a = a2a.where(a2a.ranks > gpus_per_node)
            for kind, name in (
                ("datasheet", SYSTEM_PROFILES[system]),
                ("silicon", f"silicon/{system}-{framework}"),
            ):
                node = load_profile(name).node
                for mode, phase, ranks in sorted(set(zip(a2a.mode, a2a.phase, a2a.ranks, strict=True))):
                    at = np.nonzero((a2a.mode == mode) & (a2a.phase == phase) & (a2a.ranks == ranks))[0]
                    predicted = np.array(
                        [
                            collective_time_s(
                                Collective("all_to_all", int(ranks), float(a2a.bytes[i]), phase=phase),
                                node,
                                mode,
                            )
                            for i in at
                        ]
                    )
                    measured = a2a.measured_s[at]
                    out.append(
                        {
                            "table": collection.label,
                            "profile": name,
                            "kind": kind,
                            "mode": str(mode),
                            "phase": str(phase),
                            "ep": int(ranks),
                            "rows": int(at.size),
                            "mape_percent": round(
                                float(np.mean(np.abs(predicted - measured) / measured) * 100), 1
                            ),
                            "median_predicted_over_measured": round(
                                float(np.median(predicted / measured)), 2
                            ),
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
                f"{c['table']:<44} {c['kind']:<9} {c['mode']:<11} {c['phase']:<8} EP {c['ep']:<3} {c['rows']:4d} rows  "
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
