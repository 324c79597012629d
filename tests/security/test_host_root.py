"""Class 12: the sandbox user must not be host root.

With the host process running as root (CI, containers, most servers), bubblewrap mapped the
sandbox's uid 1000 to host uid 0: files it made in the workspace were owned by root on the host,
and root-only kernel files (``/proc/kpageflags``, ``slabinfo``, ``vmallocinfo``, ``timer_list``...)
were readable. A root host now runs sandboxes as a dedicated unprivileged host uid; inside, the
user is still uid 1000 ``user`` with ``HOME=/home/user``, and the host still reads, snapshots,
restores and removes what it wrote.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from langchain_sandbox.providers.local import LocalProvider, LocalSession
from langchain_sandbox.providers.local._host_user import SANDBOX_HOST_UID
from langchain_sandbox.snapshots import LocalDirectoryBlobStore, Snapshotter

_HANG = 120.0

# Root-only (0600) kernel files that no mask hides: only the sandbox's host uid keeps them
# unreadable (the masked ones, kpageflags, slabinfo..., read empty whoever reads them).
_ROOT_ONLY = (
    "/proc/sys/kernel/cad_pid",
    "/proc/sys/kernel/usermodehelper/bset",
    "/proc/sys/kernel/usermodehelper/inheritable",
    "/proc/sys/net/ipv4/tcp_fastopen_key",
    "/proc/sys/net/core/bpf_jit_limit",
)

_READ_ROOT_ONLY = f"""
import errno
read = {{}}
for path in {_ROOT_ONLY!r}:
    try:
        with open(path, 'rb') as handle:
            read[path] = len(handle.read(64))
    except FileNotFoundError:
        continue
    except OSError as exc:
        read[path] = errno.errorcode[exc.errno]
read
"""


@pytest.fixture
def isolation() -> str:
    """Host root is a question for the bubblewrap level, whose sandbox runs on the host kernel as
    a host uid. Under gVisor the sandbox's processes, ``/proc`` and users are its own kernel's
    (the Sentry): the files it writes belong to its sandbox owner (``_gvisor.SANDBOX_OWNER``),
    checked by the conformance suite's ``local-gvisor`` runs."""
    return "bubblewrap"


def test_this_suite_runs_as_root() -> None:
    # Every test below is about a root host; run elsewhere it would prove nothing.
    assert os.geteuid() == 0


async def test_files_the_sandbox_writes_are_not_host_roots(session: LocalSession) -> None:
    made = await session.run_command(
        "mkdir -p sub && echo hi > sub/f && ln -s f sub/link && id -u && id -un && echo $HOME"
    )
    assert made.stdout.split() == ["1000", "user", "/home/user"], made.stderr
    for name in ("sub", "sub/f", "sub/link"):
        info = await asyncio.to_thread(os.lstat, os.path.join(session.workspace_dir, name))
        assert (info.st_uid, info.st_gid) == (SANDBOX_HOST_UID, SANDBOX_HOST_UID), name


async def test_root_only_kernel_files_are_unreadable(session: LocalSession) -> None:
    result = await session.run_code(_READ_ROOT_ONLY)
    assert result.ok, result.error
    read = eval(result.value or "{}")  # {path: bytes read, or the errno's name}
    assert read, "none of the root-only files exists here"
    assert all(outcome in ("EACCES", "EPERM") for outcome in read.values()), read


async def test_no_process_of_the_sandbox_is_host_root(session: LocalSession) -> None:
    # Host uids of every process in the session's cgroups: only bubblewrap's own (its monitor
    # outside, and its init inside, which holds no capability there) are left as host uid 0.
    running = asyncio.create_task(session.run_command("sleep 5; echo done"))
    owners: dict[str, int] = {}
    for _ in range(100):
        await asyncio.sleep(0.05)
        owners = await asyncio.to_thread(_owners, session)
        if "sleep" in owners:
            break
    assert (await running).stdout == "done\n"
    assert owners["sleep"] == SANDBOX_HOST_UID
    assert any(name.startswith("python") for name in owners), owners
    assert all(uid == SANDBOX_HOST_UID for name, uid in owners.items() if name != "bwrap"), owners


def _owners(session: LocalSession) -> dict[str, int]:
    owners: dict[str, int] = {}
    for pid in session.cgroup.pids():
        try:
            text = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        owners[fields["Name"].strip()] = int(fields["Uid"].split()[1])
    return owners


async def test_the_host_reads_snapshots_restores_and_removes_the_sandboxes_files(
    provider: LocalProvider, tmp_path: Path
) -> None:
    session = await provider.create()
    directory = session.directory
    try:
        await session.run_command("mkdir -p d && echo one > d/a && chmod 600 d/a && echo two > b")
        assert (await session.read_files(["d/a"]))["d/a"] == b"one\n"
        snapshotter = Snapshotter(LocalDirectoryBlobStore(tmp_path / "blobs"))
        info = await asyncio.wait_for(snapshotter.capture(session), _HANG)
        await session.run_command("rm -r d b")
        await asyncio.wait_for(snapshotter.restore(session, info.ref), _HANG)
        for name in ("d", "d/a", "b"):
            restored = await asyncio.to_thread(os.lstat, os.path.join(session.workspace_dir, name))
            assert restored.st_uid == SANDBOX_HOST_UID, name
        # What the host restored is the sandbox's to change.
        changed = await session.run_command("echo three >> d/a && rm b && mkdir d/e && cat d/a")
        assert changed.exit_code == 0, changed.stderr
        assert changed.stdout == "one\nthree\n"
        await session.write_files({"new/deep/f": b"x"})
        replaced = await session.run_command("rm -r new && echo gone")
        assert replaced.stdout == "gone\n", replaced.stderr
    finally:
        await asyncio.wait_for(session.close(), _HANG)
    assert not await asyncio.to_thread(os.path.exists, directory)
