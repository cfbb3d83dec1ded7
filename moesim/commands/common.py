"""What every command shares: turning user errors into one line, JSON output, and model/hardware options."""

from __future__ import annotations

import errno
import functools
import json
import math
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, TypeVar

import click

from moesim.errors import MoesimError
from moesim.simulator.bounds import MAX_COUNT

F = TypeVar("F", bound=Callable[..., Any])

USER_ERROR_EXIT_CODE = 2
MAX_LIST_VALUES = 100_000
"""Most values one list flag may expand to (a range like 1-100000); the work a list causes is bounded later."""


def fail(message: str) -> None:
    """Print one error line and exit non-zero."""
    click.echo(f"error: {message}", err=True)
    sys.exit(USER_ERROR_EXIT_CODE)


def interrupted() -> NoReturn:
    """Ctrl-C, once the command has unwound: one line, the shell's status for SIGINT, no traceback (outputs
    are written atomically). The console script then exits without tearing down the simulation's objects,
    which takes seconds after a long run."""
    from moesim import interrupt

    if interrupt.installed():
        interrupt.exit_now()
    click.echo(f"\n{interrupt.MESSAGE}", err=True)
    sys.exit(interrupt.INTERRUPTED_EXIT_CODE)


def handle_errors(func: F) -> F:
    """Run a command so that user-caused problems end in one clear line and a non-zero exit."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except MoesimError as error:
            fail(str(error))
        except FileNotFoundError as error:
            fail(f"{error.filename}: no such file (check the path)")
        except IsADirectoryError as error:
            fail(f"{error.filename}: is a directory, expected a file")
        except PermissionError as error:
            fail(f"{error.filename}: permission denied")
        except OSError as error:
            if error.filename is None and error.errno not in OUTPUT_ERRNOS:
                raise
            fail(os_error_line(error, kwargs))
        except KeyboardInterrupt:
            interrupted()

    return wrapper  # type: ignore[return-value]


OS_ERROR_FIXES = {
    errno.ENAMETOOLONG: "give a shorter path: a name is at most 255 bytes",
    errno.ELOOP: "fix the symbolic links on the path",
    errno.ENOTDIR: "a part of the path is a file, not a folder: fix the path",
    errno.EROFS: "choose a writable location",
    errno.ENOSPC: "free some disk space or choose another location",
}


OUTPUT_ERRNOS = (errno.ENOSPC, errno.EIO, errno.EROFS, errno.EDQUOT)
"""Errors of a write with no file named: standard output on a full disk (`> /dev/full`) or a failing device."""


def _shown_path(path: str, limit: int = 80) -> str:
    return path if len(path) <= limit else f"{path[: limit // 2]}…{path[-8:]} ({len(path):,} characters)"


def os_error_line(error: OSError, params: dict[str, Any]) -> str:
    """One line for an operating-system error on a path the user gave: the flag whose value holds the path,
    the path (shortened), what went wrong and the fix."""
    if error.filename is None:
        fix = OS_ERROR_FIXES.get(error.errno or 0, "check where the output goes")
        return f"output: {error.strerror or 'cannot be written'} ({fix})"
    path = os.fsdecode(error.filename)
    context = click.get_current_context(silent=True)
    options = {param.name: param for param in context.command.params} if context else {}
    flags = []
    for name, value in {**(context.params if context else {}), **params}.items():
        values = value if isinstance(value, tuple | list) else (value,)
        texts = [os.fsdecode(os.fspath(v)) for v in values if isinstance(v, str | bytes | os.PathLike)]
        if any(text and (text in path or path in text) for text in texts):
            param = options.get(name)
            if isinstance(param, click.Option):
                flags.append(param.opts[0])
            elif param is not None:
                flags.append(param.human_readable_name)
            else:
                flags.append("--" + name.replace("_", "-"))
    where = f"{flags[0]}: " if flags else ""
    fix = OS_ERROR_FIXES.get(error.errno or 0, "check the path")
    return f"{where}{_shown_path(path)}: {error.strerror or 'cannot be used'} ({fix})"


def _json_default(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def _finite(value: Any) -> Any:
    """JSON has no NaN or infinity: write them as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value


def emit_json(data: Any) -> None:
    """Print `data` as JSON on stdout."""
    click.echo(json.dumps(_finite(data), indent=2, default=_json_default))


