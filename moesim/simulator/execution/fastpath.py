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

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from moesim.simulator.execution.cache import CacheState, repeat_traffic, write_traffic
from moesim.simulator.execution.cost import CostParams, GroupedTerms, kernel_times_s
from moesim.simulator.execution.launch import LaunchParams
from moesim.simulator.hardware.profile import HardwareProfile
from moesim.simulator.hardware.sections import ATTENTION_KERNEL_KINDS, TRANSCENDENTAL_OPS
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
    attention_units: dict[str, np.ndarray]  # kind -> work units of attention kernels of that kind, else 0
    transcendental: dict[str, np.ndarray]  # op -> elements of element-wise kernels evaluating it, else 0
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


_K_VALUES = 3 + len(ATTENTION_KERNEL_KINDS) + len(TRANSCENDENTAL_OPS)


@dataclass(frozen=True)
class _TemplateParts:
    """One segment template's numbers (what changes with batch, draft length and design) apart from its
    structure (what kernels, streams and tensors it has: the same for every plan of one model)."""

    # (kernels, 3 + attention kinds + transcendental ops): flops, m_tokens, experts, units per kind, elements
    # per op
    kernel_values: np.ndarray
    access_values: np.ndarray  # (accesses, 3): size, reads, working set (accesses: reads, then the write)
    # Per kernel (category index, stream, join, dtype); per access (kernel, tensor name, is write).
    signature: tuple[tuple[tuple[int, int, bool, str], ...], tuple[tuple[int, str, bool], ...]]


_KIND_COLUMN = {kind: 3 + i for i, kind in enumerate(ATTENTION_KERNEL_KINDS)}
_OP_COLUMN = {op: 3 + len(ATTENTION_KERNEL_KINDS) + i for i, op in enumerate(TRANSCENDENTAL_OPS)}


def _template_parts(kernels: tuple[Kernel, ...]) -> _TemplateParts:
    # Flat lists of floats convert to arrays faster than rows of lists; the few attention and transcendental
    # numbers are set in afterwards.
    numbers: list[float] = []  # flops, m_tokens, experts of each kernel
    sparse: list[tuple[int, int, float]] = []  # (kernel, column, value)
    access: list[float] = []  # size, reads, working set of each access
    kstruct: list[tuple[int, int, bool, str]] = []
    astruct: list[tuple[int, str, bool]] = []
    for index, kernel in enumerate(kernels):
        numbers += (kernel.flops, kernel.m_tokens, kernel.experts)
        if kernel.attention_kind:
            column = _KIND_COLUMN.get(kernel.attention_kind)
            if column is not None:
                sparse.append((index, column, kernel.attention_units))
        if kernel.transcendental_op:
            column = _OP_COLUMN.get(kernel.transcendental_op)
            if column is not None:
                sparse.append((index, column, kernel.transcendental_elements))
        kstruct.append((CATEGORY_INDEX[kernel.category], kernel.stream, kernel.join, kernel.dtype))
        for read in kernel.reads:
            access += (read.size_bytes, read.reads, read.working_set_bytes)
            astruct.append((index, read.tensor, False))
        if kernel.write_bytes > 0 or kernel.write_tensor:
            access += (kernel.write_bytes, 1.0, 0.0)
            astruct.append((index, kernel.write_tensor, True))
    values = np.zeros((len(kernels), _K_VALUES))
    values[:, :3] = np.array(numbers, dtype=float).reshape(-1, 3)
    for index, column, value in sparse:
        values[index, column] = value
    return _TemplateParts(
        values, np.array(access, dtype=float).reshape(-1, 3), (tuple(kstruct), tuple(astruct))
    )


