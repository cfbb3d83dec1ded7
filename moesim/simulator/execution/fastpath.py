"""The closed-form fast path: a step's time from its plan with numpy only, no discrete-event simulation.

It evaluates the same plan, cache semantics and cost formulas as the event timer:

- cache traffic from LRU stack distances computed for every tensor access at once (exactly the event timer's
  `CacheState`, warm from the previous identical step);
- kernel times from `cost.kernel_times_s` over arrays;
- one stream: start_i = max(issue_i, end_{i−1}) + gap, so the step ends at
  max_i (issue_i + Σ_{j≥i} (gap + d_j)) — the event timer's recurrence in closed form, hence equal to it;
- side streams (shared experts beside routed ones): a fork–join region takes
  max(main branch, side branch, both branches' memory time + the lighter branch's fixed costs), the
  event timer's bandwidth sharing in one line.
  This is the one approximation; it is within a few percent of the event timer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from moesim.simulator.execution.cache import CacheState, repeat_traffic, write_traffic
from moesim.simulator.execution.cost import CostParams, kernel_times_s
from moesim.simulator.execution.launch import LaunchParams
from moesim.simulator.hardware.profile import HardwareProfile
from moesim.simulator.plan.kernels import CATEGORIES, Kernel
from moesim.simulator.plan.step import LAYER_PREFIX, StepPlan

CATEGORY_INDEX = {name: i for i, name in enumerate(CATEGORIES)}
IDLE = CATEGORY_INDEX["launch_idle"]
# Above this many tensors that are touched more than once per step (per-token plans), the exact sequential
# cache pass is faster than one vectorised sweep per tensor.
MAX_MULTI_TENSORS = 96


@dataclass(frozen=True)
class KernelArrays:
    """A plan's kernels and tensor accesses as flat arrays (accesses: each kernel's reads, then its write)."""

    flops: np.ndarray
    m_tokens: np.ndarray
    experts: np.ndarray  # distinct experts of a grouped expert GEMM, 0 for other kernels
    dtype_index: np.ndarray  # index into `dtypes`
    dtypes: list[str]
    category: np.ndarray
    stream: np.ndarray
    join: np.ndarray
    acc_kernel: np.ndarray
    acc_tensor: np.ndarray
    acc_size: np.ndarray
    acc_reads: np.ndarray
    acc_working: np.ndarray
    acc_write: np.ndarray

    @property
    def n_kernels(self) -> int:
        return int(self.flops.size)


_K_COLUMNS = 7  # flops, m_tokens, category, stream, join, dtype index, experts
_A_COLUMNS = 7  # kernel, tensor id, size, reads, working set, is write, per-layer tensor


def _template_arrays(
    kernels: tuple[Kernel, ...], names: dict[str, int], dtypes: dict[str, int]
) -> tuple[np.ndarray, np.ndarray]:
    krows: list[list[float]] = []
    arows: list[list[float]] = []
    for index, kernel in enumerate(kernels):
        dtype = dtypes.setdefault(kernel.dtype, len(dtypes))
        krows.append(
            [
                kernel.flops,
                kernel.m_tokens,
                CATEGORY_INDEX[kernel.category],
                kernel.stream,
                float(kernel.join),
                dtype,
                kernel.experts,
            ]
        )
        for read in kernel.reads:
            tid = names.setdefault(read.tensor, len(names))
            arows.append(
                [
                    index,
                    tid,
                    read.size_bytes,
                    read.reads,
                    read.working_set_bytes,
                    0.0,
                    read.tensor.startswith(LAYER_PREFIX),
                ]
            )
        if kernel.write_bytes > 0 or kernel.write_tensor:
            tid = names.setdefault(kernel.write_tensor, len(names)) if kernel.write_tensor else -1
            arows.append(
                [index, tid, kernel.write_bytes, 1.0, 0.0, 1.0, kernel.write_tensor.startswith(LAYER_PREFIX)]
            )
    return (
        np.asarray(krows, dtype=float).reshape(-1, _K_COLUMNS),
        np.asarray(arows, dtype=float).reshape(-1, _A_COLUMNS),
    )


def plan_arrays(plan: StepPlan) -> KernelArrays:
    """Flatten a plan (sharing the work of identical layer templates) into arrays."""
    names: dict[str, int] = {}
    dtypes: dict[str, int] = {}
    cache: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    kparts: list[np.ndarray] = []
    aparts: list[np.ndarray] = []
    for segment in plan.segments:
        key = id(segment.kernels)
        if key not in cache:
            cache[key] = _template_arrays(segment.kernels, names, dtypes)
        kparts.append(cache[key][0])
        aparts.append(cache[key][1])
    k = np.concatenate(kparts) if kparts else np.zeros((0, _K_COLUMNS))
    acc = np.concatenate(aparts) if aparts else np.zeros((0, _A_COLUMNS))
    k_sizes = np.array([part.shape[0] for part in kparts])
    a_sizes = np.array([part.shape[0] for part in aparts])
    kernel_offsets = np.concatenate([[0], np.cumsum(k_sizes)[:-1]]) if k_sizes.size else k_sizes
    layers = np.array([segment.layer for segment in plan.segments])
    acc_kernel = acc[:, 0].astype(np.int64) + np.repeat(kernel_offsets, a_sizes).astype(np.int64)
    raw_ids = acc[:, 1].astype(np.int64)
    per_layer = acc[:, 6] > 0
    raw_ids = np.where(per_layer, raw_ids + (np.repeat(layers, a_sizes) + 1) * (len(names) + 1), raw_ids)
    anonymous = raw_ids < 0
    _, dense_ids = np.unique(raw_ids, return_inverse=True)
    dense_ids = dense_ids.reshape(-1).astype(np.int64)
    if anonymous.any():  # anonymous writes each get their own id, so they never hit
        dense_ids[anonymous] = int(dense_ids.max()) + 1 + np.arange(int(anonymous.sum()))
    return KernelArrays(
        flops=k[:, 0],
        m_tokens=k[:, 1],
        experts=k[:, 6],
        dtype_index=k[:, 5].astype(np.int64),
        dtypes=list(dtypes),
        category=k[:, 2].astype(np.int64),
        stream=k[:, 3].astype(np.int64),
        join=k[:, 4] > 0,
        acc_kernel=acc_kernel,
        acc_tensor=dense_ids,
        acc_size=acc[:, 2],
        acc_reads=acc[:, 3],
        acc_working=acc[:, 4],
        acc_write=acc[:, 5] > 0,
    )


@dataclass(frozen=True)
class _StackStructure:
    """What the stack distances of an access sequence need beyond the sizes: it depends on the order of
    tensor ids only, so plans of one model at different batch sizes share it."""

    previous: np.ndarray  # previous access (in the doubled sequence) of each access of the second copy
    single: np.ndarray  # accesses (doubled) of tensors touched once per step
    pair_rows: np.ndarray  # (row j, column q): tensor of access q is counted once in access j's distance
    pair_cols: np.ndarray


_STRUCTURES: dict[bytes, _StackStructure | None] = {}
_MAX_CACHED_STRUCTURES = 256


def _stack_structure(tensor: np.ndarray) -> _StackStructure | None:
    key = tensor.tobytes()
    if key in _STRUCTURES:
        return _STRUCTURES[key]
    n = tensor.size
    counts = np.bincount(tensor)
    multi = np.nonzero(counts > 1)[0]
    structure: _StackStructure | None = None
    if multi.size <= MAX_MULTI_TENSORS:
        ids2 = np.concatenate([tensor, tensor])
        positions = np.arange(2 * n)
        order = np.lexsort((positions, ids2))
        sorted_ids = ids2[order]
        prev = np.full(2 * n, -1, dtype=np.int64)
        same = sorted_ids[1:] == sorted_ids[:-1]
        prev[order[1:][same]] = order[:-1][same]
        j = np.arange(n, 2 * n)
        p = prev[j]
        rows = np.zeros(0, dtype=np.int64)
        cols = np.zeros(0, dtype=np.int64)
        if multi.size:
            # last[x, t]: position of tensor x's latest access before access t (−1 if none).
            hits = ids2[None, :] == multi[:, None]
            last = np.maximum.accumulate(np.where(hits, positions[None, :], -1), axis=1)[:, j - 1]
            counted = (last > p[None, :]) & (ids2[j][None, :] != multi[:, None])
            x_idx, rows = np.nonzero(counted)
            cols = last[x_idx, rows]
        structure = _StackStructure(p, counts[ids2] == 1, rows, cols)
    if len(_STRUCTURES) >= _MAX_CACHED_STRUCTURES:
        _STRUCTURES.pop(next(iter(_STRUCTURES)))
    _STRUCTURES[key] = structure
    return structure


def residency(tensor: np.ndarray, size: np.ndarray, capacity: float) -> np.ndarray | None:
    """Bytes of each access's tensor resident just before it, in a steady state of repeated steps.

    LRU stack distance: resident = clamp(capacity − y, 0, min(footprint, capacity)), y = footprints of the
    distinct other tensors touched since the tensor's previous access (in this step or the previous one);
    a tensor's footprint is its largest access. Returns None when too many tensors are touched repeatedly
    for the vectorised form to pay off.
    """
    n = tensor.size
    if n == 0:
        return np.zeros(0)
    structure = _stack_structure(tensor)
    if structure is None:
        return None
    footprint = np.zeros(int(tensor.max()) + 1)
    np.maximum.at(footprint, tensor, size)
    inserted = np.minimum(footprint[np.concatenate([tensor, tensor])], capacity)
    p = structure.previous
    cumulative = np.concatenate([[0.0], np.cumsum(np.where(structure.single, inserted, 0.0))])
    y = cumulative[n : 2 * n] - cumulative[p + 1]
    if structure.pair_rows.size:
        y += np.bincount(structure.pair_rows, weights=inserted[structure.pair_cols], minlength=n)
    return np.clip(capacity - y, 0.0, inserted[p])


def kernel_traffic(arrays: KernelArrays, capacity: float) -> tuple[np.ndarray, np.ndarray]:
    """(cache bytes, memory bytes) of every kernel, warm from the previous identical step."""
    n_k = arrays.n_kernels
    resident = residency(arrays.acc_tensor, arrays.acc_size, capacity)
    if resident is None:
        return _sequential_traffic(arrays, capacity)
    size = arrays.acc_size
    first_hit = np.minimum(resident, size)
    rep_hit, rep_miss = repeat_traffic(size, arrays.acc_reads, arrays.acc_working, capacity)
    w_cache, w_memory = write_traffic(size, capacity)
    is_write = arrays.acc_write
    cache = np.where(is_write, w_cache, first_hit + rep_hit)
    memory = np.where(is_write, w_memory, size - first_hit + rep_miss)
    return (
        np.bincount(arrays.acc_kernel, weights=cache, minlength=n_k),
        np.bincount(arrays.acc_kernel, weights=memory, minlength=n_k),
    )


def _sequential_traffic(arrays: KernelArrays, capacity: float) -> tuple[np.ndarray, np.ndarray]:
    footprint = np.zeros(int(arrays.acc_tensor.max()) + 1 if arrays.acc_tensor.size else 0)
    np.maximum.at(footprint, arrays.acc_tensor, arrays.acc_size)
    state = CacheState(capacity, {str(i): float(f) for i, f in enumerate(footprint)})
    n_k = arrays.n_kernels
    cache = np.zeros(n_k)
    memory = np.zeros(n_k)
    rep_hit, rep_miss = repeat_traffic(arrays.acc_size, arrays.acc_reads, arrays.acc_working, capacity)
    w_cache, w_memory = write_traffic(arrays.acc_size, capacity)
    rows = list(
        zip(
            arrays.acc_kernel.tolist(),
            arrays.acc_tensor.tolist(),
            arrays.acc_size.tolist(),
            arrays.acc_write.tolist(),
            strict=True,
        )
    )
    for record in (False, True):
        for i, (k, tid, size, is_write) in enumerate(rows):
            resident = state.touch(str(tid), size)
            if not record:
                continue
            if is_write:
                cache[k] += w_cache[i]
                memory[k] += w_memory[i]
            else:
                hit = min(resident, size)
                cache[k] += hit + rep_hit[i]
                memory[k] += size - hit + rep_miss[i]
    return cache, memory


@dataclass(frozen=True)
class KernelCosts:
    """Per-kernel device seconds (total, compute, memory) and traffic of one plan."""

    total_s: np.ndarray
    compute_s: np.ndarray
    memory_s: np.ndarray
    cache_bytes: np.ndarray
    hbm_bytes: np.ndarray


def cost_plan(arrays: KernelArrays, params: CostParams) -> KernelCosts:
    """Cache traffic and device time of every kernel of a plan."""
    cache, hbm = kernel_traffic(arrays, params.cache_capacity_bytes)
    peaks = np.array([params.peak(d) for d in arrays.dtypes] or [0.0])[arrays.dtype_index]
    grouped = params.grouped_terms(arrays.experts, arrays.dtypes, arrays.dtype_index)
    total, compute, memory = kernel_times_s(arrays.flops, arrays.m_tokens, peaks, hbm, cache, params, grouped)
    return KernelCosts(total, compute, memory, cache, hbm)


@dataclass(frozen=True)
class FastStep:
    """A step's time from the closed form."""

    step_s: float
    breakdown_s: dict[str, float]
    hbm_bytes: float
    cache_bytes: float
    n_kernels: int


