"""Calibration: short torch microbenchmarks on the local device, fitted into a hardware profile.

torch is imported lazily by the suites (and triton by `triton_kernels`), so `import moesim.calibrate` works
without them; `fit`, the per-suite fits (`fit_memory`, `fit_launch`, `fit_gemm`, `fit_moe`), `build` and
`plan` never need them. Entry point: `moesim.calibrate.runner.calibrate`.
"""

from __future__ import annotations

SUITES = ("memory", "launch", "gemm", "moe")