@dataclass(frozen=True)
class _PlanStructure:
    """What `plan_arrays` derives from a plan's structure alone: where each kernel's and access's numbers
    come from among the distinct templates' rows, and the tensor ids, streams and categories."""

    kernel_rows: np.ndarray  # row of each kernel in the distinct templates' stacked kernel values
    access_rows: np.ndarray
    dtypes: list[str]
    dtype_index: np.ndarray
    category: np.ndarray
    stream: np.ndarray
    join: np.ndarray
    acc_kernel: np.ndarray
    acc_tensor: np.ndarray
    acc_write: np.ndarray


_PLAN_STRUCTURES: dict[tuple[object, ...], _PlanStructure] = {}
_MAX_PLAN_STRUCTURES = 256


def _plan_structure(
    parts: Sequence[_TemplateParts], order: Sequence[int], layers: Sequence[int]
) -> _PlanStructure:
    """Tensor ids in order of first use over the distinct templates (a layer template's "L*." tensors are
    one tensor per layer; an anonymous write is its own tensor, never hit), dense from 0."""
    names: dict[str, int] = {}
    dtypes: dict[str, int] = {}
    # Per distinct template: kernels × (category, stream, join, dtype); accesses × (kernel, tensor id,
    # is write, per layer).
    kernel_cols: list[np.ndarray] = []
    access_cols: list[np.ndarray] = []
    for part in parts:
        kstruct, astruct = part.signature
        kernel_cols.append(
            np.array(
                [(c, s, float(j), dtypes.setdefault(d, len(dtypes))) for c, s, j, d in kstruct], dtype=float
            ).reshape(-1, 4)
        )
        rows = []
        for kernel, tensor, is_write in astruct:
            tid = -1 if is_write and not tensor else names.setdefault(tensor, len(names))
            rows.append((kernel, tid, float(is_write), tensor.startswith(LAYER_PREFIX)))
        access_cols.append(np.array(rows, dtype=float).reshape(-1, 4))
    k_offsets = np.concatenate([[0], np.cumsum([c.shape[0] for c in kernel_cols])])
    a_offsets = np.concatenate([[0], np.cumsum([c.shape[0] for c in access_cols])])
    kernel_rows = np.concatenate(
        [np.arange(k_offsets[i], k_offsets[i + 1]) for i in order] or [np.zeros(0)]
    ).astype(np.int64)
    access_rows = np.concatenate(
        [np.arange(a_offsets[i], a_offsets[i + 1]) for i in order] or [np.zeros(0)]
    ).astype(np.int64)
    k = np.concatenate(kernel_cols)[kernel_rows] if kernel_cols else np.zeros((0, 4))
    acc = np.concatenate(access_cols)[access_rows] if access_cols else np.zeros((0, 4))
    k_sizes = np.array([kernel_cols[i].shape[0] for i in order])
    a_sizes = np.array([access_cols[i].shape[0] for i in order])
    kernel_offsets = np.concatenate([[0], np.cumsum(k_sizes)[:-1]]) if k_sizes.size else k_sizes
    acc_kernel = acc[:, 0].astype(np.int64) + np.repeat(kernel_offsets, a_sizes).astype(np.int64)
    raw_ids = acc[:, 1].astype(np.int64)
    per_layer = acc[:, 3] > 0
    layer_of = np.repeat(np.array(layers), a_sizes)
    raw_ids = np.where(per_layer, raw_ids + (layer_of + 1) * (len(names) + 1), raw_ids)
    anonymous = raw_ids < 0
    _, dense_ids = np.unique(raw_ids, return_inverse=True)
    dense_ids = dense_ids.reshape(-1).astype(np.int64)
    if anonymous.any():  # anonymous writes each get their own id, so they never hit
        dense_ids[anonymous] = int(dense_ids.max()) + 1 + np.arange(int(anonymous.sum()))
    structure = _PlanStructure(
        kernel_rows=kernel_rows,
        access_rows=access_rows,
        dtypes=list(dtypes),
        dtype_index=k[:, 3].astype(np.int64),
        category=k[:, 0].astype(np.int64),
        stream=k[:, 1].astype(np.int64),
        join=k[:, 2] > 0,
        acc_kernel=acc_kernel,
        acc_tensor=dense_ids,
        acc_write=acc[:, 2] > 0,
    )
    for array in dataclasses.astuple(structure):  # shared by every plan of the structure: read-only
        if isinstance(array, np.ndarray):
            array.setflags(write=False)
    return structure


