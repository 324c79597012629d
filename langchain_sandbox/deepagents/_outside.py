"""Files outside the workspace, moved through the sandbox itself, and the note their results carry.

The providers' file APIs reach only ``/home/user`` (what snapshots keep). A path elsewhere
(``/tmp/x``, ``/opt/data``) is still the sandbox's own: the bytes travel through a staging file
in the workspace (the file API: binary-safe, no command-line or output size limit) and one
``python3`` script, run in the sandbox as its user, copies them to or from the real path. The
sandbox's permissions therefore decide (a read-only ``/usr`` is ``permission_denied``), and the
host is never touched: the target is only ever named inside the sandbox. Staging files are
removed in the same call, so the workspace is left as it was.
"""

from __future__ import annotations

import json
import posixpath
import shlex
import uuid
from collections.abc import Mapping, Sequence

from langchain_sandbox.core.workspace import WORKSPACE_ROOT
from langchain_sandbox.errors import InvalidPathError, SandboxError
from langchain_sandbox.providers.base import Session

_STAGING_PREFIX = ".langchain_sandbox-transfer-"
"""Staging files, at the workspace's root (commands run there): a directory made for them would
outlive the call and be snapshotted."""

_COPY_IN = r"""
import errno, json, os, shutil, sys
codes = {}
for stage, target in json.loads(sys.argv[1]):
    try:
        if os.path.isdir(target):
            codes[target] = "is_directory"
            continue
        os.makedirs(os.path.dirname(target) or "/", exist_ok=True)
        with open(stage, "rb") as src, open(target, "wb") as dst:
            shutil.copyfileobj(src, dst)
    except IsADirectoryError:
        codes[target] = "is_directory"
    except OSError as exc:
        denied = exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS)
        codes[target] = "permission_denied" if denied else "invalid_path"
    finally:
        os.unlink(stage)
print(json.dumps(codes))
"""
"""Copy each staged file to its target (parents created), removing the stage; print the error
codes of the targets that failed."""

_COPY_OUT = r"""
import errno, json, os, shutil, stat, sys
codes = {}
limit = json.loads(sys.argv[2])
for target, stage in json.loads(sys.argv[1]):
    try:
        info = os.stat(target)
        if stat.S_ISDIR(info.st_mode):
            codes[target] = "is_directory"
        elif not stat.S_ISREG(info.st_mode):
            codes[target] = "invalid_path"
        elif limit is not None and info.st_size > limit:
            codes[target] = "too_large"
        else:
            with open(target, "rb") as src, open(stage, "wb") as dst:
                shutil.copyfileobj(src, dst)
    except (FileNotFoundError, NotADirectoryError):
        codes[target] = "file_not_found"
    except OSError as exc:
        denied = exc.errno in (errno.EACCES, errno.EPERM)
        codes[target] = "permission_denied" if denied else "invalid_path"
print(json.dumps(codes))
"""
"""Copy each readable target to its stage; print the error codes of the others (``limit``: the
largest size wanted, else ``too_large``)."""


class NotedPath(str):
    """The path of a result, carrying a note for whoever reads the result.

    It equals the path (what callers compare) and formats with the note after it: Deep Agents
    builds its tools' replies as ``f"Updated file {result.path}"``, so the model reads the note
    without any change to Deep Agents. The note itself is ``.note``.
    """

    note: str

    def __new__(cls, path: str, note: str) -> NotedPath:
        made = super().__new__(cls, path)
        made.note = note
        return made

    def __format__(self, format_spec: str) -> str:
        return format(f"{self!s} ({self.note})", format_spec)


def outside_note(path: str) -> NotedPath:
    """``path`` with the note that the conversation does not keep it."""
    return NotedPath(
        path,
        f"note: {path} is outside {WORKSPACE_ROOT}, so the conversation does not keep it: "
        "it is in the sandbox now, but the sandbox's snapshots do not include it, so a resumed "
        f"or forked conversation will not have it. Keep files under {WORKSPACE_ROOT} to keep them",
    )


def sandbox_path(path: object) -> str | None:
    """The normalized absolute sandbox path of ``path``, or ``None`` if it is not absolute.

    Normalizing is lexical (``/home/user/../../etc/x`` is ``/etc/x``): the path is only ever
    resolved inside the sandbox, which follows its own symlinks."""
    if not isinstance(path, str) or not path.startswith("/") or "\x00" in path:
        return None
    normalized = posixpath.normpath(path)
    # POSIX keeps a leading "//" as implementation-defined; on Linux it is "/".
    return "/" + normalized.lstrip("/")


def _staged(count: int) -> list[str]:
    token = uuid.uuid4().hex
    return [f"{_STAGING_PREFIX}{token}-{index}" for index in range(count)]


async def _run_script(session: Session, script: str, *args: str) -> dict[str, str]:
    command = " ".join(["python3", "-c", shlex.quote(script), *map(shlex.quote, args)])
    result = await session.run_command(command)
    if not result.ok:
        raise SandboxError(
            f"the sandbox could not copy the files: {(result.stderr or result.stdout).strip()}"
        )
    codes: dict[str, str] = json.loads(result.stdout.strip().splitlines()[-1])
    return codes


async def write_outside(session: Session, files: Mapping[str, bytes]) -> dict[str, str]:
    """Write ``{sandbox path: bytes}`` as the sandbox's user; the error code of each path that
    failed (``permission_denied``, ``is_directory``, ``invalid_path``)."""
    stages = dict(zip(files, _staged(len(files)), strict=True))
    await session.write_files({stages[target]: data for target, data in files.items()})
    try:
        pairs = [[stage, target] for target, stage in stages.items()]
        return await _run_script(session, _COPY_IN, json.dumps(pairs))
    finally:
        await session.remove_files(list(stages.values()))


async def read_outside(
    session: Session, targets: Sequence[str], *, max_bytes: int | None
) -> tuple[dict[str, bytes], dict[str, str]]:
    """Read sandbox paths as the sandbox's user: ``({path: bytes}, {path: error code})``
    (``file_not_found``, ``is_directory``, ``permission_denied``, ``too_large`` past
    ``max_bytes``, ``invalid_path``)."""
    stages = dict(zip(targets, _staged(len(targets)), strict=True))
    try:
        pairs = [[target, stage] for target, stage in stages.items()]
        codes = await _run_script(session, _COPY_OUT, json.dumps(pairs), json.dumps(max_bytes))
        readable = [stages[t] for t in targets if t not in codes]
        try:
            data = await session.read_files(readable) if readable else {}
        except InvalidPathError:
            data = {}
        by_stage = {stage: target for target, stage in stages.items()}
        return {by_stage[s]: content for s, content in data.items()}, codes
    finally:
        await session.remove_files(list(stages.values()))
