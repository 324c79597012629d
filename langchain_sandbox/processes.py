"""Processes that outlive a call: what starts one again, and what the sandbox says about it.

(Placeholder of the shared contract of issue 22, written from its spec; the provider branch owns
this module and replaces it.)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

ProcessState = Literal["running", "exited", "stopped", "lost"]


@dataclass(frozen=True)
class ProcessSpec:
    """What is needed to start a named process again: what the sandbox record keeps."""

    name: str
    command: str
    cwd: str = "/home/user"
    env: dict[str, str] = field(default_factory=dict)
    restart: bool = True

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "command": self.command,
            "cwd": self.cwd,
            "env": dict(self.env),
            "restart": self.restart,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ProcessSpec:
        return cls(
            name=data["name"],
            command=data["command"],
            cwd=data.get("cwd", "/home/user"),
            env=dict(data.get("env") or {}),
            restart=bool(data.get("restart", True)),
        )


@dataclass(frozen=True)
class ProcessInfo:
    name: str
    command: str
    cwd: str
    state: ProcessState
    exit_code: int | None
    started_at: float
    pid: int | None
    restart: bool
    output: str = ""


@dataclass(frozen=True)
class ProcessOutput:
    name: str
    text: str
    next_offset: int
    state: ProcessState
    exit_code: int | None
    dropped: int


__all__ = ["ProcessInfo", "ProcessOutput", "ProcessSpec", "ProcessState"]
