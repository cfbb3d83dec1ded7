"""Tensor and expert parallelism across the GPUs of a node: layouts, expert placement, per-rank expert work.

A layout of G GPUs has
- attention (and dense FFN, embeddings, LM head) split by tensor parallelism over `tp` ranks; the G/tp
  groups are data-parallel attention replicas, each serving its share of the batch (SGLang's DP attention);
- routed experts split over `ep` expert-parallel ranks (contiguous blocks of expert ids, or round-robin);
  each expert is further split by tensor parallelism over the G/ep ranks of its group;
- shared experts either `replicated` on every rank and run on the rank's own tokens (DeepEP-style engines,
  no extra communication) or `split` by tensor parallelism over the attention group and summed with an
  all-reduce (vLLM/SGLang's tensor-parallel MoE).

With ep > 1 tokens reach their experts by an all-to-all *dispatch* and come back by an all-to-all *combine*
(DeepEP-style: each rank sends its 1/G share of the tokens, one copy per destination rank). With ep = 1 the
experts are tensor-parallel across all G ranks, tokens are replicated, and an all-reduce sums the outputs.

Per-rank expert work comes from the routing model: each rank's distinct experts and token assignments per
layer, and the step's MoE time is set by the *slowest* rank — the expected maximum over ranks, not the mean.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np
import numpy.typing as npt

from moesim.errors import MoesimError
from moesim.options import option
from moesim.simulator.bounds import MAX_LAYOUT_GPUS, check_count
from moesim.simulator.models.spec import ModelSpec
from moesim.simulator.routing.placement import (
    PLACEMENT_SPELLINGS,
    PLACEMENTS,
    Placement,
    normalise_placement,
)

if TYPE_CHECKING:
    from moesim.simulator.routing.per_rank import RankExperts

SharedExperts = Literal["replicated", "split"]
DraftOn = Literal["separate", "shared"]
SHARED_EXPERT_MODES: tuple[str, ...] = ("replicated", "split")
DRAFT_ON: tuple[str, ...] = ("separate", "shared")


@dataclass(frozen=True)
class ParallelLayout:
    """How one model's step is spread over `gpus` GPUs (see the module docstring for the conventions).

    `shared_experts=None` means the engines' usual choice, `split` (vLLM, and SGLang without DeepEP);
    `replicated` costs every rank the whole shared expert but saves its all-reduce. `draft_on` says whether the drafter shares the target's GPUs or runs on a GPU of its own.
    """

    gpus: int = 1
    tp: int = 1
    ep: int = 1
    placement: Placement = "contiguous"
    shared_experts: SharedExperts | None = None
    draft_on: DraftOn = "shared"
    device: str = "GPU"  # what the ranks are, in words: "CPU" for a CPU profile

    def __post_init__(self) -> None:
        for name in ("gpus", "tp", "ep"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise MoesimError(name, f"must be a positive integer, got {value!r}")
        if self.gpus % self.tp:
            raise MoesimError(
                "tp", f"{self.tp} does not divide --gpus {self.gpus}", "choose a divisor of --gpus"
            )
        if self.gpus % self.ep:
            raise MoesimError(
                "ep", f"{self.ep} does not divide --gpus {self.gpus}", "choose a divisor of --gpus"
            )
        if self.ep == 1 and self.tp != self.gpus:
            raise MoesimError(
                "tp",
                f"with --ep 1 the experts are tensor-parallel over all {self.gpus} GPUs, so --tp must be {self.gpus}",
                f"use --tp {self.gpus}, or --ep {self.gpus} for expert parallelism",
            )
        object.__setattr__(self, "placement", normalise_placement(self.placement))
        if self.shared_experts is not None and self.shared_experts not in SHARED_EXPERT_MODES:
            raise MoesimError(
                "shared_experts", f"unknown mode {self.shared_experts!r}", "replicated or split"
            )
        if self.draft_on not in DRAFT_ON:
            raise MoesimError(
                "draft_on", f"unknown drafter placement {self.draft_on!r}", "separate or shared"
            )

    @property
    def dp(self) -> int:
        """Data-parallel attention groups; each serves 1/dp of the batch."""
        return self.gpus // self.tp

    @property
    def expert_tp(self) -> int:
        """Ranks each routed expert's width is split over."""
        return self.gpus // self.ep

    @property
    def shared_mode(self) -> SharedExperts:
        return "split" if self.shared_experts is None else self.shared_experts

    @property
    def is_single(self) -> bool:
        return self.gpus == 1

    def sequences_per_group(self, batch: int) -> int:
        """Sequences the busiest data-parallel attention group serves."""
        return math.ceil(batch / self.dp)

    def describe(self) -> str:
        """The layout in words, printed with every multi-GPU result."""
        if self.is_single:
            text = f"1 {self.device}"
        else:
            attention = f"attention TP={self.tp}" + (f" × DP={self.dp}" if self.dp > 1 else "")
            experts = f"experts EP={self.ep} ({self.placement})" if self.ep > 1 else f"experts TP={self.gpus}"
            if self.ep > 1 and self.expert_tp > 1:
                experts += f" × TP={self.expert_tp}"
            text = f"{self.gpus} {self.device}s: {attention}, {experts}, shared experts {self.shared_mode}"
        return text + (f"; drafter on its own {self.device}" if self.draft_on == "separate" else "")

    def as_dict(self) -> dict[str, object]:
        return {
            "gpus": self.gpus,
            "tp": self.tp,
            "ep": self.ep,
            "dp": self.dp,
            "expert_tp": self.expert_tp,
            "placement": self.placement,
            "shared_experts": self.shared_mode,
            "draft_on": self.draft_on,
            "description": self.describe(),
        }

    def check_model(self, spec: ModelSpec) -> None:
        """Refuse a layout the model cannot be split into."""
        if self.ep > 1 and not spec.is_moe:
            raise MoesimError("ep", f"{spec.name} has no routed experts to split", "use --ep 1")
        if spec.is_moe and self.ep > spec.n_experts:
            raise MoesimError(
                "ep", f"{self.ep} ranks exceed the {spec.n_experts} routed experts of {spec.name}"
            )
        heads, kv_heads = spec.attention.num_heads, spec.attention.num_kv_heads
        if self.tp > heads:
            raise MoesimError("tp", f"{self.tp} exceeds the {heads} attention heads of {spec.name}")
        # vLLM and SGLang split query heads evenly on GPUs (sglang 0.5.23 srt/layers/linear.py,
        # QKVParallelLinear: divide(total_num_heads, tp_size)); only SGLang's CPU backend pads heads
        # (srt/configs/update_config.py, adjust_config_with_unaligned_cpu_tp).
        if heads % self.tp:
            raise MoesimError(
                "tp",
                f"{self.tp} does not divide the {heads} attention heads ({kv_heads} KV heads) of {spec.name}; "
                "engines split heads evenly across tensor-parallel ranks",
                "choose --tp dividing the heads, e.g. a power of two; --gpus alone sets --tp to the GPU count",
            )


