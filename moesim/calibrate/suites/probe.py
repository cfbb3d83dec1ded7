"""The drift probe: four short fixed kernels that measure how fast the machine is right now.

Four timings, each under ~50 ms, with the same clock as the suites and the validation steps
(`timing.Timer`: CUDA events on a GPU, the thread's CPU time for a single-threaded CPU run), one per part of
the machine a suite or a validation step depends on:

- a **memory read**: `torch.sum` over a buffer several times the last-level cache, so every pass streams
  from DRAM / HBM: the memory suite's plateau kernel. Its rate (GB/s) is the machine's *memory speed* now;
- a **GEMM** whose operands stay in the last-level cache, so it is arithmetic-bound like the GEMM suite's
  large-M rows and the validation steps' projections. Its rate (TFLOP/s) is the machine's *core speed* now
  (clock, a busy hyperthread sibling, a neighbour thrashing the shared cache, a GPU's SM clock);
- a **streaming GEMM**: a small-M GEMM whose weights cycle through a pool several times the last-level
  cache, so every call streams its weights from DRAM / HBM, as a decode step's projections and experts do
  and as the GEMM suite's rotating pools do. Its rate (TFLOP/s) is the speed of the regime the validation
  steps run in: on the 2-core EPYC VM their time was 75-98% such GEMMs, and the in-cache GEMM read 11-14%
  faster than during calibration at times the rows were not faster;
- a **dispatch burst**: `DISPATCH_OPS` tiny in-place adds issued eagerly, timed on the host, like the launch
  suite's eager rows. The host time per op (µs) is the machine's *dispatch speed* now.

Each kernel is timed in its own block: one untimed warm-up call (it reloads the kernel's operands and the
dispatch path into the caches, whatever ran before the probe), then `*_repeats` timed batches; the probe
reports each kernel's median and the relative standard error of that median (from the batches' IQR), the
noise a drift must exceed before it counts (`calibrate/fits/drift.py`). Timing the three kernels
interleaved, as the first version did, made each GEMM and each dispatch burst follow a read that had just
evicted the cache: the GEMM then measured partly the memory, and the probe depended on what ran before it.

The sizes depend only on the device (`probe_plan`), so a calibration and a later validation on the same
machine time exactly the same work; the ratio of their rates is a machine-speed ratio, not a fit (see
`calibrate/fits/drift.py` for how it is applied). torch is imported lazily, through the timer.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from moesim.calibrate.fits.drift import ProbeSample, median_noise, rel_iqr
from moesim.calibrate.suites.timing import DeviceInfo, Timer, torch_dtype

MIB = 2**20
GIB = 2**30
# The sizes a profile records (`ProbePlan.figures`), so a later validation times the same kernels.
PROBE_FIGURES = ("read_bytes", "gemm_n", "stream_m", "stream_k", "stream_n", "stream_pool_bytes")
DISPATCH_OPS = 100  # tiny eager ops per dispatch batch: ~0.5 ms of host time on a CPU, ~0.5 ms on a GPU host


@dataclass(frozen=True)
class ProbePlan:
    """What one probe times: the read's bytes, the GEMM's size and dtype, calls per batch and batches."""

    read_bytes: int
    gemm_n: int  # the GEMM is (n × n) · (n × n)
    dtype: str
    read_inner: int  # reads per timed batch
    gemm_inner: int  # GEMMs per timed batch
    read_repeats: int  # timed batches of each kernel; the probe reports their median
    gemm_repeats: int
    dispatch_repeats: int
    # The streaming GEMM: x[stream_m, stream_k] · W[stream_k, stream_n], W the next of a pool of
    # stream_pool_bytes (several times the last-level cache), stream_inner calls per timed batch.
    stream_m: int = 4
    stream_k: int = 512
    stream_n: int = 1536
    stream_pool_bytes: int = 128 * MIB
    stream_inner: int = 8
    stream_repeats: int = 9

    def figures(self) -> dict[str, float]:
        """The sizes a profile records (`PROBE_FIGURES`), so a later validation times the same kernels."""
        return {key: float(getattr(self, key)) for key in PROBE_FIGURES}

    def describe(self) -> str:
        return (
            f"sum over {self.read_bytes / MIB:.0f} MiB fp32 (x{self.read_inner}, median of {self.read_repeats}), "
            f"a {self.gemm_n}^3 {self.dtype} GEMM (x{self.gemm_inner}, median of {self.gemm_repeats}) and "
            f"a {self.stream_m}x{self.stream_k}x{self.stream_n} {self.dtype} GEMM over a "
            f"{self.stream_pool_bytes / MIB:.0f} MiB weight pool (x{self.stream_inner}, median of "
            f"{self.stream_repeats}) and {DISPATCH_OPS} tiny eager ops (median of {self.dispatch_repeats}), "
            "each after one warm-up call"
        )


def recorded_plan(is_gpu: bool, figures: dict[str, float]) -> ProbePlan:
    """The probe a profile recorded (`ProbePlan.figures`): the same sizes, the same repeats (a profile recorded
    before the probe timed the streaming GEMM: today's streaming GEMM, which its calibration cannot match, so
    rows are corrected with the in-cache GEMM's part for it: `SpeedRatio.between`)."""
    plan = probe_plan(is_gpu, 0.0)

    def size(key: str, default: int) -> int:
        return int(figures.get(key) or default)

    return replace(
        plan,
        read_bytes=int(figures["read_bytes"]),
        gemm_n=int(figures["gemm_n"]),
        stream_m=size("stream_m", plan.stream_m),
        stream_k=size("stream_k", plan.stream_k),
        stream_n=size("stream_n", plan.stream_n),
        stream_pool_bytes=size("stream_pool_bytes", plan.stream_pool_bytes),
    )


def probe_plan(is_gpu: bool, llc_bytes: float) -> ProbePlan:
    """The probe's fixed sizes for a device: a read of 4× its last-level cache, a GEMM that fits in it.

    CPU (a 2-core EPYC VM: 32 MiB L3, ~14 GB/s, ~0.07 TFLOP/s fp32 on one thread): a 128 MiB read ≈ 9 ms,
    median of 5 (45 ms); a 512³ fp32 GEMM (3 MiB of operands, inside the L3 like the GEMM suite's 4-11 MiB
    weights) ≈ 4 ms, median of 9 (36 ms); 21 dispatch bursts ≈ 10 ms: a probe costs about 0.1 s. GPU (H200:
    50 MiB L2, 4.8 TB/s, ~700 TFLOP/s bf16): a 1 GiB read ≈ 0.2 ms and a 4096³ bf16 GEMM ≈ 0.2 ms, batched
    10 and 20 at a time so each timed batch lasts 2-4 ms (CUDA events resolve ~µs): about 60 ms in all.

    The streaming GEMM, CPU: M = 4 (the validation rows' GEMMs run at M = 1-32: experts at 1-3 rows, the
    LM head and projections at B·(K+1)) over 512 x 1536 fp32 weights (3 MiB, like the rows' expert and
    projection matrices), a pool of 4 x the LLC: ≈ 0.6 ms a call at ~11 GFLOP/s, 8 a batch, median of 9
    (≈ 45 ms). GPU: M = 16 over 4096 x 4096 bf16 (32 MiB) in a pool of 4 x the L2 (≥ 256 MiB), ≈ 10 µs a call
    at HBM speed, 400 a batch (1.7 ms on a B200, 16 ms on an L40S), median of 9.
    """
    llc = llc_bytes or (50 * MIB if is_gpu else 32 * MIB)
    if is_gpu:
        return ProbePlan(
            read_bytes=int(max(8 * llc, GIB)),
            gemm_n=4096,
            dtype="bf16",
            read_inner=10,
            gemm_inner=20,
            read_repeats=5,
            gemm_repeats=9,
            dispatch_repeats=21,
            stream_m=16,
            stream_k=4096,
            stream_n=4096,
            stream_pool_bytes=int(max(4 * llc, 256 * MIB)),
            stream_inner=400,
        )
    return ProbePlan(
        read_bytes=int(min(max(4 * llc, 64 * MIB), 512 * MIB)),
        gemm_n=512,
        dtype="fp32",
        read_inner=1,
        gemm_inner=1,
        read_repeats=5,
        gemm_repeats=9,
        dispatch_repeats=21,
        stream_pool_bytes=int(min(max(4 * llc, 64 * MIB), 512 * MIB)),
    )


class Probe:
    """The probe's buffers, allocated once; `sample()` times the four kernels and returns a `ProbeSample`."""

    def __init__(self, timer: Timer, device: DeviceInfo, plan: ProbePlan | None = None) -> None:
        self.timer = timer
        self.plan = plan or probe_plan(device.is_gpu, device.last_level_cache_bytes)
        torch = timer.torch
        where = device.torch_device
        self._buffer = torch.ones(self.plan.read_bytes // 4, dtype=torch.float32, device=where)
        n, dtype = self.plan.gemm_n, torch_dtype(self.plan.dtype)
        generator = torch.Generator(device="cpu").manual_seed(0)
        self._a = torch.rand((n, n), generator=generator).to(device=where, dtype=dtype)
        self._b = torch.rand((n, n), generator=generator).to(device=where, dtype=dtype)
        self._c = torch.empty((n, n), device=where, dtype=dtype)
        self._tiny = torch.zeros(1, dtype=torch.float32, device=where)
        p = self.plan
        weight_bytes = p.stream_k * p.stream_n * torch.empty((), dtype=dtype).element_size()
        self._pool = [
            torch.rand((p.stream_k, p.stream_n), generator=generator).to(device=where, dtype=dtype)
            for _ in range(max(2, -(-p.stream_pool_bytes // weight_bytes)))
        ]
        self._x = torch.rand((p.stream_m, p.stream_k), generator=generator).to(device=where, dtype=dtype)
        self._y = torch.empty((p.stream_m, p.stream_n), device=where, dtype=dtype)
        self._next = 0
        self._started = time.perf_counter()
        self.samples: list[ProbeSample] = []  # every probe taken, in order

    def _read(self) -> Any:
        return self.timer.torch.sum(self._buffer)

    def _gemm(self) -> Any:
        return self.timer.torch.mm(self._a, self._b, out=self._c)

    def _stream_gemm(self) -> Any:
        weights = self._pool[self._next % len(self._pool)]
        self._next += 1
        return self.timer.torch.mm(self._x, weights, out=self._y)

    def _dispatch(self) -> None:
        for _ in range(DISPATCH_OPS):
            self._tiny.add_(1.0)

    def sample(self, label: str = "") -> ProbeSample:
        """Time the read, the GEMM, the streaming GEMM and the dispatch burst, each in its own warmed-up block
        of repeats."""
        with self.timer.torch.inference_mode():  # the same dispatch path in calibration and in validation
            return self._sample(label)

    def _block(self, timed: Callable[[], float], warm_up: Callable[[], Any], repeats: int) -> list[float]:
        warm_up()
        self.timer.sync()
        return [timed() for _ in range(repeats)]

    def _sample(self, label: str) -> ProbeSample:
        plan, timer = self.plan, self.timer
        read_s = self._block(
            lambda: timer.time_once(self._read, plan.read_inner), self._read, plan.read_repeats
        )
        gemm_s = self._block(
            lambda: timer.time_once(self._gemm, plan.gemm_inner), self._gemm, plan.gemm_repeats
        )
        stream_s = self._block(
            lambda: timer.time_once(self._stream_gemm, plan.stream_inner),
            self._stream_gemm,
            plan.stream_repeats,
        )
        dispatch_s = self._block(
            lambda: timer.host_time(self._dispatch, 1) / DISPATCH_OPS, self._dispatch, plan.dispatch_repeats
        )
        flops = 2.0 * plan.gemm_n**3
        sample = ProbeSample(
            label=label,
            at_s=round(time.perf_counter() - self._started, 3),
            memory_gbps=plan.read_bytes / statistics.median(read_s) / 1e9,
            compute_tflops=flops / statistics.median(gemm_s) / 1e12,
            memory_rel_iqr=rel_iqr(read_s),
            compute_rel_iqr=rel_iqr(gemm_s),
            dispatch_us=statistics.median(dispatch_s) * 1e6,
            dispatch_rel_iqr=rel_iqr(dispatch_s),
            memory_noise=median_noise(read_s),
            compute_noise=median_noise(gemm_s),
            dispatch_noise=median_noise(dispatch_s),
            stream_gemm_tflops=self._stream_tflops(statistics.median(stream_s)),
            stream_gemm_rel_iqr=rel_iqr(stream_s),
            stream_gemm_noise=median_noise(stream_s),
        )
        self.samples.append(sample)
        return sample

    def _stream_tflops(self, seconds_per_call: float) -> float:
        p = self.plan
        return 2.0 * p.stream_m * p.stream_k * p.stream_n / seconds_per_call / 1e12

    def stream_reference(self) -> float:
        """One reading of the streaming GEMM alone (TFLOP/s): one untimed call, then one timed batch of
        `stream_inner` calls. A suite reads it in every round beside its own points (`suites/gemm.py`), so its
        points can be brought to the suite's median machine speed: the same kernel as the probe's, read where
        the points are timed rather than before and after the suite."""
        timer = self.timer
        with timer.torch.inference_mode():
            return self._stream_tflops(
                timer.time_once(self._stream_gemm, self.plan.stream_inner, before=self._stream_gemm)
            )

    def close(self) -> None:
        """Free the buffers (the read buffer is several times the cache)."""
        del self._buffer, self._a, self._b, self._c, self._tiny, self._pool, self._x, self._y


__all__ = ["PROBE_FIGURES", "Probe", "ProbePlan", "probe_plan", "recorded_plan"]
