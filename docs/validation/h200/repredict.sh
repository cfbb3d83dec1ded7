#!/usr/bin/env bash
# Re-score the H200 run-3 measurements (measured-run3/*/result.json, raw evidence from the device) offline,
# with the measured H200 profile and with the profile derived for the H200 from the CPU calibration.
# Needs no GPU. Usage: bash docs/validation/h200/repredict.sh   (from the repository root)
set -euo pipefail
H=docs/validation/h200
python3 -m moesim profiles derive --from docs/validation/cpu/cpu.toml --to h200 --output "$H/h200-from-cpu.toml"
for launch in eager graph; do
  python3 -m moesim validate --repredict "$H/measured-run3/$launch/result.json" --profile measured/h200 \
    --cross-profile "$H/h200-from-cpu.toml" --report "$H/$launch" --json > /dev/null
  python3 -m moesim validate --repredict "$H/measured-run3/$launch/result.json" --profile "$H/h200-from-cpu.toml" \
    --report "$H/cross-from-cpu/$launch" --json > /dev/null
done
python3 - <<'PY'
import json
for sub in ("eager", "graph", "cross-from-cpu/eager", "cross-from-cpu/graph"):
    s = json.load(open(f"docs/validation/h200/{sub}/result.json"))["summary"]
    print(f"{sub:22s} n={s['n']} MAPE {s['mape']:.1%} p90 {s['p90_abs_error']:.1%} bias {s['median_error']:+.1%} noise {s['noise_floor']:.1%}")
PY