def default_layout(
    gpus: int, placement: Placement = "contiguous", draft_on: DraftOn = "shared"
) -> ParallelLayout:
    """What serving engines run on G GPUs of one node: attention TP=G and experts EP=G."""
    return ParallelLayout(gpus=gpus, tp=gpus, ep=gpus, placement=placement, draft_on=draft_on)


@dataclass(frozen=True)
class LayoutRequest:
    """What the user asked for: a fixed layout when --gpus, --tp or --ep is given, else the smallest that fits.

    Missing --tp / --ep default to the GPU count (engines' usual TP = EP = G); placement, shared-expert mode
    and drafter placement apply either way.
    """

    gpus: int | None = option(
        None,
        "GPUs to spread the model over (default: the smallest layout whose memory fits, stated in the output).",
        kind=int,
    )
    tp: int | None = option(
        None, "Tensor-parallel ranks for attention and dense layers (default: --gpus).", kind=int
    )
    ep: int | None = option(None, "Expert-parallel ranks for routed experts (default: --gpus).", kind=int)
    placement: Placement = option(
        "contiguous", "How expert ids map to expert-parallel ranks.", choices=PLACEMENT_SPELLINGS
    )
    shared_experts: SharedExperts | None = option(
        None,
        "Shared experts split by tensor parallelism (default) or replicated on every GPU.",
        flag="--shared-expert-mode",
        choices=SHARED_EXPERT_MODES,
    )
    draft_on: DraftOn = option(
        "shared",
        "Run the drafter on the target's GPUs (shared) or on a GPU of its own (separate).",
        choices=DRAFT_ON,
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "placement", normalise_placement(self.placement))
        for flag, value in (("--gpus", self.gpus), ("--tp", self.tp), ("--ep", self.ep)):
            if value is not None:
                check_count(
                    value, flag, high=MAX_LAYOUT_GPUS, fix=f"give {flag} from 1 to {MAX_LAYOUT_GPUS:,}"
                )

    def fixed(self) -> ParallelLayout | None:
        """The layout asked for, or None when the smallest fitting one should be chosen."""
        gpus = self.gpus
        if gpus is None:
            if self.tp is None and self.ep is None:
                return None
            gpus = max(self.tp or 1, self.ep or 1)
        return ParallelLayout(
            gpus=gpus,
            tp=gpus if self.tp is None else self.tp,
            ep=gpus if self.ep is None else self.ep,
            placement=self.placement,
            shared_experts=self.shared_experts,
            draft_on=self.draft_on,
        )

    def candidates(self, max_gpus: int = 64) -> list[ParallelLayout]:
        """Layouts in the order the smallest-fit search tries them: 1, 2, 4, 8, ... GPUs; for each, EP = G with
        TP = G first (engines' default), then data-parallel attention (TP = G/2, ..., 1), which splits the KV
        cache of MLA models that tensor parallelism cannot split."""
        layouts, gpus = [], 1
        while gpus <= max_gpus:
            tp = gpus
            while tp >= 1:
                layouts.append(
                    ParallelLayout(gpus, tp, gpus, self.placement, self.shared_experts, self.draft_on)
                )
                tp //= 2
            gpus *= 2
        return layouts


