"""Recording a trace from a tiny randomly initialised transformers MoE model (no downloads)."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


@pytest.mark.torch
@pytest.mark.slow
def test_record_from_a_small_config(tmp_path) -> None:
    from moesim.calibrate.routing_record import record_trace

    config = transformers.Qwen3MoeConfig(
        vocab_size=300,
        hidden_size=32,
        intermediate_size=64,
        moe_intermediate_size=16,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        num_experts=16,
        num_experts_per_tok=4,
        max_position_embeddings=128,
    )
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config.to_dict()))
    prompts = ["hello world", "routing statistics"]
    trace = record_trace(str(path), prompts, new_tokens=3)
    assert trace.n_experts == 16 and trace.top_k == 4 and trace.n_layers == 2
    assert trace.layer_indices == (0, 1)
    lengths = np.bincount(trace.sequence_ids)
    assert lengths.tolist() == [len(p) + 2 for p in prompts]  # prompt bytes + generated tokens fed back
