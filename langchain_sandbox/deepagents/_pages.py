"""What Deep Agents' ``read`` and ``edit`` return, computed from a file's bytes on the host.

The shapes follow ``deepagents.backends.sandbox.BaseSandbox`` exactly (a page is the window's
lines without their terminators, joined by ``\\n``; a page over 500 KiB is cut with the same
notice; binary content is base64 up to 500 KiB; an edit keeps the file's CRLF line endings), so
an agent sees the same results whichever backend it runs on. Only where the bytes come from
differs: the provider's file API instead of a Python script run through the shell.
"""

from __future__ import annotations

import base64
import re

from deepagents.backends.protocol import EditResult, FileData, ReadResult
from deepagents.backends.utils import (
    EMPTY_OLD_STRING_ERROR,
    _get_backend_read_file_type,
    normalize_read_bounds,
)

from langchain_sandbox.core.workspace import WORKSPACE_ROOT
from langchain_sandbox.deepagents._outside import sandbox_path

MAX_PAGE_BYTES = 500 * 1024
"""Largest text page ``read`` returns (BaseSandbox's ``MAX_OUTPUT_BYTES``)."""

MAX_BINARY_BYTES = 500 * 1024
"""Largest binary file ``read`` returns base64-encoded (BaseSandbox's ``MAX_BINARY_BYTES``)."""

EMPTY_FILE_NOTICE = "System reminder: File exists but has empty contents"

_LINE_BREAK = re.compile(r"\r\n|\r|\n")
"""Universal newlines, as Python's text files read them (``str.splitlines`` splits on more)."""

TRUNCATION_NOTICE = "\n\n" + (
    "[Output was truncated due to size limits. "
    "This paginated read result exceeded the sandbox stdout limit. "
    "Continue reading with a larger offset or smaller limit to inspect the rest of the file.]"
)


def is_binary_path(path: str) -> bool:
    """Whether Deep Agents reads ``path`` as binary from its extension (images, audio, PDF...)."""
    return _get_backend_read_file_type(path) != "text"


def binary_too_large(path: str) -> ReadResult:
    return ReadResult(
        error=f"File '{path}': Binary file exceeds maximum preview size of {MAX_BINARY_BYTES} bytes"
    )


def read_page(path: str, data: bytes, offset: int, limit: int) -> ReadResult:
    """The ``ReadResult`` of reading lines ``[offset, offset + limit)`` of a file holding ``data``."""
    if not data:
        return ReadResult(file_data=FileData(content=EMPTY_FILE_NOTICE, encoding="utf-8"))
    text = None if is_binary_path(path) else _utf8(data)
    if text is None:
        if len(data) > MAX_BINARY_BYTES:
            return binary_too_large(path)
        encoded = base64.b64encode(data).decode("ascii")
        return ReadResult(file_data=FileData(content=encoded, encoding="base64"))
    offset, limit = normalize_read_bounds(offset, limit)
    if limit == 0:
        return ReadResult(file_data=FileData(content="", encoding="utf-8"), no_lines_requested=True)
    lines = _LINE_BREAK.split(text)
    if lines[-1] == "":
        lines.pop()
    if offset >= len(lines):
        return ReadResult(
            error=f"File '{path}': Line offset {offset} exceeds file length ({len(lines)} lines)"
        )
    parts: list[str] = []
    used = 0
    budget = MAX_PAGE_BYTES - len(TRUNCATION_NOTICE.encode())
    truncated = False
    for line in lines[offset : offset + limit]:
        piece = (line if not parts else "\n" + line).encode()
        if used + len(piece) > budget:
            truncated = True
            if not parts:
                # Even the first line is too long: show its head and move past it, so paging on
                # never loops on the same line.
                parts.append(piece[:budget].decode(errors="ignore"))
            break
        parts.append(piece.decode())
        used += len(piece)
    end_line = offset + len(parts)
    content = "".join(parts) + (TRUNCATION_NOTICE if truncated else "")
    return ReadResult(
        file_data=FileData(content=content, encoding="utf-8"),
        total_lines=len(lines),
        start_line=offset + 1,
        end_line=end_line,
        next_offset=end_line if end_line < len(lines) else None,
    )


def replace_in(
    path: str, data: bytes, old: str, new: str, *, replace_all: bool
) -> tuple[bytes, EditResult]:
    """The file's new bytes and the ``EditResult`` of replacing ``old`` by ``new`` in ``data``.

    ``read`` hands the model LF-only text even from a CRLF file, so ``old`` is tried as given,
    then with CRLF, then with LF line endings; ``new`` gets the line endings that matched.
    On an error the bytes are returned unchanged.
    """
    if not old:
        return data, EditResult(error=EMPTY_OLD_STRING_ERROR)
    text = _utf8(data)
    if text is None:
        return data, EditResult(error=f"Error: File '{path}' is not a text file")
    lf_old, lf_new = old.replace("\r\n", "\n"), new.replace("\r\n", "\n")
    candidates = (
        (old, new),
        (lf_old.replace("\n", "\r\n"), lf_new.replace("\n", "\r\n")),
        (lf_old, lf_new),
    )
    for found, replacement in candidates:
        count = text.count(found)
        if count == 0:
            continue
        if count > 1 and not replace_all:
            return data, EditResult(
                error=f"Error: String '{old}' appears multiple times ({count} occurrences). "
                "Use replace_all=True to replace all occurrences, or give more context."
            )
        updated = text.replace(found, replacement, -1 if replace_all else 1)
        return updated.encode(), EditResult(path=path, occurrences=count)
    return data, EditResult(error=f"Error: String not found in file: '{old}'")


def _utf8(data: bytes) -> str | None:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def not_absolute(path: str) -> str:
    """The error for a path that is not absolute."""
    return (
        f"Error: '{path}' is not an absolute path. Use one under {WORKSPACE_ROOT}: files there "
        "are kept with the conversation."
    )


def read_error(path: str, code: str) -> ReadResult:
    """``read``'s result for a file operation error ``code``."""
    return ReadResult(error=f"File '{path}': {code}")


def write_error(path: str, code: str) -> str:
    """``write``'s message for ``code``, saying where writing works."""
    if code == "invalid_path" and sandbox_path(path) is None:
        return not_absolute(path)
    if code == "permission_denied":
        # Say where writing works: the model asked for a place the sandbox's user may not write.
        return (
            f"Error: Permission denied writing file '{path}'. Files under {WORKSPACE_ROOT} can be "
            "written, and are kept with the conversation."
        )
    return f"Error writing file '{path}': {code}"


def edit_error(path: str, code: str) -> str:
    """``edit``'s message for ``code``."""
    if code == "file_not_found":
        return f"Error: File '{path}' not found"
    if code == "permission_denied":
        return f"Error: Permission denied editing file '{path}'"
    return f"Error editing file '{path}': {code}"
