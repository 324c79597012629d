"""One private event loop in a daemon thread, and the two ways to wait on work submitted to it.

Async SDK clients (and the local provider's subprocess pipes) are bound to the loop that created
them. Running every provider call on one loop owned by the runtime removes the whole class of
"attached to a different loop" failures: sync callers, async callers on any loop and ToolNode's
worker threads all submit coroutines here and wait in their own way.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import threading
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import AbstractContextManager
from typing import Any, TypeVar

from langchain_sandbox.errors import SessionClosedError

T = TypeVar("T")


class LoopThread:
    """A daemon thread running an asyncio event loop until `stop`.

    The thread starts on construction, without waiting for the loop to run (work submitted
    before it does waits in the loop's queue), so building one never blocks a caller that is
    itself on an event loop. Coroutines run with `run_sync` (blocking the calling
    thread) or `run_async` (awaited from another loop); cancelling the awaiting task cancels
    the coroutine on this loop, so cancelled work is interrupted rather than left running.
    """

    def __init__(self, name: str = "langchain-sandbox-runtime") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            self.loop.close()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and not self.loop.is_closed()

    def in_loop_thread(self) -> bool:
        """Whether the caller runs on this loop's thread (where blocking on it would deadlock)."""
        return threading.get_ident() == self._thread.ident

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the loop; the returned future's ``cancel`` cancels the task."""
        if not self.alive:
            coro.close()
            raise SessionClosedError("The sandbox runtime is closed; its event loop is stopped.")
        # In a fresh context: the work is shared by every caller, so no caller's context
        # variables (a LangChain run's config, a LangGraph step's runtime) may leak into it.
        return contextvars.Context().run(asyncio.run_coroutine_threadsafe, coro, self.loop)

    def run_sync(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop and block until it finishes.

        An interrupt of the waiting thread (``KeyboardInterrupt``) cancels the work on the loop.
        """
        if self.in_loop_thread():
            coro.close()
            raise RuntimeError(
                "A synchronous sandbox call was made from the runtime's own event loop; "
                "use the async method instead."
            )
        future = self.submit(coro)
        try:
            return future.result()
        except BaseException:
            future.cancel()
            raise

    async def run_async(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await ``coro`` running on the loop, from any other loop (or from this one)."""
        if self.in_loop_thread():
            return await coro
        future = self.submit(coro)
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            future.cancel()
            raise

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the loop after cancelling what still runs on it, and join the thread. Idempotent."""
        if not self.alive:
            return
        if self.in_loop_thread():
            raise RuntimeError("The runtime's event loop cannot be stopped from its own thread.")

        async def _cancel_remaining() -> None:
            current = asyncio.current_task()
            tasks = [t for t in asyncio.all_tasks() if t is not current]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.loop.shutdown_asyncgens()

        with contextlib.suppress(concurrent.futures.TimeoutError, RuntimeError):
            asyncio.run_coroutine_threadsafe(_cancel_remaining(), self.loop).result(timeout)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout)


@contextlib.asynccontextmanager
async def entered_off_loop(make: Callable[[], AbstractContextManager[T]]) -> AsyncIterator[T]:
    """Build and enter the context manager ``make`` returns in a worker thread, exit it on
    leaving: for set-up that touches the filesystem (a sandbox's argv, its memfd) on the way to
    an async call."""
    with contextlib.ExitStack() as stack:
        yield await asyncio.to_thread(lambda: stack.enter_context(make()))


def on_event_loop() -> bool:
    """Whether the calling thread is running an event loop (where nothing may block)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


__all__ = ["LoopThread", "entered_off_loop", "on_event_loop"]
