"""Device resolution, timing with the device's own clock, cache flushing and provenance.

torch is imported lazily (only when a measurement is asked for), so the package imports without it.
GPU timings use CUDA events (ROCm presents itself as cuda in torch and is recorded as rocm) and measure
*device* time only: a spin kernel queued ahead of the start event keeps the device busy while the host
issues the timed batch, so no host launch time lands inside the interval (see `Timer.time_once`). CPU
timings use perf_counter_ns, or the thread's CPU time when torch runs on one thread (preemption by other
processes on a shared machine is then not counted).
"""

from __future__ import annotations

import datetime
import os
import platform
import re
import shutil
import socket
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from moesim.errors import MoesimError

DTYPES = ("fp32", "bf16", "fp16", "fp8")


def import_torch() -> Any:
    """torch, or one clear error naming how to get it."""
    try:
        import torch
    except ImportError:
        raise MoesimError(
            "torch", "calibration needs PyTorch, which is not installed", "pip install 'moesim[measure]'"
        ) from None
    return torch


def torch_dtype(name: str) -> Any:
    """Map a dtype flag value to the torch dtype."""
    torch = import_torch()
    table = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    if name == "fp8":
        table["fp8"] = getattr(torch, "float8_e4m3fn", None)
    if table.get(name) is None:
        raise MoesimError("--dtype", f"unknown dtype {name!r}", f"choose from {', '.join(DTYPES)}")
    return table[name]


@dataclass(frozen=True)
class DeviceInfo:
    """The device being calibrated and what could be read about it."""

    kind: str  # "cpu" or "cuda"
    backend: str  # "cpu", "cuda" or "rocm"
    name: str
    torch_device: str
    last_level_cache_bytes: float  # what the OS/driver reports; 0 if unreadable
    inner_cache_bytes: float  # CPU: total private L2; 0 if unknown
    memory_capacity_bytes: float
    compute_units: int
    threads: int
    details: dict[str, str] = field(default_factory=dict)

    @property
    def is_gpu(self) -> bool:
        return self.kind == "cuda"


def _lscpu_bytes(text: str, label: str) -> float:
    """Total bytes of a cache line of lscpu output, e.g. 'L3 cache: 300 MiB (1 instance)'."""
    match = re.search(rf"^{re.escape(label)}:\s*([\d.]+)\s*([KMG]i?B)", text, re.MULTILINE)
    if not match:
        return 0.0
    unit = {"K": 2**10, "M": 2**20, "G": 2**30}[match.group(2)[0]]
    return float(match.group(1)) * unit


def cpu_caches() -> tuple[float, float]:
    """(last-level cache bytes, total private L2 bytes) from lscpu, falling back to sysfs; 0 if unknown."""
    text = ""
    if shutil.which("lscpu"):
        try:
            text = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10, check=False).stdout
        except (OSError, subprocess.SubprocessError):
            text = ""
    l3, l2 = _lscpu_bytes(text, "L3 cache"), _lscpu_bytes(text, "L2 cache")
    if l3 == 0.0:
        try:
            size = Path("/sys/devices/system/cpu/cpu0/cache/index3/size").read_text().strip()
            l3 = float(size.rstrip("K")) * 1024
        except (OSError, ValueError):
            pass
    return (l3 or l2), l2


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (or platform as a fallback)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def in_virtual_machine() -> bool:
    """Whether the CPU reports running under a hypervisor (the 'hypervisor' cpuinfo flag)."""
    try:
        return any(
            line.startswith("flags") and " hypervisor" in line
            for line in Path("/proc/cpuinfo").read_text().splitlines()
        )
    except OSError:
        return False


def machine_description(device: DeviceInfo) -> str:
    """The machine a measurement ran on, in words: what a report must name so results can be compared."""
    if device.is_gpu:
        return f"{device.name} ({device.backend} {device.details.get(device.backend, '')}, {device.compute_units} SMs)"
    where = "VM" if in_virtual_machine() else "bare metal"
    return (
        f"{device.name}, {os.cpu_count()} logical CPUs ({where}), {device.threads} torch thread(s), "
        f"L2 {device.inner_cache_bytes / 2**20:.0f} MiB, last-level cache {device.last_level_cache_bytes / 2**20:.0f} "
        f"MiB as reported, {device.memory_capacity_bytes / 2**30:.0f} GiB memory"
    )


