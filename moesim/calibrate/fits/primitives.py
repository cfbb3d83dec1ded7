"""Pure fits from measurement tables to cost-model parameters, each with its goodness of fit.

No torch here: every function takes plain arrays (what the suites wrote to CSV) and returns parameters plus
R², RMSE and residuals, so the fits can be tested against synthetic data with a known truth.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.optimize import curve_fit, least_squares
from scipy.stats import siegelslopes, theilslopes
from sklearn.linear_model import LinearRegression

Row = dict[str, Any]  # one CSV row a suite wrote: numbers or numeric strings


def _num(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


def column(rows: list[Row], key: str, **where: Any) -> np.ndarray:
    """Numeric column `key` of the rows matching every `where` item (compared as strings)."""
    picked = [r for r in rows if all(str(r.get(k)) == str(v) for k, v in where.items())]
    return np.array([_num(r.get(key)) for r in picked], dtype=float)


@dataclass(frozen=True)
class FitResult:
    """Fitted parameters of one model, with how well it reproduces the measurements it came from."""

    params: dict[str, float]
    r2: float
    rmse: float
    residuals: tuple[float, ...]
    x: tuple[float, ...] = ()
    predicted: tuple[float, ...] = ()
    extra: dict[str, float] = field(default_factory=dict)

    def quality(self) -> dict[str, float]:
        """Flat float summary for the profile's fit_quality table."""
        quality = {
            "r2": self.r2,
            "rmse": self.rmse,
            "max_abs_residual": max((abs(r) for r in self.residuals), default=0.0),
            "n_points": float(len(self.residuals)),
        }
        quality.update(self.params)
        quality.update(self.extra)
        return quality


def goodness(measured: np.ndarray, predicted: np.ndarray) -> tuple[float, float, np.ndarray]:
    """R², RMSE and residuals (measured − predicted)."""
    measured = np.asarray(measured, dtype=float)
    residuals = measured - np.asarray(predicted, dtype=float)
    ss_res = float(np.sum(residuals**2))
    ss_tot = float(np.sum((measured - measured.mean()) ** 2))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else (1.0 if ss_res == 0 else 0.0)
    rmse = math.sqrt(ss_res / max(len(measured), 1))
    return r2, rmse, residuals


def _result(
    params: dict[str, float], x: np.ndarray, y: np.ndarray, predicted: np.ndarray, **extra: float
) -> FitResult:
    r2, rmse, residuals = goodness(y, predicted)
    return FitResult(
        params={k: float(v) for k, v in params.items()},
        r2=r2,
        rmse=rmse,
        residuals=tuple(float(r) for r in residuals),
        x=tuple(float(v) for v in x),
        predicted=tuple(float(p) for p in predicted),
        extra={k: float(v) for k, v in extra.items()},
    )


# ---------------------------------------------------------------------------------------------- memory


def cache_curve(
    size_bytes: np.ndarray, cache_gbps: float, memory_gbps: float, knee_bytes: float, sharpness: float
) -> np.ndarray:
    """Bandwidth against working set: `cache_gbps` well below the knee, `memory_gbps` well above it.

    A logistic step in log size: half-way between the plateaus at `knee_bytes`, steeper for larger
    `sharpness` (a cache with LRU-like replacement falls off over a factor of ~2 in size).
    """
    z = sharpness * (np.log(np.asarray(size_bytes, dtype=float)) - math.log(knee_bytes))
    return memory_gbps + (cache_gbps - memory_gbps) * 0.5 * (1.0 - np.tanh(0.5 * z))


def two_level_cache_curve(
    size_bytes: np.ndarray,
    inner_gbps: float,
    cache_gbps: float,
    memory_gbps: float,
    inner_knee_bytes: float,
    knee_bytes: float,
    sharpness: float,
) -> np.ndarray:
    """Two cache levels (e.g. a CPU's private L2 inside its shared L3) in front of memory."""
    z_inner = sharpness * (np.log(np.asarray(size_bytes, dtype=float)) - math.log(inner_knee_bytes))
    outer = cache_curve(size_bytes, cache_gbps, memory_gbps, knee_bytes, sharpness)
    return outer + (inner_gbps - cache_gbps) * 0.5 * (1.0 - np.tanh(0.5 * z_inner))