def plan_arrays(plan: StepPlan) -> KernelArrays:
    """Flatten a plan into arrays: each distinct layer template's numbers are read once, and the structure
    (tensor ids, streams, categories: equal for one model's plans at every batch and draft length) is
    worked out once per distinct structure and remembered."""
    by_id: dict[int, int] = {}
    parts: list[_TemplateParts] = []
    order: list[int] = []
    for segment in plan.segments:
        index = by_id.get(id(segment.kernels))
        if index is None:
            index = by_id[id(segment.kernels)] = len(parts)
            parts.append(_template_parts(segment.kernels))
        order.append(index)
    layers = tuple(segment.layer for segment in plan.segments)
    key = (tuple(part.signature for part in parts), tuple(order), layers)
    structure = _PLAN_STRUCTURES.get(key)
    if structure is None:
        structure = _plan_structure(parts, order, layers)
        if len(_PLAN_STRUCTURES) >= _MAX_PLAN_STRUCTURES:
            _PLAN_STRUCTURES.pop(next(iter(_PLAN_STRUCTURES)))
        _PLAN_STRUCTURES[key] = structure
    # np.take of whole rows: the same copy as fancy indexing, a third of its time
    k = np.take(np.concatenate([part.kernel_values for part in parts]), structure.kernel_rows, axis=0)
    acc = np.take(np.concatenate([part.access_values for part in parts]), structure.access_rows, axis=0)
    return KernelArrays(
        flops=k[:, 0],
        m_tokens=k[:, 1],
        experts=k[:, 2],
        attention_units={kind: k[:, 3 + i] for i, kind in enumerate(ATTENTION_KERNEL_KINDS)},
        transcendental={op: k[:, column] for op, column in _OP_COLUMN.items()},
        dtype_index=structure.dtype_index,
        dtypes=structure.dtypes,
        category=structure.category,
        stream=structure.stream,
        join=structure.join,
        acc_kernel=structure.acc_kernel,
        acc_tensor=structure.acc_tensor,
        acc_size=acc[:, 0],
        acc_reads=acc[:, 1],
        acc_working=acc[:, 2],
        acc_write=structure.acc_write,
    )


@dataclass(frozen=True)
class _StackStructure:
    """What the stack distances of an access sequence need beyond the sizes: it depends on the order of
    tensor ids only, so plans of one model at different batch sizes share it."""

    previous: np.ndarray  # previous access (in the doubled sequence) of each access of the second copy
    single: np.ndarray  # accesses (doubled) of tensors touched once per step
    pair_rows: np.ndarray  # (row j, column q): tensor of access q is counted once in access j's distance
    pair_cols: np.ndarray
    doubled: np.ndarray  # the tensor ids of the doubled sequence
    after_previous: np.ndarray  # previous + 1: where the cumulative footprints start counting
    tensors: int  # tensor ids are below this


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
        structure = _StackStructure(p, counts[ids2] == 1, rows, cols, ids2, p + 1, int(tensor.max()) + 1)
        for array in (p, structure.single, rows, cols, ids2, structure.after_previous):
            array.setflags(write=False)  # shared by every plan of the access sequence
    if len(_STRUCTURES) >= _MAX_CACHED_STRUCTURES:
        _STRUCTURES.pop(next(iter(_STRUCTURES)))
    _STRUCTURES[key] = structure
    return structure


