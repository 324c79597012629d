"""SandboxMiddleware: the sandbox lifecycle for ``create_agent`` agents.

```python
agent = create_agent(model, middleware=[SandboxMiddleware()], checkpointer=InMemorySaver())
```

``create_agent`` builds its own ``ToolNode``, so the middleware is the hook. It

* adds the ``sandbox`` channel to the agent's state ([`SandboxAgentState`][langchain_sandbox.SandboxAgentState]);
* registers the sandbox tools (the whole [`SandboxToolkit`][langchain_sandbox.SandboxToolkit] by default);
* ``before_agent``: creates the thread's sandbox, or attaches to it / restores it to the record in
  the checkpoint (a new process, a resume, a fork), before the model first runs;
* ``wrap_tool_call`` / ``awrap_tool_call``: turns each sandbox tool's record into a state update
  and runs each sandbox call once (see `langchain_sandbox.graph.tool_calls`);
* holds a lease on the thread for the turn, so a second run on a thread another run (in any
  worker sharing the checkpointer) is running fails with
  [`ThreadBusyError`][langchain_sandbox.ThreadBusyError] instead of silently losing a turn (see `langchain_sandbox.graph.turn_lease`);
* never destroys the sandbox at the end of a turn: ``after_agent`` runs at the end of *every*
  turn, so a thread's sandbox lives until ``runtime.close_thread(thread_id)``, its idle TTL, or
  ``langchain-sandbox gc``. Only with ``release_between_turns=True`` does it close the live
  session at the end of a turn (its state stays in the snapshot the record names), for
  deployments where several worker processes take turns on one thread.

This module needs the ``langchain`` package (``pip install 'langchain-sandbox[agents]'``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NotRequired, cast

from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest, ModelResponse
from langchain_core.messages import AIMessage, AnyMessage, ToolMessage
from langchain_core.tools import BaseTool
from langgraph.config import get_config
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.runtime import Runtime
from langgraph.types import Command

from langchain_sandbox.core.arguments import checked_init
from langchain_sandbox.errors import ConfigurationError, SandboxError
from langchain_sandbox.graph.channel import SandboxChannel
from langchain_sandbox.graph.images import ImagePolicy, check_image_policy, messages_for_model
from langchain_sandbox.graph.step_record import arequire_record_home, require_record_home
from langchain_sandbox.graph.tool_calls import SandboxToolCallWrapper, ToolResult, is_sandbox_tool
from langchain_sandbox.graph.turn_lease import Busy, TurnLease, asks_for_tools
from langchain_sandbox.providers.base import Session
from langchain_sandbox.runtime import Outcome, SandboxRuntime
from langchain_sandbox.state import SandboxState
from langchain_sandbox.tools.base import (
    notice_lines,
    private_thread_id,
    resolve_runtime,
    resolve_thread_id,
)
from langchain_sandbox.tools.toolkit import SandboxToolkit

logger = logging.getLogger(__name__)


class SandboxAgentState(AgentState[Any]):
    """``create_agent``'s state plus the ``sandbox`` channel (``create_agent(state_schema=...)``
    if you wire the tools yourself; [`SandboxMiddleware`][langchain_sandbox.SandboxMiddleware] adds it on its own)."""

    sandbox: NotRequired[SandboxChannel]


def _start_record(state: SandboxAgentState) -> SandboxState | None:
    """The record ``before_agent`` brings the sandbox to. A conversation in which nothing has
    run yet (no AI message) and no record takes the thread's live sandbox as it is (``None``):
    the files an application seeded with ``runtime.write_files`` before the first turn. Any
    other branch without a record starts empty (``{}``): a live sandbox of the thread then
    holds another branch's work."""
    record = state.get("sandbox")
    if record:
        return record
    ran = any(isinstance(m, AIMessage) for m in state.get("messages") or ())
    return SandboxState() if ran else None