def name_slug(device_name: str) -> str:
    """A device name as a file-friendly slug: 'Intel(R) Xeon(R) Processor' -> 'intel-xeon-processor'."""
    return re.sub(r"[^a-z0-9]+", "-", re.sub(r"\(r\)|\(tm\)", "", device_name.lower())).strip("-")


def machine_kind(device: DeviceInfo) -> str:
    """A folder-friendly kind of machine, e.g. 'cpu-intel-xeon-processor-2cpu-vm' or 'nvidia-h200': one
    validation report per kind."""
    slug = name_slug(device.name)
    if device.is_gpu:
        return slug
    return f"cpu-{slug}-{os.cpu_count()}cpu" + ("-vm" if in_virtual_machine() else "")


def mem_total_bytes() -> float:
    """Installed memory from /proc/meminfo; 0 if unreadable."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return float(line.split()[1]) * 1024
    except OSError:
        pass
    return 0.0


def _nvidia_smi(query: str) -> str:
    if not shutil.which("nvidia-smi"):
        return ""
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.strip().splitlines()[0] if out.strip() else ""


def resolve_device(kind: str, threads: int | None = None) -> DeviceInfo:
    """Check that `kind` ('cpu' or 'cuda') is usable here and read what is known about it."""
    torch = import_torch()
    details: dict[str, str] = {"torch": torch.__version__, "python": platform.python_version()}
    if kind == "cpu":
        if threads is not None:
            if threads < 1:
                raise MoesimError("--threads", f"must be ≥ 1, got {threads}")
            torch.set_num_threads(threads)
        llc, l2 = cpu_caches()
        details["cpu_model"] = name = cpu_model()
        details["threads"] = str(torch.get_num_threads())
        return DeviceInfo(
            kind="cpu",
            backend="cpu",
            name=name,
            torch_device="cpu",
            last_level_cache_bytes=llc,
            inner_cache_bytes=l2,
            memory_capacity_bytes=mem_total_bytes(),
            compute_units=os.cpu_count() or 1,
            threads=torch.get_num_threads(),
            details=details,
        )
    if kind != "cuda":
        raise MoesimError("--device", f"unknown device {kind!r}", "use cuda (also for ROCm) or cpu")
    if not torch.cuda.is_available():
        raise MoesimError(
            "--device", "cuda was asked for but torch sees no GPU", "check the driver, or use --device cpu"
        )
    props = torch.cuda.get_device_properties(0)
    hip = getattr(torch.version, "hip", None)
    backend = "rocm" if hip else "cuda"
    details[backend] = str(hip or torch.version.cuda)
    l2 = float(getattr(props, "L2_cache_size", 0) or 0)
    driver = _nvidia_smi("driver_version") if backend == "cuda" else ""
    if driver:
        details["driver"] = driver
    clocks = _nvidia_smi("clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,power.limit")
    if clocks:
        details["clocks_sm_mem_maxsm_maxmem_powerlimit"] = clocks
    clock_rate = getattr(props, "clock_rate", None)
    if clock_rate:
        details["clock_rate_khz"] = str(clock_rate)
    details["compute_capability"] = f"{props.major}.{props.minor}"
    return DeviceInfo(
        kind="cuda",
        backend=backend,
        name=str(props.name),
        torch_device="cuda",
        last_level_cache_bytes=l2,
        inner_cache_bytes=0.0,
        memory_capacity_bytes=float(props.total_memory),
        compute_units=int(props.multi_processor_count),
        threads=torch.get_num_threads(),
        details=details,
    )


def check_dtype(device: DeviceInfo, name: str) -> None:
    """Refuse dtypes the device cannot multiply, with one clear message."""
    torch_dtype(name)  # refuses a dtype torch does not have
    if name == "fp8":
        torch = import_torch()
        if not device.is_gpu:
            raise MoesimError("--dtype", "fp8 GEMMs are not supported on cpu", "use fp32 or bf16 on cpu")
        major, minor = torch.cuda.get_device_capability(0)
        if (major, minor) < (8, 9):
            raise MoesimError(
                "--dtype", f"fp8 needs compute capability ≥ 8.9, this GPU has {major}.{minor}", "drop fp8"
            )


@dataclass(frozen=True)
class Sample:
    """Median and spread of repeated timings of one call, in seconds."""

    median_s: float
    iqr_s: float
    n: int

    @property
    def relative_spread(self) -> float:
        return self.iqr_s / self.median_s if self.median_s > 0 else 0.0


def summarise(times_s: list[float]) -> Sample:
    """Median and inter-quartile range: robust to the one-sided outliers (preemption) timing has."""
    ordered = sorted(times_s)
    if len(ordered) >= 4:
        q = statistics.quantiles(ordered, n=4)
        iqr = q[2] - q[0]
    else:
        iqr = ordered[-1] - ordered[0]
    return Sample(statistics.median(ordered), iqr, len(ordered))


# Bounds of the spin that keeps the device busy ahead of a timed batch (seconds).
MIN_LEAD_S = 2e-4
MAX_LEAD_S = 0.2
# One retry at most: a batch the host cannot issue within a spin twice its measured issue time is blocked on
# the device (a host sync inside it, or a full launch queue), and longer spins would only cost wall time.
LEAD_RETRIES = 1
LEAD_FACTOR = 1.25  # spin this many times the host issue time of the previous batch


def lead_seconds(last_issue_s: float) -> float:
    """How long the device must stay busy ahead of a batch the host took `last_issue_s` to issue."""
    return min(max(LEAD_FACTOR * last_issue_s, MIN_LEAD_S), MAX_LEAD_S)


def cpu_clock_ns(threads: int) -> Callable[[], int]:
    """The CPU clock: this thread's CPU time with one torch thread (every op runs on it), else wall time."""
    return time.thread_time_ns if threads == 1 else time.perf_counter_ns


