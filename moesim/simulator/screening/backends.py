"""Where the chunks of designs run: this process, a local process pool, or Ray tasks on a Ray cluster.

All three run the same function on the same chunks — `evaluate_chunk` over designs already constrained, or
`constrain_and_evaluate`, which a screen uses so its workers also solve each design's constraints — and
return the outcomes in design order, so their tables are identical. Ray is an optional extra
(`pip install 'moesim[ray]'`), imported only when asked for; `address` None starts (or joins) a local Ray,
as `ray.init()` does.
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from moesim.errors import MoesimError

if TYPE_CHECKING:  # the CLI reads BACKENDS at start-up: the evaluation loads when a screen runs
    from moesim.simulator.screening.evaluate import ScreenSettings

BACKENDS = ("local", "ray")
# Chunks per worker: enough to balance uneven designs (big ones take longer) and to move the progress
# bar, few enough that per-task overhead (pickling the settings, a Ray task's ~1 ms) stays negligible.
CHUNKS_PER_WORKER = 4
MAX_CHUNK = 64
# The most designs of one (N, k) a chunk holds: their routing banks are sampled once per chunk's worker.
MAX_KEY_CHUNK = 256

Progress = Callable[[int], None]


class _Item(Protocol):
    @property
    def routing_key(self) -> tuple[int, int]: ...


class _Outcome(Protocol):
    @property
    def index(self) -> int: ...


Item = TypeVar("Item", bound=_Item)
Outcome = TypeVar("Outcome", bound=_Outcome)
Work = Callable[["ScreenSettings", list[Item]], list[Outcome]]


def _default_work() -> Work[Any, Any]:
    from moesim.simulator.screening.evaluate import evaluate_chunk

    return evaluate_chunk


def default_workers() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def chunked(tasks: Sequence[Item], workers: int) -> list[list[Item]]:
    """Chunks of about len / (workers × CHUNKS_PER_WORKER) designs (at most MAX_CHUNK), each holding whole
    groups of designs of one expert count and top-k: a worker samples the routing banks of an (N, k) once,
    so an (N, k) is split over chunks (and so, perhaps, over workers, each sampling it again) only when its
    designs outnumber MAX_KEY_CHUNK. Small groups are packed together. (Results go back in design order.)"""
    size = max(1, min(MAX_CHUNK, math.ceil(len(tasks) / (workers * CHUNKS_PER_WORKER))))
    ordered = sorted(tasks, key=lambda task: task.routing_key)  # stable
    chunks: list[list[Item]] = []
    packed: list[Item] = []  # whole small groups, up to `size` designs
    for _, members in itertools.groupby(ordered, key=lambda task: task.routing_key):
        group = list(members)
        if len(packed) + len(group) > size and packed:
            chunks.append(packed)
            packed = []
        if len(group) >= size:
            pieces = math.ceil(len(group) / MAX_KEY_CHUNK)
            bounds = [len(group) * i // pieces for i in range(pieces + 1)]  # sizes differ by at most one
            chunks.extend(group[a:b] for a, b in itertools.pairwise(bounds))
        else:
            packed.extend(group)
    if packed:
        chunks.append(packed)
    return chunks


def run_local(
    settings: ScreenSettings,
    tasks: Sequence[Item],
    workers: int,
    progress: Progress | None = None,
    work: Work[Item, Outcome] | None = None,
) -> list[Outcome]:
    """A process pool of `workers` (1: in this process, no pool) running `work` (default `evaluate_chunk`)
    on chunks of `tasks`."""
    if workers < 1:
        raise MoesimError("--workers", f"must be ≥ 1, got {workers}")
    chunks = chunked(tasks, workers)
    evaluate = work or _default_work()
    results: list[Outcome] = []
    if workers == 1 or len(chunks) == 1:
        for chunk in chunks:
            results.extend(evaluate(settings, chunk))
            if progress:
                progress(len(chunk))
        return sorted(results, key=lambda r: r.index)
    from concurrent.futures import ProcessPoolExecutor, as_completed  # lazily: the CLI reads BACKENDS

    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = {pool.submit(evaluate, settings, chunk): len(chunk) for chunk in chunks}
        for future in as_completed(futures):
            results.extend(future.result())
            if progress:
                progress(futures[future])
    return sorted(results, key=lambda r: r.index)


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise MoesimError(
            "--backend", "ray is not installed", "pip install 'moesim[ray]', or use --backend local"
        ) from None
    return ray


def run_ray(
    settings: ScreenSettings,
    tasks: Sequence[Item],
    address: str | None = None,
    progress: Progress | None = None,
    workers: int | None = None,
    work: Work[Item, Outcome] | None = None,
) -> list[Outcome]:
    """Ray tasks, one per chunk, on the cluster at `address` (None: the running Ray, or a new local one
    with `workers` CPUs). A Ray this call starts (or joins) it shuts down (or leaves) when done. Joining a
    cluster ships this moesim package to its workers (Ray's `py_modules`); its dependencies (numpy, scipy,
    simpy) must be installed there."""
    evaluate = work or _default_work()
    ray = _ray()
    started = not ray.is_initialized()
    if started and address is None:
        ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
    elif started:  # a cluster's workers run this driver's moesim, shipped with the job (same figures)
        import moesim

        ray.init(address=address, runtime_env={"py_modules": [moesim]}, log_to_driver=False)
    try:
        cpus = int(ray.cluster_resources().get("CPU", 1))
        remote = ray.remote(num_cpus=1)(evaluate)
        shared = ray.put(settings)
        sizes = {remote.remote(shared, chunk): len(chunk) for chunk in chunked(tasks, workers or cpus)}
        results: list[Outcome] = []
        pending = list(sizes)
        while pending:  # ray.wait hands back the refs not yet done: each chunk is fetched exactly once
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                results.extend(ray.get(ref))
                if progress:
                    progress(sizes[ref])
    finally:
        if started:
            ray.shutdown()
    return sorted(results, key=lambda r: r.index)


def run_backend(
    backend: str,
    settings: ScreenSettings,
    tasks: Sequence[Item],
    *,
    workers: int | None = None,
    address: str | None = None,
    progress: Progress | None = None,
    work: Work[Item, Outcome] | None = None,
) -> list[Outcome]:
    if workers is not None and workers < 1:
        raise MoesimError("--workers", f"must be ≥ 1, got {workers}")
    if backend == "local":
        return run_local(settings, tasks, workers or default_workers(), progress, work)
    if backend == "ray":
        return run_ray(settings, tasks, address, progress, workers, work)
    raise MoesimError("--backend", f"unknown backend {backend!r}", f"choose {' or '.join(BACKENDS)}")


__all__ = ["BACKENDS", "chunked", "default_workers", "run_backend", "run_local", "run_ray"]