def parse_int_list(field: str, text: str, minimum: int = 1) -> list[int]:
    """Parse '1,2,4' (or a range '1-8') into integers ≥ `minimum`, naming the flag on error."""
    values: list[int] = []
    try:
        for part in text.split(","):
            part = part.strip()
            if "-" in part[1:]:
                low, high = (int(end) for end in part.split("-", 1))
                if high < low:
                    raise MoesimError(field, f"range {part} is reversed", f"write {high}-{low}")
                if high - low >= MAX_LIST_VALUES:
                    raise MoesimError(
                        field,
                        f"range {part} has {high - low + 1:,} values, above the {MAX_LIST_VALUES:,} a list may hold",
                        "sweep fewer values, e.g. powers of two: 1,2,4,8,...",
                    )
                values.extend(range(low, high + 1))
            elif part:
                values.append(int(part))
    except ValueError:
        raise MoesimError(field, f"expected integers like 1,2,4 or 1-8, got {text!r}") from None
    if not values:
        raise MoesimError(field, "needs at least one value")
    bad = [value for value in values if value < minimum]
    if bad:
        raise MoesimError(field, f"values must be ≥ {minimum}, got {bad[0]}")
    huge = [value for value in values if value > MAX_COUNT]
    if huge:
        raise MoesimError(field, f"values must be ≤ {MAX_COUNT:,}, got {huge[0]:.3g}")
    return values


def parse_float_list(field: str, text: str) -> list[float]:
    """Parse '0.5,0.3' into floats, naming the flag on error."""
    try:
        return [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise MoesimError(field, f"expected numbers like 0.5,0.3, got {text!r}") from None


def apply_options(func: F, options: Sequence[Callable[[Any], Any]]) -> F:
    """Decorate `func` with click options so that they appear in the order listed."""
    for option in reversed(options):
        func = option(func)
    return func


def override_options(func: F) -> F:
    """One flag per overridable model field (hypothetical designs)."""
    from moesim.simulator.models.catalogue import OVERRIDE_OPTIONS

    for flag, field, kind, help_text in reversed(OVERRIDE_OPTIONS):
        func = click.option(flag, field, type=kind, default=None, help=help_text)(func)
    return func


def model_options(func: F) -> F:
    """--model / --model-config plus one flag per overridable model field (hypothetical designs)."""
    func = click.option(
        "--model-config",
        type=click.Path(),
        default=None,
        help="A Hugging Face config.json, a folder holding one, or a catalogue-style .toml describing the model.",
    )(override_options(func))
    func = click.option(
        "--model", "model_name", default=None, help="Catalogue model name (see `moesim models`)."
    )(func)
    return func


def with_override_flags(spec: Any, options: dict[str, Any]) -> Any:
    """`spec` with the override flags present in `options` applied."""
    from moesim.simulator.models.catalogue import OVERRIDE_OPTIONS, apply_overrides

    overrides = {
        field: options[field] for _, field, _, _ in OVERRIDE_OPTIONS if options.get(field) is not None
    }
    return apply_overrides(spec, overrides) if overrides else spec


def resolve_model(model_name: str | None, model_config: str | None, options: dict[str, Any]) -> Any:
    """Load the named or imported model and apply any override flags present in `options`."""
    from moesim.simulator.models.catalogue import load_model

    if (model_name is None) == (model_config is None):
        raise MoesimError("--model", "give exactly one of --model NAME or --model-config PATH")
    return with_override_flags(
        load_model(model_name if model_name is not None else str(model_config)), options
    )


def make_console() -> Any:
    """A rich console that keeps tables readable when output is piped (rich would otherwise assume 80 columns)."""
    from rich.console import Console

    return Console(width=None if sys.stdout.isatty() else 140)


PARQUET_SUFFIXES = (".parquet", ".pq")
"""File types `--parquet` writes (a special target such as - or /dev/stdout takes the bytes whatever its name)."""


def check_outputs(
    *, csv: str | None = None, parquet: str | None = None, plot: str | None = None, as_json: bool = False
) -> bool:
    """Refuse, before any work, output targets that cannot be written and two outputs to standard output.
    True when one output goes to standard output: the command then prints nothing else."""
    from moesim.atomic import check_output_path, stdout_targets
    from moesim.figures import check_plot_path

    to_stdout = stdout_targets(
        **{"--csv": csv, "--parquet": parquet, "--plot": plot, "--json": "-" if as_json else None}
    )
    if len(to_stdout) > 1:
        raise MoesimError(
            to_stdout[1], f"{' and '.join(to_stdout)} both write to standard output", "send one to a file"
        )
    files = [
        (flag, name)
        for flag, name in (("--csv", csv), ("--parquet", parquet), ("--plot", plot))
        if name is not None
    ]
    for index, (first, name) in enumerate(files):  # one file each: a later writer would overwrite the first
        for other, other_name in files[index + 1 :]:
            if name != "-" and os.path.abspath(name) == os.path.abspath(other_name):
                raise MoesimError(other, f"writes {name}, as {first} does", f"give {other} a path of its own")
    if csv is not None:  # an empty path is refused, not taken for no output
        check_output_path("--csv", csv)
    if parquet is not None:
        check_output_path("--parquet", parquet, suffixes=PARQUET_SUFFIXES)
    if plot is not None:
        check_plot_path("--plot", plot)
    return bool(to_stdout)
