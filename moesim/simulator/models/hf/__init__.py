"""Import a Hugging Face `config.json` into a ModelSpec: one reader per family group, a general reader for
the rest, and a record of what was assumed and which keys were not read.

Family readers follow the transformers 5.23 configuration classes (`configuration_<family>.py`: key
names, defaults, per-layer lists) and modelling files (which layers are MoE, which attention each layer
runs, which biases, norms and gates exist). Multimodal wrappers are read through their text model.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

from moesim.errors import MoesimError
from moesim.reading import check_finite_numbers, read_json_table
from moesim.simulator.models.hf import deepseek, general, gqa_moe, hybrid, qwen
from moesim.simulator.models.hf.reader import HfConfig
from moesim.simulator.models.spec import ModelSpec
from moesim.simulator.models.validate import validate_spec

Reader = Callable[[HfConfig, str], dict[str, Any]]

FAMILIES: dict[str, Reader] = {
    "deepseek_v2": deepseek.deepseek,
    "deepseek_v3": deepseek.deepseek,
    "kimi_k2": deepseek.deepseek,
    "glm4_moe_lite": deepseek.deepseek,
    "deepseek_v32": deepseek.deepseek_sparse,
    "glm_moe_dsa": deepseek.deepseek_sparse,
    "deepseek_v4": deepseek.deepseek_v4,
    "qwen2_moe": qwen.qwen_moe,
    "qwen3_moe": qwen.qwen_moe,
    "qwen3_vl_moe_text": qwen.qwen_moe,
    "qwen3_omni_moe_text": qwen.qwen_moe,
    "qwen3_next": qwen.qwen_next,
    "qwen3_5_moe_text": qwen.qwen_next,
    "mixtral": gqa_moe.mixtral,
    "phimoe": gqa_moe.mixtral,
    "minimax_m2": gqa_moe.mixtral,
    "olmoe": gqa_moe.olmoe,
    "flex_olmo": gqa_moe.olmoe,
    "granitemoe": gqa_moe.granitemoe,
    "granitemoeshared": gqa_moe.granitemoe,
    "granitemoe_swa": gqa_moe.granitemoe,
    "glm4_moe": gqa_moe.glm4_moe,
    "glm4v_moe_text": gqa_moe.glm4_moe,
    "ernie4_5_moe": gqa_moe.ernie,
    "hunyuan_v1_moe": gqa_moe.hunyuan,
    "exaone_moe": gqa_moe.exaone,
    "afmoe": gqa_moe.afmoe,
    "cohere2_moe": gqa_moe.cohere2_moe,
    "mimo_v2_flash": gqa_moe.mimo_v2_flash,
    "gpt_oss": gqa_moe.gpt_oss,
    "llama4_text": gqa_moe.llama4,
    "dbrx": gqa_moe.dbrx,
    "grok-1": gqa_moe.grok,
    "grok1": gqa_moe.grok,
    "jetmoe": gqa_moe.jetmoe,
    "gemma4_text": gqa_moe.gemma4,
    "minimax": hybrid.minimax,
    "granitemoehybrid": hybrid.granitemoehybrid,
    "lfm2_moe": hybrid.lfm2_moe,
    "qwen2": general.dense,
    "qwen3": general.dense,
    "llama": general.dense,
    "mistral": general.dense,
}
# Wrappers whose language model sits in a nested config (vision / audio towers are not modelled).
WRAPPERS: dict[str, tuple[str, ...]] = {
    "kimi_k25": ("text_config",),
    "qwen3_vl_moe": ("text_config",),
    "qwen3_5_moe": ("text_config",),
    "qwen3_omni_moe": ("thinker_config", "text_config"),
    "glm4v_moe": ("text_config",),
    "llama4": ("text_config",),
    "gemma4": ("text_config",),
}
# The text model type each wrapper nests, for configs whose nested part omits `model_type`.
_NESTED_TYPES = {
    "kimi_k25": "deepseek_v3",
    "qwen3_vl_moe": "qwen3_vl_moe_text",
    "qwen3_5_moe": "qwen3_5_moe_text",
    "qwen3_omni_moe": "qwen3_omni_moe_text",
    "glm4v_moe": "glm4v_moe_text",
    "llama4": "llama4_text",
    "gemma4": "gemma4_text",
}
_INHERITED = ("tie_word_embeddings", "torch_dtype", "dtype", "quantization_config")
SUPPORTED_MODEL_TYPES: tuple[str, ...] = tuple(sorted({*FAMILIES, *WRAPPERS}))


def _text_model(cfg: HfConfig, model_type: str, path: tuple[str, ...]) -> tuple[HfConfig, str]:
    """The language model of a wrapper config (with the wrapper's dtype, tying and quantisation)."""
    text, towers = cfg, []
    for key in path:
        if not isinstance(text.data.get(key), dict):
            raise MoesimError(
                text.field(key), "is missing", f"a {model_type} config nests its language model here"
            )
        towers += [
            text.prefix + k
            for k in text.data
            if k != key and (k.endswith("_config") or k.startswith(("projection", "mm_")))
        ]
        text = text.sub(key)
    for key in _INHERITED:  # the wrapper's tying decides (transformers ties the wrapper's lm_head)
        if key in cfg.data and (key not in text.data or key == "tie_word_embeddings"):
            text.data[key] = cfg.data[key]
            cfg.used.add(key)
    if towers:
        cfg.assume(f"{', '.join(sorted(towers))}: not modelled (a text decode step does not run them)")
        cfg.used.update(towers)
        cfg.not_modelled.update(towers)
    nested = text.data.get("model_type") or _NESTED_TYPES.get(model_type, f"{model_type}_text")
    text.used.add(text.prefix + "model_type")
    return text, nested


def spec_from_hf_config(config: dict[str, Any], name: str, origin: str = "config.json") -> ModelSpec:
    """The ModelSpec of a Hugging Face `config.json` (already parsed), named `name`, validated.

    Known families use their reader; any other `model_type` goes through the general reader, whose
    assumptions are recorded on the spec with the keys nobody read. Errors name `origin` and the key.
    """
    return _read_config(config, name, origin)[0]


def config_keys_read(config: dict[str, Any], origin: str = "config.json") -> frozenset[str]:
    """The keys of a Hugging Face config (dotted within nested configs) whose values reach the model; every
    other key is listed by `moesim models` as ignored, or changes neither weights nor step time."""
    return _read_config(config, "config", origin)[1].keys_read()


def _dotted(config: dict[str, Any], key: str) -> Any:
    """The value at dotted `key` (keys of nested configs joined by dots), None where there is none."""
    value: Any = config
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _read_config(config: dict[str, Any], name: str, origin: str) -> tuple[ModelSpec, HfConfig]:
    if not isinstance(config, dict):
        raise MoesimError(origin, "is not a JSON object", "point at a model's config.json")
    cfg = HfConfig(copy.deepcopy(config), origin)
    model_type = cfg.get("model_type", None)
    if not isinstance(model_type, str) or not model_type:
        raise MoesimError(cfg.field("model_type"), "is missing", "a config.json names its model_type")
    path = WRAPPERS.get(model_type)
    if path is None and model_type not in FAMILIES and isinstance(config.get("text_config"), dict):
        path = ("text_config",)  # an unknown multimodal wrapper: read its language model
    text, family = _text_model(cfg, model_type, path) if path else (cfg, model_type)
    reader = FAMILIES.get(family, general.general)
    try:
        fields = reader(text, family)
    except (TypeError, ValueError, AttributeError, KeyError, IndexError) as err:  # a value of the wrong shape
        raise MoesimError(
            origin,
            f"cannot be read as a {family} config ({type(err).__name__}: {err})",
            "check the config's values",
        ) from None
    if path:
        fields["family"] = model_type
    for key in sorted(
        cfg.keys_read()
    ):  # NaN / Infinity in a key that reaches the model (a reader of its own may
        value = _dotted(
            config, key
        )  # take a float as is); other keys may hold them (Mamba's time_step_limit)
        if not isinstance(value, dict):
            check_finite_numbers(f"{origin}:{key}", value)
    spec = ModelSpec(name=name, **fields, assumptions=tuple(cfg.assumptions), ignored_keys=cfg.ignored_keys())
    try:
        return validate_spec(spec), cfg
    except MoesimError as err:
        raise MoesimError(f"{origin}:{err.field}", err.problem, err.fix) from None


def load_hf_config(path: str | Path, name: str | None = None) -> ModelSpec:
    """Read a Hugging Face config.json (or a directory holding one) into a ModelSpec.

    The name defaults to the directory name for `.../config.json`, else the file stem.
    """
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    config = read_json_table(str(path), path, "Hugging Face config.json")
    return spec_from_hf_config(
        config, name=config_model_name(path) if name is None else name, origin=str(path)
    )


def config_model_name(path: Path) -> str:
    """The model's name from its config file's path: the folder of a config.json, else the file's stem."""
    return path.parent.name if path.stem == "config" and path.parent.name else path.stem


__all__ = [
    "FAMILIES",
    "SUPPORTED_MODEL_TYPES",
    "WRAPPERS",
    "config_keys_read",
    "config_model_name",
    "load_hf_config",
    "spec_from_hf_config",
]
