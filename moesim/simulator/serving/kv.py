"""The paged KV cache of a serving run: a pool of fixed-size blocks that running requests hold.

As in vLLM (block size 16 tokens, `gpu_memory_utilization` 0.9 by default: vllm/config/cache.py, 0.11), a
request holds ⌈tokens / block⌉ blocks for the tokens whose KV it keeps plus those being computed this step,
and a fixed number of blocks for its recurrent state when the model has linear-attention layers.

Capacity from the memory model (`plan.memory`): gpu_memory_utilization × device memory − weights on the
busiest rank − the drafter's weights, divided by the KV bytes of one token (all attention layers, and the
drafter's own KV). With data-parallel attention each of the dp attention groups holds only its own
sequences' KV (GQA heads split over the group's tp ranks, MLA's latent replicated on them), so the pool is dp
times one rank's. Approximations, stated with the result: sliding-window layers are charged every token
(engines that free out-of-window blocks hold less), and activation memory is not subtracted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from moesim.errors import MoesimError
from moesim.simulator.hardware.profile import HardwareProfile
from moesim.simulator.models.spec import ModelSpec
from moesim.simulator.plan.layout import ParallelLayout
from moesim.simulator.plan.memory import kv_cache_bytes_per_rank, weight_bytes_per_rank
from moesim.simulator.serving.options import DEFAULT_BLOCK_TOKENS, DEFAULT_GPU_MEMORY_UTILIZATION


@dataclass(frozen=True)
class KvCapacity:
    """KV-cache capacity of one rank: token slots, and blocks each request's fixed state takes."""

    tokens: int
    state_tokens_per_request: int
    bytes_per_token: float
    description: str


