#!/usr/bin/env bash
# Issue 15 on a borrowed GPU, one prepared run that installs nothing: a quick calibration (the L2 read by
# the Triton multi-pass kernel where triton is present), then validation of both reference styles
# (torch-reference: a GEMM pair per distinct expert; torch-fused: one Triton grouped GEMM per projection)
# in eager and graph replay, everything under one folder, each step time-boxed so the whole stays < 8 min.
# The drift probe (an HBM read, a bf16 GEMM, a small-M bf16 GEMM over weights streamed from HBM and a burst
# of tiny launches, CUDA events / host clock) runs
# before and after every calibration suite and beside every validation row, so the run reports the GPU's
# own drift: the calibration's probe spread, and each validation's MAPE raw and drift-corrected.
#
# Usage (repository root, a CUDA build of torch in python3):
#   OUT=/tmp/moesim-device DEPS=deps bash scripts/device_validate.sh
# DEPS: optional folder of unpacked pure-python dependencies put on PYTHONPATH (nothing is installed), e.g.
#   made beside the checkout with: pip download --no-deps -d wheels simpy tomli-w click rich && \
#   for w in wheels/*.whl; do python3 -m zipfile -e "$w" deps; done
# scipy and scikit-learn (the fits) must already be importable; the script says so and stops if not.
set -uo pipefail
OUT="${OUT:-${1:-/tmp/moesim-device}}"
mkdir -p "$OUT/validate"
export PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${DEPS:+:$PWD/$DEPS}${PYTHONPATH:+:$PYTHONPATH}"
SECONDS=0

python3 - > "$OUT/environment.txt" 2>&1 <<'PY'
import importlib, platform, sys
missing = []
for name in ("torch", "numpy", "scipy", "sklearn", "click", "tomli_w", "simpy", "triton"):
    try:
        module = importlib.import_module(name)
        print(f"{name} {getattr(module, '__version__', '?')}")
    except ImportError:
        missing.append(name)
        print(f"{name} MISSING")
import torch
print("python", platform.python_version(), "cuda", torch.version.cuda, "device",
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none")
needed = {"torch", "numpy", "scipy", "sklearn", "click", "tomli_w"} & set(missing)
sys.exit(1 if needed or not torch.cuda.is_available() else 0)
PY
status=$?
cat "$OUT/environment.txt"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv >> "$OUT/environment.txt" 2>&1
if [ $status -ne 0 ]; then echo "missing a dependency or no CUDA device: see $OUT/environment.txt"; exit 1; fi

PROFILE="$OUT/calibration/gpu.toml"
timeout 200 python3 -m moesim calibrate --device cuda --quick --fresh --output "$PROFILE" --json \
  > "$OUT/calibrate.json" 2> "$OUT/calibrate.log"
echo "calibration: rc $? at ${SECONDS}s" | tee -a "$OUT/steps.txt"
[ -f "$PROFILE" ] || { echo "no measured profile: validating against the bundled datasheet profile h200" | tee -a "$OUT/steps.txt"; PROFILE=h200; }

for style in torch-reference torch-fused; do
  for launch in eager graph; do
    models=fine,coarse,shared
    [ "$launch" = graph ] && models=fine  # graph capture per configuration: one shape keeps it inside the budget
    timeout 90 python3 -m moesim validate --profile "$PROFILE" --device cuda --quick --launch "$launch" \
      --reference "$style" --models "$models" --cross-profile h200 \
      --report "$OUT/validate/$style-$launch" --json > "$OUT/validate/$style-$launch.json" 2> "$OUT/validate/$style-$launch.log"
    echo "validate $style $launch: rc $? at ${SECONDS}s" | tee -a "$OUT/steps.txt"
  done
done

python3 - "$OUT" <<'PY' | tee "$OUT/summary.txt"
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
try:
    q = json.loads((out / "calibrate.json").read_text())["profile"]
    em = q["empirical"]
    print("calibrated:", {k: em[k] for k in ("kernel_fixed_latency_us", "launch_graph_gap_us", "memory_bandwidth_fraction",
                                             "cache_bandwidth_gbps", "cache_effective_bytes")})
    probe = q.get("fit_quality", {}).get("drift_probe", {})
    print("drift probe during calibration:", {k: round(v, 4) for k, v in probe.items()
                                              if k.endswith(("_spread", "_drift", "_threshold", "_noise", "_gbps", "_tflops", "_us"))})
except (OSError, KeyError, ValueError) as exc:
    print("calibration result unreadable:", exc)
for path in sorted((out / "validate").glob("*.json")):
    try:
        s = json.loads(path.read_text())["summary"]
    except (ValueError, KeyError):
        print(path.stem, "no result (see its .log)")
        continue
    drift = s.get("drift") or {}
    corrected = (drift.get("corrected") or {}).get("mape")
    spread = ", ".join(f"{k} {v:.1%}" for k, v in drift.get("probe_spread", {}).items())
    print(f"{path.stem:26s} n={s['n']} MAPE {s['mape']:.1%} p90 {s['p90_abs_error']:.1%} "
          f"bias {s['median_error']:+.1%} noise {s['noise_floor']:.1%} "
          f"drift-corrected MAPE {'-' if corrected is None else format(corrected, '.1%')}; probe spread {spread or '-'}")
PY
echo "total: ${SECONDS}s" | tee -a "$OUT/steps.txt"
