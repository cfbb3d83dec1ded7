#!/usr/bin/env bash
# One prepared run on a borrowed GPU (no network): full calibration, validation against the measured profile,
# and the cross-device check (a profile derived from the committed CPU calibration, scored on the same rows).
# simpy and tomli-w travel as wheels in .whl/ (python3 -m pip download ... -d .whl simpy tomli-w).
# Usage: RESULTS=/tmp/results bash scripts/device_run.sh   (then archive $RESULTS)
set -uo pipefail
RESULTS="${RESULTS:-/tmp/moesim-device}"
CPU_PROFILE="${CPU_PROFILE:-docs/validation/cpu/cpu.toml}"
mkdir -p "$RESULTS/calibration"
export PYTHONUNBUFFERED=1
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH="/tmp/site:$PWD"
else
  export PYTHONPATH="$PWD"
fi
moesim() { python3 -m moesim "$@"; }

{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
  python3 -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))"
} 2>&1 | tee "$RESULTS/device.txt"

SECONDS=0
timeout 75 python3 -m moesim calibrate --device cuda --name h200-measured \
  --output "$RESULTS/calibration/h200-measured.toml" 2>&1 | tee "$RESULTS/calibrate.log"
echo "calibration: ${SECONDS}s" | tee -a "$RESULTS/calibrate.log"

PROFILE="$RESULTS/calibration/h200-measured.toml"
[ -f "$PROFILE" ] || { echo "no measured profile: validating against the datasheet profile" | tee -a "$RESULTS/calibrate.log"; PROFILE=h200; }
DERIVED=""
if [ -f "$CPU_PROFILE" ] && moesim profiles derive --from "$CPU_PROFILE" --to h200 --name h200-from-cpu \
    --output "$RESULTS/h200-from-cpu.toml" > "$RESULTS/derive.log" 2>&1; then
  DERIVED="$RESULTS/h200-from-cpu.toml"
fi
SECONDS=0
timeout 100 bash docs/validation/h200/run_validate.sh "$PROFILE" "$DERIVED" "$RESULTS/validation" 2>&1 | tee "$RESULTS/validate.log"
echo "validation: ${SECONDS}s" | tee -a "$RESULTS/validate.log"
# Host cost per aten op of one eager reference step (torch profiler), when there is time left:
# timeout 90 python3 scripts/profile_reference_ops.py --device cuda > "$RESULTS/reference_ops_profile.txt" 2>&1