@dataclass(frozen=True)
class CacheFit:
    """The last-level cache seen by a streaming read, and the memory plateau behind it."""

    cache_gbps: float
    memory_gbps: float
    knee_bytes: float
    inner_knee_bytes: float  # 0 when only one level was resolved
    inner_gbps: float  # 0 when only one level was resolved
    levels: int
    fit: FitResult


def fit_cache_knee(size_bytes: np.ndarray, bandwidth_gbps: np.ndarray, max_levels: int = 2) -> CacheFit:
    """Fit one- and two-level cache curves to bandwidth-vs-working-set and keep the better by BIC.

    The outer knee is the cache capacity the simulator uses; on a CPU an inner level (private L2) often
    shows as well. Fitting happens in log bandwidth so plateaus of very different heights weigh equally.
    """
    sizes = np.asarray(size_bytes, dtype=float)
    bw = np.asarray(bandwidth_gbps, dtype=float)
    order = np.argsort(sizes)
    sizes, bw = sizes[order], bw[order]
    if len(sizes) < 5:
        raise ValueError("need at least 5 working-set sizes to locate a cache knee")
    log_s, log_bw = np.log(sizes), np.log(bw)
    lo_s, hi_s = float(sizes[0]), float(sizes[-1])
    n = len(sizes)
    # Plateaus stay near the measured range: an unreached plateau must not run off to zero or infinity.
    lo_bw, hi_bw = float(log_bw.min()) - math.log(2.0), float(log_bw.max()) + math.log(2.0)

    def bic(rss: float, k: int) -> float:
        return n * math.log(max(rss, 1e-300) / n) + k * math.log(n)

    candidates: list[tuple[float, CacheFit]] = []

    # One level: cache, memory, log knee, sharpness.
    def one_res(p: np.ndarray) -> np.ndarray:
        return np.log(cache_curve(sizes, math.exp(p[0]), math.exp(p[1]), math.exp(p[2]), p[3])) - log_bw

    best_one = None
    for knee0 in np.exp(np.linspace(log_s[1], log_s[-2], 5)):
        p0 = np.array([log_bw[:2].mean(), log_bw[-2:].mean(), math.log(knee0), 4.0])
        res = least_squares(
            one_res,
            p0,
            bounds=([lo_bw, lo_bw, math.log(lo_s), 0.5], [hi_bw, hi_bw, math.log(hi_s), 30.0]),
        )
        if best_one is None or res.cost < best_one.cost:
            best_one = res
    assert best_one is not None
    c, m, k, sh = math.exp(best_one.x[0]), math.exp(best_one.x[1]), math.exp(best_one.x[2]), best_one.x[3]
    pred = cache_curve(sizes, c, m, k, sh)
    rss = float(np.sum((np.log(pred) - log_bw) ** 2))
    fit1 = _result(
        {"cache_gbps": c, "memory_gbps": m, "knee_bytes": k, "sharpness": sh}, sizes, bw, pred, levels=1
    )
    candidates.append((bic(rss, 4), CacheFit(c, m, k, 0.0, 0.0, 1, fit1)))

    if max_levels >= 2 and n >= 8:

        def two_res(p: np.ndarray) -> np.ndarray:
            e = np.exp(p[:5])
            curve = two_level_cache_curve(sizes, e[0], e[1], e[2], e[3], e[4], p[5])
            return np.log(np.maximum(curve, 1e-12)) - log_bw

        best_two = None
        grid = np.linspace(log_s[1], log_s[-2], 5)
        for i, a in enumerate(grid):
            for b in grid[i + 1 :]:
                p0 = np.array(
                    [log_bw[:2].mean(), np.interp((a + b) / 2, log_s, log_bw), log_bw[-2:].mean(), a, b, 4.0]
                )
                res = least_squares(
                    two_res,
                    p0,
                    bounds=(
                        [lo_bw, lo_bw, lo_bw, math.log(lo_s), math.log(lo_s), 0.5],
                        [hi_bw, hi_bw, hi_bw, math.log(hi_s), math.log(hi_s), 30.0],
                    ),
                )
                if best_two is None or res.cost < best_two.cost:
                    best_two = res
        assert best_two is not None
        e = np.exp(best_two.x[:5])
        inner, mid, mem = e[0], e[1], e[2]
        knees = sorted([e[3], e[4]])
        sh2 = best_two.x[5]
        pred2 = two_level_cache_curve(sizes, inner, mid, mem, knees[0], knees[1], sh2)
        rss2 = float(np.sum((np.log(pred2) - log_bw) ** 2))
        # Two genuinely distinct levels: knees apart, each step downward, the middle plateau measured.
        # A real level is a clear step (≥ 30% each), with at least two measured sizes on every plateau.
        distinct = (
            knees[1] > 2.0 * knees[0]
            and inner > 1.3 * mid
            and mid > 1.3 * mem
            and int(np.sum(sizes < knees[0])) >= 2
            and int(np.sum((sizes > knees[0]) & (sizes < knees[1]))) >= 2
            and int(np.sum(sizes > knees[1])) >= 2
        )
        if distinct:
            fit2 = _result(
                {
                    "cache_gbps": mid,
                    "memory_gbps": mem,
                    "knee_bytes": knees[1],
                    "inner_gbps": inner,
                    "inner_knee_bytes": knees[0],
                    "sharpness": sh2,
                },
                sizes,
                bw,
                pred2,
                levels=2,
            )
            candidates.append((bic(rss2, 6), CacheFit(mid, mem, knees[1], knees[0], inner, 2, fit2)))

    return min(candidates, key=lambda item: item[0])[1]


