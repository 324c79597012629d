"""The workspace as a file system of its own, so the kernel enforces its quota.

When the host process is root and e2fsprogs is installed, a session whose limits set a workspace
quota gets a sparse ext4 image in its directory (``workspace.img``), loop-mounted on its
workspace: ``Limits.workspace_bytes`` becomes the file system's size and ``Limits.workspace_files``
its inode count. A write past either fails inside the sandbox with ``ENOSPC``, whatever the file
(an unlinked or ``O_TMPFILE`` file still holds its blocks), where measuring the workspace from the
host (`_quota`) sees only what is linked.

The image is made without a journal and with lazily initialised inode tables, so ``mkfs`` writes
a few hundred kilobytes whatever the size; ``mount -o loop`` takes a free loop device itself
(race-free between concurrent sessions) and frees it at unmount (autoclear). Elsewhere (not
root, no ``mkfs.ext4``, no loop devices) the workspace stays a plain directory and the quota is
measured only.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from pathlib import Path

from langchain_sandbox.providers.local._tree_walk import remove_directory

logger = logging.getLogger(__name__)

IMAGE_FILE = "workspace.img"
"""Name of the ext4 image in a session's directory."""

_INODE_BYTES = 256
# ext4's own first inodes (1 to 10 reserved, the root among them; 11 is lost+found, which is
# removed, and then holds .packages): what is left is the file limit.
_RESERVED_INODES = 11
# Block groups, bitmaps and the superblock copies: the file system's room for its own metadata,
# so that files up to the quota fit (the host's measurement then says exactly where it stands).
_METADATA_SHARE = 50
_METADATA_MIN_BYTES = 4 * 1024 * 1024
_TIMEOUT = 60


def unavailable_reason() -> str | None:
    """Why this host cannot give workspaces a file system of their own, or ``None`` if it can."""
    if os.geteuid() != 0:
        return "not root: mounting a per-session file system needs root"
    if shutil.which("mkfs.ext4") is None:
        return "mkfs.ext4 not found (Debian/Ubuntu: apt-get install e2fsprogs)"
    if shutil.which("mount") is None or shutil.which("umount") is None:
        return "mount/umount not found"
    if not os.path.exists("/dev/loop-control"):
        return "no loop devices (/dev/loop-control is missing)"
    return None


def image_bytes(workspace_bytes: int | None, workspace_files: int, free_bytes: int) -> int:
    """Size of the image for these quotas: the byte quota plus room for the file system's own
    metadata, or (no byte quota) the free space of the host's file system, sparse anyway."""
    if workspace_bytes is None:
        return max(free_bytes, _METADATA_MIN_BYTES)
    metadata = max(_METADATA_MIN_BYTES, workspace_bytes // _METADATA_SHARE)
    return workspace_bytes + workspace_files * _INODE_BYTES + metadata


def mount_workspace(
    session_dir: Path, workspace: Path, *, workspace_bytes: int | None, workspace_files: int
) -> None:
    """Make the ext4 image of the session in ``session_dir`` and mount it on ``workspace`` (an
    empty directory); the mounted root is left empty and private (mode 0700).

    Raises:
        OSError: the image could not be made or mounted (nothing is left: no mount, no image).
    """
    image = session_dir / IMAGE_FILE
    free = os.statvfs(session_dir)
    size = image_bytes(workspace_bytes, workspace_files, free.f_bavail * free.f_frsize)
    with open(image, "xb") as handle:
        handle.truncate(size)
    inodes = workspace_files + _RESERVED_INODES
    try:
        _format_and_mount(image, workspace, inodes)
    except OSError:
        image.unlink(missing_ok=True)
        raise
    try:
        # A fresh ext4 has lost+found; it is no file of the sandbox's (listings, snapshots).
        (workspace / "lost+found").rmdir()
        os.chmod(workspace, 0o700)
    except OSError:
        unmount_workspace(workspace)
        image.unlink(missing_ok=True)
        raise


def _format_and_mount(image: Path, workspace: Path, inodes: int) -> None:
    _run(
        "mkfs.ext4",
        "-q",
        "-F",
        "-O",
        "^has_journal,^resize_inode",
        "-E",
        "lazy_itable_init=1,nodiscard,root_owner=0:0",
        "-m",
        "0",
        # Fixed, not mkfs's "small" defaults (1 KiB blocks, 128-byte inodes, 8 MiB groups), so
        # the inode count is rounded up by at most one inode-table block per 128 MiB group.
        "-b",
        "4096",
        "-I",
        str(_INODE_BYTES),
        "-N",
        str(inodes),
        str(image),
    )
    _run("mount", "-o", "loop,nosuid,nodev,noatime", str(image), str(workspace))


def unmount_workspace(workspace: str | os.PathLike[str]) -> None:
    """Unmount a session's workspace image if it is mounted (at close, by ``gc``); never raises.

    A lazy unmount if a process still holds it busy: the loop device is freed once the last one
    lets go, and the image file (removed with the session's directory) with it.
    """
    path = os.fspath(workspace)
    if not os.path.ismount(path):
        return
    try:
        _run("umount", path)
    except OSError:
        try:
            _run("umount", "--lazy", path)
        except OSError as exc:
            logger.warning("could not unmount a session's workspace: %s", exc)


def mount_ports(ports: str | os.PathLike[str]) -> None:
    """Mount a small tmpfs on a session's port directory (the host is root): a bind of a
    directory shows its host path in the sandbox's ``mountinfo``, a file system's own root
    shows as ``/``, so the sandbox does not learn where its session directory is."""
    _run(
        "mount", "-t", "tmpfs", "-o", "size=1m,nr_inodes=1024,mode=0700", "tmpfs", os.fspath(ports)
    )


def release_directory(directory: str | os.PathLike[str]) -> None:
    """Remove a session's directory (at close, by ``gc``), its workspace and port directory
    unmounted first."""
    unmount_workspace(Path(directory) / "workspace")
    unmount_workspace(Path(directory) / "ports")
    remove_directory(directory)


def _run(*argv: str) -> None:
    try:
        completed = subprocess.run(
            argv,
            capture_output=True,
            timeout=_TIMEOUT,
            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise OSError(f"{argv[0]} failed: {exc}") from exc
    if completed.returncode != 0:
        message = completed.stderr.decode(errors="replace").strip()
        raise OSError(f"{argv[0]} failed ({completed.returncode}): {message}")


__all__ = [
    "IMAGE_FILE",
    "image_bytes",
    "mount_ports",
    "mount_workspace",
    "release_directory",
    "unavailable_reason",
    "unmount_workspace",
]
