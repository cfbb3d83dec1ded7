"""Check each datasheet profile against the measured kernel tables of its GPU, the `derive_check` way.

    python benchmarks/silicon_check.py [--framework sglang] [--json]

For every bundled silicon profile of the framework (`silicon/<system>-<framework>`), prints per fitted term
the held-out MAPE of the datasheet profile it was fitted onto (`provenance.software.datasheet_profile`:
its documented defaults, or the roofline alone where the datasheet has no such term) beside the fitted
term's, on the same held-out shapes of the same table. Both come from the profile's `[fit_quality]`, written
by `moesim calibrate --from-silicon` (`calibrate/fits/silicon/build.py`), so this reads files and fits
nothing. Terms the profile reports but does not store are marked.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", default="sglang")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
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
