"""The GEMM suite's table → the efficiency curve e(M) the cost model prices GEMMs with. Pure.

The fit prices every measured GEMM with the cost model itself (`execution.cost.kernel_times_s`), so the
curve it stores reproduces the measurements exactly as the simulator will use it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares
from sklearn.isotonic import IsotonicRegression

from moesim.calibrate.fits import primitives as fit
from moesim.calibrate.fits.primitives import Row, column
from moesim.errors import MoesimError
from moesim.simulator.execution.cost import CostParams, kernel_times_s
from moesim.simulator.hardware.sections import GemmEfficiency


def never_faster_with_more_rows(m_tokens: np.ndarray, efficiency: np.ndarray) -> np.ndarray:
    """Cap each point so compute time M / e(M) never falls as M grows: e₂ ≤ e₁ · M₂ / M₁.

    The cost model interpolates e as a power law between points, so holding this at the points holds it
    everywhere. A fitted power above 1 would break it at small M (more rows finishing sooner), which no GEMM does.
    """
    capped = np.array(efficiency, dtype=float)
    for i in range(1, len(capped)):
        capped[i] = min(capped[i], capped[i - 1] * m_tokens[i] / m_tokens[i - 1])
    return capped


@dataclass(frozen=True)
class GemmParams:
    dtype: str
    peak_tflops: float  # best measured rate (used as the peak where no datasheet gives one)
    efficiency: GemmEfficiency
    fit: fit.FitResult


def fit_gemm_table(
    rows: list[Row],
    dtype: str,
    peak_tflops: float | None,
    memory_gbps: float,
    half_bytes: float,
    fixed_us: float,
) -> GemmParams:
    """Fit e(M) so the cost model (`kernel_times_s`: fixed + max(compute, memory), a one-row GEMM being a
    weight stream) reproduces the measured GEMM times.

    Memory-bound points only bound e(M) from below, so the curve is fixed mostly by the compute-bound
    points; the fit is least squares on log time over every shape and M. The stored curve is the fitted
    one evaluated on the measured M grid.
    """
    m = column(rows, "m", dtype=dtype)
    flops = column(rows, "flops", dtype=dtype)
    nbytes = column(rows, "bytes", dtype=dtype)
    t = column(rows, "median_s", dtype=dtype)
    ok = np.isfinite(t) & (t > 0)
    m, flops, nbytes, t = m[ok], flops[ok], nbytes[ok], t[ok]
    if len(m) < 3:
        raise MoesimError("gemm suite", f"too few valid {dtype} GEMM timings to fit", "rerun with --fresh")
    best_tflops = float(np.max(flops / t)) / 1e12
    peak = peak_tflops if peak_tflops else best_tflops
    grid = np.unique(m)

    def cost_model_s(e_max: float, m_half: float, power: float) -> np.ndarray:
        curve = fit.efficiency_curve(grid, e_max, m_half, power)
        params = CostParams.for_gemms(
            fixed_us * 1e-6, memory_gbps * 1e9, half_bytes, grid, curve, peak * 1e12
        )
        return kernel_times_s(flops, m, np.full_like(m, peak * 1e12), nbytes, np.zeros_like(m), params)[0]

    def residual(p: np.ndarray) -> np.ndarray:
        return np.log(cost_model_s(math.exp(p[0]), math.exp(p[1]), p[2])) - np.log(t)

    best = None
    for m_half0 in (4.0, 32.0, 256.0):
        res = least_squares(
            residual,
            np.array([math.log(0.7 * best_tflops / peak), math.log(m_half0), 1.0]),
            bounds=([math.log(1e-4), math.log(0.05), 0.3], [math.log(1.0), math.log(1e6), 4.0]),
        )
        if best is None or res.cost < best.cost:
            best = res
    assert best is not None
    e_max, m_half, power = math.exp(best.x[0]), math.exp(best.x[1]), float(best.x[2])
    pred = cost_model_s(e_max, m_half, power)
    log_r2, log_rmse, _ = fit.goodness(np.log(t), np.log(pred))
    result = fit._result(
        {"e_max": e_max, "m_half": m_half, "power": power, "peak_tflops": peak},
        m,
        t,
        pred,
        log_r2=log_r2,
        log_rmse=log_rmse,
        best_measured_tflops=best_tflops,
    )
    curve = np.clip(fit.efficiency_curve(grid, e_max, m_half, power), 1e-6, 1.0)
    # Monotone in M by construction of the curve; isotonic regression guards against round-off only.
    curve = IsotonicRegression(increasing=True, y_min=1e-6, y_max=1.0).fit_transform(grid, curve)
    # Round for a readable profile first, then cap: rounding after the cap could undo it.
    curve = never_faster_with_more_rows(grid, np.round(curve, 6))
    return GemmParams(
        dtype=dtype,
        peak_tflops=best_tflops,
        efficiency=GemmEfficiency(
            m_tokens=tuple(float(v) for v in grid), efficiency=tuple(float(e) for e in curve)
        ),
        fit=result,
    )


def m1_gemm_streaming_gbps(gemm_rows: list[Row], dtype: str) -> float:
    """Median bytes/s over the suite's shapes of the M=1 (memory-bound) GEMMs of one dtype: weights streamed
    by x·W, the rate a GEMM of a typical shape streams at (it varies by shape: 13-17 GB/s on a 2-core Xeon
    VM, so the fastest shape overstates the others); 0 if none."""
    m = column(gemm_rows, "m", dtype=dtype)
    nbytes = column(gemm_rows, "bytes", dtype=dtype)
    t = column(gemm_rows, "median_s", dtype=dtype)
    ok = (m == 1) & np.isfinite(nbytes) & np.isfinite(t) & (t > 0) & (nbytes > 0)
    return float(np.median(nbytes[ok] / t[ok])) / 1e9 if ok.any() else 0.0


# A one-row GEMM streaming at under half of a plain read's rate is not a weight stream (a failed or preempted
# measurement): the plateau is kept. Measured shares on a 2-core Xeon VM: 0.9-1.2.
MIN_GEMM_STREAM_SHARE = 0.5


def cpu_bandwidths(sum_plateau_gbps: float, gemm_stream_gbps: float) -> tuple[float, float]:
    """CPU (memory bandwidth, element-wise fraction): GEMMs stream at their own measured rate, element-wise
    kernels at the sum plateau, which is that rate × the fraction (above 1 where a plain read streams faster
    than a one-row GEMM); the sum plateau alone when no plausible GEMM rate was measured."""
    if gemm_stream_gbps < MIN_GEMM_STREAM_SHARE * sum_plateau_gbps:
        return sum_plateau_gbps, 1.0
    return gemm_stream_gbps, sum_plateau_gbps / gemm_stream_gbps


__all__ = [
    "GemmParams",
    "cpu_bandwidths",
    "fit_gemm_table",
    "m1_gemm_streaming_gbps",
    "never_faster_with_more_rows",
]
