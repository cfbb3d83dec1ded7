"""GEMM suite: achieved FLOP/s and bytes/s of y = x·W against the token count M, per (K, N) shape and dtype.

Weights rotate through a pool larger than the last-level cache, so every call reads its W from memory as a
decode-time GEMM does; x is small and stays resident. On a CPU the points are timed in interleaved rounds
(`_run_gemm_interleaved`), as the memory suite's working sets are, and given the drift probe's streaming GEMM
(`probe.Probe.stream_reference`) the suite reads it REFERENCE_READINGS times in every round, spread over it:
the median of those is the machine's speed in that round, and the fit brings each point to the suite's median
speed (`fits.gemm.at_suite_reference`), as the memory suite does with its reference read. The probes before
and after the suite, seconds away, missed speed changes of 10-20% within it on the shared 2-core VM.
"""

from __future__ import annotations

import itertools
import math
import random
import statistics
from collections.abc import Callable, Iterator
from typing import Any

from moesim.calibrate.fits.gemm import ROUND_REFERENCES, ROUND_TIMES
from moesim.calibrate.suites.plan import Plan
from moesim.calibrate.suites.timing import DeviceInfo, Timer, summarise, torch_dtype

Row = dict[str, Any]
# Readings of the in-suite reference per round, at 1/6, 1/2 and 5/6 of it. One mid-round reading (8 calls, ~5 ms
# on the 2-core EPYC VM) scattered 3.9-9.9% from round to round beyond the drift (`drift.trend_free_scatter`,
# three quick calibrations, 2026-12-08) while following the round's speed as the median of its ~56 points read
# it with correlation 0.66-0.88; the median of three is robust to one preempted reading and follows the round's
# speed rather than one instant of it, for ~15 ms a round.
REFERENCE_READINGS = 3
BYTES_PER_ELEMENT = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}