def cache_flush_bytes(device: DeviceInfo, llc_multiple: float = 2.0) -> int:
    """Bytes a read streams to evict the caches: `llc_multiple` × the last-level cache (64 MiB when unknown),
    at least 32 MiB. Calibration's cold reads use twice the cache; validation, flushing before every timed
    step, one cache's worth (a read of the cache's size replaces an LRU cache's contents)."""
    return int(max(llc_multiple * (device.last_level_cache_bytes or 64 * 2**20), 32 * 2**20))


class Timer:
    """Times callables on one device: device time via CUDA events on a GPU, the CPU clock on a CPU."""

    def __init__(self, device: DeviceInfo, flush_bytes: int = 0) -> None:
        self.device = device
        self.torch = import_torch()
        self.flush_bytes = flush_bytes or cache_flush_bytes(device)
        self._flush_buffer: Any = None
        self.clock_ns = cpu_clock_ns(device.threads) if not device.is_gpu else time.perf_counter_ns
        self._lead_s = MIN_LEAD_S
        self._cycles_per_s = 0.0
        self.lead_failures = 0  # timed batches whose start the device reached before the host finished

    @property
    def clock_name(self) -> str:
        if self.device.is_gpu:
            return "device time (CUDA events behind a spin kernel)"
        return "thread CPU time" if self.clock_ns is time.thread_time_ns else "wall clock"

    def _spin_cycles_per_s(self) -> float:
        """GPU clock cycles per second of torch.cuda._sleep, measured once."""
        if self._cycles_per_s <= 0:
            torch = self.torch
            cycles = 1_000_000
            torch.cuda._sleep(cycles)  # warm-up: the first call loads the kernel
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            torch.cuda._sleep(cycles)
            end.record()
            end.synchronize()
            self._cycles_per_s = cycles / max(start.elapsed_time(end) * 1e-3, 1e-6)
        return self._cycles_per_s

    def busy_ahead(self, seconds: float) -> None:
        """Queue device work lasting about `seconds` (a spin kernel); nothing to do on a CPU."""
        if self.can_spin and seconds > 0:
            self.torch.cuda._sleep(int(seconds * self._spin_cycles_per_s()))

    @property
    def can_spin(self) -> bool:
        """Whether this device has a spin kernel to run ahead of a timed batch (torch.cuda._sleep)."""
        return self.device.is_gpu and hasattr(self.torch.cuda, "_sleep")

    def sync(self) -> None:
        if self.device.is_gpu:
            self.torch.cuda.synchronize()

    def time_once(
        self, fn: Callable[[], Any], inner: int = 1, before: Callable[[], Any] | None = None
    ) -> float:
        """Seconds per call of `fn`, run `inner` times back to back after `before` (untimed).

        On a GPU this is device time: a spin kernel queued before the start event keeps the device busy
        until the host has issued the whole batch, so the kernels run back to back with no host launch
        time between the events. The start event still pending when the host finishes proves it; if
        not, the batch is retimed once with a spin twice the issue time just seen (LEAD_RETRIES), then
        counted in `lead_failures`. One spin covers the whole batch of `inner` calls, so its wall cost is
        about LEAD_FACTOR × the batch's host issue time, paid once per batch, not per call.
        """
        if not self.device.is_gpu:
            if before is not None:
                before()
            t0 = self.clock_ns()
            for _ in range(inner):
                fn()
            return (self.clock_ns() - t0) * 1e-9 / inner
        torch = self.torch
        elapsed = 0.0
        for attempt in range(LEAD_RETRIES + 1):
            if before is not None:
                before()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            issue0 = time.perf_counter_ns()
            self.busy_ahead(self._lead_s)
            start.record()
            for _ in range(inner):
                fn()
            end.record()
            covered = not start.query()  # the device had not reached the batch when the host was done
            issue_s = (time.perf_counter_ns() - issue0) * 1e-9
            end.synchronize()
            elapsed = start.elapsed_time(end) * 1e-3 / inner
            grown = lead_seconds(issue_s)
            self._lead_s = grown if covered else min(max(2.0 * issue_s, 2.0 * self._lead_s), MAX_LEAD_S)
            if covered or not self.can_spin:
                if not covered:
                    self.lead_failures += 1
                return elapsed
            if attempt == LEAD_RETRIES:
                self.lead_failures += 1
                # Blocked, not slow: don't let the next batch inherit a spin this batch could not use.
                self._lead_s = MIN_LEAD_S
        return elapsed

    def measure(
        self,
        fn: Callable[[], Any],
        inner: int = 1,
        repeats: int = 5,
        warmup: int = 2,
        before: Callable[[], Any] | None = None,
    ) -> Sample:
        """Median and spread of `repeats` timings after `warmup` untimed runs."""
        for _ in range(warmup):
            fn()
        self.sync()
        return summarise([self.time_once(fn, inner, before) for _ in range(repeats)])

    def host_time(self, fn: Callable[[], Any], inner: int) -> float:
        """Host wall seconds per call to *issue* `fn` `inner` times (no sync inside the timed region)."""
        self.sync()
        t0 = self.clock_ns()
        for _ in range(inner):
            fn()
        elapsed = (self.clock_ns() - t0) * 1e-9 / inner
        self.sync()
        return elapsed

    def flush(self) -> None:
        """Evict the caches by writing a buffer at least twice the last-level cache."""
        torch = self.torch
        if self._flush_buffer is None:
            self._flush_buffer = torch.ones(
                self.flush_bytes // 4, dtype=torch.float32, device=self.device.torch_device
            )
        # A read, not a write: it evicts without leaving dirty lines whose write-back the next timing pays.
        torch.sum(self._flush_buffer)
        self.sync()


def provenance_software(device: DeviceInfo, dtypes: list[str]) -> dict[str, str]:
    """What the numbers were measured with (Vidur's lesson: backends change the numbers)."""
    from moesim import __version__

    software = dict(device.details)
    software.update(
        {
            "moesim": __version__,
            "device": device.name,
            "backend": device.backend,
            "dtypes": ",".join(dtypes),
            "host": socket.gethostname(),
            "platform": platform.platform(),
            "threads": str(device.threads),
        }
    )
    return software


def today() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
