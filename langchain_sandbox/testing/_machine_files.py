"""Files anywhere in an emulated machine (a local provider's session), for the emulators.

The local provider reads and writes only inside the workspace; a remote sandbox's API writes
anywhere its user may (``/tmp``, the worker's directory). A file outside the workspace is staged
in the workspace and moved (or copied) there by a command of the machine itself, so the machine's
own permissions decide, as they would on the real sandbox.
"""

from __future__ import annotations

import posixpath
import shlex
import uuid
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from langchain_sandbox.core.workspace import WORKSPACE_ROOT
from langchain_sandbox.errors import InvalidPathError
from langchain_sandbox.providers.base import Session

T = TypeVar("T")
Run = Callable[[Coroutine[Any, Any, Any]], Any]
"""How the emulator waits for a coroutine of the machine (its loop thread's ``run_sync``)."""

_STAGING_PREFIX = f"{WORKSPACE_ROOT}/.emulator-staging-"


class MachineFileError(Exception):
    """A file the machine refused to write (its message is the machine's own)."""


def in_workspace(path: str) -> bool:
    """Whether the absolute ``path`` is the workspace or inside it."""
    return path == WORKSPACE_ROOT or path.startswith(WORKSPACE_ROOT + "/")


def write_file(run: Run, machine: Session, path: str, data: bytes) -> None:
    """Write ``data`` at the absolute ``path``, making its directories."""
    if in_workspace(path):
        run(machine.write_files({path: data}))
        return
    staging = f"{_STAGING_PREFIX}{uuid.uuid4().hex}"
    run(machine.write_files({staging: data}))
    moved = run(
        machine.run_command(
            f"mkdir -p {shlex.quote(posixpath.dirname(path))} && mv {staging} {shlex.quote(path)}",
            timeout=60,
        )
    )
    if moved.exit_code != 0:
        raise MachineFileError(moved.stderr.strip())


def read_file(run: Run, machine: Session, path: str) -> bytes:
    """The bytes of the regular file at the absolute ``path``; `FileNotFoundError` if none."""
    try:
        if in_workspace(path):
            data: bytes = run(machine.read_files([path]))[path]
            return data
        staging = f"{_STAGING_PREFIX}{uuid.uuid4().hex}"
        copied = run(machine.run_command(f"cp -- {shlex.quote(path)} {staging}", timeout=60))
        if copied.exit_code != 0:
            raise FileNotFoundError(path)
        data = run(machine.read_files([staging]))[staging]
        run(machine.remove_files([staging]))
        return data
    except InvalidPathError as exc:
        raise FileNotFoundError(path) from exc


__all__ = ["MachineFileError", "in_workspace", "read_file", "write_file"]
