"""Where one [`SandboxBackend`][langchain_sandbox.SandboxBackend] call goes: the runtime, the
thread, and (inside an agent's tool call) its place in the conversation, which says what record
the sandbox continues from (see ``_lineage``)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TypeVar

from langchain_core.runnables import RunnableConfig

from langchain_sandbox.deepagents._lineage import Position, RecordBook
from langchain_sandbox.graph.step_lineage import StepAbove
from langchain_sandbox.runtime import SandboxRuntime, StepCall
from langchain_sandbox.state import SandboxState

T = TypeVar("T")

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Call:
    """Where one backend call goes: the runtime, the thread, and (inside an agent's tool call) its
    place in the conversation, which says what state the sandbox must be in (see ``_lineage``)."""

    runtime: SandboxRuntime
    thread_id: str
    position: Position | None = None
    book: RecordBook | None = None
    resumable: bool = False

    @property
    def step_call(self) -> StepCall | None:
        return self.position.step_call if self.position is not None else None

    @property
    def siblings(self) -> frozenset[str]:
        """The other calls of the call's model message, where its record comes from the
        conversation (only then can one of them have finished before a crash)."""
        if self.position is None or self.book is None:
            return frozenset()
        return self.position.step_call.siblings

    @property
    def filed(self) -> bool:
        """Whether the call's records are filed by its place in the conversation."""
        return self.position is not None and self.book is not None

    def under(self, above: StepAbove | None) -> Call:
        """This call, in a subagent run by a tool call of the parent's step ``above`` (see
        ``_lineage``)."""
        if self.position is None or above is None:
            return self
        return dataclasses.replace(self, position=self.position.under(above))

    def after(self, finished: frozenset[str]) -> Call:
        """This call, re-run after ``finished`` siblings of its step (see ``_lineage``)."""
        if self.position is None or not finished:
            return self
        return dataclasses.replace(
            self, position=dataclasses.replace(self.position, finished=finished)
        )

    async def record(self) -> SandboxState | None:
        """The record the call continues from: the conversation's, inside an agent; else (and
        when no earlier call of the conversation changed the sandbox) the runtime's own."""
        if self.position is None or self.book is None:
            return None
        return await self.book.latest(self.thread_id, self.position)

    def lost(self, record: SandboxState | None) -> str | None:
        """A notice naming what is missing when the conversation shows calls that changed the
        sandbox but no record of what they left was found (``record`` is ``None``) and no live
        sandbox of the thread holds it: the call then starts from an empty sandbox, and says
        so (to the model, and as a warning to the developer) rather than silently."""
        if record is not None or self.position is None or self.book is None:
            return None
        ran = self.position.ran_changes()
        if not ran or self.runtime.live_sessions().get(self.thread_id):
            return None
        shown = ", ".join(ran[-5:]) + (f" and {len(ran) - 5} more" if len(ran) > 5 else "")
        notice = (
            f"No saved record of the sandbox was found for the earlier calls of this "
            f"conversation ({shown}) on thread {self.thread_id!r}: the sandbox starts empty, "
            "and files or shell state those calls made are not here. Redo what is needed."
        )
        logger.warning("%s", notice)
        return notice

    async def file(self, record: SandboxState, continued_from: SandboxState | None) -> None:
        """Remember the record a changing call left, so the conversation can find it again
        (``continued_from``: what `record` gave the call)."""
        if self.position is not None and self.book is not None:
            await self.book.file(self.thread_id, self.position, record, continued_from)


def graph_config() -> RunnableConfig | None:
    """The config of the LangGraph run around this call, if there is one."""
    from langgraph.config import get_config

    try:
        return get_config()
    except RuntimeError:
        return None


async def awaited(awaitable: Awaitable[T]) -> T:
    return await awaitable


__all__ = ["Call", "awaited", "graph_config"]
