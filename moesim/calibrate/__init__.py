"""Calibration: short torch microbenchmarks on the local device, fitted into a hardware profile.

torch is imported lazily by the suites, so `import moesim.calibrate` works without it; `fit`, `build` and
`plan` never need it. Entry point: `moesim.calibrate.runner.calibrate`.
"""

from __future__ import annotations

SUITES = ("memory", "launch", "gemm", "moe")
