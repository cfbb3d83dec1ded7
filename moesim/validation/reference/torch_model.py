"""A reference MoE forward step in plain torch, whose kernel sequence the `torch-reference` plan describes.

Real-shaped layers (RMSNorm, GQA attention over a KV cache, router + top-k, per-expert gated MLPs for the
experts hit only, shared experts, LM head + argmax) with random weights, run for a decode step (B × 1
tokens) or a verification step (B × (K+1) tokens). Routing is forced: the router GEMM, softmax and top-k
still run for their cost, but the experts used are those of a `StepRouting` sampled from the simulator's
routing model, so the measurement and the prediction see the same experts.

Every intermediate lives in a workspace allocated by `prepare` (with its views made there too), so the
timed step issues only the kernels listed in `moesim/simulator/plan_reference.py`, one aten call each,
and no host-side view or allocation bookkeeping beyond what those calls do. Keep the two in step:
`tests/test_validation_reference.py` counts the aten ops of a step against the plan.

torch is imported here at module level; import this module lazily (only when measuring).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from moesim.errors import MoesimError
from moesim.simulator.models.spec import ModelSpec
from moesim.validation.reference.configs import moe_layers
from moesim.validation.reference.routing_replay import StepRouting

RMS_EPS = 1e-6
ROPE_THETA = 1e6

TORCH_DTYPES: dict[str, torch.dtype] = {
    "fp32": torch.float32,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
}


def torch_dtype_for(spec: ModelSpec) -> torch.dtype:
    """The torch dtype the reference computes in: the spec's dense weight format (no quantised kernels here)."""
    fmt = spec.weight_format
    if fmt not in TORCH_DTYPES or (spec.expert_weight_format or fmt) != fmt:
        raise MoesimError(
            "weight_format",
            f"the torch reference runs {', '.join(TORCH_DTYPES)} weights only, got {fmt!r}"
            f"{'' if spec.expert_weight_format in (None, fmt) else f' with experts {spec.expert_weight_format!r}'}",
            "override the validation model's weight format",
        )
    return TORCH_DTYPES[fmt]


def check_reference_spec(spec: ModelSpec) -> None:
    """Refuse architectures the reference cannot run (it does GQA/MHA full attention only)."""
    from moesim.simulator.plan.reference import check_reference_model

    check_reference_model(spec)
    att = spec.attention
    if att.is_mla:
        raise MoesimError("attention", f"{spec.name}: the torch reference runs MHA/GQA only, not MLA")
    if any(kind != "full" for kind in spec.layer_attention):
        raise MoesimError("attention", f"{spec.name}: the torch reference runs full attention layers only")
    if att.num_heads % att.num_kv_heads:
        raise MoesimError("attention", f"{spec.name}: heads {att.num_heads} not a multiple of kv heads")
    if att.head_dim % 2:
        raise MoesimError("attention", f"{spec.name}: head_dim must be even for rotary embedding")
    if spec.is_moe and not 1 <= spec.top_k <= spec.n_experts:
        raise MoesimError("top_k", f"{spec.name}: top_k {spec.top_k} outside 1..{spec.n_experts}")


@dataclass
class LayerWeights:
    """Weights of one layer; matrices are stored [in, out] so the step runs x @ W."""

    attn_norm: torch.Tensor
    wqkv: torch.Tensor  # [H, (nq + 2 nkv) hd]
    qk_norm: torch.Tensor | None  # [nq + nkv, hd]
    wo: torch.Tensor  # [nq hd, H]
    ffn_norm: torch.Tensor
    router: torch.Tensor | None = None  # [H, N]
    w13: list[torch.Tensor] = field(default_factory=list)  # per expert [H, 2I] (gate | up)
    w2: list[torch.Tensor] = field(default_factory=list)  # per expert [I, H]
    # the `torch-fused` reference's stacked expert weights: [N, H, I] gate, [N, H, I] up, [N, I, H] down
    w1_all: torch.Tensor | None = None
    w3_all: torch.Tensor | None = None
    w2_all: torch.Tensor | None = None
    shared_w13: torch.Tensor | None = None  # [H, 2S]
    shared_w2: torch.Tensor | None = None  # [S, H]
    dense_w13: torch.Tensor | None = None  # [H, 2F] for dense FFN layers
    dense_w2: torch.Tensor | None = None


