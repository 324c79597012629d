"""How a runtime call reaches a thread's sandbox: its context, the one path every operation takes,
and the helper that makes each blocking twin.

Every public operation of [`SandboxRuntime`][langchain_sandbox.SandboxRuntime] (code, shell,
files, packages, processes, ports) takes the same four things that say which thread it runs on and
how its record continues: the thread's id, the record from graph state, the step call and whether
something can resume from the result. They travel together as one `CallContext`, so no operation
passes them on one by one, and all of them run through `RuntimeCalls._on_thread`.

Each operation is one async method; its blocking twin is made by `blocking` (it runs the async
method on the runtime's loop), so no twin repeats the keyword arguments of another.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from langchain_sandbox.core.thread import Outcome, StepCall, ThreadSandbox
from langchain_sandbox.providers.base import Session
from langchain_sandbox.state import SandboxState

if TYPE_CHECKING:
    from langchain_sandbox.core._event_loop import LoopThread
    from langchain_sandbox.core.rehydration import RehydrationEngine
    from langchain_sandbox.core.session_pool import SessionPool

P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S", bound="RuntimeCalls")


@dataclass(frozen=True)
class CallContext:
    """Which thread a call runs on and how its record continues (see `SandboxRuntime.aexecute`
    for what each field means)."""

    thread_id: str
    record: SandboxState | None = None
    step_call: StepCall | None = None
    resumable: bool = False


def blocking(
    method: Callable[Concatenate[S, P], Coroutine[Any, Any, R]],
) -> Callable[Concatenate[S, P], R]:
    """The blocking twin of an async runtime method: the same call, run on the runtime's loop
    (for sync code and ToolNode worker threads)."""

    @functools.wraps(method)
    def twin(self: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return self._loop.run_sync(method(self, *args, **kwargs))

    twin.__name__ = twin.__qualname__ = method.__name__.removeprefix("a")
    twin.__doc__ = f"Blocking twin of `{method.__name__}`."
    return twin


class RuntimeCalls:
    """The parts of `SandboxRuntime` every operation uses; the base of its operation mixins."""

    _loop: LoopThread
    _pool: SessionPool
    _engine: RehydrationEngine

    async def _on_thread(
        self,
        call: CallContext,
        operation: Callable[[ThreadSandbox, Session], Awaitable[R]],
        *,
        mutates: bool,
        repeatable: bool,
    ) -> Outcome[R]:
        """Run ``operation(thread, session)`` on the runtime's loop with the thread's lock held,
        rehydrating before and persisting after; it gets the thread too, to change the services
        its record is issued with."""

        async def _run() -> Outcome[R]:
            async with self._pool.use(call.thread_id) as thread:
                return await self._engine.run(
                    thread,
                    functools.partial(operation, thread),
                    record=call.record,
                    mutates=mutates,
                    repeatable=repeatable,
                    step_call=call.step_call,
                    resumable=call.resumable,
                )

        return await self._loop.run_async(_run())


__all__ = ["CallContext", "RuntimeCalls", "blocking"]