def kv_capacity(
    model: ModelSpec,
    hardware: HardwareProfile,
    drafter_weight_bytes: float = 0.0,
    drafter_bytes_per_token: float = 0.0,
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
    layout: ParallelLayout | None = None,
) -> KvCapacity:
    """Token slots left for the KV cache once weights are loaded (see the module docstring)."""
    if not 0.0 < gpu_memory_utilization <= 1.0:
        raise MoesimError(
            "gpu_memory_utilization", f"must be in (0, 1], got {gpu_memory_utilization}", "vLLM uses 0.9"
        )
    layout = layout or ParallelLayout()
    capacity = hardware.datasheet.memory_capacity_bytes
    weights = sum(weight_bytes_per_rank(model, layout).values())
    one, two = (kv_cache_bytes_per_rank(model, layout, 1, n) for n in (1, 2))
    per_token = two - one + drafter_bytes_per_token
    state = max(0.0, one - (two - one))  # what a sequence holds whatever its length (linear attention)
    free = gpu_memory_utilization * capacity - weights - drafter_weight_bytes
    if free <= 0 or per_token <= 0:
        raise MoesimError(
            "memory",
            f"{model.name} leaves no room for a KV cache on {layout.describe()} of {hardware.name} "
            f"({weights / 1e9:.1f} GB of weights, {gpu_memory_utilization:.0%} of "
            f"{capacity / 1e9:.1f} GB usable)",
            "use more GPUs (--tp), a smaller weight format, or a higher --gpu-memory-utilization",
        )
    tokens = int(free // per_token) * layout.dp  # each data-parallel attention group holds its own KV
    groups = f" × {layout.dp} attention groups, each holding its own sequences' KV" if layout.dp > 1 else ""
    return KvCapacity(
        tokens=tokens,
        state_tokens_per_request=math.ceil(state / per_token),
        bytes_per_token=per_token,
        description=(
            f"{tokens} KV tokens ({free / 1e9:.1f} GB at {per_token / 1e3:.1f} kB per token: "
            f"{gpu_memory_utilization:.0%} of {capacity / 1e9:.0f} GB minus {weights / 1e9:.1f} GB of weights"
            + (f" and {drafter_weight_bytes / 1e9:.2f} GB of drafter" if drafter_weight_bytes else "")
            + ")"
            + groups
        ),
    )


class KvBlocks:
    """A pool of KV blocks shared by the running requests (the serving loop's one shared resource).

    `reserve(owner, tokens)` makes `owner` (a request's index, ≥ 0) hold enough blocks for `tokens` tokens
    (plus its fixed state), taking only the missing ones, and says whether that was possible;
    `release(owner)` returns them all. `reserve_all` does a whole step's reservations at once.
    """

    def __init__(self, capacity_tokens: int, block_tokens: int = DEFAULT_BLOCK_TOKENS, state_tokens: int = 0):
        if block_tokens < 1:
            raise MoesimError("block_size", f"must be ≥ 1 token, got {block_tokens}")
        self.block_tokens = block_tokens
        self.total_blocks = capacity_tokens // block_tokens
        if self.total_blocks < 1:
            raise MoesimError(
                "kv_cache_tokens", f"{capacity_tokens} tokens hold no {block_tokens}-token block"
            )
        self.state_blocks = math.ceil(state_tokens / block_tokens)
        self.free_blocks = self.total_blocks
        self.peak_used_blocks = 0
        self._held = np.zeros(0, dtype=np.int64)  # blocks per owner index (grown on demand)

    def _holding(self, owner: int) -> int:
        if owner >= self._held.size:
            self._held = np.concatenate([self._held, np.zeros(max(owner + 1, 2 * self._held.size), np.int64)])
        return int(self._held[owner])

    def blocks_for(self, tokens: int) -> int:
        return math.ceil(tokens / self.block_tokens) + self.state_blocks

    def fits_alone(self, tokens: int) -> bool:
        """Whether one request of `tokens` tokens could ever run (the whole pool to itself)."""
        return self.blocks_for(tokens) <= self.total_blocks

    def reserve(self, owner: int, tokens: int) -> bool:
        # `blocks_for` inlined, in integer arithmetic (equal to it for any count below 2**52).
        held = self._holding(owner)
        missing = -(-tokens // self.block_tokens) + self.state_blocks - held
        if missing > self.free_blocks:
            return False
        if missing > 0:
            self._held[owner] = held + missing
            self.free_blocks -= missing
            used = self.total_blocks - self.free_blocks
            if used > self.peak_used_blocks:
                self.peak_used_blocks = used
        return True

    def reserve_all(self, owners: np.ndarray, tokens: np.ndarray) -> bool:
        """`reserve` of every (owner, tokens) in turn (distinct owners, each holding blocks already) when all
        of them succeed — the blocks they miss are all free —, with the same blocks held and the same peak
        after; else takes nothing and says False."""
        missing = np.maximum(-(-tokens // self.block_tokens) + self.state_blocks - self._held[owners], 0)
        taken = int(missing.sum())
        if taken > self.free_blocks:
            return False
        self._held[owners] += missing
        self.free_blocks -= taken
        self.peak_used_blocks = max(self.peak_used_blocks, self.total_blocks - self.free_blocks)
        return True

    def extend_all(self, owners: np.ndarray, tokens: np.ndarray) -> np.ndarray | None:
        """`reserve_all` of owners whose blocks cover fewer than their `tokens` (`covered_tokens` below each;
        so each misses at least one block), returning the tokens their blocks then cover
        (`covered_tokens_of`), or None, taking nothing, when the blocks they miss are not all free. The
        same blocks held and the same peak as `reserve_all`, in fewer array operations (a decode step's)."""
        blocks = -(-tokens // self.block_tokens)
        held = blocks + self.state_blocks
        taken = int(np.add.reduce(held - self._held[owners]))  # `.sum()` without its Python wrapper
        if taken > self.free_blocks:
            return None
        self._held[owners] = held
        self.free_blocks -= taken
        self.peak_used_blocks = max(self.peak_used_blocks, self.total_blocks - self.free_blocks)
        return blocks * self.block_tokens

    def covered_tokens(self, owner: int) -> int:
        """Tokens the blocks `owner` holds cover: `reserve(owner, n)` takes nothing and succeeds for any n up
        to this, so a caller that remembers it may skip those calls."""
        return (self._holding(owner) - self.state_blocks) * self.block_tokens

    def covered_tokens_of(self, owners: np.ndarray) -> np.ndarray:
        """`covered_tokens` of each owner (each holding blocks already)."""
        return (self._held[owners] - self.state_blocks) * self.block_tokens

    def release(self, owner: int) -> None:
        self.free_blocks += self._holding(owner)
        self._held[owner] = 0

    @property
    def used_blocks(self) -> int:
        return self.total_blocks - self.free_blocks
