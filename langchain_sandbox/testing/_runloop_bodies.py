"""Request bodies as the Runloop API reads them: a JSON object, or ``multipart/form-data``."""

from __future__ import annotations

import email.parser
import email.policy
import json
from typing import Any

from langchain_sandbox.testing._runloop_devboxes import ApiError


def json_body(body: bytes) -> dict[str, Any]:
    """The JSON object of a request (empty: ``{}``)."""
    if not body:
        return {}
    value = json.loads(body)
    if not isinstance(value, dict):
        raise ApiError(400, "The body must be a JSON object")
    return value


def multipart_fields(body: bytes, content_type: str) -> dict[str, bytes]:
    """The fields of a ``multipart/form-data`` body (stdlib ``email`` parses the MIME)."""
    if not content_type.startswith("multipart/form-data"):
        raise ApiError(400, "upload_file expects multipart/form-data")
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        f"Content-Type: {content_type}\r\n\r\n".encode() + body
    )
    fields: dict[str, bytes] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        if name:
            fields[str(name)] = payload if isinstance(payload, bytes) else b""
    return fields


__all__ = ["json_body", "multipart_fields"]
