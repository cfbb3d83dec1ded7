"""A bracketed root of a scalar function without scipy: Brent's method, step for step as scipy's `brentq`.

Typical routing solves two one-dimensional equations (a Zipf exponent for the baseline overlap, and the
Poisson rate of successive-draw inclusion). Importing `scipy.optimize` for them cost every `moesim simulate`
0.3–0.7 s of start-up, more than the simulation. This is the same algorithm (Brent 1973, ch. 4: bisection
safeguarding inverse quadratic interpolation and the secant step) with the same tolerance rule, iteration
order and floating-point operations as scipy 1.17's C `brentq` (scipy/optimize/Zeros/brentq.c), so it
returns the very same float: the figures that depend on the roots do not move by one bit, which a plain
bisection (converging elsewhere inside the tolerance) would not give. `tests/test_routing_root.py` checks
the agreement with `scipy.optimize.brentq` bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from moesim.errors import MoesimError

DEFAULT_RTOL = 4 * 2.220446049250313e-16  # scipy's: four machine epsilons
DEFAULT_MAXITER = 100


def brent_root(
    f: Callable[[float], float],
    a: float,
    b: float,
    xtol: float = 2e-12,
    rtol: float = DEFAULT_RTOL,
    maxiter: int = DEFAULT_MAXITER,
) -> float:
    """A root of `f` in [a, b], where f(a) and f(b) have opposite signs, to |error| ≤ xtol + rtol·|x|."""
    if xtol <= 0 or rtol < DEFAULT_RTOL:
        raise ValueError(f"xtol must be > 0 and rtol ≥ {DEFAULT_RTOL}, got {xtol}, {rtol}")
    xpre, xcur = float(a), float(b)
    fpre, fcur = float(f(xpre)), float(f(xcur))
    if fpre == 0:
        return xpre
    if fcur == 0:
        return xcur
    if math.copysign(1.0, fpre) == math.copysign(1.0, fcur):
        raise MoesimError("root", f"f({a}) and f({b}) have the same sign: no bracketed root")
    xblk = fblk = spre = scur = 0.0
    for _ in range(maxiter):
        if fpre != 0 and fcur != 0 and math.copysign(1.0, fpre) != math.copysign(1.0, fcur):
            xblk, fblk = xpre, fpre
            spre = scur = xcur - xpre
        if abs(fblk) < abs(fcur):
            xpre, xcur, xblk = xcur, xblk, xcur
            fpre, fcur, fblk = fcur, fblk, fcur
        delta = (xtol + rtol * abs(xcur)) / 2
        sbis = (xblk - xcur) / 2
        if fcur == 0 or abs(sbis) < delta:
            return xcur
        if abs(spre) > delta and abs(fcur) < abs(fpre):
            if xpre == xblk:  # interpolate (secant)
                stry = -fcur * (xcur - xpre) / (fcur - fpre)
            else:  # extrapolate (inverse quadratic)
                dpre = (fpre - fcur) / (xpre - xcur)
                dblk = (fblk - fcur) / (xblk - xcur)
                stry = -fcur * (fblk * dblk - fpre * dpre) / (dblk * dpre * (fblk - fpre))
            if 2 * abs(stry) < min(abs(spre), 3 * abs(sbis) - delta):  # a good short step
                spre, scur = scur, stry
            else:
                spre = scur = sbis
        else:
            spre = scur = sbis
        xpre, fpre = xcur, fcur
        xcur += scur if abs(scur) > delta else (delta if sbis > 0 else -delta)
        fcur = float(f(xcur))
    raise MoesimError("root", f"no convergence after {maxiter} iterations in [{a}, {b}]")


__all__ = ["brent_root"]