EXPERT_STYLES = ("torch-reference", "torch-fused")


class ReferenceModel:
    """Random-weight model of `spec` on `device`; `prepare` a step, then `step` (or `capture`) it.

    `style` picks the routed experts' kernels: 'torch-reference' loops over the distinct experts (two
    GEMMs each), 'torch-fused' runs one grouped GEMM per projection (`torch._grouped_mm`) over all of them.
    """

    def __init__(
        self,
        spec: ModelSpec,
        device: str = "cpu",
        seed: int = 0,
        dtype: torch.dtype | None = None,
        style: str = "torch-reference",
    ):
        check_reference_spec(spec)
        if style not in EXPERT_STYLES:
            raise MoesimError(
                "--reference", f"unknown reference style {style!r}", f"choose {' or '.join(EXPERT_STYLES)}"
            )
        self.style = style
        self.spec = spec
        # The grouped GEMM: torch's own on a CPU; on a GPU the Triton fused-MoE kernel where triton is present
        # (torch._grouped_mm on CUDA wants bf16 on sm90+), registered as one torch op either way.
        self._triton_grouped_mm: Any = None
        if style == "torch-fused" and torch.device(device).type == "cuda":
            from moesim.calibrate.suites.triton_kernels import grouped_mm_op, triton_available

            if triton_available():
                self._triton_grouped_mm = grouped_mm_op()
        self.device = torch.device(device)
        self.dtype = dtype or torch_dtype_for(spec)
        gen = torch.Generator(device=self.device).manual_seed(seed)
        att = spec.attention
        H, hd, nq, nkv = spec.hidden, att.head_dim, att.num_heads, att.num_kv_heads

        def rand(*shape: int, fan_in: int | None = None) -> torch.Tensor:
            t = torch.randn(*shape, generator=gen, device=self.device, dtype=self.dtype)
            if fan_in:
                t.mul_(fan_in**-0.5)
            return t

        def norm_weight(*shape: int) -> torch.Tensor:
            return rand(*shape).mul_(0.1).add_(1.0)

        self.embedding = rand(spec.vocab, H)
        self.final_norm = norm_weight(H)
        self.lm_head = rand(H, spec.vocab, fan_in=H)
        self.layers: list[LayerWeights] = []
        for ffn_kind in spec.layer_ffn:
            lw = LayerWeights(
                attn_norm=norm_weight(H),
                wqkv=rand(H, (nq + 2 * nkv) * hd, fan_in=H),
                qk_norm=norm_weight(nq + nkv, hd) if att.qk_norm else None,
                wo=rand(nq * hd, H, fan_in=nq * hd),
                ffn_norm=norm_weight(H),
            )
            if ffn_kind == "moe":
                n, width = spec.n_experts, spec.expert_width
                lw.router = rand(H, n, fan_in=H)
                w13_all, w2_all = rand(n, H, 2 * width, fan_in=H), rand(n, width, H, fan_in=width)
                lw.w13, lw.w2 = list(w13_all.unbind(0)), list(w2_all.unbind(0))
                if style == "torch-fused":
                    lw.w1_all = w13_all[:, :, :width].contiguous()
                    lw.w3_all = w13_all[:, :, width:].contiguous()
                    lw.w2_all = w2_all
                if spec.n_shared_experts:
                    s = spec.n_shared_experts * spec.shared_expert_width
                    lw.shared_w13 = rand(H, 2 * s, fan_in=H)
                    lw.shared_w2 = rand(s, H, fan_in=s)
            else:
                f = spec.dense_ffn_width
                if f <= 0:
                    raise MoesimError("dense_ffn_width", f"{spec.name}: dense layer with FFN width {f}")
                lw.dense_w13 = rand(H, 2 * f, fan_in=H)
                lw.dense_w2 = rand(f, H, fan_in=f)
            self.layers.append(lw)

    @property
    def moe_layers(self) -> tuple[int, ...]:
        return moe_layers(self.spec)

    # ------------------------------------------------------------------ preparation (not timed)

    def prepare(
        self, batch: int, tokens_per_seq: int, context_len: int, routing: StepRouting | None, seed: int = 1
    ) -> StepInputs:
        """Inputs, KV cache, forced routing and workspace for one step of B sequences × T new tokens."""
        spec, dev, dt = self.spec, self.device, self.dtype
        if batch < 1 or tokens_per_seq < 1 or context_len < 0:
            raise MoesimError("batch", "batch and tokens must be ≥ 1 and the context length ≥ 0")
        if spec.is_moe:
            if routing is None:
                raise MoesimError("routing", "an MoE step needs its forced routing")
            if (routing.batch, routing.tokens_per_seq, routing.top_k) != (batch, tokens_per_seq, spec.top_k):
                raise MoesimError("routing", "the routing sample is for a different step shape")
            if tuple(routing.moe_layers) != self.moe_layers:
                raise MoesimError("routing", "the routing sample covers different MoE layers than the model")
        gen = torch.Generator(device=dev).manual_seed(seed)
        att = spec.attention
        H, hd, nq, nkv = spec.hidden, att.head_dim, att.num_heads, att.num_kv_heads
        group = nq // nkv
        B, T, L = batch, tokens_per_seq, context_len
        M, S = B * T, L + T

        ids = torch.randint(0, spec.vocab, (M,), generator=gen, device=dev)
        # rotary tables for positions L..L+T-1; rotate_half(x)·sin == roll(x, hd/2)·sin_signed
        inv_freq = ROPE_THETA ** (-torch.arange(0, hd, 2, device=dev, dtype=torch.float64) / hd)
        pos = torch.arange(L, L + T, device=dev, dtype=torch.float64)
        angles = torch.outer(pos, inv_freq)
        cos = torch.cat([angles.cos(), angles.cos()], dim=-1)
        sin = torch.cat([-angles.sin(), angles.sin()], dim=-1)
        cos = cos.to(dt).view(1, T, 1, hd)
        sin = sin.to(dt).view(1, T, 1, hd)
        # additive causal mask over the cache, rows ordered (group member, new token)
        allowed = torch.arange(S, device=dev)[None, :] <= (L + torch.arange(T, device=dev))[:, None]
        mask_t = torch.zeros(T, S, device=dev, dtype=dt).masked_fill_(~allowed, float("-inf"))
        mask = mask_t.repeat(group, 1)

        ws = Workspace(B=B, T=T, L=L, M=M, S=S)
        ws.ids, ws.cos, ws.sin = ids, cos, sin
        ws.mask3 = mask.unsqueeze(0).expand(B * nkv, group * T, S)
        ws.h = torch.empty(M, H, device=dev, dtype=dt)
        ws.sq = torch.empty(M, H, device=dev, dtype=dt)
        ws.ms = torch.empty(M, 1, device=dev, dtype=dt)
        ws.xn = torch.empty(M, H, device=dev, dtype=dt)
        qkv = torch.empty(M, (nq + 2 * nkv) * hd, device=dev, dtype=dt)
        ws.qkv = qkv
        qkv4 = qkv.view(B, T, nq + 2 * nkv, hd)
        ws.qk = qkv4[:, :, : nq + nkv]
        v_new = qkv4[:, :, nq + nkv :]
        ws.qk_sq = torch.empty(B, T, nq + nkv, hd, device=dev, dtype=dt)
        ws.qk_ms = torch.empty(B, T, nq + nkv, 1, device=dev, dtype=dt)
        ws.qk_n = torch.empty(B, T, nq + nkv, hd, device=dev, dtype=dt)
        ws.qk_r = torch.empty(B, T, nq + nkv, hd, device=dev, dtype=dt)
        ws.q_src = ws.qk_r[:, :, :nq].view(B, T, nkv, group, hd).permute(0, 2, 3, 1, 4)
        ws.k_src = ws.qk_r[:, :, nq:].permute(0, 2, 1, 3)
        ws.v_src = v_new.permute(0, 2, 1, 3)
        ws.q_heads = torch.empty(B, nkv, group, T, hd, device=dev, dtype=dt)
        ws.q3 = ws.q_heads.view(B * nkv, group * T, hd)
        ws.scores = torch.empty(B * nkv, group * T, S, device=dev, dtype=dt)
        ws.attn = torch.empty(B * nkv, group * T, hd, device=dev, dtype=dt)
        ws.attn_src = ws.attn.view(B, nkv, group, T, hd).permute(0, 3, 1, 2, 4)
        ws.o_in = torch.empty(B, T, nkv, group, hd, device=dev, dtype=dt)
        ws.o_in2 = ws.o_in.view(M, nq * hd)
        ws.scale = hd**-0.5
        for _ in self.layers:
            k_cache = torch.randn(B, nkv, S, hd, generator=gen, device=dev, dtype=dt)
            v_cache = torch.randn(B, nkv, S, hd, generator=gen, device=dev, dtype=dt)
            ws.k_slot.append(k_cache[:, :, L:])
            ws.v_slot.append(v_cache[:, :, L:])
            ws.kT3.append(k_cache.view(B * nkv, S, hd).transpose(1, 2))
            ws.v3.append(v_cache.view(B * nkv, S, hd))
            ws.caches.append((k_cache, v_cache))
        if spec.is_moe:
            assert routing is not None
            self._prepare_moe(ws, routing)
        if spec.n_shared_experts:
            s = spec.n_shared_experts * spec.shared_expert_width
            ws.sgu = torch.empty(M, 2 * s, device=dev, dtype=dt)
            ws.sgate, ws.sup = ws.sgu[:, :s], ws.sgu[:, s:]
            ws.sact = torch.empty(M, s, device=dev, dtype=dt)
        if "dense" in spec.layer_ffn:
            f = spec.dense_ffn_width
            ws.dgu = torch.empty(M, 2 * f, device=dev, dtype=dt)
            ws.dgate, ws.dup = ws.dgu[:, :f], ws.dgu[:, f:]
            ws.dact = torch.empty(M, f, device=dev, dtype=dt)
        ws.logits = torch.empty(M, spec.vocab, device=dev, dtype=dt)
        return StepInputs(ws, routing)

    def _prepare_moe(self, ws: Workspace, routing: StepRouting) -> None:
        spec, dev, dt = self.spec, self.device, self.dtype
        M, H, k, width = ws.M, spec.hidden, spec.top_k, spec.expert_width
        P = M * k
        ws.router_logits = torch.empty(M, spec.n_experts, device=dev, dtype=dt)
        ws.gate = torch.empty(M, k, device=dev, dtype=dt)
        ws.gate_flat = ws.gate.view(P)
        ws.gsum = torch.empty(M, 1, device=dev, dtype=dt)
        ws.x_sorted = torch.empty(P, H, device=dev, dtype=dt)
        ws.w_sorted = torch.empty(P, device=dev, dtype=dt)
        ws.w_sorted_col = ws.w_sorted.view(P, 1)
        gu = torch.empty(P, 2 * width, device=dev, dtype=dt)
        act = torch.empty(P, width, device=dev, dtype=dt)
        ws.y_sorted = torch.empty(P, H, device=dev, dtype=dt)
        ws.act_sorted = act
        for layer in self.moe_layers:
            ids = routing.assignment(layer)
            order = np.argsort(ids.ravel(), kind="stable")
            experts, sizes = np.unique(ids.ravel(), return_counts=True)
            plan = MoeLayerInputs(
                forced_ids=torch.as_tensor(ids, dtype=torch.long, device=dev),
                sorted_pairs=torch.as_tensor(order, dtype=torch.long, device=dev),
                sorted_tokens=torch.as_tensor(order // k, dtype=torch.long, device=dev),
                experts=[int(e) for e in experts],
                offsets=torch.as_tensor(
                    np.cumsum(np.bincount(ids.ravel(), minlength=spec.n_experts)),
                    dtype=torch.int32,
                    device=dev,
                ),
            )
            if self._triton_grouped_mm is not None:
                from moesim.calibrate.suites.triton_kernels import moe_block_table

                assert plan.offsets is not None
                plan.block_table = moe_block_table(plan.offsets)
            bounds = np.concatenate([[0], np.cumsum(sizes)])
            for lo, hi in itertools.pairwise(bounds):
                plan.x.append(ws.x_sorted[lo:hi])
                plan.gu.append(gu[lo:hi])
                plan.gate.append(gu[lo:hi, :width])
                plan.up.append(gu[lo:hi, width:])
                plan.act.append(act[lo:hi])
                plan.y.append(ws.y_sorted[lo:hi])
            ws.moe[layer] = plan

    # ------------------------------------------------------------------ the timed step

    def _rms_norm(self, ws: Workspace, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        torch.pow(x, 2, out=ws.sq)
        torch.mean(ws.sq, -1, keepdim=True, out=ws.ms)
        ws.ms.add_(RMS_EPS)
        ws.ms.rsqrt_()
        torch.mul(x, ws.ms, out=ws.xn)
        ws.xn.mul_(weight)
        return ws.xn

    def step(self, inputs: StepInputs) -> tuple[torch.Tensor, torch.Tensor]:
        """One forward step; returns (logits [M, vocab], greedy next ids [M]). Issues only planned kernels."""
        ws, spec = inputs.ws, self.spec
        torch.index_select(self.embedding, 0, ws.ids, out=ws.h)
        for i, lw in enumerate(self.layers):
            self._attention(ws, lw, i)
            xn = self._rms_norm(ws, ws.h, lw.ffn_norm)
            if spec.layer_ffn[i] == "moe":
                self._moe(ws, lw, ws.moe[i], xn)
                if lw.shared_w13 is not None:
                    assert lw.shared_w2 is not None
                    torch.mm(xn, lw.shared_w13, out=ws.sgu)
                    F.silu(ws.sgate, inplace=True)
                    torch.mul(ws.sgate, ws.sup, out=ws.sact)
                    ws.h.addmm_(ws.sact, lw.shared_w2)
            else:
                assert lw.dense_w13 is not None and lw.dense_w2 is not None
                torch.mm(xn, lw.dense_w13, out=ws.dgu)
                F.silu(ws.dgate, inplace=True)
                torch.mul(ws.dgate, ws.dup, out=ws.dact)
                ws.h.addmm_(ws.dact, lw.dense_w2)
        xn = self._rms_norm(ws, ws.h, self.final_norm)
        torch.mm(xn, self.lm_head, out=ws.logits)
        next_ids = torch.argmax(ws.logits, -1)
        return ws.logits, next_ids

    def _attention(self, ws: Workspace, lw: LayerWeights, i: int) -> None:
        xn = self._rms_norm(ws, ws.h, lw.attn_norm)
        torch.mm(xn, lw.wqkv, out=ws.qkv)
        qk = ws.qk
        if lw.qk_norm is not None:
            torch.pow(qk, 2, out=ws.qk_sq)
            torch.mean(ws.qk_sq, -1, keepdim=True, out=ws.qk_ms)
            ws.qk_ms.add_(RMS_EPS)
            ws.qk_ms.rsqrt_()
            torch.mul(qk, ws.qk_ms, out=ws.qk_n)
            ws.qk_n.mul_(lw.qk_norm)
            qk = ws.qk_n
        rolled = torch.roll(qk, qk.shape[-1] // 2, -1)
        torch.mul(qk, ws.cos, out=ws.qk_r)
        ws.qk_r.addcmul_(rolled, ws.sin)
        ws.q_heads.copy_(ws.q_src)
        ws.k_slot[i].copy_(ws.k_src)
        ws.v_slot[i].copy_(ws.v_src)
        torch.baddbmm(ws.mask3, ws.q3, ws.kT3[i], alpha=ws.scale, out=ws.scores)
        probs = torch.softmax(ws.scores, -1)
        torch.bmm(probs, ws.v3[i], out=ws.attn)
        ws.o_in.copy_(ws.attn_src)
        ws.h.addmm_(ws.o_in2, lw.wo)

    def _moe(self, ws: Workspace, lw: LayerWeights, plan: MoeLayerInputs, xn: torch.Tensor) -> None:
        assert lw.router is not None
        torch.mm(xn, lw.router, out=ws.router_logits)
        probs = torch.softmax(ws.router_logits, -1)
        torch.topk(probs, self.spec.top_k, dim=-1)  # for its cost; the forced ids replace its choice
        torch.gather(probs, 1, plan.forced_ids, out=ws.gate)
        torch.sum(ws.gate, -1, keepdim=True, out=ws.gsum)
        ws.gate.div_(ws.gsum)
        torch.index_select(xn, 0, plan.sorted_tokens, out=ws.x_sorted)
        torch.index_select(ws.gate_flat, 0, plan.sorted_pairs, out=ws.w_sorted)
        y_sorted = ws.y_sorted
        if self.style == "torch-fused":
            assert lw.w1_all is not None and lw.w3_all is not None and lw.w2_all is not None
            gate = self._experts_mm(ws.x_sorted, lw.w1_all, plan)
            up = self._experts_mm(ws.x_sorted, lw.w3_all, plan)
            F.silu(gate, inplace=True)
            torch.mul(gate, up, out=ws.act_sorted)
            y_sorted = self._experts_mm(ws.act_sorted, lw.w2_all, plan)
        else:
            for j, e in enumerate(plan.experts):
                torch.mm(plan.x[j], lw.w13[e], out=plan.gu[j])
                F.silu(plan.gate[j], inplace=True)
                torch.mul(plan.gate[j], plan.up[j], out=plan.act[j])
                torch.mm(plan.act[j], lw.w2[e], out=plan.y[j])
        y_sorted.mul_(ws.w_sorted_col)
        ws.h.index_add_(0, plan.sorted_tokens, y_sorted)

    def _experts_mm(self, x: torch.Tensor, weights: torch.Tensor, plan: MoeLayerInputs) -> torch.Tensor:
        """One grouped GEMM over the sorted rows: the Triton kernel where prepared, else torch._grouped_mm."""
        if plan.block_table is not None:
            return self._triton_grouped_mm(x, weights, *plan.block_table)
        return torch._grouped_mm(x, weights, offs=plan.offsets)

    # ------------------------------------------------------------------ graph replay

    def capture(self, inputs: StepInputs) -> Callable[[], None]:
        """Capture the step into a CUDA graph; returns a function that replays it (CUDA only)."""
        if self.device.type != "cuda":
            raise MoesimError("launch", "graph replay needs a CUDA device", "use --launch eager on CPU")
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                self.step(inputs)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self.step(inputs)
        inputs.graph = graph
        return graph.replay


@dataclass
class MoeLayerInputs:
    """Forced routing of one MoE layer on the device, and per-expert views into the workspace."""

    forced_ids: torch.Tensor  # [M, k]
    sorted_pairs: torch.Tensor  # [M k] token-choice pairs sorted by expert
    sorted_tokens: torch.Tensor  # [M k] the token of each sorted pair
    experts: list[int]  # distinct experts hit, ascending
    offsets: torch.Tensor | None = None  # [N] int32 end row of each expert's group in the sorted rows (fused)
    block_table: tuple[torch.Tensor, torch.Tensor] | None = (
        None  # the Triton kernel's (rows, expert) per block
    )
    x: list[torch.Tensor] = field(default_factory=list)
    gu: list[torch.Tensor] = field(default_factory=list)
    gate: list[torch.Tensor] = field(default_factory=list)
    up: list[torch.Tensor] = field(default_factory=list)
    act: list[torch.Tensor] = field(default_factory=list)
    y: list[torch.Tensor] = field(default_factory=list)


@dataclass
class Workspace:
    """Every buffer and view the step touches, made before timing."""

    B: int
    T: int
    L: int
    M: int
    S: int
    scale: float = 1.0
    ids: Any = None
    cos: Any = None
    sin: Any = None
    mask3: Any = None
    h: Any = None
    sq: Any = None
    ms: Any = None
    xn: Any = None
    qkv: Any = None
    qk: Any = None
    qk_sq: Any = None
    qk_ms: Any = None
    qk_n: Any = None
    qk_r: Any = None
    q_src: Any = None
    k_src: Any = None
    v_src: Any = None
    q_heads: Any = None
    q3: Any = None
    scores: Any = None
    attn: Any = None
    attn_src: Any = None
    o_in: Any = None
    o_in2: Any = None
    k_slot: list[Any] = field(default_factory=list)
    v_slot: list[Any] = field(default_factory=list)
    kT3: list[Any] = field(default_factory=list)
    v3: list[Any] = field(default_factory=list)
    caches: list[Any] = field(default_factory=list)
    router_logits: Any = None
    gate: Any = None
    gate_flat: Any = None
    gsum: Any = None
    x_sorted: Any = None
    w_sorted: Any = None
    w_sorted_col: Any = None
    y_sorted: Any = None
    act_sorted: Any = None
    moe: dict[int, MoeLayerInputs] = field(default_factory=dict)
    sgu: Any = None
    sgate: Any = None
    sup: Any = None
    sact: Any = None
    dgu: Any = None
    dgate: Any = None
    dup: Any = None
    dact: Any = None
    logits: Any = None


@dataclass
class StepInputs:
    """A prepared step: its workspace and the routing it was prepared with."""

    ws: Workspace
    routing: StepRouting | None
    graph: Any = None

    @property
    def batch(self) -> int:
        return self.ws.B

    @property
    def tokens_per_seq(self) -> int:
        return self.ws.T


def count_step_ops(model: ReferenceModel, inputs: StepInputs) -> tuple[list[str], list[str]]:
    """(kernel ops, view ops) the step dispatches, by aten name, in order (runs the step once)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    kernels: list[str] = []
    views: list[str] = []

    class _Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            (views if func.is_view else kernels).append(str(func.overloadpacket.__name__))
            return func(*args, **(kwargs or {}))

    with _Count():
        model.step(inputs)
    return kernels, views


def dense_reference_logits(model: ReferenceModel, inputs: StepInputs) -> torch.Tensor:
    """The same step computed plainly in float64, token by token and expert by expert (for tests).

    Uses the KV cache contents as they were before the step (positions < L) and the model's weights;
    every token is sent through each of its forced experts by brute force.
    """
    spec, ws = model.spec, inputs.ws
    att = spec.attention
    hd, nq, nkv = att.head_dim, att.num_heads, att.num_kv_heads
    group = nq // nkv
    B, T, L = ws.B, ws.T, ws.L
    f64 = torch.float64

    def rms(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + RMS_EPS) * w.to(f64)

    def rope(x: torch.Tensor) -> torch.Tensor:  # x [B, T, heads, hd]
        half = hd // 2
        cos = ws.cos.to(f64)
        sin_abs = ws.sin.to(f64)[..., half:]
        rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rot * torch.cat([sin_abs, sin_abs], dim=-1)

    def mlp(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
        width = w2.shape[0]
        gu = x @ w13.to(f64)
        return (F.silu(gu[..., :width]) * gu[..., width:]) @ w2.to(f64)

    h = model.embedding.to(f64)[ws.ids]
    for i, lw in enumerate(model.layers):
        x = rms(h, lw.attn_norm)
        qkv = (x @ lw.wqkv.to(f64)).view(B, T, nq + 2 * nkv, hd)
        qk, v_new = qkv[:, :, : nq + nkv], qkv[:, :, nq + nkv :]
        if lw.qk_norm is not None:
            qk = rms(qk, lw.qk_norm)
        qk = rope(qk)
        q, k_new = qk[:, :, :nq], qk[:, :, nq:]
        k_cache, v_cache = (c.to(f64).clone() for c in ws.caches[i])
        k_cache[:, :, L:] = k_new.permute(0, 2, 1, 3)
        v_cache[:, :, L:] = v_new.permute(0, 2, 1, 3)
        out = torch.zeros(B, T, nq, hd, dtype=f64, device=h.device)
        for b in range(B):
            for t in range(T):
                for head in range(nq):
                    kv = head // group
                    keys = k_cache[b, kv, : L + t + 1]
                    vals = v_cache[b, kv, : L + t + 1]
                    w = torch.softmax(keys @ q[b, t, head] * hd**-0.5, dim=0)
                    out[b, t, head] = w @ vals
        h = h + out.reshape(B * T, nq * hd) @ lw.wo.to(f64)
        x = rms(h, lw.ffn_norm)
        if spec.layer_ffn[i] == "moe":
            assert lw.router is not None and inputs.routing is not None
            probs = torch.softmax(x @ lw.router.to(f64), dim=-1)
            ids = inputs.routing.assignment(i)
            moe_out = torch.zeros_like(h)
            for tok in range(B * T):
                chosen = [int(e) for e in ids[tok]]
                gates = probs[tok, chosen] / probs[tok, chosen].sum()
                for g, e in zip(gates, chosen, strict=True):
                    moe_out[tok] += g * mlp(x[tok], lw.w13[e], lw.w2[e])
            h = h + moe_out
            if lw.shared_w13 is not None:
                assert lw.shared_w2 is not None
                h = h + mlp(x, lw.shared_w13, lw.shared_w2)
        else:
            assert lw.dense_w13 is not None and lw.dense_w2 is not None
            h = h + mlp(x, lw.dense_w13, lw.dense_w2)
    return rms(h, model.final_norm) @ model.lm_head.to(f64)
