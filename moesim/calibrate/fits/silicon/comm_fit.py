"""`nccl_perf` and the framework's `custom_allreduce_perf` → the node's scale-up link (bandwidth, latency).

A row is one collective over `num_gpus` GPUs of one node with `message_size` elements of its dtype (half:
2 bytes, int8 / fp8: 1, as nccl-tests count them). moesim prices it with `execution.collectives` (α–β
model; all-reduce takes the fastest of ring, one-shot and two-shot, as NCCL's tuner and the engines' custom
kernels do; all-gather and reduce-scatter of the full buffer; all-to-all sends (n−1)/n of it). The fit
finds the link (datasheet-level bandwidth, of which `collectives.ACHIEVED_LINK_FRACTION` is achieved, and
the per-round latency) that reproduces the rows, on the training message sizes; every fourth size and GPU
count is held out.

Where a custom all-reduce table times the kernel both eagerly and in CUDA-graph replay (SGLang's
`SGLang_CustomAllReduce_eager` / `_graph`, vLLM's `vLLM_custom_eager` / `_graph`), only the graph rows are
used: engines replay decode and verification steps as graphs, and moesim's launch model charges an eager
launch's host time itself (on h200_sxm/sglang the eager rows fit a 28 µs latency, the graph rows 2.9 µs).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from moesim.calibrate.fits.silicon.holdout import FitQuality, held_out_mask
from moesim.simulator.execution.collectives import (
    ACHIEVED_LINK_FRACTION,
    Link,
    all_gather_s,
    all_reduce_s,
    all_to_all_s,
)

ELEMENT_BYTES = {"half": 2.0, "bfloat16": 2.0, "float16": 2.0, "int8": 1.0, "fp8": 1.0, "float32": 4.0}
OPS = ("all_reduce", "all_gather", "reduce_scatter", "alltoall")


@dataclass(frozen=True)
class LinkFit:
    bandwidth_gbps: float  # datasheet-level scale-up bandwidth per GPU, one direction
    latency_us: float
    quality: FitQuality
    datasheet_quality: FitQuality  # the datasheet node's link on the same rows


def price(
    op: np.ndarray, ranks: np.ndarray, nbytes: np.ndarray, bandwidth_gbps: float, latency_us: float
) -> np.ndarray:
    link = Link(bandwidth_gbps * ACHIEVED_LINK_FRACTION, latency_us)
    out = np.zeros(nbytes.size)
    for n in np.unique(ranks):
        for name in OPS:
            rows = (ranks == n) & (op == name)
            if not rows.any():
                continue
            size = nbytes[rows]
            if name == "all_reduce":
                out[rows] = all_reduce_s(size, int(n), link)
            elif name in ("all_gather", "reduce_scatter"):
                out[rows] = all_gather_s(size, int(n), link)
            else:
                out[rows] = all_to_all_s(size * (n - 1) / n, int(n), link)
    return out


def fit_link(
    tables: list[tuple[str, dict[str, np.ndarray]]],
    gpus_per_node: int,
    start_gbps: float,
    start_latency_us: float,
) -> LinkFit | None:
    """Fit the scale-up link to every collective row within one node of the given tables."""
    ops, ranks, nbytes, measured, labels = [], [], [], [], []
    for label, columns in tables:
        op = columns["op_name"] if "op_name" in columns else np.full(columns["latency"].size, "all_reduce")
        dtype_column = columns.get("nccl_dtype", columns.get("allreduce_dtype"))
        assert dtype_column is not None
        element = np.array([ELEMENT_BYTES.get(str(d), np.nan) for d in dtype_column])
        keep = np.isin(op, OPS) & (columns["num_gpus"] <= gpus_per_node) & (columns["num_gpus"] > 1)
        keep &= np.isfinite(element)
        if "kernel_source" in columns:  # the kernel in graph replay where the table also times it eagerly
            graph = np.array([str(source).endswith("graph") for source in columns["kernel_source"]])
            keep &= graph if graph.any() else True
        if not keep.any():
            continue
        ops.append(op[keep].astype(str))
        ranks.append(columns["num_gpus"][keep])
        nbytes.append(columns["message_size"][keep] * element[keep])
        measured.append(columns["latency"][keep] * 1e-3)
        labels.append(label)
    if not ops:
        return None
    op_a, ranks_a, bytes_a, y = (np.concatenate(x) for x in (ops, ranks, nbytes, measured))
    held = held_out_mask(bytes_a, ranks_a)

    def residual(x: np.ndarray) -> np.ndarray:
        return np.log(price(op_a[~held], ranks_a[~held], bytes_a[~held], x[0], x[1]) / y[~held])

    solution = least_squares(residual, np.array([start_gbps, 5.0]), bounds=([1.0, 0.0], [1e4, 1e3]))
    bandwidth, latency = round(float(solution.x[0]), 2), round(float(solution.x[1]), 3)
    predicted = price(op_a, ranks_a, bytes_a, bandwidth, latency)
    note = f"{', '.join(sorted(set(np.unique(op_a))))} on 2-{int(ranks_a.max())} GPUs"
    before = price(op_a, ranks_a, bytes_a, start_gbps, start_latency_us)
    label = " + ".join(labels)
    return LinkFit(
        bandwidth,
        latency,
        FitQuality.of(label, predicted, y, held, note),
        FitQuality.of(label, before, y, held, "datasheet node"),
    )