def residency(tensor: np.ndarray, size: np.ndarray, capacity: float) -> np.ndarray | None:
    """Bytes of each access's tensor resident just before it, in a steady state of repeated steps.

    LRU stack distance: resident = clamp(capacity − y, 0, min(footprint, capacity)), y = footprints of the
    distinct other tensors touched since the tensor's previous access (in this step or the previous one);
    a tensor's footprint is its largest access. `size` is one row of access sizes, or a (plans × accesses)
    array of plans sharing the access sequence `tensor` (whose stack structure is then worked out once).
    Returns None when too many tensors are touched repeatedly for the vectorised form to pay off.
    """
    n = tensor.size
    if n == 0:
        return np.zeros(np.shape(size))
    structure = _stack_structure(tensor)
    if structure is None:
        return None
    if np.ndim(size) == 2:
        return _residency_rows(tensor, size, capacity, structure)
    return _residency_rows(tensor, size[None, :], capacity, structure)[0]


def _residency_rows(
    tensor: np.ndarray, size: np.ndarray, capacity: float, structure: _StackStructure
) -> np.ndarray:
    """`residency` of each row of `size` in one pass over (plans × accesses) arrays: the row-wise maxima,
    running sums (sequential along each row) and bin sums (in access order) add exactly as one row alone."""
    plans, n = size.shape
    footprint = np.zeros((plans, structure.tensors))
    offsets = structure.tensors * np.arange(plans)[:, None]
    np.maximum.at(footprint.reshape(-1), (tensor[None, :] + offsets).reshape(-1), size.reshape(-1))
    inserted = np.minimum(footprint, capacity)[:, structure.doubled]  # = min(footprint[doubled], capacity)
    p = structure.previous
    running = np.cumsum(np.where(structure.single, inserted, 0.0), axis=1)
    cumulative = np.concatenate([np.zeros((plans, 1)), running], axis=1)
    y = cumulative[:, n : 2 * n] - cumulative[:, structure.after_previous]
    if structure.pair_rows.size:
        pair_rows = np.broadcast_to(structure.pair_rows, (plans, structure.pair_rows.size))
        y += _row_bincount_2d(pair_rows, inserted[:, structure.pair_cols], n)
    return np.clip(capacity - y, 0.0, inserted[:, p])


def kernel_traffic(arrays: KernelArrays, capacity: float) -> tuple[np.ndarray, np.ndarray]:
    """(cache bytes, memory bytes) of every kernel, warm from the previous identical step."""
    cache, memory = _group_traffic(arrays, arrays.acc_size[None, :], capacity, [arrays])
    return cache[0], memory[0]


def _group_traffic(
    structure: KernelArrays, size: np.ndarray, capacity: float, members: Sequence[KernelArrays]
) -> tuple[np.ndarray, np.ndarray]:
    """(cache bytes, memory bytes) per kernel of plans sharing `structure`'s accesses; rows of `size`."""
    n_k = structure.n_kernels
    resident = residency(structure.acc_tensor, size, capacity)
    if resident is None:
        parts = [_sequential_traffic(member, capacity) for member in members]
        return np.array([c for c, _ in parts]), np.array([m for _, m in parts])
    reads = np.array([member.acc_reads for member in members])
    working = np.array([member.acc_working for member in members])
    first_hit = np.minimum(resident, size)
    rep_hit, rep_miss = repeat_traffic(size, reads, working, capacity)
    w_cache, w_memory = write_traffic(size, capacity)
    is_write = structure.acc_write
    cache = np.where(is_write, w_cache, first_hit + rep_hit)
    memory = np.where(is_write, w_memory, size - first_hit + rep_miss)
    kernel = np.broadcast_to(structure.acc_kernel, size.shape)
    return _row_bincount_2d(kernel, cache, n_k), _row_bincount_2d(kernel, memory, n_k)


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
    """Per-kernel device seconds (total, compute, memory) and traffic of one plan (or, as 2-D arrays, of
    a group of plans sharing one structure: one row per plan)."""

    total_s: np.ndarray
    compute_s: np.ndarray
    memory_s: np.ndarray
    cache_bytes: np.ndarray
    hbm_bytes: np.ndarray