def transfer_ramp(size_bytes: np.ndarray, plateau_gbps: float, half_bytes: float) -> np.ndarray:
    """Achieved bandwidth of one read of `size_bytes`: s / (s + s½) of the plateau."""
    s = np.asarray(size_bytes, dtype=float)
    return plateau_gbps * s / (s + half_bytes)


def fit_transfer_ramp(size_bytes: np.ndarray, bandwidth_gbps: np.ndarray) -> FitResult:
    """Fit the single-read ramp: plateau bandwidth and the transfer size that reaches half of it."""
    sizes = np.asarray(size_bytes, dtype=float)
    bw = np.asarray(bandwidth_gbps, dtype=float)
    p0 = [float(bw.max()), float(np.median(sizes))]
    (plateau, half), _ = curve_fit(
        transfer_ramp,
        sizes,
        bw,
        p0=p0,
        bounds=([1e-6, 1.0], [1e6, 1e13]),
        sigma=np.maximum(bw, 1e-9),  # relative errors: small and large transfers weigh alike
        maxfev=20000,
    )
    pred = transfer_ramp(sizes, plateau, half)
    return _result({"plateau_gbps": plateau, "half_bandwidth_transfer_bytes": half}, sizes, bw, pred)


# No DRAM/HBM round trip takes this long on any device (GPU HBM ≈ 0.5–1 µs loaded, CPU DRAM ≈ 0.1 µs):
# a fitted extra latency above it measures something else (host launch time, flush side effects, TLB).
MAX_MEMORY_LATENCY_S = 2e-6


def transfer_time_s(
    size_bytes: np.ndarray, fixed_s: float, bandwidth_bytes_per_s: float, half_bytes: float
) -> np.ndarray:
    """The cost model's time of one kernel reading `size_bytes` from memory: fixed + (S + h) / bandwidth."""
    return fixed_s + (np.asarray(size_bytes, dtype=float) + half_bytes) / bandwidth_bytes_per_s


