"""The drift probe: a short fixed kernel pair that measures how fast the machine is right now.

Three short timings, each well under 50 ms, with the same clock as the suites and the validation steps
(`timing.Timer`: CUDA events on a GPU, the thread's CPU time for a single-threaded CPU run):

- a **memory read**: `torch.sum` over a buffer several times the last-level cache, so every pass streams
  from DRAM / HBM. Its rate (GB/s) is the machine's *memory speed* now;
- a **small GEMM**: a square matrix product whose operands stay in cache, so it is arithmetic-bound. Its
  rate (TFLOP/s) is the machine's *core speed* now (clock, steal by a hyperthread sibling, GPU SM clock);
- a **dispatch burst**: `DISPATCH_OPS` tiny in-place adds issued eagerly, timed on the host. The host time per
  op (µs) is the machine's *dispatch speed* now: the framework's per-op path, which a neighbour thrashing
  the shared caches slows far more than arithmetic (on a GPU: the host's launch rate).

The sizes depend only on the device (`probe_plan`), so a calibration and a later validation on the same
machine time exactly the same work; the ratio of their rates is a machine-speed ratio, not a fit (see
`calibrate/fits/drift.py` for how it is applied). torch is imported lazily, through the timer.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, replace
from typing import Any

from moesim.calibrate.fits.drift import ProbeSample
from moesim.calibrate.suites.timing import DeviceInfo, Timer, torch_dtype

MIB = 2**20
GIB = 2**30
DISPATCH_OPS = 100  # tiny eager ops per dispatch batch: ~0.5 ms of host time on a CPU, ~0.5 ms on a GPU host


@dataclass(frozen=True)
class ProbePlan:
    """What one probe times: the read's bytes, the GEMM's size and dtype, batches and repeats."""

    read_bytes: int
    gemm_n: int  # the GEMM is (n × n) · (n × n)
    dtype: str
    read_inner: int  # reads per timed batch
    gemm_inner: int  # GEMMs per timed batch
    repeats: int  # timed batches per kernel; the probe reports their median

    def figures(self) -> dict[str, float]:
        """The sizes a profile records, so a later validation times the same kernels."""
        return {"read_bytes": float(self.read_bytes), "gemm_n": float(self.gemm_n)}

    def describe(self) -> str:
        return (
            f"sum over {self.read_bytes / MIB:.0f} MiB fp32 (x{self.read_inner}), a {self.gemm_n}^3 "
            f"{self.dtype} GEMM (x{self.gemm_inner}) and {DISPATCH_OPS} tiny eager ops, median of {self.repeats}"
        )


def recorded_plan(is_gpu: bool, figures: dict[str, float], repeats: int = 9) -> ProbePlan:
    """The probe a profile recorded (`ProbePlan.figures`), rebuilt with `repeats` batches per kernel."""
    plan = probe_plan(is_gpu, 0.0)
    return replace(
        plan, read_bytes=int(figures["read_bytes"]), gemm_n=int(figures["gemm_n"]), repeats=repeats
    )


def probe_plan(is_gpu: bool, llc_bytes: float) -> ProbePlan:
    """The probe's fixed sizes for a device: a read of 4× its last-level cache, a GEMM that fits in it.

    CPU (a 2-core EPYC VM: 32 MiB L3, ~14 GB/s, ~0.07 TFLOP/s fp32 on one thread): 128 MiB read ≈ 9 ms,
    512³ fp32 GEMM (3 MiB of operands) ≈ 4 ms. GPU (H200: 50 MiB L2, 4.8 TB/s, ~700 TFLOP/s bf16):
    a 1 GiB read ≈ 0.2 ms and a 4096³ bf16 GEMM ≈ 0.2 ms, batched 10 and 20 at a time so each timed batch lasts
    a few ms (CUDA events resolve ~µs). Nine repeats of each (a shared CPU's timings spread 7-15% IQR under
    load): a probe costs about 0.13 s of CPU time on that VM, 40 ms on the GPU.
    """
    llc = llc_bytes or (50 * MIB if is_gpu else 32 * MIB)
    if is_gpu:
        return ProbePlan(
            read_bytes=int(max(8 * llc, GIB)),
            gemm_n=4096,
            dtype="bf16",
            read_inner=10,
            gemm_inner=20,
            repeats=9,
        )
    return ProbePlan(
        read_bytes=int(min(max(4 * llc, 64 * MIB), 512 * MIB)),
        gemm_n=512,
        dtype="fp32",
        read_inner=1,
        gemm_inner=1,
        repeats=9,
    )


class Probe:
    """The probe's buffers, allocated once; `sample()` times both kernels and returns a `ProbeSample`."""

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
        self._started = time.perf_counter()
        self.samples: list[ProbeSample] = []  # every probe taken, in order
        self._read()
        self._gemm()
        self._dispatch()
        timer.sync()

    def _read(self) -> Any:
        return self.timer.torch.sum(self._buffer)

    def _gemm(self) -> Any:
        return self.timer.torch.mm(self._a, self._b, out=self._c)

    def _dispatch(self) -> None:
        for _ in range(DISPATCH_OPS):
            self._tiny.add_(1.0)

    def sample(self, label: str = "") -> ProbeSample:
        """Time the read, the GEMM and the dispatch burst (`repeats` of each, interleaved): their medians."""
        with self.timer.torch.inference_mode():  # the same dispatch path in calibration and in validation
            return self._sample(label)

    def _sample(self, label: str) -> ProbeSample:
        plan = self.plan
        read_s: list[float] = []
        gemm_s: list[float] = []
        dispatch_s: list[float] = []
        for _ in range(plan.repeats):
            read_s.append(self.timer.time_once(self._read, plan.read_inner))
            gemm_s.append(self.timer.time_once(self._gemm, plan.gemm_inner))
            dispatch_s.append(self.timer.host_time(self._dispatch, 1) / DISPATCH_OPS)
        flops = 2.0 * plan.gemm_n**3
        sample = ProbeSample(
            label=label,
            at_s=round(time.perf_counter() - self._started, 3),
            memory_gbps=plan.read_bytes / statistics.median(read_s) / 1e9,
            compute_tflops=flops / statistics.median(gemm_s) / 1e12,
            memory_rel_iqr=_rel_iqr(read_s),
            compute_rel_iqr=_rel_iqr(gemm_s),
            dispatch_us=statistics.median(dispatch_s) * 1e6,
            dispatch_rel_iqr=_rel_iqr(dispatch_s),
        )
        self.samples.append(sample)
        return sample

    def close(self) -> None:
        """Free the buffers (the read buffer is several times the cache)."""
        del self._buffer, self._a, self._b, self._c, self._tiny


def _rel_iqr(times_s: list[float]) -> float:
    if len(times_s) < 4:
        return (max(times_s) - min(times_s)) / statistics.median(times_s)
    q = statistics.quantiles(times_s, n=4)
    return (q[2] - q[0]) / q[1]


__all__ = ["Probe", "ProbePlan", "probe_plan", "recorded_plan"]