def schedule(
    durations: np.ndarray,
    memory_s: np.ndarray,
    stream: np.ndarray,
    join: np.ndarray,
    launch: LaunchParams,
    is_gemm: np.ndarray | None = None,
) -> tuple[float, np.ndarray]:
    """Step seconds and the exposed device seconds of each kernel under the launch model."""
    n = durations.size
    exposed = durations.copy()
    gaps = np.full(n, launch.gap_s)
    side = np.nonzero(stream != 0)[0]
    if side.size:
        exposed, gaps = _fold_side_streams(durations, memory_s, stream, join, gaps, launch.gap_s)
    issue = launch.issue_times(n, is_gemm)
    per = gaps + exposed
    suffix = np.cumsum(per[::-1])[::-1]
    end = float(np.max(issue + suffix)) if n else launch.first_issue_s
    return end + launch.sync_s, exposed


def _fold_side_streams(
    durations: np.ndarray,
    memory_s: np.ndarray,
    stream: np.ndarray,
    join: np.ndarray,
    gaps: np.ndarray,
    gap_s: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Collapse each side-stream run onto the main stream: its fork–join region takes
    max(main branch, side branch, both branches' memory time plus the lighter branch's fixed costs); a run
    never joined only adds what sticks
    out past the main stream's end."""
    n = durations.size
    exposed = durations.copy()
    gaps = gaps.copy()
    on_side = stream != 0
    edges = np.diff(np.concatenate([[0], on_side.astype(np.int8), [0]]))
    run_start = np.nonzero(edges == 1)[0]
    run_end = np.nonzero(edges == -1)[0]  # exclusive
    join_idx = np.nonzero(join)[0]
    pos = np.searchsorted(join_idx, run_end)
    joined = pos < join_idx.size
    region_end = np.where(
        joined, join_idx[np.minimum(pos, max(join_idx.size - 1, 0))] if join_idx.size else n, n
    )
    busy = np.concatenate([[0.0], np.cumsum(np.where(on_side, 0.0, durations + gap_s))])
    side_busy = np.concatenate([[0.0], np.cumsum(np.where(on_side, durations + gap_s, 0.0))])
    mem = np.concatenate([[0.0], np.cumsum(memory_s)])
    t_side = side_busy[run_end] - side_busy[run_start]
    t_main = busy[region_end] - busy[run_end]
    m_side = mem[run_end] - mem[run_start]
    m_main = mem[region_end] - mem[run_end]
    # Both branches' bytes share the bandwidth; the fixed latencies and gaps of the lighter branch stay exposed.
    shared = m_side + m_main + np.minimum(t_main - m_main, t_side - m_side)
    region = np.where(joined, np.maximum(np.maximum(t_main, t_side), shared), np.maximum(t_main, t_side))
    exposed[on_side] = 0.0
    gaps[on_side] = 0.0
    exposed[run_end - 1] = region - t_main
    return exposed, gaps


def fast_step(
    plan: StepPlan,
    hardware: HardwareProfile,
    launch: str = "graph",
    params: CostParams | None = None,
    include_launch_and_sync: bool = True,
    external_time_s: np.ndarray | None = None,
) -> FastStep:
    """Step time and breakdown of `plan` in closed form (equals the event timer on one stream).

    `external_time_s` (one entry per kernel, NaN where absent) replaces the roofline of kernels timed
    elsewhere, such as collectives on their links; those kernels move no memory bytes.
    """
    params = params or CostParams.from_hardware(hardware)
    launch_params = LaunchParams.from_hardware(hardware, launch)
    if not include_launch_and_sync:
        launch_params = launch_params.without_launch_and_sync()
    arrays = plan_arrays(plan)
    costs = cost_plan(arrays, params)
    total, memory = costs.total_s, costs.memory_s
    if external_time_s is not None:
        external = ~np.isnan(external_time_s)
        total = np.where(external, external_time_s, total)
        memory = np.where(external, 0.0, memory)
    step_s, exposed = schedule(total, memory, arrays.stream, arrays.join, launch_params, arrays.m_tokens > 0)
    per_category = np.bincount(arrays.category, weights=exposed, minlength=len(CATEGORIES))
    per_category[IDLE] = max(0.0, step_s - float(np.sum(exposed)))
    return FastStep(
        step_s=step_s,
        breakdown_s={name: float(per_category[i]) for i, name in enumerate(CATEGORIES)},
        hbm_bytes=float(np.sum(costs.hbm_bytes)),
        cache_bytes=float(np.sum(costs.cache_bytes)),
        n_kernels=arrays.n_kernels,
    )
