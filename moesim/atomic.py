"""Write outputs so that they respect the target.

A regular file (or a new path) is replaced atomically: the bytes go to a temporary sibling that is renamed over
the target, so a reader never sees half a file and a failure leaves the old one. A symlink is followed and its
target replaced, so the link is kept. Standard output (`-`, `/dev/stdout`), FIFOs, terminals and other devices
are written directly: renaming onto them would replace the special file with a regular one.

`check_output_path` is what a command calls before any work, so that an unwritable location is refused before a
sweep runs or a calibration measures anything.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from moesim.errors import MoesimError

STDOUT_NAMES = ("-", "/dev/stdout")
STDERR_NAMES = ("/dev/stderr",)


def _standard_stream(path: str, binary: bool) -> IO[Any] | None:
    """The process's own stdout/stderr for the names that mean them (looked up at call time, so a test's
    captured streams are the ones written)."""
    if path in STDOUT_NAMES:
        stream: IO[Any] = sys.stdout
    elif path in STDERR_NAMES:
        stream = sys.stderr
    else:
        return None
    return stream.buffer if binary and hasattr(stream, "buffer") else stream


def is_special_target(path: str | os.PathLike[str]) -> bool:
    """True for targets written directly: standard streams, FIFOs, character and block devices, sockets."""
    text = os.fspath(path)
    if text in STDOUT_NAMES or text in STDERR_NAMES:
        return True
    try:
        mode = os.stat(text).st_mode  # follows symlinks: a link to a FIFO is a FIFO
    except OSError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def _existing_ancestor(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if candidate.exists() or candidate.is_symlink():
            return candidate
    return Path(".")


def _probe_writable(directory: Path) -> bool:
    """Whether a file can be created in `directory` (tried, not guessed: permissions, read-only mounts, root)."""
    try:
        fd, name = tempfile.mkstemp(prefix=".moesim-probe.", dir=directory)
    except OSError:
        return False
    os.close(fd)
    os.unlink(name)
    return True


def check_output_path(field: str, path: str | os.PathLike[str], suffixes: Sequence[str] = ()) -> None:
    """Refuse, before any work starts, an output location that cannot be written.

    `suffixes` (e.g. ('.png', '.pdf', '.svg')) restricts the file type of a regular-file target.
    """
    text = os.fspath(path)
    if not text.strip():
        raise MoesimError(field, "empty path", "give a file name, or - for standard output")
    if is_special_target(text):
        if text in STDOUT_NAMES or text in STDERR_NAMES or os.access(text, os.W_OK):
            return
        raise MoesimError(field, f"{text}: cannot be opened for writing", "choose a writable target")
    if text.endswith((os.sep, "/")):
        raise MoesimError(field, f"{text} names a directory", "give a file name inside it")
    target = Path(os.path.realpath(text))
    if suffixes and target.suffix.lower() not in suffixes:
        raise MoesimError(
            field,
            f"unsupported file type {target.suffix or '(none)'!r} for {text}",
            f"use one of {', '.join(suffixes)}",
        )
    if target.is_dir():
        raise MoesimError(field, f"{text} is a directory", "give a file name inside it")
    ancestor = _existing_ancestor(target.parent)
    if not ancestor.is_dir():
        raise MoesimError(
            field, f"{ancestor} is not a directory, so {text} cannot be created", "fix the path"
        )
    if not _probe_writable(ancestor):
        raise MoesimError(
            field, f"cannot write in {ancestor} (read-only or permission denied)", "choose another location"
        )


def check_output_dir(field: str, path: str | os.PathLike[str]) -> None:
    """Refuse, before any work starts, an output folder that is a file or cannot be created or written."""
    text = os.fspath(path)
    if not text.strip():
        raise MoesimError(field, "empty path", "give a folder name")
    folder = Path(os.path.realpath(text))
    ancestor = _existing_ancestor(folder)
    if not ancestor.is_dir():
        raise MoesimError(field, f"{ancestor} exists and is not a folder", "give a folder path")
    if not _probe_writable(ancestor):
        raise MoesimError(
            field, f"cannot write in {ancestor} (read-only or permission denied)", "choose another location"
        )


@contextlib.contextmanager
def open_output(path: str | os.PathLike[str], binary: bool = False) -> Iterator[IO[Any]]:
    """Yield a stream for `path`: a temporary sibling renamed over the target on success, or the target itself
    when it is a standard stream or a special file. On failure a temporary file is removed, never left."""
    text = os.fspath(path)
    mode, encoding = ("wb", None) if binary else ("w", "utf-8")
    stream = _standard_stream(text, binary)
    if stream is not None:
        yield stream
        stream.flush()
        return
    if is_special_target(text):
        with open(text, mode, encoding=encoding) as handle:
            yield handle
        return
    target = Path(os.path.realpath(text))  # through symlinks, so the link itself is kept
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, mode, encoding=encoding) as handle:
            yield handle
        os.chmod(tmp, _replacement_mode(target))
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def _replacement_mode(target: Path) -> int:
    """Keep an existing file's permissions; a new file gets the usual ones (mkstemp creates 0600)."""
    try:
        return stat.S_IMODE(target.stat().st_mode)
    except OSError:
        mask = os.umask(0)
        os.umask(mask)
        return 0o666 & ~mask


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write `text` to `path` (atomically where the target is a regular file)."""
    with open_output(path) as handle:
        handle.write(text)


def stdout_targets(**paths: str | None) -> list[str]:
    """The flags (of `flag=path`) whose output goes to standard output; a command prints nothing else then."""
    return [flag for flag, path in paths.items() if path is not None and os.fspath(path) in STDOUT_NAMES]


__all__ = [
    "atomic_write_text",
    "check_output_dir",
    "check_output_path",
    "is_special_target",
    "open_output",
    "stdout_targets",
]
