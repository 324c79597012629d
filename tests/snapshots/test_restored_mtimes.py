"""A restored file keeps the modification time it was captured with, to the nanosecond, in a
fresh sandbox (make and other mtime readers would otherwise see every file as just changed)."""

from __future__ import annotations

from pathlib import Path

from langchain_sandbox import SandboxRuntime
from langchain_sandbox.snapshots import LocalDirectoryBlobStore, Snapshotter


def _runtime(tmp_path: Path, base: str) -> SandboxRuntime:
    return SandboxRuntime(
        "local",
        provider_options={"base_dir": tmp_path / base},
        snapshotter=Snapshotter(LocalDirectoryBlobStore(tmp_path / "blobs")),
        persist="every_call",
    )


def test_a_restore_keeps_the_captured_mtimes(tmp_path: Path) -> None:
    with _runtime(tmp_path, "first") as first:
        made = first.run_command(
            "t",
            "mkdir -p d && echo a > old && echo b > d/new "
            "&& touch -m -d @1000000000.123456789 old && stat -c '%n %.9Y' old d/new",
        )
        assert made.value.exit_code == 0, made.value.stderr
    with _runtime(tmp_path, "second") as second:
        shown = second.run_command("t", "stat -c '%n %.9Y' old d/new", record=made.record)
    assert shown.value.exit_code == 0, shown.value.stderr
    assert shown.value.stdout.splitlines() == made.value.stdout.splitlines()
    assert shown.value.stdout.splitlines()[0] == "old 1000000000.123456789"
