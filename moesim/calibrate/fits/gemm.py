"""The GEMM suite's table → the efficiency curve e(M) the cost model prices GEMMs with. Pure.

The fit prices every measured GEMM with the cost model itself (`execution.cost.kernel_times_s`), so the
curve it stores reproduces the measurements exactly as the simulator will use it.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares
from sklearn.isotonic import IsotonicRegression

from moesim.calibrate.fits import drift
from moesim.calibrate.fits import primitives as fit
from moesim.calibrate.fits.primitives import Row, column
from moesim.errors import MoesimError
from moesim.simulator.execution.cost import (
    GEMV_EFFICIENCY,
    GEMV_M_TOKENS,
    CostParams,
    kernel_times_s,
)
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


# The per-M efficiency is searched on this many log-spaced values in [MIN_EFFICIENCY, 1] (a 0.3% step).
MIN_EFFICIENCY = 1e-5
EFFICIENCY_STEPS = 4000


def _gemm_times_s(
    flops: np.ndarray,
    m: np.ndarray,
    nbytes: np.ndarray,
    efficiency: np.ndarray,
    peak_flops: float,
    memory_bytes_per_s: float,
    half_bytes: float,
    fixed_s: float,
) -> np.ndarray:
    """The cost model's time (`kernel_times_s`) of GEMMs each at its own efficiency (arrays broadcast
    together), a one-row GEMM at GEMV_EFFICIENCY: the efficiency enters as the rate, peak × e, over a flat
    curve of 1."""
    flops, m, nbytes, efficiency = np.broadcast_arrays(flops, m, nbytes, efficiency)
    rate = peak_flops * np.where(m <= GEMV_M_TOKENS, GEMV_EFFICIENCY, efficiency)
    flat = np.ones(2)
    params = CostParams.for_gemms(fixed_s, memory_bytes_per_s, half_bytes, np.array([1.0, 2.0]), flat, 1.0)
    total = kernel_times_s(flops.ravel(), m.ravel(), rate.ravel(), nbytes.ravel(), np.zeros(m.size), params)[
        0
    ]
    return total.reshape(m.shape)


def measured_efficiency(
    flops: np.ndarray,
    m: np.ndarray,
    nbytes: np.ndarray,
    t: np.ndarray,
    peak_flops: float,
    memory_bytes_per_s: float,
    half_bytes: float,
    fixed_s: float,
) -> tuple[np.ndarray, np.ndarray]:
    """(M grid, efficiency): at each measured M the one efficiency that minimises the squared log error of
    the cost model over that M's GEMMs (every shape), found on a fine log grid. No functional form: a CPU's
    or GPU's GEMM kernels switch blocking with M (on a 2-core EPYC VM an fp32 GEMM takes as long at M = 4 as
    at M = 8), which a smooth saturating curve smooths over."""
    grid = np.unique(m)
    candidates = np.geomspace(MIN_EFFICIENCY, 1.0, EFFICIENCY_STEPS)
    out = np.empty(len(grid))
    for i, value in enumerate(grid):
        at = m == value
        model = _gemm_times_s(
            flops[at][:, None],
            m[at][:, None],
            nbytes[at][:, None],
            candidates[None, :],
            peak_flops,
            memory_bytes_per_s,
            half_bytes,
            fixed_s,
        )
        cost = np.sum((np.log(model) - np.log(t[at])[:, None]) ** 2, axis=0)
        # Memory-bound points leave e free above some value: take the smallest e of the best cost.
        out[i] = candidates[int(np.flatnonzero(cost <= cost.min() * (1 + 1e-9) + 1e-15)[0])]
    # A one-row GEMM is priced as a weight stream whatever e is: its point takes the next M's compute time.
    one_row = grid <= GEMV_M_TOKENS
    if one_row.any() and (~one_row).any():
        above = int(np.flatnonzero(~one_row)[0])
        out[one_row] = out[above] * grid[one_row] / grid[above]
    return grid, out


def _shape_keys(rows: list[Row], dtype: str) -> np.ndarray:
    k, n = column(rows, "k", dtype=dtype), column(rows, "n", dtype=dtype)
    return np.round(k) * 1e7 + np.round(n)


def fit_gemm_points(
    rows: list[Row],
    dtype: str,
    peak_tflops: float | None,
    memory_gbps: float,
    half_bytes: float,
    fixed_us: float,
) -> GemmParams:
    """The efficiency curve e(M) as measured: one value per measured M (`measured_efficiency`), monotone
    and never faster with more rows, so the cost model reproduces each M's GEMMs as the suite timed them.

    The fit's quality records its log error on the suite and, held out, leave-one-shape-out: the curve
    fitted on the other (K, N) shapes scores each shape's GEMMs (`heldout_log_rmse`), beside the same for the
    three-parameter saturating curve (`heldout_log_rmse_saturating`, `fit_gemm_table`).
    """
    m = column(rows, "m", dtype=dtype)
    flops = column(rows, "flops", dtype=dtype)
    nbytes = column(rows, "bytes", dtype=dtype)
    t = column(rows, "median_s", dtype=dtype)
    shapes = _shape_keys(rows, dtype)
    ok = np.isfinite(t) & (t > 0)
    m, flops, nbytes, t, shapes = m[ok], flops[ok], nbytes[ok], t[ok], shapes[ok]
    if len(m) < 3:
        raise MoesimError("gemm suite", f"too few valid {dtype} GEMM timings to fit", "rerun with --fresh")
    best_tflops = float(np.max(flops / t)) / 1e12
    peak = (peak_tflops or best_tflops) * 1e12
    args = (peak, memory_gbps * 1e9, half_bytes, fixed_us * 1e-6)

    def curve_on(select: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        grid, e = measured_efficiency(flops[select], m[select], nbytes[select], t[select], *args)
        e = IsotonicRegression(increasing=True, y_min=MIN_EFFICIENCY, y_max=1.0).fit_transform(grid, e)
        return grid, never_faster_with_more_rows(grid, np.round(e, 6))

    def predicted(grid: np.ndarray, e: np.ndarray, select: np.ndarray) -> np.ndarray:
        at = np.exp(np.interp(np.log(m[select]), np.log(grid), np.log(e)))
        return _gemm_times_s(flops[select], m[select], nbytes[select], at, *args)

    grid, curve = curve_on(np.ones(len(m), dtype=bool))
    pred = predicted(grid, curve, np.ones(len(m), dtype=bool))
    log_r2, log_rmse, _ = fit.goodness(np.log(t), np.log(pred))
    heldout: list[float] = []
    heldout_saturating: list[float] = []
    for shape in np.unique(shapes):
        train, test = shapes != shape, shapes == shape
        if len(np.unique(m[train])) < len(np.unique(m[test])) or train.sum() < 3:
            continue
        g_train, e_train = curve_on(train)
        heldout.extend(np.log(predicted(g_train, e_train, test)) - np.log(t[test]))
        kept = [r for r, s in zip(_ok_rows(rows, dtype), shapes, strict=True) if s != shape]
        saturating = fit_gemm_table(kept, dtype, peak / 1e12, memory_gbps, half_bytes, fixed_us).efficiency
        s_grid = np.asarray(saturating.m_tokens)
        s_e = np.asarray(saturating.efficiency)
        heldout_saturating.extend(np.log(predicted(s_grid, s_e, test)) - np.log(t[test]))
    extra = {"log_r2": log_r2, "log_rmse": log_rmse, "best_measured_tflops": best_tflops}
    if heldout:
        extra["heldout_log_rmse"] = float(np.sqrt(np.mean(np.square(heldout))))
        extra["heldout_log_rmse_saturating"] = float(np.sqrt(np.mean(np.square(heldout_saturating))))
    result = fit._result(
        {f"e_m{int(g)}": float(e) for g, e in zip(grid, curve, strict=True)} | {"peak_tflops": peak / 1e12},
        m,
        t,
        pred,
        **extra,
    )
    return GemmParams(
        dtype=dtype,
        peak_tflops=best_tflops,
        efficiency=GemmEfficiency(
            m_tokens=tuple(float(v) for v in grid), efficiency=tuple(float(e) for e in curve)
        ),
        fit=result,
    )


def _ok_rows(rows: list[Row], dtype: str) -> list[Row]:
    """The rows of `dtype` with a valid time, in `column`'s order."""
    t = column(rows, "median_s", dtype=dtype)
    picked = [r for r in rows if str(r.get("dtype")) == str(dtype)]
    return [r for r, v in zip(picked, t, strict=True) if np.isfinite(v) and v > 0]


