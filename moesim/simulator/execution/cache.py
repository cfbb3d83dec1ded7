"""The last-level cache (L2 on GPUs) as an LRU stack measured in bytes, carried kernel to kernel in a step.

Semantics, shared exactly by the event timer (this stateful object) and the fast path (stack distances):

- a tensor is a buffer with one footprint per step (the largest access to it: a kernel touching part of
  a buffer still refreshes it);
- every access (a tensor read, or a kernel's written tensor) moves the tensor to the most-recently-used end
  with min(footprint, capacity) bytes; the least-recently-used bytes are evicted, partially if need be;
- the first read of a tensor in a kernel hits for the bytes still resident, the rest comes from memory;
- repeats within one kernel (`TensorRead.reads` > 1) hit for the share of the working set that fits:
  min(1, capacity / working_set);
- written bytes land in the cache up to its capacity; the excess spills to memory.

A tensor's residency at an access is therefore clamp(capacity − y, 0, min(footprint, capacity)), with y the
footprints of the distinct other tensors touched since its last access (its LRU stack distance).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

import numpy as np

from moesim.simulator.plan.kernels import Kernel, TensorRead


def repeat_traffic(
    size_bytes: np.ndarray | float,
    reads: np.ndarray | float,
    working_set_bytes: np.ndarray | float,
    capacity_bytes: float,
) -> tuple[np.ndarray, np.ndarray]:
    """(cache bytes, memory bytes) of the (reads − 1) repeats of a tensor read within one kernel."""
    size = np.asarray(size_bytes, dtype=float)
    repeats = np.maximum(np.asarray(reads, dtype=float) - 1.0, 0.0) * size
    working = np.asarray(working_set_bytes, dtype=float)
    working = np.where(working > 0, working, size)
    fits = np.where(working > 0, np.minimum(1.0, capacity_bytes / np.maximum(working, 1e-30)), 1.0)
    hits = repeats * fits
    return hits, repeats - hits


def write_traffic(write_bytes: np.ndarray | float, capacity_bytes: float) -> tuple[np.ndarray, np.ndarray]:
    """(cache bytes, memory bytes) of a kernel's writes: absorbed by the cache up to its capacity."""
    written = np.asarray(write_bytes, dtype=float)
    cached = np.minimum(written, capacity_bytes)
    return cached, written - cached


def footprints(kernels: Iterable[Kernel]) -> dict[str, float]:
    """Each tensor's footprint in a step: the largest of its accesses."""
    out: dict[str, float] = {}
    for kernel in kernels:
        for read in kernel.reads:
            if read.size_bytes > out.get(read.tensor, 0.0):
                out[read.tensor] = read.size_bytes
        if kernel.write_tensor and kernel.write_bytes > out.get(kernel.write_tensor, 0.0):
            out[kernel.write_tensor] = kernel.write_bytes
    return out


class CacheState:
    """LRU-by-bytes cache contents: tensor name → resident bytes, least recently used first."""

    def __init__(self, capacity_bytes: float, footprints: dict[str, float] | None = None) -> None:
        self.capacity_bytes = max(float(capacity_bytes), 0.0)
        self.footprints = footprints or {}
        self._resident: OrderedDict[str, float] = OrderedDict()
        self._total = 0.0

    def resident(self, tensor: str) -> float:
        """Bytes of `tensor` in the cache now."""
        return self._resident.get(tensor, 0.0)

    def touch(self, tensor: str, size_bytes: float) -> float:
        """Access `tensor` (now `size_bytes` big); returns its bytes resident before the access."""
        before = self._resident.pop(tensor, 0.0)
        self._total -= before
        inserted = min(max(float(size_bytes), self.footprints.get(tensor, 0.0)), self.capacity_bytes)
        if inserted > 0:
            self._resident[tensor] = inserted
            self._total += inserted
        if self._total - self.capacity_bytes > 1e-9:  # `_evict`'s own test, without the call when it fits
            self._evict()
        return before

    def replay(self, kernel: Kernel) -> None:
        """The accesses of `kernel` (its reads in order, then its write) without their traffic: the state
        `kernel_traffic` leaves, for warming the cache with a step."""
        for read in kernel.reads:
            self.touch(read.tensor, read.size_bytes)
        if kernel.write_tensor:
            self.touch(kernel.write_tensor, kernel.write_bytes)

    def _evict(self) -> None:
        excess = self._total - self.capacity_bytes
        while excess > 1e-9 and self._resident:
            name, size = next(iter(self._resident.items()))
            if size <= excess:
                del self._resident[name]
                self._total -= size
                excess -= size
            else:
                self._resident[name] = size - excess
                self._total -= excess
                excess = 0.0

    def read(self, read: TensorRead) -> tuple[float, float]:
        """(cache bytes, memory bytes) of one TensorRead, updating the contents."""
        size = read.size_bytes
        resident = self.touch(read.tensor, size)
        first_hit = min(resident, size)
        if read.reads <= 1.0:
            return first_hit, size - first_hit
        # repeat_traffic for one read, in plain floats (this runs once per tensor read in the event timer)
        repeats = (read.reads - 1.0) * size
        working = read.working_set_bytes if read.working_set_bytes > 0 else size
        fits = min(1.0, self.capacity_bytes / working) if working > 0 else 1.0
        return first_hit + repeats * fits, size - first_hit + repeats * (1.0 - fits)

    def kernel_traffic(self, kernel: Kernel) -> tuple[float, float]:
        """(cache bytes, memory bytes) one kernel moves: its reads in order, then its write."""
        cache_bytes = 0.0
        memory_bytes = 0.0
        for read in kernel.reads:
            hit, miss = self.read(read)
            cache_bytes += hit
            memory_bytes += miss
        if kernel.write_bytes > 0:
            w_cache = min(kernel.write_bytes, self.capacity_bytes)  # write_traffic, in plain floats
            cache_bytes += w_cache
            memory_bytes += kernel.write_bytes - w_cache
        if kernel.write_tensor:
            self.touch(kernel.write_tensor, kernel.write_bytes)
        return cache_bytes, memory_bytes
