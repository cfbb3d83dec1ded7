"""The Triton kernels' logic (L2 read, fused grouped MoE GEMM), checked under Triton's CPU interpreter.

Run in a subprocess with TRITON_INTERPRET=1 (the variable must be set before triton is first imported);
skipped where triton is not installed (CPU torch does not ship it; CUDA torch does).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")

CHECK = textwrap.dedent(
    """
    import torch
    from moesim.calibrate.suites.triton_kernels import grouped_mm_op, grouped_mm_triton, l2_read, moe_block_table

    buffer = torch.rand(3 * 4096 + 123, dtype=torch.float32)
    for passes in (1, 3):
        partial = l2_read(buffer, passes, programs=2)
        torch.testing.assert_close(partial.sum(), buffer.sum() * passes, rtol=1e-5, atol=1e-3)

    torch.manual_seed(0)
    counts = torch.tensor([3, 0, 17, 1, 0, 5])  # empty experts and one spanning two 16-row blocks
    offsets = torch.cumsum(counts, 0).to(torch.int32)
    rows, experts = moe_block_table(offsets, 16)
    assert experts.tolist() == [0, 2, 2, 3, 5]
    assert (rows >= 0).sum().item() == int(counts.sum())
    x = torch.randn(int(counts.sum()), 40)
    w = torch.randn(6, 40, 72)  # torch._grouped_mm wants 16-byte strides
    expected = torch._grouped_mm(x, w, offs=offsets)
    torch.testing.assert_close(grouped_mm_triton(x, w, rows, experts), expected, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(grouped_mm_op()(x, w, rows, experts), expected, rtol=1e-4, atol=1e-4)

    # the torch-fused reference step with the Triton kernel wired in (as on a GPU) computes the same logits
    from moesim.simulator.models.spec import AttentionSpec, ModelSpec
    from moesim.simulator.routing.independent import IndependentRouting
    from moesim.validation.reference.torch_model import ReferenceModel
    from moesim.validation.reference.routing_replay import sample_step_routing

    spec = ModelSpec(
        name="tiny", hidden=32, vocab=48, layer_attention=("full",), layer_ffn=("moe",),
        attention=AttentionSpec(num_heads=4, num_kv_heads=2, head_dim=8), n_experts=8, top_k=2,
        expert_width=16, weight_format="fp32",
    )
    logits = []
    for triton_kernel in (False, True):
        model = ReferenceModel(spec, seed=0, style="torch-fused")
        if triton_kernel:
            model._triton_grouped_mm = grouped_mm_op()
        routing = sample_step_routing(IndependentRouting(), 8, 2, 3, 2, model.moe_layers, 1)
        inputs = model.prepare(3, 2, 4, routing)
        assert (inputs.ws.moe[0].block_table is not None) == triton_kernel
        logits.append(model.step(inputs)[0])
    torch.testing.assert_close(logits[1], logits[0], rtol=1e-4, atol=1e-4)
    print("ok")
    """
)


def test_triton_kernels_compute_what_torch_does_under_the_interpreter():
    env = dict(os.environ, TRITON_INTERPRET="1")
    done = subprocess.run(
        [sys.executable, "-c", CHECK], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("ok")