def _lost(state: SandboxAgentState, thread_id: str) -> str | None:
    """A notice naming the sandbox calls the conversation shows ran (answered, not failed)
    when the state holds no ``sandbox`` record of what they left (a conversation carried
    over to a new thread, a state edited by hand): the sandbox is not theirs."""
    ran = [
        f"{m.name} {m.tool_call_id}"
        for m in state.get("messages") or ()
        if isinstance(m, ToolMessage)
        and (m.name or "").startswith("sandbox_")
        and m.status != "error"
    ]
    if not ran:
        return None
    shown = ", ".join(ran[-5:]) + (f" and {len(ran) - 5} more" if len(ran) > 5 else "")
    return (
        f"The conversation shows sandbox calls that ran ({shown}), but thread {thread_id!r} "
        "has no record of the sandbox they left: this sandbox is not theirs, and files, "
        "variables or packages they made are not here. Redo what is needed."
    )


async def _touch(session: Session) -> None:
    """The operation ``before_agent`` runs: nothing, so the runtime only rehydrates."""


class SandboxMiddleware(AgentMiddleware[SandboxAgentState, Any]):
    """Gives a ``create_agent`` agent a durable sandbox per thread (see the module docstring).

    Args:
        runtime: The [`SandboxRuntime`][langchain_sandbox.SandboxRuntime] to use. Without it, each run finds one the way the
            tools do: the run's context (``context=...`` with a ``sandbox_runtime``),
            ``configurable["sandbox_runtime"]``, or the process-wide default on the local
            provider.
        tools: The sandbox tools to give the model (default: the whole toolkit). Pass ``[]`` to
            register none and only manage the tools you pass to ``create_agent`` yourself.
        code_tools: Host tools the code of the toolkit's ``sandbox_exec`` may call
            (``SandboxExecTool(tools=...)``, see ``docs/tools-from-code.md``); only with the
            default ``tools``.
        run_once: Also run each sandbox call as a LangGraph task, so a resume replays it
            instead of running it again, for agents with a wrapper *outside* this middleware
            that can ``interrupt()`` after a sandbox call. Off by default: ``create_agent`` runs
            each tool call as its own step, so an interrupt by another call (an approval) never
            repeats a finished sandbox call; and a task streams as an extra
            ``sandbox_tool_call`` entry in ``stream_mode="updates"``.
        release_between_turns: Close the thread's live session at the end of each turn. Its
            files and picklable variables are in the snapshot the checkpoint names, so the next
            turn (in this process or another) restores them; running processes and unpicklable
            variables do not survive. Use it when several workers share one checkpointer and
            the provider cannot attach across processes (the local provider), so a thread never
            has two live sandboxes.
        image_policy: Where images in tool results (charts, image files read) go in the
            messages sent to the model: ``"auto"`` (default) by the model,
            ``"tool_result"`` (inside the tool message, as Anthropic takes them) or
            ``"user_message"`` (a user message after the step's tool messages, as OpenAI's Chat
            Completions API requires). See `langchain_sandbox.graph.images`.
        busy: What a turn does when another run holds its thread (a worker racing this one on
            the same thread): ``"fail"`` (default) raises
            [`ThreadBusyError`][langchain_sandbox.ThreadBusyError] before anything runs;
            ``"off"`` takes no lease (two turns at once then silently keep only one). To wait for
            the thread instead, hold it around the call with
            ``SandboxRuntime.hold_thread(thread_id, checkpointer=..., wait=...)``: a run can only
            wait before it starts (see `langchain_sandbox.graph.turn_lease`).
    """

    state_schema = SandboxAgentState

    @checked_init
    def __init__(
        self,
        *,
        runtime: SandboxRuntime | None = None,
        tools: Sequence[BaseTool] | None = None,
        code_tools: Sequence[Any] = (),
        run_once: bool = False,
        release_between_turns: bool = False,
        default_thread_id: str | None = None,
        image_policy: ImagePolicy = "auto",
        busy: Busy = "fail",
    ) -> None:
        super().__init__()
        if busy not in ("fail", "off"):
            raise ConfigurationError(f"busy must be 'fail' or 'off', not {busy!r}.")
        self.busy: Busy = busy
        self.runtime = runtime
        self.default_thread_id = default_thread_id or private_thread_id()
        if tools is not None and code_tools:
            raise ConfigurationError(
                "code_tools= configures the default sandbox_exec; with your own tools=, give "
                "them to SandboxExecTool(tools=...) instead."
            )
        self.tools = (
            list(tools)
            if tools is not None
            else SandboxToolkit(
                runtime=runtime,
                default_thread_id=self.default_thread_id,
                code_tools=list(code_tools),
            ).get_tools()
        )
        self.release_between_turns = release_between_turns
        check_image_policy(image_policy)
        self.image_policy: ImagePolicy = image_policy
        # Each call is its own step here: only a wrapper outside can make it run again.
        self._wrapper = SandboxToolCallWrapper(runtime=runtime, run_once=run_once, every_call=True)
        # Notices of a rehydration done in ``before_agent`` (a restore, variables that could not
        # be restored) go to the model with the thread's next sandbox result.
        self._notices: dict[tuple[int, str], list[str]] = {}
        self._notices_lock = threading.Lock()

    # -- lifecycle ---------------------------------------------------------------------------

    def _target(self, runtime: Runtime[Any]) -> tuple[SandboxRuntime, str]:
        config = get_config()
        return (
            resolve_runtime(self.runtime, runtime, config),
            resolve_thread_id(config, self.default_thread_id),
        )

    def _lease(
        self, sandbox: SandboxRuntime, thread_id: str, stream_writer: Any, config: Any
    ) -> TurnLease | None:
        return TurnLease.of(self.busy, sandbox, thread_id, config, stream_writer)

    def _step_lease(self, runtime: Any, config: Any) -> TurnLease | None:
        """The lease of a model or tool call's run (``runtime``: the request's)."""
        sandbox = resolve_runtime(self.runtime, runtime, config)
        thread_id = resolve_thread_id(config, self.default_thread_id)
        return self._lease(sandbox, thread_id, runtime.stream_writer, config)

    def _after_rehydrate(
        self,
        sandbox: SandboxRuntime,
        thread_id: str,
        state: SandboxAgentState,
        outcome: Outcome[None],
    ) -> dict[str, Any]:
        notices = list(outcome.notices)
        if not state.get("sandbox") and (lost := _lost(state, thread_id)):
            logger.warning("%s", lost)
            notices.append(lost)
        record = outcome.record
        if notices:
            with self._notices_lock:
                self._notices.setdefault((id(sandbox), thread_id), []).extend(notices)
        return {"sandbox": record}

    @staticmethod
    def _not_ready(thread_id: str, exc: SandboxError) -> None:
        # Misconfiguration is the developer's to fix: fail the run now, before the model runs.
        if isinstance(exc, ConfigurationError):
            raise exc
        # Otherwise the model may not need the sandbox this turn; if it does, its first sandbox
        # call tries again and the model reads why it failed. Failing the whole run would not.
        logger.warning("could not prepare the sandbox of thread %s: %s", thread_id, exc)

    def before_agent(
        self, state: SandboxAgentState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """Create the thread's sandbox, or bring it to the checkpoint's record.

        Raises:
            ConfigurationError: the agent is a subgraph whose parent would drop the record.
        """
        if not state.get("sandbox"):
            require_record_home(get_config())
        sandbox, thread_id = self._target(runtime)
        lease = self._lease(sandbox, thread_id, runtime.stream_writer, get_config())
        if lease:
            lease.take()
        try:
            outcome = sandbox.execute(
                thread_id, _touch, record=_start_record(state), mutates=False, repeatable=True
            )
        except SandboxError as exc:
            if lease and isinstance(exc, ConfigurationError):
                lease.give_back()
            return self._not_ready(thread_id, exc)
        except BaseException:
            if lease:
                lease.give_back()
            raise
        return self._after_rehydrate(sandbox, thread_id, state, outcome)

    async def abefore_agent(
        self, state: SandboxAgentState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """Async twin of `before_agent`."""
        if not state.get("sandbox"):
            await arequire_record_home(get_config())
        sandbox, thread_id = self._target(runtime)
        lease = self._lease(sandbox, thread_id, runtime.stream_writer, get_config())
        if lease:
            await lease.atake()
        try:
            outcome = await sandbox.aexecute(
                thread_id, _touch, record=_start_record(state), mutates=False, repeatable=True
            )
        except SandboxError as exc:
            if lease and isinstance(exc, ConfigurationError):
                await lease.agive_back()
            return self._not_ready(thread_id, exc)
        except BaseException:
            if lease:
                await lease.agive_back()
            raise
        return self._after_rehydrate(sandbox, thread_id, state, outcome)

    def after_agent(self, state: SandboxAgentState, runtime: Runtime[Any]) -> None:
        """End of a turn: keep the sandbox (or release the live session, if asked to), and give
        the thread's lease back."""
        sandbox, thread_id = self._target(runtime)
        lease = self._lease(sandbox, thread_id, runtime.stream_writer, get_config())
        try:
            if self.release_between_turns:
                sandbox.close_thread(thread_id)
        finally:
            if lease:
                lease.give_back()

    async def aafter_agent(self, state: SandboxAgentState, runtime: Runtime[Any]) -> None:
        """Async twin of `after_agent`."""
        sandbox, thread_id = self._target(runtime)
        lease = self._lease(sandbox, thread_id, runtime.stream_writer, get_config())
        try:
            if self.release_between_turns:
                await sandbox.aclose_thread(thread_id)
        finally:
            if lease:
                await lease.agive_back()

    # -- model calls -------------------------------------------------------------------------

    def _with_placed_images(self, request: ModelRequest[Any]) -> ModelRequest[Any]:
        messages = messages_for_model(request.messages, request.model, self.image_policy)
        return request.override(messages=cast("list[AnyMessage]", messages))

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelResponse[Any]:
        """Send tool-result images where the model's API accepts them (``image_policy``), under
        the thread's lease (kept for the tool calls the model asks for, given back if the run
        ends before them: see `langchain_sandbox.graph.turn_lease`)."""
        lease = self._step_lease(request.runtime, get_config())
        if lease is None:
            return handler(self._with_placed_images(request))
        lease.take()
        try:
            response = handler(self._with_placed_images(request))
        except BaseException:
            lease.give_back()
            raise
        if asks_for_tools(response):
            lease.give_back_when_done()
        return response

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any]:
        """Async twin of `wrap_model_call`."""
        lease = self._step_lease(request.runtime, get_config())
        if lease is None:
            return await handler(self._with_placed_images(request))
        await lease.atake()
        try:
            response = await handler(self._with_placed_images(request))
        except BaseException:
            await lease.agive_back()
            raise
        if asks_for_tools(response):
            lease.give_back_when_done()
        return response

    # -- tool calls --------------------------------------------------------------------------

    def _with_notices(self, request: ToolCallRequest, result: ToolResult) -> ToolResult:
        """Put notices left by ``before_agent`` in front of the thread's next sandbox result."""
        if not (self._notices and isinstance(result, ToolMessage)):
            return result
        config = getattr(request.runtime, "config", None)
        explicit = getattr(request.tool, "runtime", None)  # the wrapper already bound it
        sandbox = resolve_runtime(explicit, request.runtime, config)
        with self._notices_lock:
            thread_id = resolve_thread_id(config, getattr(request.tool, "default_thread_id", ""))
            notices = self._notices.pop((id(sandbox), thread_id), None)
        if not notices:
            return result
        prefix = notice_lines(notices)
        content = result.content
        if isinstance(content, str):
            content = prefix + content
        else:
            content = [{"type": "text", "text": prefix.rstrip("\n")}, *content]
        return result.model_copy(update={"content": content})

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        """Run a sandbox tool call once and turn its record into a ``sandbox`` update; any tool
        call runs under the thread's lease."""
        lease = self._step_lease(request.runtime, getattr(request.runtime, "config", None))
        if lease:
            lease.take()
        try:
            if not is_sandbox_tool(request.tool):
                return handler(request)
            return self._wrapper.wrap(request, lambda r: self._with_notices(r, handler(r)))
        except BaseException:  # an interrupt or a failure ends the run: after_agent will not
            if lease:
                lease.give_back()
            raise

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        """Async twin of `wrap_tool_call` (``ainvoke`` / ``astream`` need it)."""
        lease = self._step_lease(request.runtime, getattr(request.runtime, "config", None))
        if lease:
            await lease.atake()

        async def _handle(r: ToolCallRequest) -> ToolResult:
            return self._with_notices(r, await handler(r))

        try:
            if not is_sandbox_tool(request.tool):
                return await handler(request)
            return await self._wrapper.awrap(request, _handle)
        except BaseException:
            if lease:
                await lease.agive_back()
            raise


__all__ = ["SandboxAgentState", "SandboxMiddleware"]
