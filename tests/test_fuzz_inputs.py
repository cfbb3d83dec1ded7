"""A corpus of bad inputs across every command and file type: each ends in a clear message naming the field
(the flag, or the file at fault), a non-zero exit and no traceback.

Files: every kind of wrong content (binary, images, archives, non-UTF-8, empty, JSON where TOML is expected and
back, arrays where tables are expected, corrupt and pickled .npz, directories, missing paths) given to every
flag that reads a file. Flags: hypothesis draws bad values for the numeric and list flags.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from moesim.cli import cli


def _npz(**arrays: object) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)  # type: ignore[arg-type]
    return buffer.getvalue()


def _zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("hello.txt", "hi")
    return buffer.getvalue()


PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
CONTENTS: dict[str, bytes | None] = {
    "random-binary": bytes((i * 7919 + 13) % 256 for i in range(2048)),
    "png-image": PNG,
    "zip-archive": _zip(),
    "corrupt-npz": b"PK\x03\x04" + b"\x00" * 40,
    "pickled-npz": _npz(experts=np.array([{"a": 1}], dtype=object)),
    "npz-missing-arrays": _npz(other=np.arange(3)),
    "latin1-text": "caf\xe9 = 1\nname = 'd\xe9j\xe0'\n".encode("latin-1"),
    "empty": b"",
    "whitespace": b"  \n\t\n",
    "json-array": b"[1, 2, 3]\n",
    "json-string": b'"hello"\n',
    "json-number": b"42\n",
    "json-null": b"null\n",
    "broken-json": b'{"a": 1,',
    "broken-toml": b"[datasheet\nname = \n",
    "wrong-toml": b'answer = 42\n[unrelated]\nx = "y"\n',
    "wrong-json": b'{"unrelated": true}\n',
    "nul-in-text": b"name = 'x'\x00\x00\n",
    "bom-garbage": b"\xef\xbb\xbf\x01\x02\x03 not a file",
    "csv-header-only": b"model,batch\n",
    "directory": None,
}
MISSING = "missing"

Target = tuple[str, str, Callable[[str, Path], list[str]], tuple[str, ...]]
# (name, suffix of the input file, argv builder, acceptable field names besides the file itself)
TARGETS: list[Target] = [
    ("model-config", ".json", lambda f, d: ["simulate", "--model-config", f], ("--model-config", "model")),
    ("model-toml", ".toml", lambda f, d: ["simulate", "--model-config", f], ("--model-config", "model")),
    ("sweep-model", ".json", lambda f, d: ["sweep", "--model", f, "--batch", "1"], ("--model", "model")),
    (
        "hardware",
        ".toml",
        lambda f, d: ["simulate", "--model", "olmoe-1b-7b", "--hardware", f],
        ("hardware",),
    ),
    (
        "routing-stats",
        ".json",
        lambda f, d: ["simulate", "--model", "olmoe-1b-7b", "--routing", f],
        ("--routing",),
    ),
    ("measured", ".csv", lambda f, d: ["validate", "measured", f, "--profile", "h200"], ("--measured",)),
    (
        "repredict",
        ".json",
        lambda f, d: ["validate", "repredict", f, "--profile", "h200"],
        ("--repredict",),
    ),
    (
        "derive-from",
        ".toml",
        lambda f, d: ["profiles", "derive", "--from", f, "--to", "h200", "--output", str(d / "o.toml")],
        ("hardware", "--from"),
    ),
    (
        "derive-to",
        ".toml",
        lambda f, d: ["profiles", "derive", "--from", "h200", "--to", f, "--output", str(d / "o.toml")],
        ("--to", "hardware"),
    ),
    ("trace-npz", ".npz", lambda f, d: ["routing", "inspect", f], ("trace", "TRACE")),
    ("trace-jsonl", ".jsonl", lambda f, d: ["routing", "inspect", f], ("trace", "TRACE")),
    (
        "fit-trace",
        ".npz",
        lambda f, d: ["routing", "fit", f, "--output", str(d / "s.json")],
        ("trace", "TRACE"),
    ),
    (
        "generate-stats",
        ".json",
        lambda f, d: [
            "routing",
            "generate",
            "--stats",
            f,
            "--sequences",
            "2",
            "--tokens",
            "4",
            "-o",
            str(d / "t.npz"),
        ],
        ("--stats",),
    ),
]

CASES = [
    pytest.param(target, content, id=f"{target[0]}-{content}")
    for target in TARGETS
    for content in [*CONTENTS, MISSING]
]


def assert_clean_failure(result: object, fields: tuple[str, ...]) -> None:
    output = result.output + (result.stderr if result.stderr_bytes is not None else "")  # type: ignore[attr-defined]
    assert isinstance(result.exception, SystemExit), f"crashed: {result.exception!r}\n{output}"  # type: ignore[attr-defined]
    assert result.exit_code != 0, output  # type: ignore[attr-defined]
    assert "Traceback" not in output
    last = [line for line in output.splitlines() if line.strip()][-1]
    assert last.lower().startswith("error"), output
    spellings = {*fields, *(f.lstrip("-").replace("-", "_") for f in fields if f.startswith("--"))}
    assert any(field in last for field in spellings), f"no field of {fields} in {last!r}"


def test_the_corpus_is_large_enough() -> None:
    assert len(CASES) + len(FLAG_CASES) >= 150


@pytest.mark.parametrize(("target", "content"), CASES)
def test_bad_file_ends_in_one_clear_message(tmp_path: Path, target: Target, content: str) -> None:
    _, suffix, argv, fields = target
    path = tmp_path / f"input-{content}{suffix}"
    if content == "directory":
        path.mkdir()
    elif content != MISSING:
        data = CONTENTS[content]
        assert data is not None
        path.write_bytes(data)
    result = CliRunner().invoke(cli, argv(str(path), tmp_path))
    assert_clean_failure(result, (*fields, path.name))
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(("o.toml", "s.json", "t.npz"))]


FLAG_CASES = [
    (["simulate", "--model", "olmoe-1b-7b", "--batch", "0"], "--batch"),
    (["simulate", "--model", "olmoe-1b-7b", "--batch", "-3"], "--batch"),
    (["simulate", "--model", "olmoe-1b-7b", "--draft-len", "-1"], "--draft-len"),
    (["simulate", "--model", "olmoe-1b-7b", "--context-len", "-5"], "--context-len"),
    (["simulate", "--model", "olmoe-1b-7b", "--acceptance", "1.5"], "--acceptance"),
    (["simulate", "--model", "olmoe-1b-7b", "--acceptance", "-0.1"], "--acceptance"),
    (["simulate", "--model", "olmoe-1b-7b", "--acceptance", "nan"], "--acceptance"),
    (["simulate", "--model", "olmoe-1b-7b", "--acceptance-length", "0"], "--acceptance-length"),
    (["simulate", "--model", "olmoe-1b-7b", "--launch", "warp"], "--launch"),
    (["simulate", "--model", "olmoe-1b-7b", "--kernel-style", "nope"], "kernel_style"),
    (["simulate", "--model", "olmoe-1b-7b", "--draft", "model:nonexistent"], "model"),
    (["simulate", "--model", "olmoe-1b-7b", "--draft", "fraction:-1"], "draft"),
    (["simulate", "--model", "olmoe-1b-7b", "--draft", "medusa"], "draft"),
    (["simulate", "--model", "olmoe-1b-7b", "--routing", "zipf"], "--routing"),
    (["simulate", "--model", "olmoe-1b-7b", "--overlap", "a,b"], "--overlap"),
    (["simulate", "--model", "olmoe-1b-7b", "--overlap", "1.5"], "overlap"),
    (["simulate", "--model", "olmoe-1b-7b", "--top-k", "0"], "top_k"),
    (["simulate", "--model", "olmoe-1b-7b", "--top-k", "65"], "top_k"),
    (["simulate", "--model", "olmoe-1b-7b", "--experts", "0"], "experts"),
    (["simulate", "--model", "olmoe-1b-7b", "--experts", "-4"], "experts"),
    (["simulate", "--model", "olmoe-1b-7b", "--layers", "0"], "layers"),
    (["simulate", "--model", "olmoe-1b-7b", "--weight-format", "fp3"], "weight"),
    (["simulate", "--model", "olmoe-1b-7b", "--gpus", "0"], "--gpus"),
    (["simulate", "--model", "olmoe-1b-7b", "--tp", "-1"], "--tp"),
    (["simulate", "--model", "olmoe-1b-7b", "--placement", "diagonal"], "placement"),
    (["simulate", "--model", "no-such-model"], "model"),
    (["simulate", "--model", "olmoe-1b-7b", "--hardware", "h900"], "hardware"),
    (["simulate"], "--model"),
    (["sweep", "--model", "olmoe-1b-7b", "--batch", "8-1"], "--batch"),
    (["sweep", "--model", "olmoe-1b-7b", "--batch", "1-1000000000"], "--batch"),
    (["sweep", "--model", "olmoe-1b-7b", "--batch", "x"], "--batch"),
    (["sweep", "--model", "olmoe-1b-7b", "--batch", ""], "--batch"),
    (["sweep", "--model", "olmoe-1b-7b", "--draft-len", "0"], "--draft-len"),
    (["sweep", "--model", "olmoe-1b-7b", "--gpus", "0"], "--gpus"),
    (["sweep", "--model", "olmoe-1b-7b", "--plot", "x.bmp"], "--plot"),
    (["sweep", "--model", "olmoe-1b-7b", "--csv", "-", "--json"], "standard output"),
    (["sweep", "--model", ","], "model"),
    (["routing", "predict", "--experts", "0", "--top-k", "1", "--tokens", "1"], "--top-k"),
    (["routing", "predict", "--experts", "8", "--top-k", "9", "--tokens", "1"], "--top-k"),
    (["routing", "predict", "--experts", "8", "--top-k", "2", "--tokens", "0"], "--tokens"),
    (["routing", "predict", "--experts", "8", "--top-k", "2", "--tokens", "2", "--layer", "-1"], "--layer"),
    (["routing", "predict", "--experts", "8", "--top-k", "2", "--tokens", "2", "--ranks", "3"], "--ranks"),
    (
        ["routing", "predict", "--experts", "128", "--top-k", "8", "--batch", "1000000", "--tokens", "1000"],
        "--batch",
    ),
    (
        ["routing", "predict", "--experts", "8", "--top-k", "2", "--tokens", "2", "--max-memory-gb", "0"],
        "memory",
    ),
    (["routing", "inspect", "t.npz", "--plot", "x.bmp"], "--plot"),
    (["profiles", "derive", "--from", "h200", "--to", "h900", "--output", "o.toml"], "hardware"),
    (["validate", "reference", "--device", "cpu"], "--profile"),
    (["validate", "reference", "--profile", "h200", "--context-len", "-1"], "--context-len"),
    (["validate", "reference", "--profile", "h200", "--models", "nope"], "--models"),
    (
        ["calibrate", "--device", "cpu", "--threads", "2", "--device", "cuda", "--output", "x.toml"],
        "--threads",
    ),
    (["simulate", "--model", "olmoe-1b-7b", "--acceptance", "0.7", "--acceptance-length", "2"], "acceptance"),
    (["simulate", "--model", "olmoe-1b-7b", "--draft-len", "100000"], "--draft-len"),
    (["simulate", "--model", "olmoe-1b-7b", "--draft-len", "1024", "--experts", "100000"], "--max-memory-gb"),
    (["simulate", "--model", "qwen3-30b-a3b", "--gpus", "3", "--tp", "3"], "tp"),
    (["simulate", "--model", "olmoe-1b-7b", "--experts", "1000000"], "--max-memory-gb"),
    (["simulate", "--model", "olmoe-1b-7b", "--max-memory-gb", "0"], "max_memory_gb"),
    (["sweep", "--model", "olmoe-1b-7b", "--batch", "1-100000"], "--max-configs"),
    (["sweep", "--model", "olmoe-1b-7b", "--max-configs", "1"], "--max-configs"),
    (["layer", "--model", "olmoe-1b-7b", "--tokens", "0", "--distinct-experts", "4"], "tokens"),
    (["layer", "--model", "olmoe-1b-7b", "--tokens", "4", "--distinct-experts", "999"], "distinct"),
]


@pytest.mark.parametrize(("argv", "field"), FLAG_CASES, ids=[" ".join(a)[:60] for a, _ in FLAG_CASES])
def test_bad_flag_ends_in_one_clear_message(tmp_path: Path, argv: list[str], field: str, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, argv)
    assert_clean_failure(result, (field,))


BAD_INTEGERS = st.one_of(
    st.integers(max_value=0),
    st.sampled_from(["", " ", "1.5", "two", "1e3", "0x10", "--", "1,,x", "3-1", "-", "1-"]),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flag=st.sampled_from(["--batch", "--draft-len"]), value=BAD_INTEGERS)
def test_bad_list_values_are_refused_by_name(flag: str, value: object) -> None:
    result = CliRunner().invoke(cli, ["sweep", "--model", "olmoe-1b-7b", flag, str(value)])
    assert_clean_failure(result, (flag,))


@settings(max_examples=40, deadline=None)
@given(
    flag=st.sampled_from(["--acceptance", "--acceptance-length", "--context-len", "--batch"]),
    value=st.one_of(
        st.floats(max_value=-1e-9, allow_nan=False),
        st.sampled_from(["nan", "inf", "-inf", "abc", ""]),
    ),
)
def test_bad_simulate_numbers_are_refused_by_name(flag: str, value: object) -> None:
    result = CliRunner().invoke(cli, ["simulate", "--model", "olmoe-1b-7b", flag, str(value)])
    assert_clean_failure(result, (flag,))
