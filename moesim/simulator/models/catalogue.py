"""The catalogue of real models (one TOML file each in moesim/model_catalogue/) and spec ⇄ dict round trips.

A catalogue file holds the ModelSpec's scalar fields at top level (same names), and three tables:
`[layers]` (a regular pattern: count, dense_prefix, moe_every, moe_offset, attention_cycle — or explicit
per-layer lists `attention` and `ffn`), `[attention]` and, for hybrid models, `[linear_attention]`.
"""

from __future__ import annotations

import difflib
import functools
from dataclasses import MISSING, fields
from importlib import resources
from pathlib import Path
from typing import Any

from moesim.errors import MoesimError
from moesim.reading import parse_toml, read_table
from moesim.simulator.bounds import MAX_LAYERS, check_count
from moesim.simulator.models.layers import LayerPattern, layer_pattern
from moesim.simulator.models.overrides import OVERRIDE_OPTIONS, apply_overrides, scalar_type
from moesim.simulator.models.spec import (
    ATTENTION_KINDS,
    FFN_KINDS,
    AttentionSpec,
    LinearAttentionSpec,
    ModelSpec,
)
from moesim.simulator.models.validate import validate_spec

_STRUCTURED = (
    "layer_attention",
    "layer_ffn",
    "attention",
    "linear_attention",
    "full_attention",
    "assumptions",
    "ignored_keys",
)
_TEXT_LISTS = ("assumptions", "ignored_keys")
_LAYER_KEYS = ("count", "dense_prefix", "moe_every", "moe_offset", "attention_cycle", "attention", "ffn")


def _check_value(origin: str, key: str, value: object, type_text: str) -> object:
    expected = scalar_type(type_text)
    optional = "None" in type_text
    where = f"{origin}:{key}"
    if value is None and optional:
        return None
    if expected is bool:
        ok = isinstance(value, bool)
    elif expected is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif expected is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    else:
        ok = isinstance(value, str)
    if not ok:
        raise MoesimError(
            where, f"expects {expected.__name__}, got {value!r}", f"write {key} as a TOML {expected.__name__}"
        )
    return float(value) if expected is float else value  # type: ignore[arg-type]


def _dataclass_from_table(cls: Any, table: object, origin: str, prefix: str) -> Any:
    if not isinstance(table, dict):
        raise MoesimError(f"{origin}:{prefix}", f"must be a table, got {table!r}", f"write it as [{prefix}]")
    known = {f.name: f for f in fields(cls)}
    unknown = sorted(set(table) - set(known))
    if unknown:
        raise MoesimError(
            f"{origin}:{prefix}.{unknown[0]}", "unknown key", f"valid keys: {', '.join(sorted(known))}"
        )
    values = {}
    for name, f in known.items():
        if name in table:
            values[name] = _check_value(origin, f"{prefix}.{name}", table[name], str(f.type))
        elif f.default is MISSING:
            raise MoesimError(f"{origin}:{prefix}.{name}", "is missing", f"add {name} to [{prefix}]")
    return cls(**values)


def _layers_from_table(table: object, origin: str) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    if not isinstance(table, dict):
        raise MoesimError(f"{origin}:layers", "is missing or not a table", "add a [layers] table")
    unknown = sorted(set(table) - set(_LAYER_KEYS))
    if unknown:
        raise MoesimError(
            f"{origin}:layers.{unknown[0]}", "unknown key", f"valid keys: {', '.join(_LAYER_KEYS)}"
        )
    if "attention" in table or "ffn" in table:
        attention, ffn = table.get("attention"), table.get("ffn")
        for key, seq, kinds in (("attention", attention, ATTENTION_KINDS), ("ffn", ffn, FFN_KINDS)):
            if not isinstance(seq, list) or not all(kind in kinds for kind in seq):
                raise MoesimError(
                    f"{origin}:layers.{key}",
                    f"must be a list of {'/'.join(kinds)}, got {seq!r}",
                    "give one kind per layer",
                )
        assert isinstance(attention, list) and isinstance(ffn, list)
        return tuple(attention), tuple(ffn)
    values: dict[str, Any] = {}
    for key in ("count", "dense_prefix", "moe_every", "moe_offset"):
        if key in table:
            values[key] = _check_value(origin, f"layers.{key}", table[key], "int")
    if "count" not in values:
        raise MoesimError(f"{origin}:layers.count", "is missing", "give the layer count")
    check_count(values["count"], f"{origin}:layers.count", high=MAX_LAYERS, fix="give the layer count")
    cycle = table.get("attention_cycle", ["full"])
    if not isinstance(cycle, list) or not cycle or not all(kind in ATTENTION_KINDS for kind in cycle):
        raise MoesimError(
            f"{origin}:layers.attention_cycle",
            f"must be a non-empty list of {'/'.join(ATTENTION_KINDS)}, got {cycle!r}",
            'e.g. ["sliding", "full"]',
        )
    pattern = LayerPattern(
        n_layers=values["count"],
        dense_prefix=values.get("dense_prefix", 0),
        moe_every=values.get("moe_every", 1),
        moe_offset=values.get("moe_offset", 0),
        attention_cycle=tuple(cycle),
    )
    try:
        return pattern.build()
    except MoesimError as err:
        raise MoesimError(f"{origin}:{err.field}", err.problem, err.fix) from None


