"""Services: the processes and ports a thread's sandbox record promises, and bringing them back.

A process started with ``restart=True`` and every exposed port is a *service*: part of the sandbox's
state as much as its files, so it is kept in the record (the ``services`` key of
[`SandboxState`][langchain_sandbox.SandboxState]) and travels with every checkpoint. When the
thread's sandbox is replaced or rewound (a resume in a new process, a fork or time travel, a remote
sandbox that was lost, an idle session closed), the record's services are started again in their
``cwd`` with their ``env`` before the next call runs, ports are exposed again, and the model is told
the URLs (a new sandbox serves a port at a new URL). A record from before a service was started
does not name it, so a fork to that checkpoint does not start it, and a rewind in place stops it.

This module is plain Python (no LangGraph import), like `langchain_sandbox.state`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

from langchain_sandbox.errors import SandboxError
from langchain_sandbox.processes import ProcessInfo, ProcessSpec
from langchain_sandbox.providers.base import Session

logger = logging.getLogger(__name__)


class ServicesRecord(TypedDict, total=False):
    """The ``services`` key of a sandbox record: JSON only.

    Attributes:
        processes: [`ProcessSpec.to_json`][langchain_sandbox.ProcessSpec] of each process to
            start again after a restore, in the order they were started.
        ports: The ports exposed, in the order they were exposed.
    """

    processes: list[dict[str, Any]]
    ports: list[int]


@dataclass(frozen=True)
class Services:
    """The services of one position of a thread's history (an immutable value: each call that
    changes them makes a new one, so a record issued earlier never changes under its holder)."""

    processes: tuple[ProcessSpec, ...] = ()
    ports: tuple[int, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.processes or self.ports)

    @classmethod
    def of(cls, record: Mapping[str, Any]) -> Services:
        """The services a record names (none for a record without the key)."""
        raw = record.get("services") or {}
        return cls(
            tuple(ProcessSpec.from_json(p) for p in raw.get("processes") or ()),
            tuple(int(p) for p in raw.get("ports") or ()),
        )

    def to_json(self) -> ServicesRecord:
        return {"processes": [p.to_json() for p in self.processes], "ports": list(self.ports)}

    def with_process(self, spec: ProcessSpec) -> Services:
        """These services with ``spec`` (replacing a process of the same name); a process that
        must not restart is not a service, and only drops an older one of its name."""
        kept = tuple(p for p in self.processes if p.name != spec.name)
        return Services((*kept, spec) if spec.restart else kept, self.ports)

    def without_process(self, name: str) -> Services:
        return Services(tuple(p for p in self.processes if p.name != name), self.ports)

    def with_port(self, port: int) -> Services:
        return self if port in self.ports else Services(self.processes, (*self.ports, port))


def _same_process(info: ProcessInfo, spec: ProcessSpec) -> bool:
    return info.state == "running" and info.command == spec.command and info.cwd == spec.cwd


async def bring_back(
    session: Session, services: Services, *, fresh: bool, stop_others: bool
) -> list[str]:
    """Make ``session`` run the record's ``services``; returns the notices for the model.

    Args:
        session: The thread's sandbox, just restored, attached or rewound to the record.
        services: What the record names.
        fresh: The session was created for this restore: nothing runs in it yet, so there is
            nothing to list.
        stop_others: The session was rewound in place from another branch: processes of that
            branch the record does not name are stopped, as a fresh sandbox would not run them.

    A service that cannot be started again (its command now fails, the cap is reached) is told
    to the model and stays in the record, so the next restore tries again; it never fails the
    call that follows.
    """
    if not services and (fresh or not stop_others):
        return []
    if not session.capabilities.processes:
        # A thread moved to a provider that runs no background processes.
        return [
            "This sandbox cannot run background processes: the services of this checkpoint "
            f"({', '.join(p.name for p in services.processes) or 'ports only'}) were not started."
        ]
    running: dict[str, ProcessInfo] = {}
    if not fresh:
        try:
            listed = await session.list_processes()
        except SandboxError as exc:
            return [f"Could not list the sandbox's processes ({exc}); services were not started."]
        running = {p.name: p for p in listed if p.state == "running"}
    wanted = {p.name: p for p in services.processes}
    notices: list[str] = []
    if stop_others:
        for name in running.keys() - wanted.keys():
            await session.stop_process(name)
            notices.append(f"Process {name!r} is not part of this checkpoint and was stopped.")
    started, failed = [], []
    for spec in services.processes:
        info = running.get(spec.name)
        if info is not None and _same_process(info, spec):
            continue
        try:
            if info is not None:
                await session.stop_process(spec.name)
            await session.start_process(spec)
        except SandboxError as exc:
            logger.info("service %s could not be started again: %s", spec.name, exc)
            failed.append(f"{spec.name!r} ({exc})")
        else:
            started.append(f"{spec.name!r} ({spec.command})")
    urls = []
    for port in services.ports:
        try:
            urls.append(f"{port} at {await session.expose_port(port)}")
        except SandboxError as exc:
            failed.append(f"port {port} ({exc})")
    if started:
        notices.append(f"Services of this checkpoint were started again: {', '.join(started)}.")
    if urls:
        # An attached or rewound sandbox keeps its URLs; only a new one's differ from before.
        where = " (a new sandbox serves them at new URLs)" if fresh else ""
        notices.append(f"Exposed ports{where}: {', '.join(urls)}.")
    if failed:
        notices.append(
            f"Could not start again: {', '.join(failed)}. Start them yourself if still needed."
        )
    return notices


__all__ = ["Services", "ServicesRecord", "bring_back"]