def m1_gemm_streaming_gbps(gemm_rows: list[Row], dtype: str) -> float:
    """Median bytes/s over the suite's shapes of the M=1 (memory-bound) GEMMs of one dtype: weights streamed
    by x·W, the rate a GEMM of a typical shape streams at (it varies by shape: 13-17 GB/s on a 2-core Xeon
    VM, so the fastest shape overstates the others); 0 if none."""
    m = column(gemm_rows, "m", dtype=dtype)
    nbytes = column(gemm_rows, "bytes", dtype=dtype)
    t = column(gemm_rows, "median_s", dtype=dtype)
    ok = (m == 1) & np.isfinite(nbytes) & np.isfinite(t) & (t > 0) & (nbytes > 0)
    return float(np.median(nbytes[ok] / t[ok])) / 1e9 if ok.any() else 0.0


# The GEMM suite's CSV columns of the in-suite reference (`suites/gemm.py`): each point's seconds per call in
# every round, and the probe's streaming GEMM's rate (TFLOP/s) in every round (the median of the suite's
# `suites.gemm.REFERENCE_READINGS` readings spread over it); both ";"-joined in
# round order, so a `--from-csv` refit normalises exactly as the run did.
ROUND_TIMES = "round_s"
ROUND_REFERENCES = "reference_tflops"


