"""One result shape for code and commands, on every provider, and how a model sees it.

The full [`ExecutionResult`][langchain_sandbox.ExecutionResult] travels as a ToolMessage artifact (for programs and UIs); the model
reads [`ExecutionResult.render`][langchain_sandbox.ExecutionResult.render], a compact text that keeps the head and tail of long output and
says what was cut, plus images as image content blocks.
"""

from __future__ import annotations

import base64
import html
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from langchain_sandbox._output_capture import DEFAULT_CAPTURE_BYTES, OutputCapture

DEFAULT_RENDER_CHARS = 8_000
"""How much of each stream a model sees by default."""


class ExecutionError(BaseModel):
    """An exception raised by user code, as a value."""

    model_config = ConfigDict(frozen=True)

    name: str
    value: str
    traceback: str = ""


class Artifact(BaseModel):
    """A file the code produced for the caller (a matplotlib figure, a chart), carried inline.

    ``data`` is base64 so the result stays JSON-safe in a checkpoint.
    """

    model_config = ConfigDict(frozen=True)

    name: str
    mime_type: str
    data: str = Field(repr=False)
    path: str | None = None

    @classmethod
    def from_bytes(
        cls, name: str, mime_type: str, data: bytes, path: str | None = None
    ) -> Artifact:
        return cls(name=name, mime_type=mime_type, data=base64.b64encode(data).decode(), path=path)

    def to_bytes(self) -> bytes:
        return base64.b64decode(self.data)

    @property
    def is_image(self) -> bool:
        return self.mime_type.startswith("image/")

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        """Jupyter shows an image artifact as the image itself (base64 is what it expects)."""
        bundle: dict[str, Any] = {"text/plain": f"{self.name} ({self.mime_type})"}
        if self.is_image:
            bundle[self.mime_type] = self.data
        return bundle


class ExecutionResult(BaseModel):
    """What running code or a command produced.

    Attributes:
        kind: ``"code"`` for stateful Python, ``"command"`` for a shell command.
        stdout, stderr: Captured streams, faithfully (newlines, unicode, partial lines). When a stream
            exceeded the provider's capture limit, its head and tail are kept around a marker line.
        exit_code: The process exit code for commands; for code 0, or 1 when it raised.
        error: The exception user code raised, with its traceback.
        value: ``repr`` of the last bare expression's value (as Jupyter shows it), if any.
        artifacts: Images and files the code produced for the caller.
        duration_ms: Wall time of the execution as the provider measured it.
        timed_out: The execution ran past its timeout and was interrupted or killed.
        truncated: Some output was dropped at the source; ``omitted_bytes`` says how much.
        notices: Messages from the infrastructure the model should know about (a restore happened,
            some variables could not be restored, a package was installed...).
    """

    kind: Literal["code", "command"] = "code"
    stdout: str = ""
    stderr: str = ""
    exit_code: int | None = 0
    error: ExecutionError | None = None
    value: str | None = None
    artifacts: list[Artifact] = Field(default_factory=list)
    duration_ms: float = 0.0
    timed_out: bool = False
    truncated: bool = False
    omitted_bytes: int = 0
    notices: list[str] = Field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when the code ran to completion without an exception and exited 0."""
        return not self.timed_out and self.error is None and (self.exit_code or 0) == 0

    def with_notices(self, *notices: str) -> ExecutionResult:
        """A copy with ``notices`` prepended (infrastructure messages go first)."""
        if not notices:
            return self
        return self.model_copy(update={"notices": [*notices, *self.notices]})

    def render(self, *, max_chars: int = DEFAULT_RENDER_CHARS) -> str:
        """Compact text for a model: what happened first, then the streams, head and tail kept.

        Warnings on stderr are shown under ``stderr`` without calling the run a failure; only an
        exception, a non-zero exit or a timeout is reported as one.
        """
        parts: list[str] = [f"[notice] {n}" for n in self.notices]
        if self.timed_out:
            parts.append(f"[timed out after {self.duration_ms / 1000:.1f}s; execution was stopped]")
        elif self.error is not None:
            parts.append(f"[error] {self.error.name}: {self.error.value}")
        elif self.kind == "command" and self.exit_code not in (0, None):
            parts.append(f"[exit code {self.exit_code}]")
        if self.stdout:
            parts.append("stdout:\n" + truncate_middle(self.stdout, max_chars))
        if self.stderr:
            parts.append("stderr:\n" + truncate_middle(self.stderr, max_chars))
        if self.error is not None and self.error.traceback:
            parts.append("traceback:\n" + truncate_middle(self.error.traceback, max_chars))
        if self.value is not None:
            parts.append("value:\n" + truncate_middle(self.value, max_chars))
        if self.truncated:
            parts.append(
                f"[output truncated at the source: {self.omitted_bytes} bytes omitted; "
                "write large output to a file and read parts of it instead]"
            )
        for artifact in self.artifacts:
            where = f" saved at {artifact.path}" if artifact.path else ""
            parts.append(f"[artifact] {artifact.name} ({artifact.mime_type}){where}")
        if not parts:
            parts.append("[no output]" if self.kind == "code" else "[exit code 0, no output]")
        return "\n".join(parts)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        """Jupyter shows a result as the model reads it, with its images drawn (no decoding by
        hand): HTML with the text and every image inline, and for front ends without HTML the
        text and the first image of each type."""
        text = self.render()
        images = [a for a in self.artifacts if a.is_image]
        inline = "".join(
            f'<img src="data:{a.mime_type};base64,{a.data}" alt="{html.escape(a.name)}"/>'
            for a in images
        )
        bundle: dict[str, Any] = {a.mime_type: a.data for a in reversed(images)}
        bundle["text/plain"] = text
        bundle["text/html"] = f"<pre>{html.escape(text)}</pre>{inline}"
        return bundle

    def to_content_blocks(self, *, max_chars: int = DEFAULT_RENDER_CHARS) -> list[dict[str, Any]]:
        """The rendering as LangChain content blocks: one text block, then one block per image."""
        blocks: list[dict[str, Any]] = [{"type": "text", "text": self.render(max_chars=max_chars)}]
        for artifact in self.artifacts:
            if artifact.is_image:
                blocks.append(
                    {
                        "type": "image",
                        "base64": artifact.data,
                        "mime_type": artifact.mime_type,
                    }
                )
        return blocks


def truncate_middle(text: str, max_chars: int) -> str:
    """Keep the head and the tail of ``text`` with a line that says how much was cut between."""
    if len(text) <= max_chars:
        return text
    head = max_chars * 2 // 3
    tail = max_chars - head
    cut = len(text) - head - tail
    return f"{text[:head]}\n... [{cut} characters cut] ...\n{text[len(text) - tail :]}"


__all__ = [
    "DEFAULT_CAPTURE_BYTES",
    "DEFAULT_RENDER_CHARS",
    "Artifact",
    "ExecutionError",
    "ExecutionResult",
    "OutputCapture",
    "truncate_middle",
]
