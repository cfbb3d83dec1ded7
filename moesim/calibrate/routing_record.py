"""Record routing traces from a Hugging Face `transformers` MoE model with forward hooks on its routers.

Optional (extra `record`): torch and transformers are imported lazily, only here. A router is a submodule
named `gate` or `router` whose parent also holds `experts`; its output is either the router logits
[tokens, N] (top-k taken here) or a tuple that includes the chosen indices [tokens, k] (transformers ≥ 5).
Given only a config.json, the model is built with random weights (seeded) and prompts are tokenised as
UTF-8 bytes modulo the vocabulary — routing statistics of an untrained model, useful to test the pipeline.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from moesim.errors import MoesimError
from moesim.reading import read_json_table
from moesim.simulator.bounds import check_bytes, check_count
from moesim.simulator.routing.settings import RECORD_DEFAULTS
from moesim.simulator.routing.trace import RoutingTrace

EXPERT_COUNT_FIELDS = ("num_experts", "n_routed_experts", "num_local_experts", "moe_num_experts")
TOP_K_FIELDS = ("num_experts_per_tok", "moe_topk", "top_k")


def _config_value(config: Any, fields: Sequence[str], what: str) -> int:
    for name in fields:
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    raise MoesimError(
        "--hf-model", f"the config names no {what} (looked for {', '.join(fields)})", "is it an MoE model?"
    )


def load_model(path_or_config: str, seed: int = 0) -> tuple[Any, Any]:
    """(model, tokenizer or None): pretrained weights from a directory, random weights from a config."""
    try:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    except ImportError:
        raise MoesimError(
            "--hf-model", "recording needs torch and transformers", "pip install 'moesim[record]'"
        ) from None
    path = Path(path_or_config)
    if not path.exists():
        raise MoesimError("--hf-model", f"{path} does not exist", "give a model directory or a config.json")
    has_weights = path.is_dir() and (any(path.glob("*.safetensors")) or any(path.glob("*.bin")))
    if path.is_dir():
        config = AutoConfig.from_pretrained(path)
    else:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            config = AutoConfig.for_model(data.pop("model_type"), **data)
        except (json.JSONDecodeError, KeyError, ValueError) as error:
            raise MoesimError("--hf-model", f"{path} is not a usable config.json ({error})") from None
    if has_weights:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    else:
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config)
    tokenizer = None
    if path.is_dir() and (any(path.glob("tokenizer*")) or (path / "vocab.json").exists()):
        tokenizer = AutoTokenizer.from_pretrained(path)
    model.eval()
    return model, tokenizer


def find_routers(model: Any) -> list[tuple[str, Any]]:
    """(name, module) of every router: a `gate`/`router` child of a module that also has `experts`."""
    routers = []
    for name, module in model.named_modules():
        if not hasattr(module, "experts"):
            continue
        for child in ("gate", "router"):
            if hasattr(module, child):
                routers.append((f"{name}.{child}", getattr(module, child)))
                break
    return routers


def _indices(output: Any, n_experts: int, top_k: int) -> np.ndarray:
    import torch

    items = output if isinstance(output, tuple | list) else (output,)
    for item in items:
        if isinstance(item, torch.Tensor) and not item.is_floating_point() and item.shape[-1] == top_k:
            return item.reshape(-1, top_k).cpu().numpy()
    for item in items:
        if isinstance(item, torch.Tensor) and item.is_floating_point() and item.shape[-1] == n_experts:
            logits = item.reshape(-1, n_experts).float()
            return torch.topk(logits, top_k, dim=-1).indices.cpu().numpy()
    raise MoesimError("--hf-model", "could not read expert choices from a router's output")


def _tokenise(tokenizer: Any, prompt: str, vocab_size: int, max_tokens: int) -> list[int]:
    if tokenizer is not None:
        ids = list(tokenizer(prompt)["input_ids"])
    else:
        ids = [byte % vocab_size for byte in prompt.encode("utf-8")]
    return ids[:max_tokens]


FLOAT32_BYTES = 4
"""Bytes per parameter of the model `load_model` builds (float32, the dtype it asks transformers for)."""


def model_bytes(path_or_config: str) -> float:
    """Estimated memory of the float32 model `load_model` would build, from its config alone (before torch is
    imported or any weight allocated): every parameter moesim's reader counts (`weights.param_counts`, MTP
    modules included) × 4 bytes; for a family that reader does not know, the dominant terms — per layer
    4·hidden² of attention and experts × 3·hidden·width of gated experts, and the two vocabulary matrices."""
    from moesim.simulator.models.hf import load_hf_config
    from moesim.simulator.models.weights import param_counts

    path = Path(path_or_config)
    if not path.exists():
        raise MoesimError("--hf-model", f"{path} does not exist", "give a model directory or a config.json")
    try:
        return float(param_counts(load_hf_config(path)).total_with_mtp * FLOAT32_BYTES)
    except MoesimError:
        config = read_json_table("--hf-model", path / "config.json" if path.is_dir() else path, "config.json")
        config = config.get("text_config", config) if isinstance(config.get("text_config"), dict) else config

    def count(*names: str) -> int:
        values = [config[name] for name in names if isinstance(config.get(name), int | float)]
        return check_count(values[0], names[0], str(path), low=0) if values else 0

    hidden, layers, vocab = count("hidden_size"), count("num_hidden_layers"), count("vocab_size")
    experts = max(1, count(*EXPERT_COUNT_FIELDS))
    width = count("moe_intermediate_size", "intermediate_size")
    params = layers * (4 * hidden**2 + experts * 3 * hidden * width) + 2 * vocab * hidden
    return float(params * FLOAT32_BYTES)


def record_trace(
    path_or_config: str,
    prompts: Sequence[str],
    max_tokens: int = RECORD_DEFAULTS.max_tokens,
    new_tokens: int = RECORD_DEFAULTS.new_tokens,
    seed: int = RECORD_DEFAULTS.seed,
    max_memory_gb: float = RECORD_DEFAULTS.max_memory_gb,
) -> RoutingTrace:
    """Run each prompt through the model (and optionally greedy-generate) and record every router's choices;
    a model estimated above `max_memory_gb` is refused before it is built."""
    check_bytes(
        model_bytes(path_or_config),
        max_memory_gb,
        f"building {Path(path_or_config).name} in float32",
        "record from a scaled-down config (fewer layers, experts or a narrower width)",
    )
    import torch

    model, tokenizer = load_model(path_or_config, seed)
    config = model.config
    n_experts = _config_value(config, EXPERT_COUNT_FIELDS, "expert count")
    top_k = _config_value(config, TOP_K_FIELDS, "top-k")
    routers = find_routers(model)
    if not routers:
        raise MoesimError("--hf-model", "found no MoE router modules (gate/router beside experts)")
    captured: list[list[np.ndarray]] = [[] for _ in routers]
    handles = [
        module.register_forward_hook(
            lambda _m, _i, out, slot=i: captured[slot].append(_indices(out, n_experts, top_k))
        )
        for i, (_, module) in enumerate(routers)
    ]
    layer_indices = tuple(_layer_number(name, i) for i, (name, _) in enumerate(routers))
    experts, sequence_ids = [], []
    try:
        with torch.no_grad():
            for seq, prompt in enumerate(prompts):
                ids = _tokenise(tokenizer, prompt, config.vocab_size, max_tokens)
                if not ids:
                    continue
                for store in captured:
                    store.clear()
                input_ids = torch.tensor([ids])
                if new_tokens > 0:
                    model.generate(
                        input_ids,
                        attention_mask=torch.ones_like(input_ids),
                        max_new_tokens=new_tokens,
                        do_sample=False,
                        pad_token_id=0,
                    )
                else:
                    model(input_ids)
                per_layer = [np.concatenate(store, axis=0) for store in captured]
                tokens = min(chosen.shape[0] for chosen in per_layer)
                experts.append(np.stack([chosen[:tokens] for chosen in per_layer], axis=1))
                sequence_ids.append(np.full(tokens, seq))
    finally:
        for handle in handles:
            handle.remove()
    if not experts:
        raise MoesimError("--prompts", "no prompt produced any tokens")
    return RoutingTrace.create(
        np.concatenate(experts), np.concatenate(sequence_ids), n_experts, layer_indices, source=path_or_config
    )


def _layer_number(name: str, position: int) -> int:
    """The decoder layer index in a module name like `model.layers.3.mlp.gate` (else the router's position)."""
    parts = name.split(".")
    for before, after in itertools.pairwise(parts):
        if before in ("layers", "h", "blocks") and after.isdigit():
            return int(after)
    return position