def fit_transfer_latency(
    size_bytes: np.ndarray, seconds: np.ndarray, fixed_s: float, bandwidth_bytes_per_s: float
) -> FitResult:
    """Fit h of `transfer_time_s` to cold single reads, with the kernel's fixed cost and the bandwidth given.

    h / bandwidth is the extra time a read from memory takes beyond the kernel's fixed latency and its
    bytes at the streaming bandwidth — physically about one memory latency, so h ≈ bandwidth × latency
    (the bytes that must be in flight to stream). This is exactly the term the cost model adds to a kernel
    that reads memory, fitted on relative error so small reads (where h matters) weigh as much as large.
    """
    sizes = np.asarray(size_bytes, dtype=float)
    t = np.asarray(seconds, dtype=float)

    def residual(p: np.ndarray) -> np.ndarray:
        return transfer_time_s(sizes, fixed_s, bandwidth_bytes_per_s, p[0]) / t - 1.0

    excess = float(np.median(np.maximum(t - fixed_s - sizes / bandwidth_bytes_per_s, 0.0)))
    res = least_squares(residual, np.array([excess * bandwidth_bytes_per_s]), bounds=([0.0], [np.inf]))
    half = float(res.x[0])
    pred = transfer_time_s(sizes, fixed_s, bandwidth_bytes_per_s, half)
    return _result(
        {"half_bandwidth_transfer_bytes": half, "memory_latency_us": half / bandwidth_bytes_per_s * 1e6},
        sizes,
        t,
        pred,
        fixed_us=fixed_s * 1e6,
        bandwidth_gbps=bandwidth_bytes_per_s / 1e9,
    )


# ---------------------------------------------------------------------------------------------- launch


def fit_line(x: np.ndarray, y: np.ndarray, robust: bool = True) -> FitResult:
    """y = intercept + slope·x; robust (Siegel repeated medians) by default, since timing outliers
    (a preempted batch) are one-sided and a least-squares line would follow them."""
    xs = np.asarray(x, dtype=float)
    ys = np.asarray(y, dtype=float)
    if len(np.unique(xs)) < 2:
        raise ValueError("need at least two distinct x values to fit a line")
    extra: dict[str, float] = {}
    if robust and len(xs) >= 3:
        slope, intercept = siegelslopes(ys, xs)
        # The slope's 95% confidence interval (Theil-Sen: the spread of the pairwise slopes).
        _, _, extra["slope_low"], extra["slope_high"] = theilslopes(ys, xs, 0.95)
    else:
        model = LinearRegression().fit(xs.reshape(-1, 1), ys)
        slope, intercept = float(model.coef_[0]), float(model.intercept_)
    pred = intercept + slope * xs
    return _result({"slope": float(slope), "intercept": float(intercept)}, xs, ys, pred, **extra)


def fit_plane(features: np.ndarray, y: np.ndarray, names: tuple[str, ...]) -> FitResult:
    """y = intercept + Σ coefᵢ·featureᵢ, non-negative coefficients (costs cannot be negative)."""
    X = np.asarray(features, dtype=float)
    ys = np.asarray(y, dtype=float)
    model = LinearRegression(positive=True)
    model.fit(X, ys)
    pred = model.predict(X)
    params = {"intercept": float(model.intercept_)}
    params.update({name: float(c) for name, c in zip(names, model.coef_, strict=True)})
    return _result(params, X[:, 0], ys, pred)


# ---------------------------------------------------------------------------------------------- gemm


def efficiency_curve(m_tokens: np.ndarray, e_max: float, m_half: float, power: float) -> np.ndarray:
    """Saturating efficiency against M: e_max · Mᵖ / (Mᵖ + m_halfᵖ)."""
    m = np.asarray(m_tokens, dtype=float) ** power
    return e_max * m / (m + m_half**power)
