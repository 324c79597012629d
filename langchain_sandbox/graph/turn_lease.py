"""When a ``create_agent`` turn holds its thread's lease (`langchain_sandbox.checkpointing.thread_lease`).

LangGraph gives middleware no hook around a whole run: ``after_agent`` does not run when a turn
ends with an interrupt or an exception. So [`SandboxMiddleware`][langchain_sandbox.SandboxMiddleware]
holds the lease over the spans it does see, and gives it back wherever the run may stop:

* ``before_agent`` takes it, or fails with ``ThreadBusyError``. It never waits: LangGraph loads
  the thread's checkpoint when the run starts, before any middleware hook, so a run that waited
  here for another one to end would go on from the state before that run's turn and drop it.
  Waiting belongs around the call, before the run starts: ``SandboxRuntime.hold_thread(thread_id,
  checkpointer=..., wait=...)`` takes the same lease (the middleware then takes none of its own);
* each model call and tool call takes it again (at no cost when the run already holds it), so a
  run resumed from an interrupt, in this process or another, holds it too; these never wait: a
  run already under way that waited for another would go on from a checkpoint the other one has
  moved past;
* a model call that asks for tools gives it back *once its run has ended*, because the next hook
  may be another middleware's interrupt (``HumanInTheLoopMiddleware``): a thread waiting for a
  human is not running, and must not stay leased to a process that is done with it. Given back at
  once, another run could take the thread before the tool calls, which then failed; so the lease
  stays while the run lives, and the tool calls take it again (see `release_when_done`);
* an exception or interrupt out of a model or tool call gives it back; ``after_agent`` gives it
  back at the end of the turn.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from langchain.agents.middleware import ModelResponse
from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig

from langchain_sandbox.checkpointing.checkpointer_names import run_checkpointer
from langchain_sandbox.checkpointing.thread_lease import (
    LeaseBackend,
    aacquire,
    acquire,
    lease_backend,
    release,
    release_when_done,
)
from langchain_sandbox.checkpointing.thread_lock import covered
from langchain_sandbox.runtime import SandboxRuntime

Busy = Literal["fail", "off"]


def asks_for_tools(response: Any) -> bool:
    """Whether a ``wrap_model_call`` result has an AI message with tool calls."""
    response = getattr(response, "model_response", response)  # ExtendedModelResponse
    messages = response.result if isinstance(response, ModelResponse) else [response]
    return any(isinstance(m, AIMessage) and m.tool_calls for m in messages)


class TurnLease:
    """One step's view of its thread's lease: which backend, which thread, which run."""

    def __init__(self, backend: LeaseBackend, thread_id: str, owner: Any) -> None:
        self.backend = backend
        self.thread_id = thread_id
        self.owner = owner

    @classmethod
    def of(
        cls,
        busy: Busy,
        sandbox: SandboxRuntime,
        thread_id: str,
        config: RunnableConfig | None,
        stream_writer: Any,
    ) -> TurnLease | None:
        """The lease of the run around ``config``; ``None`` when ``busy="off"`` or the run keeps
        no thread (no checkpointer)."""
        if busy == "off" or covered(thread_id):
            return None
        backend = lease_backend(
            run_checkpointer(config), getattr(sandbox.snapshotter, "store", None)
        )
        return None if backend is None else cls(backend, thread_id, stream_writer)

    def take(self) -> None:
        acquire(self.backend, self.thread_id, self.owner)

    async def atake(self) -> None:
        await aacquire(self.backend, self.thread_id, self.owner)

    def give_back(self) -> None:
        release(self.backend, self.thread_id, self.owner)

    async def agive_back(self) -> None:
        await asyncio.to_thread(self.give_back)

    def give_back_when_done(self) -> None:
        """Give the lease back once this run has ended, unless it takes it again first (no I/O:
        the same from sync and async code)."""
        release_when_done(self.backend, self.thread_id, self.owner)


__all__ = ["Busy", "TurnLease", "asks_for_tools"]