def cost_plan(arrays: KernelArrays, params: CostParams) -> KernelCosts:
    """Cache traffic and device time of every kernel of a plan."""
    costs = _cost_group([arrays], params)
    return KernelCosts(*(field[0] for field in _fields(costs)))


def _fields(costs: KernelCosts) -> tuple[np.ndarray, ...]:
    return costs.total_s, costs.compute_s, costs.memory_s, costs.cache_bytes, costs.hbm_bytes


def _cost_group(members: Sequence[KernelArrays], params: CostParams) -> KernelCosts:
    """`cost_plan` of plans sharing one structure, one numpy pass over (plans × kernels) arrays."""
    first = members[0]
    size = np.array([member.acc_size for member in members])
    cache, hbm = _group_traffic(first, size, params.cache_capacity_bytes, members)
    flops = np.array([member.flops for member in members])
    m_tokens = np.array([member.m_tokens for member in members])
    terms = _group_terms(members, params) if _share_dtypes(members) else _member_terms(members, params)
    peaks, grouped, attention_s, gemm_curve, fraction, transcendental_s = terms
    total, compute, memory = kernel_times_s(
        flops,
        m_tokens,
        peaks,
        hbm,
        cache,
        params,
        grouped,
        attention_s,
        gemm_curve,
        fraction,
        transcendental_s,
    )
    return KernelCosts(total, compute, memory, cache, hbm)


# Per kernel: peak FLOP/s, grouped expert GEMM terms, attention seconds, GEMM curve, attention rate share,
# transcendental seconds (None where the pricing or the plans have none), each (plans × kernels).
_PricingTerms = tuple[
    np.ndarray,
    GroupedTerms | None,
    np.ndarray | None,
    np.ndarray | None,
    np.ndarray | None,
    np.ndarray | None,
]


def _share_dtypes(members: Sequence[KernelArrays]) -> bool:
    """Whether every member computes each kernel in the same dtype as the first (plans of one model do)."""
    first = members[0]
    return all(
        m.dtype_index is first.dtype_index
        or (m.dtypes == first.dtypes and np.array_equal(m.dtype_index, first.dtype_index))
        for m in members
    )


def _group_terms(members: Sequence[KernelArrays], params: CostParams) -> _PricingTerms:
    """The per-kernel pricing terms of plans sharing their kernels' dtypes, as (plans × kernels) arrays from
    one call each: the terms are element-wise in the kernels' numbers, so each row is its plan's own."""
    first = members[0]
    shape = (len(members), first.n_kernels)
    peak_row = np.array([params.peak(d) for d in first.dtypes] or [0.0])[first.dtype_index]
    peaks = np.broadcast_to(peak_row, shape)
    experts = np.array([m.experts for m in members])
    grouped = params.grouped_terms(experts, first.dtypes, first.dtype_index)
    units = {kind: np.array([m.attention_units[kind] for m in members]) for kind in first.attention_units}
    elements = {op: np.array([m.transcendental[op] for m in members]) for op in first.transcendental}
    curve = params.gemm_curve_index(first.dtypes, first.dtype_index)
    gemm_curve = None if curve is None else np.broadcast_to(curve, shape)
    return (
        peaks,
        grouped,
        params.attention_extra_s(units),
        gemm_curve,
        params.attention_fractions(units),
        params.transcendental_s(elements),
    )


def _member_terms(members: Sequence[KernelArrays], params: CostParams) -> _PricingTerms:
    """`_group_terms` of plans whose kernels' dtypes differ: each plan's terms on its own, stacked."""
    peaks = np.array([np.array([params.peak(d) for d in m.dtypes] or [0.0])[m.dtype_index] for m in members])
    grouped = _stacked([params.grouped_terms(m.experts, m.dtypes, m.dtype_index) for m in members])
    attention = [params.attention_extra_s(m.attention_units) for m in members]
    attention_s = None if attention[0] is None else np.array(attention)
    curves = [params.gemm_curve_index(m.dtypes, m.dtype_index) for m in members]
    gemm_curve = None if curves[0] is None else np.array(curves)  # one structure: all or none have one
    fractions = [params.attention_fractions(m.attention_units) for m in members]
    fraction = None if fractions[0] is None else np.array(fractions)
    evaluation = [params.transcendental_s(m.transcendental) for m in members]
    transcendental_s = None if evaluation[0] is None else np.array(evaluation)
    return peaks, grouped, attention_s, gemm_curve, fraction, transcendental_s


