"""Check the derive rules on memory bandwidth: measured H200 → each GPU with a public measurement.

    python benchmarks/derive_check.py [--from measured/h200] [--json]

For every GPU with a published STREAM-like HBM measurement (shared/reference/measured_runs.md, R6: one
harness on Azure VMs, TB/s; RTX 4090: a global-memory read benchmark), prints the achieved bandwidth the
bundled datasheet profile assumes (peak × the vendor's documented default fraction), the one
`moesim profiles derive` gives from the measured H200 profile (fraction carried by the ratio rule), and
the measured range (lowest to highest of copy, mul, add, triad, read-only), with each one's error against
the measured read-only figure (what a decode step's weight stream is). The NVIDIA default fraction is
itself the median of these measurements and the H200's, so the default column is in-sample for them; the
derived column does not use the defaults between parts of one vendor (the ratio cancels) and is an
independent check there; for the MI300X it uses the AMD default, which comes from the MI300X figures.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

# TB/s as published (R6); "read" is the read-only (dot) kernel, 4090: the global-memory read figure.
MEASURED_TBPS: dict[str, dict[str, float]] = {
    "a100-80gb": {"copy": 1.61, "mul": 1.61, "add": 1.70, "triad": 1.70, "read": 1.75},
    "h100-sxm": {"copy": 2.90, "mul": 2.90, "add": 2.97, "triad": 2.97, "read": 3.18},
    "h200": {"copy": 4.01, "mul": 4.00, "add": 4.15, "triad": 4.15, "read": 4.48},
    "mi300x": {"copy": 4.11, "mul": 4.26, "add": 4.14, "triad": 4.09, "read": 3.87},
    "rtx-4090": {"read": 0.92},
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="source", default="measured/h200")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    from moesim.simulator.hardware.derive import derive_profile
    from moesim.simulator.hardware.profile import load_profile

    measured = load_profile(args.source)
    rows = []
    for name, figures in MEASURED_TBPS.items():
        target = load_profile(name)
        peak = target.datasheet.memory_bandwidth_gbps / 1000
        derived = derive_profile(measured, target, f"{name}-derived")
        default_tbps = peak * target.empirical.memory_bandwidth_fraction
        derived_tbps = peak * derived.empirical.memory_bandwidth_fraction
        read = figures["read"]
        rows.append(
            {
                "gpu": name,
                "peak_tbps": peak,
                "default_tbps": default_tbps,
                "derived_from_h200_tbps": derived_tbps,
                "measured_read_tbps": read,
                "measured_range_tbps": [min(figures.values()), max(figures.values())],
                "default_error": default_tbps / read - 1,
                "derived_error": derived_tbps / read - 1,
            }
        )
    if args.json:
        print(json.dumps({"source": measured.name, "rows": rows}, indent=2))
        return 0
    print(f"achieved HBM bandwidth, TB/s (derived from {measured.name}; errors against the measured read)")
    print(f"{'GPU':<11}{'peak':>7}{'default':>16}{'derived':>16}{'measured read':>15}{'range':>13}")
    for r in rows:
        lo, hi = r["measured_range_tbps"]
        print(
            f"{r['gpu']:<11}{r['peak_tbps']:>7.2f}{r['default_tbps']:>8.2f} ({r['default_error']:+.0%})"
            f"{r['derived_from_h200_tbps']:>8.2f} ({r['derived_error']:+.0%}){r['measured_read_tbps']:>15.2f}"
            f"{lo:>8.2f}-{hi:.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