def weight_pool(
    torch: Any, k: int, n: int, dtype: Any, device: str, rotate_bytes: int, budget: int
) -> list[Any]:
    """Enough distinct (K, N) weight matrices that cycling through them defeats the cache."""
    bytes_each = k * n * torch.empty((), dtype=dtype).element_size()
    count = max(2, math.ceil(rotate_bytes / bytes_each) + 1)
    count = max(2, min(count, budget // max(bytes_each, 1)))
    pool = []
    for _ in range(count):
        w = torch.empty((k, n), dtype=torch.float32, device=device).uniform_(-0.05, 0.05)
        pool.append(w.to(dtype))
    return pool


def _matmul(torch: Any, x: Any, w: Any, dtype_name: str) -> Any:
    if dtype_name == "fp8":
        scale = torch.ones((), device=x.device, dtype=torch.float32)
        return torch._scaled_mm(x, w, scale_a=scale, scale_b=scale, out_dtype=torch.bfloat16)
    return x @ w


def _rotating_gemm(
    torch: Any, x: Any, pool: list[Any], cursor: Iterator[int], dtype_name: str
) -> Callable[[], Any]:
    """y = x·W with the next W of the pool on every call."""

    def call() -> Any:
        return _matmul(torch, x, pool[next(cursor) % len(pool)], dtype_name)

    return call


def run_gemm(
    timer: Timer,
    device: DeviceInfo,
    plan: Plan,
    dtypes: list[str],
    progress: Callable[[float], None] = lambda f: None,
    reference: Callable[[], float] | None = None,
) -> list[Row]:
    """Rows: dtype, k, n, m, median_s, iqr_s, flops, bytes, tflops, gbps; on a CPU given a `reference` (one
    reading of the machine's speed, TFLOP/s), also each point's time per round and the reference's per round
    (`ROUND_TIMES`, `ROUND_REFERENCES`)."""
    if not device.is_gpu:
        return _run_gemm_interleaved(timer, device, plan, dtypes, progress, reference)
    torch = timer.torch
    rows: list[Row] = []
    total = len(dtypes) * len(plan.gemm_shapes) * len(plan.gemm_m)
    done = 0
    for dtype_name in dtypes:
        dtype = torch_dtype(dtype_name)
        for k, n in plan.gemm_shapes:
            pool = weight_pool(
                torch, k, n, dtype, device.torch_device, plan.rotate_bytes, plan.memory_budget_bytes // 2
            )
            if dtype_name == "fp8":
                pool = [w.t().contiguous().t() for w in pool]  # _scaled_mm wants a column-major B
            cursor = itertools.count()  # shared across M: keep rotating through the pool
            for m in plan.gemm_m:
                x = (
                    torch.empty((m, k), dtype=torch.float32, device=device.torch_device)
                    .uniform_(-1, 1)
                    .to(dtype)
                )

                call = _rotating_gemm(torch, x, pool, cursor, dtype_name)

                try:
                    call()
                    timer.sync()
                except RuntimeError:
                    if dtype_name != "fp8":
                        raise
                    continue  # fp8 GEMMs need M a multiple of 16 on some backends: skip that M
                one = timer.time_once(call, 1)
                inner = int(min(max(plan.min_timed_s / max(one, 1e-7), 1), len(pool), 200))
                sample = timer.measure(call, inner=inner, repeats=plan.gemm_repeats, warmup=1)
                rows.append(_gemm_row(dtype_name, k, n, m, sample.median_s, sample.iqr_s))
                done += 1
                progress(done / total)
            del pool
    progress(1.0)
    return rows


def _gemm_row(dtype_name: str, k: int, n: int, m: int, median_s: float, iqr_s: float) -> Row:
    bpe = BYTES_PER_ELEMENT[dtype_name]
    flops = 2.0 * m * k * n
    nbytes = float((m * k + k * n) * bpe + m * n * (2 if dtype_name == "fp8" else bpe))
    return {
        "dtype": dtype_name,
        "k": k,
        "n": n,
        "m": m,
        "median_s": median_s,
        "iqr_s": iqr_s,
        "flops": flops,
        "bytes": nbytes,
        "tflops": flops / median_s / 1e12,
        "gbps": nbytes / median_s / 1e9,
    }


def _run_gemm_interleaved(
    timer: Timer,
    device: DeviceInfo,
    plan: Plan,
    dtypes: list[str],
    progress: Callable[[float], None],
    reference: Callable[[], float] | None = None,
) -> list[Row]:
    """The CPU suite: every (shape, M) timed once per round, in a shuffled order, for `gemm_repeats` rounds,
    so a stretch of contention from a neighbour spreads over all the points instead of bending a few
    (a whole shape's M sweep took ~1 s, several rows of it inside one slow second); the median of the
    rounds is each point's time. Each timed batch follows one untimed call (the previous point's weights
    and activations have just left the caches). `reference`, read REFERENCE_READINGS times spread over each
    round, gives that round's machine speed: their median (a quick round lasts about 0.3 s)."""
    torch = timer.torch
    points: list[tuple[str, int, int, int, Callable[[], Any], int]] = []
    pools: list[list[Any]] = []
    for dtype_name in dtypes:
        dtype = torch_dtype(dtype_name)
        budget = plan.memory_budget_bytes // (2 * max(len(plan.gemm_shapes), 1))
        for k, n in plan.gemm_shapes:
            pool = weight_pool(torch, k, n, dtype, device.torch_device, plan.rotate_bytes, budget)
            if dtype_name == "fp8":
                pool = [w.t().contiguous().t() for w in pool]  # _scaled_mm wants a column-major B
            pools.append(pool)
            cursor = itertools.count()
            for m in plan.gemm_m:
                x = torch.empty((m, k), dtype=torch.float32, device=device.torch_device).uniform_(-1, 1)
                call = _rotating_gemm(torch, x.to(dtype), pool, cursor, dtype_name)
                try:
                    call()
                except RuntimeError:
                    if dtype_name != "fp8":
                        raise
                    continue  # as on a GPU: skip an M the fp8 kernel refuses
                one = timer.time_once(call, 1)
                inner = int(min(max(plan.min_timed_s / max(one, 1e-7), 1), len(pool), 200))
                points.append((dtype_name, k, n, m, call, inner))
    times: list[list[float]] = [[] for _ in points]
    references: list[float] = []
    rng = random.Random(0)
    order = list(range(len(points)))
    read_at = {len(order) * (2 * j + 1) // (2 * REFERENCE_READINGS) for j in range(REFERENCE_READINGS)}
    for r in range(plan.gemm_repeats):
        rng.shuffle(order)
        readings: list[float] = []
        for position, i in enumerate(order):
            if reference is not None and position in read_at:
                readings.append(reference())
            call, inner = points[i][4], points[i][5]
            times[i].append(timer.time_once(call, inner, before=call))
        if readings:
            references.append(statistics.median(readings))
        progress((r + 1) / plan.gemm_repeats)
    rows = []
    for (dtype_name, k, n, m, _, _), ts in zip(points, times, strict=True):
        sample = summarise(ts)
        row = _gemm_row(dtype_name, k, n, m, sample.median_s, sample.iqr_s)
        if references:
            row[ROUND_TIMES] = ";".join(repr(float(t)) for t in ts)
            row[ROUND_REFERENCES] = ";".join(repr(float(v)) for v in references)
        rows.append(row)
    del pools
    progress(1.0)
    return rows
