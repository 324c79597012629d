"""Byte-level pieces of the E2B protocols the emulator speaks.

* HTTP/1.1 request bodies, plain or ``Transfer-Encoding: chunked`` (reqwest streams Connect
  request bodies chunked, which ``http.server`` does not decode by itself);
* Connect envelopes (``flags | u32 length | JSON``) used by envd's server-streaming RPCs;
* ``multipart/form-data`` uploads of envd's ``POST /files``;
* proto3-JSON of envd's ``filesystem.EntryInfo``.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import stat
import struct
from typing import Any

from langchain_sandbox.testing._e2b_machine import Entry

END_STREAM = 0x02
_FILE_TYPES = {
    "file": "FILE_TYPE_FILE",
    "dir": "FILE_TYPE_DIRECTORY",
    "symlink": "FILE_TYPE_SYMLINK",
}


def read_body(stream: io.BufferedIOBase, headers: Any, limit: int = 1 << 30) -> bytes:
    """Read a request body framed by ``Content-Length`` or chunked transfer encoding."""
    if "chunked" in (headers.get("Transfer-Encoding") or "").lower():
        body = bytearray()
        while True:
            size_line = stream.readline(1024)
            size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                while stream.readline(1024) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return bytes(body)
            if len(body) + size > limit:
                raise ValueError("request body too large")
            body += stream.read(size)
            stream.readline(2)
    length = int(headers.get("Content-Length") or 0)
    if length > limit:
        raise ValueError("request body too large")
    return stream.read(length) if length else b""


def envelope(message: dict[str, Any], flags: int = 0) -> bytes:
    data = json.dumps(message, separators=(",", ":")).encode()
    return struct.pack(">BI", flags, len(data)) + data


def parse_envelope(body: bytes) -> dict[str, Any]:
    """The JSON message of the single envelope a server-streaming request carries."""
    if len(body) < 5:
        raise ValueError("short Connect envelope")
    _flags, length = struct.unpack(">BI", body[:5])
    message = json.loads(body[5 : 5 + length] or b"{}")
    if not isinstance(message, dict):
        raise ValueError("Connect message is not an object")
    return message


def parse_multipart(body: bytes, content_type: str) -> list[tuple[str, bytes]]:
    """``(filename, data)`` of each part of a ``multipart/form-data`` body."""
    boundary = ""
    for param in content_type.split(";")[1:]:
        key, _, value = param.strip().partition("=")
        if key.lower() == "boundary":
            boundary = value.strip('"')
    if not boundary:
        raise ValueError("multipart body without a boundary")
    parts: list[tuple[str, bytes]] = []
    for chunk in body.split(b"--" + boundary.encode())[1:]:
        if chunk.startswith(b"--"):
            break
        head, _, data = chunk.partition(b"\r\n\r\n")
        filename = ""
        for line in head.decode("utf-8", "replace").split("\r\n"):
            if line.lower().startswith("content-disposition:"):
                for param in line.split(";")[1:]:
                    key, _, value = param.strip().partition("=")
                    if key == "filename":
                        filename = value.strip('"')
        parts.append((filename, data[:-2] if data.endswith(b"\r\n") else data))
    return parts


def rfc3339(ns: int) -> str:
    """A proto3-JSON Timestamp: UTC, nanoseconds kept."""
    seconds, nanos = divmod(ns, 1_000_000_000)
    stamp = dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{stamp}.{nanos:09d}Z"


def entry_json(entry: Entry) -> dict[str, Any]:
    """proto3-JSON of ``filesystem.EntryInfo`` (int64 as a string, zero values omitted)."""
    kind_bits = {"file": stat.S_IFREG, "dir": stat.S_IFDIR, "symlink": stat.S_IFLNK}
    message: dict[str, Any] = {
        "name": entry.name,
        "path": entry.path,
        "mode": entry.mode,
        "permissions": stat.filemode(kind_bits.get(entry.kind, stat.S_IFIFO) | entry.mode),
        "owner": "user",
        "group": "user",
        "modifiedTime": rfc3339(entry.mtime_ns),
    }
    if entry.kind in _FILE_TYPES:  # FILE_TYPE_UNSPECIFIED is proto3's zero value: omitted
        message["type"] = _FILE_TYPES[entry.kind]
    if entry.size:
        message["size"] = str(entry.size)
    if entry.symlink_target is not None:
        message["symlinkTarget"] = entry.symlink_target
    return message
