#!/usr/bin/env bash
# One prepared run on a borrowed GPU machine: full calibration, validation on the measured profile, and the
# cross-device check (a profile derived from the CPU calibration, scored on the same GPU measurements).
# Needs no network: simpy and tomli-w travel as wheels in .whl/ (see docs/validation/README.md).
set -uo pipefail
OUT="${OUT:-out/device}"
mkdir -p "$OUT/calibration" "$OUT/validation" "$OUT/derived"
export PYTHONUNBUFFERED=1
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH="/tmp/site:$PWD"
else
  export PYTHONPATH="$PWD"
fi
log="$OUT/log.txt"
run() { echo "+ $*" | tee -a "$log"; "$@" 2>&1 | tee -a "$log"; echo "exit $?" | tee -a "$log"; }

run nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
run python3 -c "import torch, sys; print(sys.version, torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))"
SECONDS=0
run timeout 270 python3 -m moesim calibrate --device cuda --name h200-measured --output "$OUT/calibration/h200.toml"
echo "calibration took ${SECONDS}s" | tee -a "$log"
SECONDS=0
run timeout 200 python3 -m moesim validate --profile "$OUT/calibration/h200.toml" --device cuda --quick \
  --report "$OUT/validation" --json
echo "validation took ${SECONDS}s" | tee -a "$log"
CPU_PROFILE=moesim/hardware_profiles/measured/cpu.toml
if [ -f "$CPU_PROFILE" ] && [ -f "$OUT/validation/validation.csv" ]; then
  run python3 -m moesim profiles derive --from "$CPU_PROFILE" --to h200 --name h200-from-cpu \
    --output "$OUT/derived/h200-from-cpu.toml"
  run python3 -m moesim validate --measured "$OUT/validation/validation.csv" --profile "$OUT/derived/h200-from-cpu.toml" \
    --report "$OUT/derived" --json
  run python3 -m moesim validate --measured "$OUT/validation/validation.csv" --profile h200 --report "$OUT/datasheet" --json
fi
tar czf "$OUT.tgz" -C "$(dirname "$OUT")" "$(basename "$OUT")" && echo "packed $OUT.tgz"