_Terms = TypeVar("_Terms")


def _stacked(per_plan: Sequence[_Terms | None]) -> _Terms | None:
    """Per-kernel term arrays of plans (a dataclass of arrays per plan, or None where a plan has no such
    kernels) as one dataclass of (plans × kernels) arrays; the plans of a group all have them or none."""
    first = per_plan[0]
    if first is None:
        return None
    names = [f.name for f in dataclasses.fields(first)]  # type: ignore[arg-type]
    return type(first)(**{name: np.array([getattr(t, name) for t in per_plan]) for name in names})


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
    step_s, exposed = _schedule_rows(
        durations[None, :],
        memory_s[None, :],
        stream,
        join,
        launch,
        None if is_gemm is None else is_gemm[None, :],
    )
    return float(step_s[0]), exposed[0]


def _schedule_rows(
    durations: np.ndarray,
    memory_s: np.ndarray,
    stream: np.ndarray,
    join: np.ndarray,
    launch: LaunchParams,
    is_gemm: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray]:
    """`schedule` of plans sharing streams and joins: one row of durations per plan."""
    plans, n = durations.shape
    exposed = durations.copy()
    gaps = np.full((plans, n), launch.gap_s)
    side = np.nonzero(stream != 0)[0]
    if side.size:
        exposed, gaps = _fold_side_streams(durations, memory_s, stream, join, gaps, launch.gap_s)
    if n == 0:
        return np.full(plans, launch.first_issue_s + launch.sync_s), exposed
    issue = launch.issue_times(n, is_gemm)
    per = gaps + exposed
    suffix = np.cumsum(per[:, ::-1], axis=1)[:, ::-1]
    end = np.max(issue + suffix, axis=1)
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
    never joined only adds what sticks out past the main stream's end. One row per plan (shared streams)."""
    n = durations.shape[1]
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
    zero = np.zeros((durations.shape[0], 1))
    busy = np.concatenate([zero, np.cumsum(np.where(on_side, 0.0, durations + gap_s), axis=1)], axis=1)
    side_busy = np.concatenate([zero, np.cumsum(np.where(on_side, durations + gap_s, 0.0), axis=1)], axis=1)
    mem = np.concatenate([zero, np.cumsum(memory_s, axis=1)], axis=1)
    t_side = side_busy[:, run_end] - side_busy[:, run_start]
    t_main = busy[:, region_end] - busy[:, run_end]
    m_side = mem[:, run_end] - mem[:, run_start]
    m_main = mem[:, region_end] - mem[:, run_end]
    # Both branches' bytes share the bandwidth; the fixed latencies and gaps of the lighter branch stay exposed.
    shared = m_side + m_main + np.minimum(t_main - m_main, t_side - m_side)
    region = np.where(joined, np.maximum(np.maximum(t_main, t_side), shared), np.maximum(t_main, t_side))
    exposed[:, on_side] = 0.0
    gaps[:, on_side] = 0.0
    exposed[:, run_end - 1] = region - t_main
    return exposed, gaps


@dataclass(frozen=True)
class StepRequest:
    """One plan to time: its launch mode, whether the launch and final sync count, and the seconds of
    kernels timed elsewhere (one entry per kernel, NaN where absent; e.g. collectives on their links)."""

    plan: StepPlan
    launch: str = "graph"
    include_launch_and_sync: bool = True
    external_time_s: np.ndarray | None = None


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
    request = StepRequest(plan, launch, include_launch_and_sync, external_time_s)
    return fast_steps([request], hardware, params)[0]


