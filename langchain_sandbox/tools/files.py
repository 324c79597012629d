"""Tools that move files in and out of the thread's workspace and list it."""

from __future__ import annotations

import asyncio
import base64
import binascii
import mimetypes
from typing import Any, Literal

from pydantic import Field

from langchain_sandbox.core.workspace import relative_path, resolve_path
from langchain_sandbox.errors import InvalidInputError
from langchain_sandbox.providers.base import FileInfo
from langchain_sandbox.results import truncate_middle
from langchain_sandbox.tools.base import (
    Content,
    SandboxCall,
    SandboxTool,
    SandboxToolArgs,
    ToolReply,
    notice_lines,
)
from langchain_sandbox.tools.images import place_images

MAX_WRITE_BYTES = 16 * 1024 * 1024
"""Largest file a model may write in one call (its content travels through the tool call)."""

_IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})

_PATH_HELP = "Path relative to /home/user (or absolute inside it)."


class SandboxWriteFileArgs(SandboxToolArgs):
    """Arguments of [`SandboxWriteFileTool`][langchain_sandbox.SandboxWriteFileTool]."""

    path: str = Field(description=_PATH_HELP)
    content: str = Field(description="The whole new content of the file.")
    encoding: Literal["text", "base64"] = Field(
        default="text",
        description="'text' writes content as UTF-8; 'base64' decodes it first (binary files).",
    )


class SandboxWriteFileTool(SandboxTool):
    """Write (create or replace) one file in the thread's workspace."""

    name: str = "sandbox_write_file"
    description: str = (
        "Create or overwrite a file in the sandbox workspace (/home/user), creating parent "
        "directories. Give the complete content; for binary data pass it base64-encoded with "
        "encoding='base64'. The file is then visible to the Python and shell tools."
    )
    args_schema: type[SandboxWriteFileArgs] = SandboxWriteFileArgs

    async def _acall(self, call: SandboxCall, args: dict[str, Any]) -> ToolReply:
        path = resolve_path(args["path"])
        data = _decode(args["content"], args.get("encoding", "text"))
        if len(data) > MAX_WRITE_BYTES:
            raise InvalidInputError(
                f"The content is {len(data)} bytes; at most {MAX_WRITE_BYTES} can be written at "
                "once. Write it in parts, or generate large files with code in the sandbox."
            )
        outcome = await call.runtime.awrite_files(
            call.thread_id,
            {path: data},
            record=call.record,
            step_call=call.step_call,
            resumable=call.resumable,
        )
        text = notice_lines(outcome.notices) + f"Wrote {len(data)} bytes to {path}."
        return ToolReply(text, {"path": path, "bytes": len(data)}, outcome.record)


def _decode(content: str, encoding: str) -> bytes:
    if encoding == "text":
        return content.encode("utf-8")
    try:
        return base64.b64decode(content, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidInputError(
            "The content is not valid base64; pass encoding='text' for text files."
        ) from None


class SandboxReadFileArgs(SandboxToolArgs):
    """Arguments of [`SandboxReadFileTool`][langchain_sandbox.SandboxReadFileTool]."""

    path: str = Field(description=_PATH_HELP)


class SandboxReadFileTool(SandboxTool):
    """Read one file of the thread's workspace: text as text, images as images, other binary
    content as a short note (a model cannot use raw bytes)."""

    name: str = "sandbox_read_file"
    description: str = (
        "Read a file from the sandbox workspace (/home/user). Text files are returned as text "
        "(the middle of very long files is cut; read parts of them with Python instead), images "
        "as images; other binary files are described, not shown."
    )
    args_schema: type[SandboxReadFileArgs] = SandboxReadFileArgs
    max_read_chars: int = 20_000

    async def _acall(self, call: SandboxCall, args: dict[str, Any]) -> ToolReply:
        path = resolve_path(args["path"])
        outcome = await call.runtime.aread_files(
            call.thread_id, [path], record=call.record, step_call=call.step_call
        )
        data = outcome.value[path]
        head = notice_lines(outcome.notices)
        result: dict[str, Any] = {"path": path, "bytes": len(data), "kind": "text"}
        content: Content
        # The first guess reads the system's mime.types files: not on the event loop.
        mime_type = (await asyncio.to_thread(mimetypes.guess_type, path))[0]
        text = _as_text(data)
        if mime_type in _IMAGE_TYPES:
            result["kind"] = "image"
            content = [
                {"type": "text", "text": f"{head}{path} ({mime_type}, {len(data)} bytes)"},
                {
                    "type": "image",
                    "base64": base64.b64encode(data).decode(),
                    "mime_type": mime_type,
                },
            ]
        elif text is None:
            result["kind"] = "binary"
            content = (
                f"{head}{path} is a binary file of {len(data)} bytes "
                f"({mime_type or 'unknown type'}); it is not shown. Inspect it with Python."
            )
        else:
            result["truncated"] = len(text) > self.max_read_chars
            content = head + truncate_middle(text, self.max_read_chars)
        content, result = place_images(content, result, inline=call.images_inline)
        return ToolReply(content, result, outcome.record)


def _as_text(data: bytes) -> str | None:
    if b"\x00" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


class SandboxListFilesArgs(SandboxToolArgs):
    """Arguments of [`SandboxListFilesTool`][langchain_sandbox.SandboxListFilesTool]."""

    path: str = Field(default=".", description="Directory to list, relative to /home/user.")
    recursive: bool = Field(default=False, description="Also list everything below it.")


class SandboxListFilesTool(SandboxTool):
    """List a directory of the thread's workspace."""

    name: str = "sandbox_list_files"
    description: str = (
        "List the files and directories in a directory of the sandbox workspace (/home/user), "
        "with sizes. Set recursive=true to include everything below it."
    )
    args_schema: type[SandboxListFilesArgs] = SandboxListFilesArgs
    max_entries: int = 500

    async def _acall(self, call: SandboxCall, args: dict[str, Any]) -> ToolReply:
        path = resolve_path(args.get("path") or ".")
        outcome = await call.runtime.alist_files(
            call.thread_id,
            path,
            recursive=bool(args.get("recursive")),
            record=call.record,
            step_call=call.step_call,
        )
        entries = sorted(outcome.value, key=lambda e: e.path)
        shown = entries[: self.max_entries]
        text = notice_lines(outcome.notices) + f"{path} ({len(entries)} entries)"
        if shown:
            text += "\n" + "\n".join(_entry_line(e) for e in shown)
        if len(entries) > len(shown):
            text += f"\n... {len(entries) - len(shown)} more entries not shown"
        result = {
            "path": relative_path(path),
            "count": len(entries),
            "entries": [{"path": e.path, "kind": e.kind, "size": e.size} for e in shown],
        }
        return ToolReply(text, result, outcome.record)


def _entry_line(entry: FileInfo) -> str:
    if entry.is_dir:
        return f"{entry.path}/"
    if entry.kind == "symlink":
        return f"{entry.path} (symbolic link)"
    if entry.kind == "fifo":
        return f"{entry.path} (named pipe)"
    return f"{entry.path}  {entry.size} bytes"


__all__ = [
    "MAX_WRITE_BYTES",
    "SandboxListFilesArgs",
    "SandboxListFilesTool",
    "SandboxReadFileArgs",
    "SandboxReadFileTool",
    "SandboxWriteFileArgs",
    "SandboxWriteFileTool",
]
