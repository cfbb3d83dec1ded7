"""The binomial pmf without scipy: Cephes' `lgam` and `log1p`, operation for operation as scipy.special's.

`per_rank._poisson_binomial_pmf` gives a rank whose experts are equally likely hit a binomial pmf,
exp(log C(n, k) + k log p + (n − k) log(1 − p)), which it took from `scipy.special` (`gammaln`, `xlogy`,
`xlog1py`): importing it cost every expert-parallel sweep, `simulate` and `serve` about 0.4 s of CPU. scipy 1.17
evaluates these with Cephes (its `xsf` library: `cephes/gamma.h` `lgam` and `cephes/unity.h` `log1p`) and the C
library's `log`, which `math.log` calls too; the same coefficients, branches and order of floating-point
operations give the same floats here (`tests/test_binomial_pmf.py` checks them against scipy bit for bit).
Only what the pmf needs is written: `lgam` at positive whole numbers, `log1p` of a float.
"""

from __future__ import annotations

import functools
import math

import numpy as np

# log1p(x) = x − x²/2 + x³ P(x)/Q(x) for 1 + x in [1/√2, √2] (Q monic, its leading 1 left out)
_LP = (
    4.5270000862445199635215e-5,
    4.9854102823193375972212e-1,
    6.5787325942061044846969e0,
    2.9911919328553073277375e1,
    6.0949667980987787057556e1,
    5.7112963590585538103336e1,
    2.0039553499201281259648e1,
)
_LQ = (
    1.5062909083469192043167e1,
    8.3047565967967209469434e1,
    2.2176239823732856465394e2,
    3.0909872225312059774938e2,
    2.1642788614495947685003e2,
    6.0118660497603843919306e1,
)
# Stirling's series correction of lgam for 13 ≤ x < 1000
_A = (
    8.11614167470508450300e-4,
    -5.95061904284301438324e-4,
    7.93650340457716943945e-4,
    -2.77777777730099687205e-3,
    8.33333333333331927722e-2,
)
_LS2PI = 0.91893853320467274178  # log(√(2π))
_SQRT1_2 = 0.70710678118654752440
_SQRT2 = 1.41421356237309504880


def _polevl(x: float, coefficients: tuple[float, ...]) -> float:
    result = coefficients[0]
    for c in coefficients[1:]:
        result = result * x + c
    return result


def _p1evl(x: float, coefficients: tuple[float, ...]) -> float:
    result = x + coefficients[0]
    for c in coefficients[1:]:
        result = result * x + c
    return result


def _log(x: float) -> float:
    """The C library's log, with log(0) = −inf and NaN for negatives as C gives them."""
    if x > 0.0 or math.isnan(x):
        return math.log(x)
    return -math.inf if x == 0.0 else math.nan


def cephes_log1p(x: float) -> float:
    """log(1 + x) as `scipy.special.log1p` gives it (Cephes' `log1p`)."""
    z = 1.0 + x
    if z < _SQRT1_2 or z > _SQRT2 or math.isnan(z):
        return _log(z)
    z = x * x
    z = -0.5 * z + x * (z * _polevl(x, _LP) / _p1evl(x, _LQ))
    return x + z


def lgam_whole(n: int) -> float:
    """log Γ(n) for a whole number n ≥ 1, as `scipy.special.gammaln` gives it (Cephes' `lgam`)."""
    x = float(n)
    if x < 13.0:  # Cephes reduces x to 2 by exact products: log((n − 1)!)
        z, p, u = 1.0, 0.0, x
        while u >= 3.0:
            p -= 1.0
            u = x + p
            z *= u
        while u < 2.0:
            z /= u
            p += 1.0
            u = x + p
        return math.log(z)
    q = (x - 0.5) * math.log(x) - x + _LS2PI
    if x > 1.0e8:
        return q
    p = 1.0 / (x * x)
    if x >= 1000.0:
        return (
            q
            + ((7.9365079365079365079365e-4 * p - 2.7777777777777777777778e-3) * p + 0.0833333333333333333333)
            / x
        )
    return q + _polevl(p, _A) / x


@functools.lru_cache(maxsize=256)
def _log_choose(n: int) -> np.ndarray:
    """log C(n, k) for k = 0..n as gammaln(n + 1) − gammaln(k + 1) − gammaln(n − k + 1)."""
    table = np.array([lgam_whole(k + 1) for k in range(n + 1)])
    result = table[n] - table - table[::-1]
    result.flags.writeable = False
    return result


def binomial_pmf(n: int, p: np.ndarray) -> np.ndarray:
    """pmf [m, n + 1] of Binomial(n, p[i]) per row, as exp(gammaln terms + xlogy(k, p) + xlog1py(n − k, −p))."""
    probabilities = np.asarray(p, dtype=float).ravel()
    count = np.arange(n + 1, dtype=float)[None, :]
    log_p = np.array([_log(v) for v in probabilities.tolist()])[:, None]
    log_q = np.array([cephes_log1p(-v) for v in probabilities.tolist()])[:, None]
    with np.errstate(invalid="ignore"):  # 0 · ±inf: xlogy's 0 where the count is 0, set below
        successes = count * log_p
        failures = (n - count) * log_q
    successes[:, 0] = np.where(np.isnan(log_p[:, 0]), np.nan, 0.0)
    failures[:, n] = np.where(np.isnan(log_q[:, 0]), np.nan, 0.0)
    return np.asarray(np.exp(_log_choose(n)[None, :] + successes + failures))
