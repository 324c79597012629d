"""A file that comes back with another mode than it was captured with is named in the restore's
notices (a read-only file writable again, a setuid bit dropped), not changed silently."""

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


def test_a_restore_names_the_files_whose_mode_changed(tmp_path: Path) -> None:
    with _runtime(tmp_path, "first") as first:
        made = first.run_command(
            "t", "echo a > ro && chmod 444 ro && echo b > tool && chmod 4755 tool && echo c > plain"
        )
        assert made.value.exit_code == 0, made.value.stderr
    with _runtime(tmp_path, "second") as second:
        shown = second.run_command("t", "stat -c '%n %a' ro tool plain", record=made.record)
    [notice] = [n for n in shown.value.notices if "another mode" in n]
    assert "ro (444 -> 644)" in notice
    assert "tool (4755 -> 755)" in notice
    assert "plain" not in notice
    assert shown.value.stdout.split("\n")[:3] == ["ro 644", "tool 755", "plain 644"]
