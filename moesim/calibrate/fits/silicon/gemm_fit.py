"""`gemm_perf` → the GEMM efficiency curve e(M), through the same fit as the local GEMM suite.

A row is one x[m, k] @ W[k, n] in `gemm_dtype`, timed on the real GPU. moesim prices it as the cost model
does any GEMM: fixed latency + max(2mnk / (peak × e(m)), bytes / achieved bandwidth), the bytes being the
weights (n·k in the dtype) plus the bf16 activations in and out. `calibrate.fits.gemm.fit_gemm_table` fits
e(M) on the training shapes; the held-out shapes are then priced with the fitted curve.

Only rows that can be compute-bound identify e(M): those whose arithmetic intensity (FLOPs per byte) is at
least the device's ridge (peak FLOP/s ÷ achieved bandwidth). Below it a GEMM is memory-bound at any
efficiency, and its time (dense GEMMs at small M reach 60–85% of the streaming bandwidth in these tables,
e.g. h100_sxm/sglang 4096 × 4096 at M = 2: 2.07 TB/s) says nothing of its arithmetic. Fitting e(M) to those
rows too lowered the curve at small M until compute explained the slow weight stream (h100_sxm/sglang:
e(2) = 0.0044, against the tile-waste 0.023), which grouped expert GEMMs, at a few rows per expert, then
paid as arithmetic: gpt-oss-120b's verification at batch 8 on H100 cost 3.9 decode steps (R8 b8 predicted
speedup 0.58 against a measured 1.31). The fitted family (e_max, m_half, power) is evaluated on the whole M
grid, so small M keeps the shape the compute-bound rows imply. The curve is stored only when it beats the
datasheet profile's own curve on the held-out shapes (`GemmFit.better`).

Each dtype is fitted on its own rows (the tables time fp8 through its own block-scaled kernels, which reach a
different share of their peak than bf16's: h200_sxm/sglang 4096 × 4096 at M = 4096, bf16 780 TFLOP/s of 989,
fp8 1,219 of 1979). `build` stores bf16's as the profile's shared curve and fp8's as fp8's own
(`Empirical.gemm_efficiency_by_dtype`), each only where it beats the datasheet curve on its held-out shapes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from moesim.calibrate.fits.gemm import fit_gemm_table, never_faster_with_more_rows
from moesim.calibrate.fits.primitives import efficiency_curve
from moesim.calibrate.fits.silicon.holdout import FitQuality, held_out_mask
from moesim.simulator.execution.cost import CostParams, kernel_times_s
from moesim.simulator.hardware.profile import HardwareProfile
from moesim.simulator.hardware.sections import GemmEfficiency

# The database's GEMM dtypes moesim has a peak for: (moesim dtype, weight bytes per element). moesim's fp8
# weights are block-scaled (`models.spec` WEIGHT_FORMATS "fp8": 128 × 128 blocks, DeepSeek-V3's and Kimi-K2's
# checkpoints), so fp8 is fitted to the tables' block-scaled GEMMs (`fp8_block`: DeepGEMM in SGLang and
# TensorRT-LLM), not to their per-tensor scaled-MM rows (`fp8`).
GEMM_DTYPES = {"bfloat16": ("bf16", 2.0), "fp8_block": ("fp8", 1.0)}
ACTIVATION_BYTES = 2.0
MAX_ROWS_PER_DTYPE = 4000
SAMPLE_SEED = 21


@dataclass(frozen=True)
class GemmFit:
    dtype: str
    efficiency: GemmEfficiency
    quality: FitQuality
    datasheet_quality: FitQuality  # the datasheet profile's own curve on the same rows

    @property
    def better(self) -> bool:
        """The fitted curve predicts the held-out shapes better than the datasheet profile's."""
        return self.quality.beats(self.datasheet_quality)


def _gemm_arrays(
    m: np.ndarray, n: np.ndarray, k: np.ndarray, weight_bytes: float
) -> tuple[np.ndarray, np.ndarray]:
    flops = 2.0 * m * n * k
    nbytes = n * k * weight_bytes + (m * k + m * n) * ACTIVATION_BYTES
    return flops, nbytes


