"""Calibration: short torch microbenchmarks on the local device, fitted into a hardware profile.

- `suites/`: the measurements (torch imported lazily, triton by `triton_kernels`): `timing`, `memory`,
  `launch`, `gemm`, `moe` with `moe_block`, the suite sizes (`plan`) and the resumable `runner`
  (entry point: `moesim.calibrate.suites.runner.calibrate`);
- `fits/`: pure, no torch: fit primitives (`primitives`), one fit per suite (`memory`, `launch`, `gemm`,
  `moe`) and their assembly into a profile (`build`); `fits/silicon/`: silicon profiles fitted to
  aiconfigurator-core's measured kernel tables;
- `routing_record`: routing traces recorded from `transformers` models;
- `request`: what `moesim calibrate` is asked (`CalibrationRequest`, its options as fields; light).
"""

from __future__ import annotations

SUITES = ("memory", "launch", "gemm", "moe")  # the calibration suites, in the order they run