def spec_from_dict(data: dict[str, Any], origin: str = "<dict>") -> ModelSpec:
    """Build and validate a ModelSpec from a catalogue-style dict; errors name `origin` and the field."""
    if not isinstance(data, dict):
        raise MoesimError(origin, "is not a table of model fields")
    spec_fields = {f.name: f for f in fields(ModelSpec) if f.name not in _STRUCTURED}
    allowed = set(spec_fields) | {"layers", "attention", "linear_attention", "full_attention", *_TEXT_LISTS}
    unknown = sorted(set(data) - allowed)
    if unknown:
        close = difflib.get_close_matches(unknown[0], sorted(allowed), n=3)
        hint = f"did you mean {', '.join(close)}?" if close else f"valid keys: {', '.join(sorted(allowed))}"
        raise MoesimError(f"{origin}:{unknown[0]}", "unknown key", hint)
    values: dict[str, Any] = {}
    for name, f in spec_fields.items():
        if name in data:
            values[name] = _check_value(origin, name, data[name], str(f.type))
        elif f.default is MISSING:
            raise MoesimError(f"{origin}:{name}", "is missing", f"add {name} = ...")
    if "attention" not in data:
        raise MoesimError(f"{origin}:attention", "is missing", "add an [attention] table")
    values["attention"] = _dataclass_from_table(AttentionSpec, data["attention"], origin, "attention")
    if "linear_attention" in data:
        values["linear_attention"] = _dataclass_from_table(
            LinearAttentionSpec, data["linear_attention"], origin, "linear_attention"
        )
    if "full_attention" in data:
        values["full_attention"] = _dataclass_from_table(
            AttentionSpec, data["full_attention"], origin, "full_attention"
        )
    for key in _TEXT_LISTS:
        if key in data:
            texts = data[key]
            if not isinstance(texts, list) or not all(isinstance(text, str) for text in texts):
                raise MoesimError(f"{origin}:{key}", f"must be a list of strings, got {texts!r}")
            values[key] = tuple(texts)
    values["layer_attention"], values["layer_ffn"] = _layers_from_table(data.get("layers"), origin)
    spec = ModelSpec(**values)
    try:
        return validate_spec(spec)
    except MoesimError as err:
        raise MoesimError(f"{origin}:{err.field}", err.problem, err.fix) from None


