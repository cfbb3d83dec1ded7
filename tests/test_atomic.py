"""Outputs respect their target: regular files replaced atomically (through symlinks), standard output, FIFOs
written directly, unwritable locations refused before any work. Every target lives in a temporary folder."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from moesim.atomic import atomic_write_text, check_output_dir, check_output_path, open_output
from moesim.cli import cli
from moesim.errors import MoesimError

SMALL_SWEEP = ("sweep", "--model", "olmoe-1b-7b", "--batch", "1,2", "--draft-len", "1,2")


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


@contextlib.contextmanager
def read_only_dir(path: Path) -> Iterator[Path]:
    """A folder nobody may write in: permissions for a normal user, the immutable flag for root; else skip."""
    path.mkdir()
    path.chmod(0o555)
    flagged = False
    if os.geteuid() == 0 and shutil.which("chattr"):
        flagged = subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode == 0
    try:
        probe = path / "probe"
        try:
            probe.write_text("x")
        except OSError:
            pass
        else:
            probe.unlink()
            pytest.skip("cannot make a read-only folder here")
        yield path
    finally:
        if flagged:
            subprocess.run(["chattr", "-i", str(path)], check=False)
        path.chmod(0o755)


def test_regular_file_is_replaced_with_its_permissions_kept(tmp_path: Path) -> None:
    target = tmp_path / "out.csv"
    target.write_text("old")
    target.chmod(0o640)
    atomic_write_text(target, "new")
    assert target.read_text() == "new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["out.csv"]


def test_symlinked_output_keeps_its_link(tmp_path: Path) -> None:
    real = tmp_path / "data" / "rows.csv"
    real.parent.mkdir()
    real.write_text("old")
    link = tmp_path / "rows.csv"
    link.symlink_to(real)
    code, _, err = invoke(*SMALL_SWEEP, "--csv", str(link))
    assert code == 0, err
    assert link.is_symlink() and link.resolve() == real.resolve()
    assert real.read_text().startswith("model,hardware,batch")


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "out.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError), open_output(target) as handle:
        handle.write("half")
        raise RuntimeError("interrupted")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


@pytest.mark.parametrize("name", ["-", "/dev/stdout"])
def test_sweep_csv_to_standard_output_prints_only_the_csv(name: str) -> None:
    code, out, err = invoke(*SMALL_SWEEP, "--csv", name)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("model,hardware,batch,draft_len,speedup")
    assert len(lines) == 1 + 4  # header + 2 batches × 2 draft lengths, no tables after it


def test_two_outputs_on_standard_output_are_refused() -> None:
    code, out, err = invoke(*SMALL_SWEEP, "--csv", "-", "--json")
    assert code == 2 and out == "" and "standard output" in err


SMALL_SCREEN = (
    "screen",
    "--model",
    "olmoe-1b-7b",
    "--experts",
    "32,64",
    "--batch",
    "1",
    "--draft-len",
    "1",
    "--workers",
    "1",
)
SMALL_SERVE = ("serve", "--model", "olmoe-1b-7b", "--num-prompts", "2", "--random-output-len", "8")


@pytest.mark.parametrize("command", [SMALL_SCREEN, SMALL_SERVE])
def test_screen_and_serve_csv_to_standard_output_print_only_the_csv(command: tuple[str, ...]) -> None:
    code, out, err = invoke(*command, "--csv", "-")
    assert code == 0, err
    assert "," in out.splitlines()[0] and "┃" not in out  # the CSV alone, no table after it
    code, out, err = invoke(*command, "--csv", "-", "--json")
    assert code == 2 and out == "" and "standard output" in err


def test_fifo_is_written_directly_and_stays_a_fifo(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    link = tmp_path / "link-to-pipe"
    link.symlink_to(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()))
    reader.start()
    code, _, err = invoke(*SMALL_SWEEP, "--csv", str(link))
    reader.join(timeout=30)
    assert code == 0, err
    assert stat.S_ISFIFO(fifo.stat().st_mode) and link.is_symlink()
    assert received and received[0].startswith(b"model,hardware,batch")


def test_plot_to_standard_output_is_a_png() -> None:
    result = CliRunner().invoke(cli, [*SMALL_SWEEP, "--plot", "-"])
    assert result.exit_code == 0, result.stderr
    assert result.stdout_bytes.startswith(b"\x89PNG")


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ((*SMALL_SWEEP, "--csv"), "--csv"),
        ((*SMALL_SWEEP, "--plot"), "--plot"),
        (("routing", "fit", "TRACE", "--output"), "--output"),
        (("profiles", "derive", "--from", "h200", "--to", "b200", "--output"), "--output"),
        (("calibrate", "--device", "cpu", "--quick", "--output"), "--output"),
    ],
)
def test_read_only_location_is_refused_before_any_work(
    tmp_path: Path, args: tuple[str, ...], field: str
) -> None:
    with read_only_dir(tmp_path / "ro") as folder:
        name = "out.png" if field == "--plot" else "out.toml"
        if args[:2] == ("routing", "fit"):
            name = "out.json"  # a statistics file is JSON
        argv = [str(tmp_path / "missing-trace.npz") if a == "TRACE" else a for a in args]
        code, out, err = invoke(*argv, str(folder / name))
        assert code == 2 and out == ""
        assert field in err and "cannot write" in err
        assert "Traceback" not in err
        assert list(folder.iterdir()) == []


def test_read_only_report_folder_is_refused_before_measuring(tmp_path: Path) -> None:
    with read_only_dir(tmp_path / "ro") as folder:
        code, _, err = invoke(
            "validate", "reference", "--profile", "h200", "--report", str(folder / "report")
        )
        assert code == 2 and "--report" in err and "cannot write" in err


def test_output_checks_name_the_problem(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(MoesimError, match="not a directory"):
        check_output_path("--csv", tmp_path / "file" / "out.csv")
    with pytest.raises(MoesimError, match="is a directory"):
        check_output_path("--csv", tmp_path)
    with pytest.raises(MoesimError, match=r"unsupported file type '\.bmp'"):
        check_output_path("--plot", tmp_path / "x.bmp", suffixes=(".png",))
    with pytest.raises(MoesimError, match="not a folder"):
        check_output_dir("--report", tmp_path / "file")
    with pytest.raises(MoesimError, match="empty path"):
        check_output_path("--csv", " ")
    with pytest.raises(MoesimError, match="names a directory"):
        check_output_path("--csv", f"{tmp_path / 'new'}/")  # a trailing slash: not a file to create
    check_output_path("--csv", tmp_path / "new" / "deeper" / "out.csv")  # parents are created on write
    assert not (tmp_path / "new").exists()  # ... but not by the check
