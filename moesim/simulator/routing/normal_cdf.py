"""The standard normal cdf without scipy: Cephes' `ndtr`, operation for operation as `scipy.special.ndtr`.

The busiest expert-parallel rank's expected work (`per_rank._expected_max_normal`) integrates a product of
normal cdfs. Importing `scipy.special` for that one function cost every multi-GPU MoE `moesim simulate`,
`sweep` and `serve` about 0.3 s of CPU. This is the Cephes algorithm scipy 1.17 evaluates (its `xsf`
library's `cephes/ndtr.h`: `ndtr`, `erf`, `erfc` with their rational approximations), with the same
coefficients, branches and order of floating-point operations, vectorised with numpy, so it returns the
same floats: the figures that depend on it do not move by one bit (the C library's `erf`, which `math.erf`
calls, differs from Cephes' in the last bit for about half of all inputs). `tests/test_routing_root.py`
checks the agreement with `scipy.special.ndtr` bit for bit. Where `scipy.special` is loaded anyway (trace
fitting, a user's own import), its C function is used instead: the same floats, faster.
"""

from __future__ import annotations

import math
import sys

import numpy as np

SQRT1_2 = 0.70710678118654752440  # 1/√2, NPY_SQRT1_2
MAXLOG = 7.09782712893383996843e2  # log(DBL_MAX): below −MAXLOG, exp underflows

# erfc(x) = exp(−x²) P(x) / Q(x) for 1 ≤ x < 8 (Q monic, its leading 1 left out)
_P = (
    2.46196981473530512524e-10,
    5.64189564831068821977e-1,
    7.46321056442269912687e0,
    4.86371970985681366614e1,
    1.96520832956077098242e2,
    5.26445194995477358631e2,
    9.34528527171957607540e2,
    1.02755188689515710272e3,
    5.57535335369399327526e2,
)
_Q = (
    1.32281951154744992508e1,
    8.67072140885989742329e1,
    3.54937778887819891062e2,
    9.75708501743205489753e2,
    1.82390916687909736289e3,
    2.24633760818710981792e3,
    1.65666309194161350182e3,
    5.57535340817727675546e2,
)
# erfc(x) = exp(−x²) R(x) / S(x) for x ≥ 8
_R = (
    5.64189583547755073984e-1,
    1.27536670759978104416e0,
    5.01905042251180477414e0,
    6.16021097993053585195e0,
    7.40974269950448939160e0,
    2.97886665372100240670e0,
)
_S = (
    2.26052863220117276590e0,
    9.39603524938001434673e0,
    1.20489539808096656605e1,
    1.70814450747565897222e1,
    9.60896809063285878198e0,
    3.36907645100081516050e0,
)
# erf(x) = x T(x²) / U(x²) for |x| ≤ 1
_T = (
    9.60497373987051638749e0,
    9.00260197203842689217e1,
    2.23200534594684319226e3,
    7.00332514112805075473e3,
    5.55923013010394962768e4,
)
_U = (
    3.35617141647503099647e1,
    5.21357949780152679795e2,
    4.59432382970980127987e3,
    2.26290000613890934246e4,
    4.92673942608635921086e4,
)


def _polevl(x: np.ndarray, coefficients: tuple[float, ...]) -> np.ndarray:
    """Cephes' `polevl`: Horner's rule from the highest coefficient."""
    result = np.full_like(x, coefficients[0])
    for c in coefficients[1:]:  # in place: the same products and sums, without a temporary per step
        result *= x
        result += c
    return result


def _p1evl(x: np.ndarray, coefficients: tuple[float, ...]) -> np.ndarray:
    """Cephes' `p1evl`: `polevl` of a monic polynomial whose leading 1 is left out."""
    result = x + coefficients[0]
    for c in coefficients[1:]:
        result *= x
        result += c
    return result


def _erf_small(x: np.ndarray) -> np.ndarray:
    """Cephes' `erf` for |x| ≤ 1."""
    z = x * x
    return x * _polevl(z, _T) / _p1evl(z, _U)


# The C library's exp, which Cephes calls: numpy's own SIMD exp (its AVX-512 path) differs from it in the
# last bit for a few per cent of arguments, so it would not give scipy's floats on every machine.
def _libm_exp(z: np.ndarray) -> np.ndarray:
    """math.exp of each element (a third faster than np.frompyfunc's object array)."""
    return np.fromiter(map(math.exp, z.ravel().tolist()), float, count=z.size).reshape(z.shape)


def _erfc_tail(x: np.ndarray, p: tuple[float, ...], q: tuple[float, ...]) -> np.ndarray:
    """Cephes' `erfc` for x ≥ 1: exp(−x²) p(x) / q(x), 0 once exp(−x²) underflows (−x² < −MAXLOG)."""
    z = -x * x
    y = (_libm_exp(z) * _polevl(x, p)) / _p1evl(x, q)
    return np.where(z < -MAXLOG, 0.0, y)


def ndtr(values: np.ndarray) -> np.ndarray:
    """P(Z ≤ values) for a standard normal Z, elementwise, as `scipy.special.ndtr` gives it: scipy's own C
    function where another feature has loaded `scipy.special` already (the same floats, about 2.5× faster),
    else `cephes_ndtr`, so that nothing loads scipy for it."""
    special = sys.modules.get("scipy.special")
    if special is not None:
        return np.asarray(special.ndtr(values), dtype=float)
    return cephes_ndtr(values)


def cephes_ndtr(values: np.ndarray) -> np.ndarray:
    """P(Z ≤ values) for a standard normal Z, elementwise, as `scipy.special.ndtr` gives it, in numpy.

    Each element takes its own Cephes branch (|x|/√2 below 1/√2: erf; below 1: 1 − erf; below 8: the P/Q
    tail; beyond: the R/S tail), so every element costs one rational function, not four."""
    a = np.asarray(values, dtype=float)
    x = a * SQRT1_2
    z = np.abs(x)
    result = np.full_like(x, np.nan)  # NaN stays NaN: no branch takes it
    small = z < SQRT1_2
    result[small] = 0.5 + 0.5 * _erf_small(x[small])
    mid = (z >= SQRT1_2) & (z < 1.0)
    near = (z >= 1.0) & (z < 8.0)
    far = z >= 8.0
    erfc = np.empty_like(x)
    erfc[mid] = 1.0 - _erf_small(z[mid])
    erfc[near] = _erfc_tail(z[near], _P, _Q)
    with np.errstate(invalid="ignore"):  # ±inf: exp(−inf) · inf, replaced by 0 below
        erfc[far] = _erfc_tail(z[far], _R, _S)
    outer = mid | near | far
    tail = 0.5 * erfc[outer]
    result[outer] = np.where(x[outer] > 0, 1.0 - tail, tail)
    return result


__all__ = ["cephes_ndtr", "ndtr"]
