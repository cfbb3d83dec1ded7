"""A real MoE expert block (router, top-k, per-expert SwiGLU GEMMs over the hit experts, combine) whose
routing can be forced to hit exactly U distinct experts for M tokens.

This is the "plain torch reference" kernel style: one loop iteration per distinct expert hit, so its cost
is a fixed part (router, top-k, sort, combine) plus a per-expert part — what the MoE suite fits and what
validation compares the simulator against. Importing this module imports torch.
"""

from __future__ import annotations

import torch
from torch import nn

from moesim.errors import MoesimError


def forced_routing(
    m_tokens: int, distinct: int, n_experts: int, top_k: int, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Expert ids (M, top_k), each row distinct, whose union is exactly `distinct` experts.

    The `distinct` experts are a random subset (from `generator`); slots are dealt round-robin over them,
    so every chosen expert is hit and the tokens per expert differ by at most one.
    """
    if not 1 <= top_k <= n_experts:
        raise MoesimError("top_k", f"must be in 1..{n_experts} (the number of experts), got {top_k}")
    if m_tokens < 1:
        raise MoesimError("m_tokens", f"must be ≥ 1, got {m_tokens}")
    most = min(n_experts, m_tokens * top_k)
    if not top_k <= distinct <= most:
        raise MoesimError(
            "distinct",
            f"{m_tokens} tokens with top-{top_k} over {n_experts} experts can hit {top_k}..{most} distinct experts, "
            f"not {distinct}",
            f"choose U between {top_k} and {most}",
        )
    chosen = torch.randperm(n_experts, generator=generator)[:distinct]
    slots = torch.arange(m_tokens * top_k).reshape(m_tokens, top_k) % distinct
    return chosen[slots]


class ExpertBlock(nn.Module):
    """Router + top-k + SwiGLU experts (gate, up, down) + weighted combine, over the experts actually hit."""

    def __init__(
        self,
        hidden: int,
        expert_width: int,
        n_experts: int,
        top_k: int,
        dtype: torch.dtype = torch.float32,
        device: str | torch.device = "cpu",
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        if not 1 <= top_k <= n_experts:
            raise MoesimError("top_k", f"must be in 1..{n_experts}, got {top_k}")
        self.hidden, self.expert_width, self.n_experts, self.top_k = hidden, expert_width, n_experts, top_k

        # Draw on the target device (GBs of experts would take long on one host thread), seeded from
        # `generator` so a seeded block is reproducible.
        target = torch.device(device)
        seed = int(torch.randint(0, 2**62, (1,), generator=generator).item())
        local = torch.Generator(device=target).manual_seed(seed)

        def init(*shape: int, fan_in: int) -> nn.Parameter:
            w = torch.empty(shape, dtype=torch.float32, device=target)
            w.uniform_(-(fan_in**-0.5), fan_in**-0.5, generator=local)
            return nn.Parameter(w.to(dtype=dtype), requires_grad=False)

        self.router = init(hidden, n_experts, fan_in=hidden)
        self.w_gate = init(n_experts, hidden, expert_width, fan_in=hidden)
        self.w_up = init(n_experts, hidden, expert_width, fan_in=hidden)
        self.w_down = init(n_experts, expert_width, hidden, fan_in=expert_width)

    @property
    def expert_bytes(self) -> int:
        """Weight bytes of one expert (gate + up + down)."""
        return 3 * self.hidden * self.expert_width * self.w_gate.element_size()

    @torch.no_grad()
    def forward(
        self, x: torch.Tensor, forced: torch.Tensor | None = None, counts: list[int] | None = None
    ) -> torch.Tensor:
        """Apply the block to tokens x (M, hidden); `forced` (M, top_k) pins the experts each token uses.

        `counts` (tokens per expert, known on the host when the routing is forced) skips the one host
        sync the reference code pays to read them, so a calibration can queue whole blocks behind a
        busy device and time device work only.
        """
        logits = x @ self.router
        if forced is not None:
            allowed = torch.zeros_like(logits, dtype=torch.bool).scatter_(1, forced, True)
            logits = logits.masked_fill(~allowed, float("-inf"))
        top_logits, top_experts = torch.topk(logits, self.top_k, dim=-1)
        gates = torch.softmax(top_logits.float(), dim=-1).to(x.dtype).reshape(-1)
        flat = top_experts.reshape(-1)
        order = torch.argsort(flat, stable=True)
        if counts is None:
            counts = torch.bincount(flat, minlength=self.n_experts).tolist()  # one host sync, as in HF code
        tokens = torch.div(order, self.top_k, rounding_mode="floor")
        gates = gates[order]
        out = torch.zeros_like(x)
        start = 0
        for expert, count in enumerate(counts):
            if count == 0:
                continue
            idx = tokens[start : start + count]
            xs = x[idx]
            h = torch.nn.functional.silu(xs @ self.w_gate[expert]) * (xs @ self.w_up[expert])
            y = (h @ self.w_down[expert]) * gates[start : start + count, None]
            out.index_add_(0, idx, y)
            start += count
        return out
