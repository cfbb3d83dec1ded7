"""Plans build kernels and tensor reads through fast constructors (plan/kernels.py `new_kernel`, `new_read`,
`joined`): they must make exactly the objects the dataclasses make."""

from __future__ import annotations

import dataclasses

from moesim.simulator.plan.kernels import Kernel, TensorRead, joined, new_kernel, new_read


def test_new_kernel_is_the_dataclass_kernel() -> None:
    reads = (new_read("L0.w", 64.0, 3, 16.0), new_read("x", 8.0))
    assert reads == (TensorRead("L0.w", 64.0, 3, 16.0), TensorRead("x", 8.0))
    assert hash(reads[0]) == hash(TensorRead("L0.w", 64.0, 3, 16.0))
    plain = new_kernel("norm", "other", 4.0, reads)
    assert plain == Kernel("norm", "other", 4.0, reads)
    assert repr(plain) == repr(Kernel("norm", "other", 4.0, reads))
    full = {"write_bytes": 2.0, "m_tokens": 8, "dtype": "fp8", "layer": 3, "stream": 1, "write_tensor": "h"}
    extra = {"join": True, "experts": 5.0, "attention_units": 7.0, "attention_kind": "mla"}
    built = new_kernel("gemm", "routed_experts", 1e6, reads, **full, **extra)
    reference = Kernel("gemm", "routed_experts", 1e6, reads, **full, **extra)  # type: ignore[arg-type]
    assert built == reference and hash(built) == hash(reference)
    assert dataclasses.asdict(built) == dataclasses.asdict(reference)
    assert set(vars(built)) == {f.name for f in dataclasses.fields(Kernel)}


def test_joined_is_replace_join() -> None:
    kernel = new_kernel("attn", "attention", 10.0, (new_read("kv", 4.0),), stream=1)
    assert joined(kernel) == dataclasses.replace(kernel, join=True)
    assert not kernel.join and joined(kernel).join
