#!/usr/bin/env bash
# Validation on a GPU machine, one prepared script (the H200 run of issue 4).
# Usage: bash docs/validation/h200/run_validate.sh MEASURED_PROFILE [DERIVED_PROFILE] [OUTDIR]
#   MEASURED_PROFILE  the profile `moesim calibrate --device cuda` measured on this GPU
#   DERIVED_PROFILE   optional: a profile derived for this GPU from another device's measurements
#                     (`moesim profiles derive --from docs/validation/cpu/cpu.toml --to h200 ...`),
#                     predicted on the very same measured rows (the cross-device check)
# Runs the eager quick grid (36 rows: 3 real-width models, 4 layers, B 1,4,32 × K 0,1,3,7), then graph
# replay on the fine-grained model. Needs torch with CUDA; simpy is optional (the fast path stands in).
set -euo pipefail
PROFILE=${1:?measured profile}
DERIVED=${2:-}
OUT=${3:-${OUT:-validation-out}}
export PYTHONUNBUFFERED=1
mkdir -p "$OUT"
CROSS=()
if [ -n "$DERIVED" ]; then CROSS=(--cross-profile "$DERIVED"); fi
run() { python3 -c 'import sys; from moesim.commands.validate import validate_command; validate_command(sys.argv[1:], prog_name="moesim validate")' "$@"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv || true
time run --profile "$PROFILE" --device cuda --quick --launch eager "${CROSS[@]}" --report "$OUT/eager" --json > "$OUT/eager.json"
time run --profile "$PROFILE" --device cuda --quick --launch graph --models fine "${CROSS[@]}" --report "$OUT/graph" --json > "$OUT/graph.json"
python3 - "$OUT" <<'PY'
import json, sys
for name in ("eager", "graph"):
    s = json.load(open(f"{sys.argv[1]}/{name}.json"))["summary"]
    print(name, {k: s.get(k) for k in ("n", "mape", "p90_abs_error", "median_error", "noise_floor", "ratio_mape")})
    for other, c in s.get("cross_device", {}).items():
        print("  cross", other, {k: c.get(k) for k in ("mape", "p90_abs_error", "median_error")})
PY