def layout_from_options(
    gpus: int | None,
    tp: int | None,
    ep: int | None,
    placement: str = "contiguous",
    shared_experts: str | None = None,
    draft_on: str = "shared",
) -> ParallelLayout | None:
    """The layout the CLI flags ask for; None when no GPU count is given (see `LayoutRequest`)."""
    return LayoutRequest(gpus, tp, ep, placement, shared_experts, draft_on).fixed()  # type: ignore[arg-type]


def candidate_layouts(
    max_gpus: int = 64, placement: Placement = "contiguous", draft_on: DraftOn = "shared"
) -> list[ParallelLayout]:
    """`LayoutRequest.candidates` for the default request."""
    return LayoutRequest(placement=placement, draft_on=draft_on).candidates(max_gpus)


# --------------------------------------------------------------------------------------- communication


@dataclass(frozen=True)
class MoeTraffic:
    """Bytes the busiest rank moves around one MoE layer (arrays over the token grid)."""

    dispatch_send_bytes: np.ndarray
    dispatch_recv_bytes: np.ndarray
    combine_send_bytes: np.ndarray
    combine_recv_bytes: np.ndarray


def moe_traffic(
    layout: ParallelLayout,
    hidden: int,
    step_tokens: npt.ArrayLike,
    work: RankExperts,
    dispatch_bytes_per_value: float = 2.0,
    combine_bytes_per_value: float = 2.0,
) -> MoeTraffic:
    """All-to-all bytes of dispatch and combine for `step_tokens` tokens in the whole step (ep > 1).

    Each rank owns 1/G of the tokens and sends every token once to each distinct expert-parallel rank its
    experts live on (times the expert-TP group size), minus the copy that stays on the rank itself; combine
    returns the same copies. The busiest rank receives in proportion to its token load (max over mean).
    """
    m = np.asarray(step_tokens, dtype=float)
    if layout.ep == 1:
        zero = np.zeros_like(m)
        return MoeTraffic(zero, zero, zero, zero)
    remote_copies = work.ranks_per_token * (layout.ep - 1) / layout.ep * layout.expert_tp
    copies = m / layout.gpus * remote_copies
    skew = work.max_tokens / np.maximum(work.mean_tokens, 1e-12)
    return MoeTraffic(
        dispatch_send_bytes=copies * hidden * dispatch_bytes_per_value,
        dispatch_recv_bytes=copies * skew * hidden * dispatch_bytes_per_value,
        combine_send_bytes=copies * skew * hidden * combine_bytes_per_value,
        combine_recv_bytes=copies * hidden * combine_bytes_per_value,
    )


__all__ = [
    "DRAFT_ON",
    "PLACEMENTS",
    "SHARED_EXPERT_MODES",
    "DraftOn",
    "LayoutRequest",
    "MoeTraffic",
    "ParallelLayout",
    "Placement",
    "SharedExperts",
    "candidate_layouts",
    "default_layout",
    "layout_from_options",
    "moe_traffic",
]