def readings(value: object) -> list[float]:
    """The numbers of a ";"-joined CSV cell (one number parses as a float; empty, absent or not numbers:
    none, so a damaged cell leaves its rows as timed)."""
    if isinstance(value, (int, float)):
        return [float(value)]
    if not isinstance(value, str) or not value.strip():
        return []
    try:
        return [float(v) for v in value.split(";")]
    except ValueError:
        return []


def at_suite_reference(rows: list[Row]) -> tuple[list[Row], dict[str, float]]:
    """GEMM-suite rows with every point taken at the suite's median machine speed, and the reference's figures.

    Each round read the probe's streaming GEMM (`ROUND_REFERENCES`); a round's times are multiplied by
    its speed ÷ the suite's median (`drift.reference_factors`, 1 within the readings' noise), and a point's
    time is the median of its rounds so corrected, as the memory suite brings each working set to its median
    reference read. The time as timed stays in `measured_s`. Rows without per-round readings (a GPU's, or a
    table written before the suite timed a reference) are returned as they are, and the figures are empty.

    Figures: the suite's median reference rate (`reference_stream_gemm_tflops`: the machine speed the points
    now hold), the references' (max − min) / median, one round's trend-free scatter and the rounds
    corrected."""
    references = readings(rows[0].get(ROUND_REFERENCES)) if rows else []
    if not references:
        return rows, {}
    factors = drift.reference_factors(references)
    out = []
    for row in rows:
        times = readings(row.get(ROUND_TIMES))
        if len(times) != len(factors):
            out.append(row)
            continue
        sample = [t * f for t, f in zip(times, factors, strict=True)]
        seconds = statistics.median(sample)
        out.append(
            row
            | {
                "measured_s": row["median_s"],
                "median_s": seconds,
                "iqr_s": drift.rel_iqr(sample) * seconds,  # as `summarise` states it
                "tflops": float(row["flops"]) / seconds / 1e12,
                "gbps": float(row["bytes"]) / seconds / 1e9,
            }
        )
    median = statistics.median(references)
    figures = {
        "reference_stream_gemm_tflops": median,
        "reference_spread": (max(references) - min(references)) / median,
        "reference_scatter": drift.trend_free_scatter(references),
        "reference_rounds": float(len(references)),
        "reference_rounds_corrected": float(sum(f != 1.0 for f in factors)),
    }
    return out, figures


# A one-row GEMM streaming at under a quarter of a plain read's rate is not a weight stream (a failed or
# preempted measurement): the plateau is kept. Measured shares of the suite's median shape: 0.9-1.2 on a 2-core
# Xeon VM over wide weights only; 0.35-0.6 on a 2-core EPYC VM with the narrow (N = 256, 512) weights too,
# whose one-row GEMMs pay ~100 ns per weight row on top of the bytes.
MIN_GEMM_STREAM_SHARE = 0.25


def cpu_bandwidths(sum_plateau_gbps: float, gemm_stream_gbps: float) -> tuple[float, float]:
    """CPU (memory bandwidth, element-wise fraction): GEMMs stream at their own measured rate, element-wise
    kernels at the sum plateau, which is that rate × the fraction (above 1 where a plain read streams faster
    than a one-row GEMM); the sum plateau alone when no plausible GEMM rate was measured."""
    if gemm_stream_gbps < MIN_GEMM_STREAM_SHARE * sum_plateau_gbps:
        return sum_plateau_gbps, 1.0
    return gemm_stream_gbps, sum_plateau_gbps / gemm_stream_gbps


__all__ = [
    "ROUND_REFERENCES",
    "ROUND_TIMES",
    "GemmParams",
    "at_suite_reference",
    "cpu_bandwidths",
    "fit_gemm_points",
    "fit_gemm_table",
    "m1_gemm_streaming_gbps",
    "measured_efficiency",
    "never_faster_with_more_rows",
    "readings",
]
