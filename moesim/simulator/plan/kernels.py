"""The unit of work the cost model and the timers understand: one device kernel with its FLOPs and bytes."""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields
from typing import Literal

Category = Literal[
    "attention",  # attention maths and projections' non-weight work
    "dense_weights",  # attention projections and dense FFN weights
    "routed_experts",
    "shared_experts",
    "kv_cache",
    "lm_head",
    "communication",
    "other",  # norms, router, top-k, alignment, sampling
]
CATEGORIES: tuple[str, ...] = (
    "attention",
    "dense_weights",
    "routed_experts",
    "shared_experts",
    "kv_cache",
    "lm_head",
    "communication",
    "other",
    "launch_idle",
)


CollectiveOp = Literal["all_reduce", "all_gather", "all_to_all"]
AllToAllPhase = Literal["", "dispatch", "combine"]


@dataclass(frozen=True)
class Collective:
    """A collective a parallel step runs: what moves, never how long it takes (execution times it).

    all_reduce: `send_bytes` is the buffer each rank holds; all_gather: the gathered output's bytes;
    all_to_all: the bytes the busiest rank sends and (`recv_bytes`) receives, its share to itself excluded.
    `phase` marks a MoE layer's dispatch or combine that runs as an expert-parallel all-to-all kernel: pure
    expert parallelism (expert TP 1), the layouts DeepEP serves (aiconfigurator-core 0.12.0
    `sdk/operations/moe_comm.MoECommBackendSpec.feasible`: moe_tp_size 1); '' for every other collective.
    """

    op: CollectiveOp
    ranks: int
    send_bytes: float
    recv_bytes: float | None = None
    phase: AllToAllPhase = ""


@dataclass(frozen=True)
class TensorRead:
    """A tensor a kernel reads `reads` times; the first read comes from memory, repeats may hit the cache.

    `tensor` names it uniquely within the step (e.g. "L3.experts.w13"), so a later kernel reading the
    same tensor can find it cached.
    """

    tensor: str
    size_bytes: float
    reads: float = 1.0
    # Bytes that must stay cached for the repeats to hit (e.g. one expert's weights when a grouped GEMM
    # re-reads each expert once per M-tile); 0 means the whole tensor.
    working_set_bytes: float = 0.0


@dataclass(frozen=True)
class Kernel:
    """One launch on the device."""

    name: str
    category: Category
    flops: float
    reads: tuple[TensorRead, ...]
    write_bytes: float = 0.0
    m_tokens: float = 0  # GEMM rows for the efficiency curve (mean rows per expert); 0 when not a GEMM
    dtype: str = "bf16"
    layer: int = -1
    stream: int = 0  # kernels on different streams may run side by side
    write_tensor: str = ""  # name of the tensor written (write_bytes of it), so later reads can hit the cache
    join: bool = False  # waits for every kernel issued before it on the other streams (an event wait)
    # Distinct experts of a grouped expert GEMM (one fused-MoE projection over them); 0 for any other kernel.
    experts: float = 0.0
    # An attention kernel over the KV cache: its work units (sequences × KV heads × query tiles) and its kind
    # ("gqa" or "mla"), which the profile's attention terms price; 0 and "" for any other kernel.
    attention_units: float = 0.0
    attention_kind: str = ""
    # An element-wise kernel whose time is one function's evaluation (`hardware.sections.TRANSCENDENTAL_OPS`:
    # "silu", "exp", "rsqrt"): the elements it evaluates, which the profile's element rate prices; 0 and "".
    transcendental_elements: float = 0.0
    transcendental_op: str = ""


# Plans build ~10^5 kernels and tensor reads per sweep; a frozen dataclass's __init__ sets each field through
# object.__setattr__ (about 3 µs a kernel). These make the same objects (equal, same hash and repr) by filling
# the instance's __dict__ directly: every field from its default, then the values given.
_KERNEL_DEFAULTS = {f.name: f.default for f in fields(Kernel) if f.default is not MISSING}
_READ_DEFAULTS = {f.name: f.default for f in fields(TensorRead) if f.default is not MISSING}


def new_kernel(
    name: str, category: Category, flops: float, reads: tuple[TensorRead, ...], **values: object
) -> Kernel:
    """`Kernel(name, category, flops, reads, **values)`, built faster (values: Kernel's other fields)."""
    kernel = object.__new__(Kernel)
    state = kernel.__dict__
    state.update(_KERNEL_DEFAULTS)
    state.update(name=name, category=category, flops=flops, reads=reads)
    state.update(values)
    return kernel


def new_read(
    tensor: str, size_bytes: float, reads: float = 1.0, working_set_bytes: float = 0.0
) -> TensorRead:
    """`TensorRead(tensor, size_bytes, reads, working_set_bytes)`, built faster."""
    read = object.__new__(TensorRead)
    read.__dict__.update(
        tensor=tensor, size_bytes=size_bytes, reads=reads, working_set_bytes=working_set_bytes
    )
    return read


def joined(kernel: Kernel) -> Kernel:
    """`dataclasses.replace(kernel, join=True)`, built faster."""
    copy = object.__new__(Kernel)
    copy.__dict__.update(kernel.__dict__)
    copy.__dict__["join"] = True
    return copy
