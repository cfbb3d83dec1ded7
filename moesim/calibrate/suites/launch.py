"""Launch suite: host cost of an eager launch (CPU: operator dispatch), graph replay, tiny-kernel latency, sync.

Each quantity comes from a batch of N tiny kernels timed for several N, so a line fit separates the
per-kernel cost (slope) from the per-batch cost (intercept). Eager launches are timed for two op classes:
a tiny elementwise op (`eager_host`) and a small GEMM (`eager_gemm_host`), whose cuBLAS path (heuristics,
sometimes a split-K + reduce pair) costs the host several times more; on a GPU the GEMMs are queued behind
a spin kernel so the host is measured as in a real eager step, never waiting for the device.

A model's step is a chain of DIFFERENT, DEPENDENT small kernels, not N copies of one: the suite also times
a dependent chain of mixed tiny ops (mul → small mm → add → amax → index_select, each consuming the
previous output and allocating its own). Run eagerly it gives the host issue time per op of a model-like
op mix (`chain_eager_host`); replayed from a CUDA graph it gives the device time per dependent kernel
(`chain_graph_device`), which identical back-to-back kernels (pipelined by the GPU) under-state.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

from moesim.calibrate.suites.plan import Plan
from moesim.calibrate.suites.timing import DeviceInfo, Timer, lead_seconds, summarise

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
        len(plan.launch_counts) * (4 if device.is_gpu else 2)
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
    chain = make_chain(torch, device.torch_device, torch.bfloat16 if device.is_gpu else torch.float32)
    chain(max(plan.launch_counts))  # warm every op's first-call paths (allocator, kernel selection)
    timer.sync()
    rows.extend(_issue_rows(timer, plan, "chain_eager_host", plan.launch_counts, chain, tick))

    if device.is_gpu:
        rows.extend(_gpu_rows(timer, plan, tiny, tick))
        rows.extend(_chain_graph_rows(timer, plan, chain, tick))
    progress(1.0)
    return rows


CHAIN_ROWS = 4  # the chain's activations: x[CHAIN_ROWS, CHAIN_WIDTH], a decode-sized batch of tokens
CHAIN_WIDTH = 64
CHAIN_CYCLE = 5  # ops per cycle of the chain (mul, mm, add, amax, index_select)


def make_chain(torch: Any, torch_device: Any, dtype: Any) -> Callable[[int], Any]:
    """`chain(n)` runs n dependent tiny ops of mixed kinds, each on the previous op's (new) output.

    One kernel per op on a GPU (mul, a 4×64×64 GEMM, add, a row max, a gather); every op allocates its
    output and takes several tensor arguments, as a model's ops do. Values stay bounded (scale < 1, mean).
    """
    x0 = torch.full((CHAIN_ROWS, CHAIN_WIDTH), 0.5, dtype=dtype, device=torch_device)
    w = torch.full((CHAIN_WIDTH, CHAIN_WIDTH), 1.0 / CHAIN_WIDTH, dtype=dtype, device=torch_device)
    bias = torch.full((CHAIN_WIDTH,), 0.01, dtype=dtype, device=torch_device)
    gather = torch.zeros(CHAIN_WIDTH, dtype=torch.long, device=torch_device)
    ops: tuple[Callable[[Any], Any], ...] = (
        lambda t: t * 0.5,
        lambda t: torch.mm(t, w),
        lambda t: t + bias,
        lambda t: torch.amax(t, dim=-1, keepdim=True),
        lambda t: torch.index_select(t, 1, gather),
    )

    def chain(n: int) -> Any:
        t = x0
        for i in range(n):
            t = ops[i % CHAIN_CYCLE](t)
        return t

    return chain


def _issue_rows(
    timer: Timer,
    plan: Plan,
    kind: str,
    counts: tuple[int, ...],
    run: Callable[[int], Any],
    tick: Callable[[], None],
) -> list[Row]:
    """Host seconds to issue `run(count)` (on a GPU behind a spin that outlasts the issue)."""
    rows: list[Row] = []
    per_call_s = 0.0  # learnt from the previous batch: the spin is sized to outlast the next issue
    for count in counts:
        times = []
        for _ in range(plan.launch_repeats):
            timer.sync()
            timer.busy_ahead(lead_seconds(2 * count * per_call_s))
            t0 = timer.clock_ns()
            run(count)
            seconds = (timer.clock_ns() - t0) * 1e-9
            timer.sync()
            times.append(seconds)
            per_call_s = seconds / count
        rows.append(_row(kind, count, times))
        tick()
    return rows


def _gemm_rows(timer: Timer, device: DeviceInfo, plan: Plan, tick: Callable[[], None]) -> list[Row]:
    """Host seconds to issue N small GEMMs back to back, each allocating its output."""
    torch = timer.torch
    m, k, n_out = plan.launch_gemm_mkn
    dtype = torch.bfloat16 if device.is_gpu else torch.float32
    x = torch.ones((m, k), dtype=dtype, device=device.torch_device)
    w = torch.full((k, n_out), 0.01, dtype=dtype, device=device.torch_device)

    def gemms(count: int) -> None:
        for _ in range(count):
            torch.mm(x, w)

    gemms(20)
    timer.sync()
    rows = _issue_rows(timer, plan, "eager_gemm_host", plan.launch_gemm_counts, gemms, tick)
    for row in rows:
        row.update({"gemm_m": m, "gemm_k": k, "gemm_n": n_out, "dtype": "bf16" if device.is_gpu else "fp32"})
    return rows


def _chain_graph_rows(
    timer: Timer, plan: Plan, chain: Callable[[int], Any], tick: Callable[[], None]
) -> list[Row]:
    """Device seconds per replay of a captured dependent chain of N mixed tiny kernels.

    A failure here (capture unsupported by some op on some backend) leaves these rows out; the build then
    falls back to the identical-kernel figures and says so.
    """
    torch = timer.torch
    rows: list[Row] = []
    try:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                chain(2 * CHAIN_CYCLE)
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        for n in plan.launch_counts:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                chain(n)
            graph.replay()
            torch.cuda.synchronize()
            times = [timer.time_once(graph.replay, 1) for _ in range(plan.launch_repeats)]
            rows.append(_row("chain_graph_device", n, times))
            del graph
            tick()
    except Exception as exc:
        with contextlib.suppress(Exception):
            torch.cuda.synchronize()
        return [
            {"kind": "chain_graph_failed", "n_kernels": 0, "seconds": float("nan"), "error": repr(exc)[:200]}
        ]
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
