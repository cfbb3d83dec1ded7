"""The MoE suite's table → per-expert and per-slot cost of a real MoE layer with forced routing. Pure."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from moesim.calibrate.fits import primitives as fit
from moesim.calibrate.fits.primitives import Row, column


def fit_moe_table(rows: list[Row]) -> dict[str, fit.FitResult]:
    """Per size class: t = fixed + per_expert·U + per_slot·(M·k), with per-expert effective bandwidth."""
    out: dict[str, fit.FitResult] = {}
    for size_class in ("small", "large"):
        u = column(rows, "distinct", size_class=size_class)
        slots = column(rows, "slots", size_class=size_class)
        t = column(rows, "median_s", size_class=size_class)
        expert_bytes = column(rows, "expert_bytes", size_class=size_class)
        if len(t) < 3:
            continue
        result = fit.fit_plane(np.column_stack([u, slots]), t, ("per_expert_s", "per_slot_s"))
        per_expert = result.params["per_expert_s"]
        extra = dict(result.extra)
        extra["expert_bytes"] = float(expert_bytes[0])
        extra["effective_expert_gbps"] = float(expert_bytes[0] / per_expert / 1e9) if per_expert > 0 else 0.0
        out[size_class] = replace(result, extra=extra)
    return out


__all__ = ["fit_moe_table"]
