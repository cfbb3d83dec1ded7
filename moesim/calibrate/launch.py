"""Launch suite: host cost of an eager launch (CPU: operator dispatch), graph replay, tiny-kernel latency, sync.

Each quantity comes from a batch of N tiny kernels timed for several N, so a line fit separates the
per-kernel cost (slope) from the per-batch cost (intercept). Eager launches are timed for two op classes:
a tiny elementwise op (`eager_host`) and a small GEMM (`eager_gemm_host`), whose cuBLAS path (heuristics,
sometimes a split-K + reduce pair) costs the host several times more; on a GPU the GEMMs are queued behind
a spin kernel so the host is measured as in a real eager step, never waiting for the device.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from moesim.calibrate.plan import Plan
from moesim.calibrate.timing import LEAD_FACTOR, MAX_LEAD_S, MIN_LEAD_S, DeviceInfo, Timer, summarise

Row = dict[str, Any]


def run_launch(
    timer: Timer, device: DeviceInfo, plan: Plan, progress: Callable[[float], None] = lambda f: None
) -> list[Row]:
    """Rows carry `kind`, `n_kernels` and `seconds` (median over repeats of the whole batch)."""
    torch = timer.torch
    x = torch.zeros(1, dtype=torch.float32, device=device.torch_device)

    def tiny() -> None:
        x.add_(1.0)

    rows: list[Row] = []
    steps = (
        len(plan.launch_counts) * (2 if device.is_gpu else 1)
        + len(plan.launch_gemm_counts)
        + (3 if device.is_gpu else 0)
    )
    done = 0

    def tick() -> None:
        nonlocal done
        done += 1
        progress(min(done / steps, 1.0))

    for _ in range(50):
        tiny()
    timer.sync()
    # Eager: host time to issue N kernels (on a GPU the device runs behind; on a CPU issuing is running).
    for n in plan.launch_counts:
        times = []
        for _ in range(plan.launch_repeats):

            def batch(n: int = n) -> None:
                for _ in range(n):
                    tiny()

            times.append(timer.host_time(batch, 1))
        rows.append(_row("eager_host", n, times))
        tick()
    rows.extend(_gemm_rows(timer, device, plan, tick))

    if device.is_gpu:
        rows.extend(_gpu_rows(timer, plan, tiny, tick))
    progress(1.0)
    return rows


def _gemm_rows(timer: Timer, device: DeviceInfo, plan: Plan, tick: Callable[[], None]) -> list[Row]:
    """Host seconds to issue N small GEMMs back to back (on a GPU behind a spin that outlasts the issue)."""
    torch = timer.torch
    m, k, n_out = plan.launch_gemm_mkn
    dtype = torch.bfloat16 if device.is_gpu else torch.float32
    x = torch.ones((m, k), dtype=dtype, device=device.torch_device)
    w = torch.full((k, n_out), 0.01, dtype=dtype, device=device.torch_device)

    def gemm() -> None:
        torch.mm(x, w)

    for _ in range(20):
        gemm()
    timer.sync()
    rows: list[Row] = []
    per_call_s = 0.0  # learnt from the previous batch: the spin is sized to outlast the next issue
    for count in plan.launch_gemm_counts:
        times = []
        for _ in range(plan.launch_repeats):
            timer.sync()
            timer.busy_ahead(min(max(2 * LEAD_FACTOR * count * per_call_s, MIN_LEAD_S), MAX_LEAD_S))
            t0 = timer.clock_ns()
            for _ in range(count):
                gemm()
            seconds = (timer.clock_ns() - t0) * 1e-9
            timer.sync()
            times.append(seconds)
            per_call_s = seconds / count
        row = _row("eager_gemm_host", count, times)
        row.update({"gemm_m": m, "gemm_k": k, "gemm_n": n_out, "dtype": "bf16" if device.is_gpu else "fp32"})
        rows.append(row)
        tick()
    return rows


def _gpu_rows(timer: Timer, plan: Plan, tiny: Callable[[], None], tick: Callable[[], None]) -> list[Row]:
    torch = timer.torch
    rows: list[Row] = []
    repeats = plan.launch_repeats
    # Graph replay: device time per replay of N captured kernels, and host time to launch a replay.
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            tiny()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    for n in plan.launch_counts:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(n):
                tiny()
        graph.replay()
        torch.cuda.synchronize()
        device_times = [timer.time_once(graph.replay, 1) for _ in range(repeats)]
        rows.append(_row("graph_device", n, device_times))
        host_times = [timer.host_time(graph.replay, 1) for _ in range(repeats)]
        rows.append(_row("graph_host", n, host_times))
        del graph
        tick()

    # One tiny kernel between two events, against two events with nothing between them.
    one = [timer.time_once(tiny, 1) for _ in range(4 * repeats)]
    rows.append(_row("single_kernel", 1, one))
    empty = [timer.time_once(lambda: None, 1) for _ in range(4 * repeats)]
    rows.append(_row("empty_events", 0, empty))
    tick()

    # Synchronisation of an idle device, as the host sees it.
    import time

    sync_times = []
    for _ in range(20 * repeats):
        torch.cuda.synchronize()
        t0 = time.perf_counter_ns()
        torch.cuda.synchronize()
        sync_times.append((time.perf_counter_ns() - t0) * 1e-9)
    rows.append(_row("sync", 0, sync_times))
    tick()
    return rows


def _row(kind: str, n: int, times: list[float]) -> Row:
    sample = summarise(times)
    return {"kind": kind, "n_kernels": n, "seconds": sample.median_s, "iqr_s": sample.iqr_s, "n": sample.n}