def whole_grid_curve(fitted: dict[str, float], m_grid: np.ndarray) -> GemmEfficiency:
    """The fitted saturating curve (`fits.primitives.efficiency_curve`) on every measured M, capped so a
    GEMM's compute time never falls as M grows (`fits.gemm.never_faster_with_more_rows`)."""
    grid = np.asarray(m_grid, dtype=float)
    curve = np.clip(efficiency_curve(grid, fitted["e_max"], fitted["m_half"], fitted["power"]), 1e-6, 1.0)
    curve = never_faster_with_more_rows(grid, np.round(curve, 6))
    return GemmEfficiency(tuple(float(v) for v in grid), tuple(float(e) for e in curve))


def price(
    hw: HardwareProfile,
    curve: GemmEfficiency,
    dtype: str,
    m: np.ndarray,
    flops: np.ndarray,
    nbytes: np.ndarray,
) -> np.ndarray:
    """Seconds the cost model gives each GEMM with efficiency curve `curve`."""
    em = hw.empirical
    peak = hw.peak_flops_per_s(dtype)
    params = CostParams.for_gemms(
        em.kernel_fixed_latency_us * 1e-6,
        hw.memory_bandwidth_bytes_per_s,
        em.half_bandwidth_transfer_bytes,
        np.asarray(curve.m_tokens),
        np.asarray(curve.efficiency),
        peak,
    )
    return kernel_times_s(flops, m, np.full_like(m, peak), nbytes, np.zeros_like(m), params)[0]


def fit_gemm(columns: dict[str, np.ndarray], hw: HardwareProfile, table: str) -> list[GemmFit]:
    out = []
    em = hw.empirical
    for db_dtype, (dtype, weight_bytes) in GEMM_DTYPES.items():
        index = np.nonzero(columns["gemm_dtype"] == db_dtype)[0]
        if index.size < 20 or dtype not in hw.datasheet.peak_dense_tflops:
            continue
        # the dtype's most-measured kernel source (the framework's default path), as the other fits take
        sources, counts = np.unique(columns["kernel_source"][index], return_counts=True)
        source = str(sources[int(np.argmax(counts))])
        index = index[columns["kernel_source"][index] == source]
        if index.size > MAX_ROWS_PER_DTYPE:
            index = np.sort(
                np.random.default_rng(SAMPLE_SEED).choice(index, MAX_ROWS_PER_DTYPE, replace=False)
            )
        m, n, k = (columns[c][index].astype(float) for c in ("m", "n", "k"))
        measured = columns["latency"][index] * 1e-3
        flops, nbytes = _gemm_arrays(m, n, k, weight_bytes)
        held = held_out_mask(n, k)
        ridge = hw.peak_flops_per_s(dtype) / hw.memory_bandwidth_bytes_per_s
        identifying = flops / nbytes >= ridge
        train = ~held & identifying
        if train.sum() < 20:
            continue
        rows = [
            {"m": m[i], "flops": flops[i], "bytes": nbytes[i], "median_s": measured[i], "dtype": dtype}
            for i in np.nonzero(train)[0]
        ]
        params = fit_gemm_table(
            rows,
            dtype,
            hw.datasheet.peak_dense_tflops[dtype],
            hw.memory_bandwidth_bytes_per_s / 1e9,
            em.half_bandwidth_transfer_bytes,
            em.kernel_fixed_latency_us,
        )
        curve = whole_grid_curve(params.fit.params, np.unique(m))
        predicted = price(hw, curve, dtype, m, flops, nbytes)
        note = (
            f"{db_dtype} via {source}; e(M) fitted to the {int(train.sum())} training rows at or above the "
            f"ridge ({ridge:.0f} FLOP/byte)"
        )
        before = price(hw, em.gemm_curve(dtype), dtype, m, flops, nbytes)
        out.append(
            GemmFit(
                dtype,
                curve,
                FitQuality.of(table, predicted, measured, held, note),
                FitQuality.of(table, before, measured, held, "datasheet profile"),
            )
        )
    return out