def _non_default(obj: Any, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in fields(obj):
        value = getattr(obj, f.name)
        if f.name in skip or value is None:
            continue
        if f.default is not MISSING and value == f.default:
            continue
        out[f.name] = value
    return out


def _attention_table(attention: AttentionSpec) -> dict[str, Any]:
    table = _non_default(attention)
    table.update(
        num_heads=attention.num_heads, num_kv_heads=attention.num_kv_heads, head_dim=attention.head_dim
    )
    return table


def spec_to_dict(spec: ModelSpec) -> dict[str, Any]:
    """The catalogue-style dict of `spec` (TOML-ready: no None values); `spec_from_dict` inverts it."""
    data = _non_default(spec, skip=_STRUCTURED)
    data["name"], data["hidden"], data["vocab"] = spec.name, spec.hidden, spec.vocab
    pattern = layer_pattern(spec)
    if pattern is None:
        data["layers"] = {"attention": list(spec.layer_attention), "ffn": list(spec.layer_ffn)}
    else:
        data["layers"] = {
            "count": pattern.n_layers,
            "dense_prefix": pattern.dense_prefix,
            "moe_every": pattern.moe_every,
            "moe_offset": pattern.moe_offset,
            "attention_cycle": list(pattern.attention_cycle),
        }
    data["attention"] = _attention_table(spec.attention)
    if spec.full_attention is not None:
        data["full_attention"] = _attention_table(spec.full_attention)
    for key in _TEXT_LISTS:
        if getattr(spec, key):
            data[key] = list(getattr(spec, key))
    if spec.linear_attention is not None:
        data["linear_attention"] = _non_default(spec.linear_attention) | {
            "num_key_heads": spec.linear_attention.num_key_heads,
            "num_value_heads": spec.linear_attention.num_value_heads,
            "key_head_dim": spec.linear_attention.key_head_dim,
            "value_head_dim": spec.linear_attention.value_head_dim,
        }
    return data


def spec_to_toml(spec: ModelSpec) -> str:
    """`spec` as catalogue-style TOML text."""
    from moesim.toml_files import dump_toml

    return dump_toml(spec_to_dict(spec))


def _catalogue_files() -> dict[str, Any]:
    root = resources.files("moesim").joinpath("model_catalogue")
    return {entry.name[: -len(".toml")]: entry for entry in root.iterdir() if entry.name.endswith(".toml")}


def list_models() -> list[str]:
    """Names of the catalogue's models, sorted."""
    return sorted(_catalogue_files())


@functools.cache
def _load_catalogue_entry(name: str) -> ModelSpec:
    entry = _catalogue_files()[name]
    origin = f"model_catalogue/{name}.toml"
    spec = spec_from_dict(parse_toml(origin, entry.read_text(encoding="utf-8"), origin, "model file"), origin)
    if spec.name != name:
        raise MoesimError(
            f"{origin}:name", f"is {spec.name!r} but the file is named {name}.toml", "make them match"
        )
    return spec


def load_model_file(path: str | Path) -> ModelSpec:
    """A model from a catalogue-style TOML file or a Hugging Face config.json (dispatched by content)."""
    path = Path(path)
    origin = str(path)
    table, form = read_table(origin, path, "model file (a config.json or a catalogue .toml)")
    if form == "json":
        from moesim.simulator.models.hf import config_model_name, spec_from_hf_config

        return spec_from_hf_config(table, name=config_model_name(path), origin=origin)
    return spec_from_dict(table, origin)


def load_model(name_or_path: str) -> ModelSpec:
    """A model by catalogue name (case-insensitive), or from a path to a catalogue-style .toml or an HF
    config.json. An unknown name raises MoesimError listing close matches."""
    candidate = Path(name_or_path)
    if not name_or_path.strip():
        raise MoesimError("model", "is empty", "give a catalogue name (`moesim models` lists them) or a file")
    if candidate.is_dir():
        if (candidate / "config.json").is_file():
            return load_model_file(candidate / "config.json")
        raise MoesimError(
            "model",
            f"{name_or_path} is a folder without a config.json",
            "give a model folder or a config file",
        )
    if candidate.exists():  # a file, or a device or FIFO the reading layer describes
        return load_model_file(candidate)
    if name_or_path.endswith((".toml", ".json")) or "/" in name_or_path:
        raise MoesimError("model", f"file {name_or_path} does not exist", "check the path")
    names = list_models()
    key = name_or_path.strip().lower()
    if key in names:
        return _load_catalogue_entry(key)
    close = difflib.get_close_matches(key, names, n=4, cutoff=0.5)
    hint = f"did you mean {', '.join(close)}?" if close else f"known models: {', '.join(names)}"
    raise MoesimError("model", f"unknown model {name_or_path!r}", hint + " (`moesim models` lists them)")


__all__ = [
    "OVERRIDE_OPTIONS",  # re-exported for the CLI: (flag, field, type, help) per override
    "apply_overrides",
    "list_models",
    "load_model",
    "load_model_file",
    "spec_from_dict",
    "spec_to_dict",
    "spec_to_toml",
]