def fast_steps(
    requests: Sequence[StepRequest], hardware: HardwareProfile, params: CostParams | None = None
) -> list[FastStep]:
    """`fast_step` of many plans at once: plans that share a structure (the same kernels, accesses, streams
    and launch: one model's steps across batch sizes and draft lengths, designs of one layer pattern) are
    costed and scheduled over (plans × kernels) arrays: one stack structure, one residency, roofline and
    schedule pass per group (sums run along each row in access order). Every row goes
    through the same floating-point operations as a plan alone, so each result is exactly `fast_step`'s."""
    params = params or CostParams.from_hardware(hardware)
    arrays = [plan_arrays(request.plan) for request in requests]
    if len(requests) == 1:  # one plan is its own group (a serving run costs its step shapes one by one)
        return _time_group(requests, arrays, hardware, params)
    groups: dict[tuple[object, ...], list[int]] = {}
    for index, (request, a) in enumerate(zip(requests, arrays, strict=True)):
        key = (
            bool(np.any(a.experts > 0)),  # grouped expert GEMM terms present (see `_stacked`)
            request.launch,
            request.include_launch_and_sync,
            request.external_time_s is not None,
            a.acc_kernel.tobytes(),
            a.acc_tensor.tobytes(),
            a.acc_write.tobytes(),
            a.stream.tobytes(),
            a.join.tobytes(),
        )
        groups.setdefault(key, []).append(index)
    out: list[FastStep | None] = [None] * len(requests)
    for indices in groups.values():
        members = [arrays[i] for i in indices]
        timed = _time_group([requests[i] for i in indices], members, hardware, params)
        for i, step in zip(indices, timed, strict=True):
            out[i] = step
    return [step for step in out if step is not None]


def _time_group(
    requests: Sequence[StepRequest],
    members: Sequence[KernelArrays],
    hardware: HardwareProfile,
    params: CostParams,
) -> list[FastStep]:
    first, request = members[0], requests[0]
    launch_params = LaunchParams.from_hardware(hardware, request.launch)
    if not request.include_launch_and_sync:
        launch_params = launch_params.without_launch_and_sync()
    costs = _cost_group(members, params)
    total, memory = costs.total_s, costs.memory_s
    if request.external_time_s is not None:
        external_s = np.array([r.external_time_s for r in requests], dtype=float)
        external = ~np.isnan(external_s)
        total = np.where(external, external_s, total)
        memory = np.where(external, 0.0, memory)
    m_tokens = np.array([member.m_tokens for member in members])
    step_s, exposed = _schedule_rows(total, memory, first.stream, first.join, launch_params, m_tokens > 0)
    categories = np.array([member.category for member in members])
    per_category = _row_bincount_2d(categories, exposed, len(CATEGORIES))
    out = []
    for row in range(len(members)):
        per_row = per_category[row]
        per_row[IDLE] = max(0.0, float(step_s[row]) - float(np.sum(exposed[row])))
        out.append(
            FastStep(
                step_s=float(step_s[row]),
                breakdown_s={name: float(per_row[i]) for i, name in enumerate(CATEGORIES)},
                hbm_bytes=float(np.sum(costs.hbm_bytes[row])),
                cache_bytes=float(np.sum(costs.cache_bytes[row])),
                n_kernels=first.n_kernels,
            )
        )
    return out


def _row_bincount_2d(index: np.ndarray, weights: np.ndarray, length: int) -> np.ndarray:
    """Per-row `np.bincount(index[row], weights=weights[row], minlength=length)`: one call, each row's
    bins offset by `length` (a bin gathers its row's weights in order, so the sums are the one-row ones)."""
    plans = weights.shape[0]
    flat = (index + length * np.arange(plans)[:, None]).ravel()
    return np.bincount(flat, weights=weights.ravel(), minlength=plans * length).reshape(plans, length)
