"""Memory suite: warm read bandwidth against working set (cache knee, plateaus) and cold single reads (ramp).

The read kernel is a sum over a float32 buffer: one pass, negligible arithmetic, the same code path on CPU
and GPU. The per-call fixed cost (dispatch, tiny-kernel latency) is measured on a tiny buffer in the same
rounds and subtracted, so the bandwidths are of the bytes alone. On a GPU every interval is device time
(`Timer.time_once`), so the fixed cost is the kernel's own latency, not the host's launch time. A GPU with
triton reads each cache-sized working set several times in ONE launch (`triton_kernels.l2_read`): one
`torch.sum` pass of an L2-sized buffer lasts about a kernel's fixed latency, which hides the L2 plateau.

On a CPU each timing of a working set beyond the last-level cache is followed by one read of a reference set
(4 x the cache, the drift probe's read): its time is the DRAM speed of that moment, and the point's
`normalised_gbps` divides each timing by it (times the suite's median reference time), so a neighbour that
slows the memory for part of the suite no longer bends the points it fell on.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable
from typing import Any

from moesim.calibrate.suites.plan import Plan
from moesim.calibrate.suites.timing import DeviceInfo, Timer, summarise
from moesim.calibrate.suites.triton_kernels import l2_read, triton_available

Row = dict[str, Any]
TINY_BYTES = 4096
# A multi-pass read streams about this many LLCs' worth per launch (at most MAX_PASSES passes).
PASS_TARGET_LLCS = 8
MAX_PASSES = 64


# A GPU batch must fit in the launch queue while the device spins ahead of it (see Timer.time_once).
GPU_MAX_INNER = 200


def _inner_for(seconds_per_call: float, min_timed_s: float, cap: int = 2000) -> int:
    return int(min(max(min_timed_s / max(seconds_per_call, 1e-7), 1), cap))


def run_memory(
    timer: Timer, device: DeviceInfo, plan: Plan, progress: Callable[[float], None] = lambda f: None
) -> list[Row]:
    """Measure both sweeps; rows carry `kind` = working_set | transfer | fixed_warm | fixed_cold."""
    torch = timer.torch
    top = max(max(plan.working_set_bytes), max(plan.transfer_bytes))
    buffer = torch.ones(top // 4, dtype=torch.float32, device=device.torch_device)
    tiny = buffer[: TINY_BYTES // 4]
    timer.sync()
    rows: list[Row] = []

    multi_pass = device.is_gpu and triton_available()
    llc = device.last_level_cache_bytes or 50 * 2**20

    def passes_for(size: int) -> int:
        if size == TINY_BYTES or not multi_pass:  # the tiny read times the fixed cost: one pass
            return 1
        return max(1, min(MAX_PASSES, round(PASS_TARGET_LLCS * llc / size)))

    def read(view: Any, passes: int = 1) -> Callable[[], Any]:
        if passes > 1:
            return lambda: l2_read(view, passes)
        return lambda: torch.sum(view)

    # Calibrate the batch length per size once, from a single untimed-then-timed read.
    sizes = list(plan.working_set_bytes)
    inner: dict[int, int] = {}
    cap = GPU_MAX_INNER if device.is_gpu else 2000
    for size in [TINY_BYTES, *sizes]:
        fn = read(buffer[: size // 4], passes_for(size))
        fn()
        timer.sync()
        # The fastest of three: one preempted call must not shrink the batch to a single read.
        inner[size] = _inner_for(min(timer.time_once(fn, 1) for _ in range(3)), plan.min_timed_s, cap)

    # Interleaved rounds: a burst of interference spreads over all sizes instead of bending one of them.
    # Beside every working set beyond the cache, one read of the reference set (the probe's DRAM read)
    # measures the memory speed of that moment, so each point can be brought to the suite's median speed.
    times: dict[int, list[float]] = {size: [] for size in [TINY_BYTES, *sizes]}
    beside: dict[int, list[float]] = {size: [] for size in sizes}
    reference = reference_bytes(sizes, llc)
    reference_fn = read(buffer[: reference // 4], passes_for(reference))
    rng = random.Random(0)
    total = plan.rounds * (len(sizes) + 1) + len(plan.transfer_bytes) + 1
    done = 0
    for _ in range(plan.rounds):
        order = [TINY_BYTES, *sizes]
        rng.shuffle(order)
        for size in order:
            fn = read(buffer[: size // 4], passes_for(size))
            times[size].append(timer.time_once(fn, inner[size], before=fn))
            if size in beside and size > llc and not device.is_gpu:
                beside[size].append(timer.time_once(reference_fn, 1))
            done += 1
            progress(done / total)
    fixed = summarise(times[TINY_BYTES])
    rows.append(_row("fixed_warm", TINY_BYTES, fixed, 0.0))
    all_reference = [t for ts in beside.values() for t in ts]
    reference_s = statistics.median(all_reference) if all_reference else float("nan")
    for size in sizes:
        sample = summarise(times[size])
        row = _row("working_set", size, sample, fixed.median_s, passes_for(size))
        if beside[size]:
            net = [
                (t - fixed.median_s) * reference_s / r for t, r in zip(times[size], beside[size], strict=True)
            ]
            net_s = statistics.median(net)
            row |= {
                "reference_bytes": reference,
                "reference_s": reference_s,
                "beside_s": statistics.median(beside[size]),
                "normalised_gbps": passes_for(size) * size / net_s / 1e9 if net_s > 0 else float("nan"),
            }
        rows.append(row)

    if not device.is_gpu:
        rows += _transcendental_rows(timer, plan, fixed.median_s)
        progress(done / total)

    # Cold single reads: flush the caches before every timed read.
    cold_repeats = max(3, plan.rounds)
    tiny_fn = read(tiny)
    cold_fixed = summarise([timer.time_once(tiny_fn, 1, before=timer.flush) for _ in range(cold_repeats)])
    rows.append(_row("fixed_cold", TINY_BYTES, cold_fixed, 0.0))
    for size in plan.transfer_bytes:
        fn = read(buffer[: size // 4])
        fn()
        sample = summarise([timer.time_once(fn, 1, before=timer.flush) for _ in range(cold_repeats)])
        rows.append(_row("transfer", size, sample, cold_fixed.median_s))
        done += 1
        progress(done / total)
    del buffer
    timer._flush_buffer = None
    progress(1.0)
    return rows


# On a CPU the element-wise functions the reference model evaluates (SiLU, softmax's exp, RMSNorm's rsqrt)
# run far below the bytes' rate (SiLU ~2 G elements/s on one core of a 2-core EPYC VM against ~10 G/s for a
# multiply of the same tensor): each op is timed over a float32 tensor of this many elements (512 KiB, in
# any last-level cache), on inputs in the range it meets there.
TRANSCENDENTAL_ELEMENTS = 131072


def _transcendental_rows(timer: Timer, plan: Plan, fixed_s: float) -> list[Row]:
    """One `transcendental` row per op: the median time of one call over TRANSCENDENTAL_ELEMENTS elements,
    with the suite's warm fixed time (dispatch) to subtract."""
    torch = timer.torch
    n = TRANSCENDENTAL_ELEMENTS
    gate, scores, mean_square = torch.linspace(-4, 4, n), torch.linspace(-8, 0, n), torch.linspace(1, 4, n)
    out = torch.empty(n)
    ops: dict[str, Callable[[], Any]] = {
        "silu": lambda: torch.nn.functional.silu(gate),
        "exp": lambda: torch.exp(scores, out=out),
        "rsqrt": lambda: torch.rsqrt(mean_square, out=out),
    }
    times: dict[str, list[float]] = {op: [] for op in ops}
    inner = {}
    for op, fn in ops.items():
        fn()
        inner[op] = _inner_for(min(timer.time_once(fn, 1) for _ in range(3)), plan.min_timed_s)
    for _ in range(max(3, plan.rounds)):  # interleaved, like the reads
        for op, fn in ops.items():
            times[op].append(timer.time_once(fn, inner[op], before=fn))
    rows = []
    for op, ts in times.items():
        sample = summarise(ts)
        rows.append(
            {
                "kind": "transcendental",
                "op": op,
                "elements": n,
                "median_s": sample.median_s,
                "iqr_s": sample.iqr_s,
                "n": sample.n,
                "fixed_s": fixed_s,
            }
        )
    return rows


def reference_bytes(sizes: list[int], llc_bytes: float) -> int:
    """The working set read beside the others as the memory-speed reference: the smallest at least 4 x the
    last-level cache (the drift probe's DRAM read, `probe.probe_plan`), else the largest."""
    beyond = [s for s in sizes if s >= 4 * llc_bytes]
    return min(beyond) if beyond else max(sizes)


def _row(kind: str, size: int, sample: Any, fixed_s: float, passes: int = 1) -> Row:
    net = sample.median_s - fixed_s
    return {
        "kind": kind,
        "size_bytes": size,
        "passes": passes,
        "median_s": sample.median_s,
        "iqr_s": sample.iqr_s,
        "n": sample.n,
        "fixed_s": fixed_s,
        "bandwidth_gbps": passes * size / net / 1e9 if net > 0 else float("nan"),
    }
