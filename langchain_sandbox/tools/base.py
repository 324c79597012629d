"""What every sandbox tool shares: finding its runtime, its thread and its record, and the sync and
async plumbing around one async implementation per tool.

A tool call resolves, in order:

* the **runtime**: the tool's own (``SandboxExecTool(runtime=...)``, or one built from
  ``provider=...``); the run's context (``ToolRuntime.context`` or LangGraph's ``get_runtime()``:
  a [`SandboxRuntime`][langchain_sandbox.SandboxRuntime], an object with a ``sandbox_runtime`` attribute or a dict with that
  key); ``config["configurable"]["sandbox_runtime"]``; the process-wide default runtime on the
  local provider;
* the **thread**: ``config["configurable"]["thread_id"]``, else the tool's ``default_thread_id``
  if set (a [`SandboxToolkit`][langchain_sandbox.SandboxToolkit]'s tools share one), else the shared thread of the runtime
  the tool was given (``SandboxRuntime.shared_thread_id``: tools given one runtime share one
  sandbox), else a private thread of this tool instance, so two tools or agents called without
  a thread id and without a shared runtime never see each other's variables or files;
* the **record**: the graph state's ``sandbox`` key, read from the ``ToolRuntime`` that ``ToolNode``
  injects into the ``runtime`` argument (``None`` outside a graph: the runtime keeps the state);
* whether the call is **resumable**: it runs in a graph with a checkpointer (LangGraph puts the
  saver in the run's ``configurable``), so a checkpoint can resume from its record. Under the
  runtime's default ``persist="resumable"`` only such calls capture a snapshot.

Tools return ``(content, artifact)``: the content is what the model reads; the artifact is
``{"result": <JSON result>, "sandbox": <updated record>}`` for programs and for the graph glue, which
turns ``artifact["sandbox"]`` into a state update. Infrastructure failures become a
``ToolException`` the model reads (``handle_tool_error=True``), never a crash of the agent;
misconfiguration ([`ConfigurationError`][langchain_sandbox.ConfigurationError]: a missing extra, API key
or bubblewrap) is not the model's to fix and propagates to the developer.
"""

# No ``from __future__ import annotations`` here: LangChain resolves ``_run``'s annotations with
# ``get_type_hints`` on every call (to find the injected ``config``), and live annotations spare it
# compiling the strings each time.
import asyncio
import contextlib
import inspect
import uuid
from abc import abstractmethod
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

from langchain_core.callbacks import AsyncCallbackManagerForToolRun, CallbackManagerForToolRun
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, InjectedToolArg, ToolException
from langchain_core.tools.base import FILTERED_ARGS
from pydantic import BaseModel, Field, PrivateAttr, model_validator
from pydantic.json_schema import SkipJsonSchema
from typing_extensions import TypeAliasType

from langchain_sandbox.checkpointing.checkpointer_names import (
    anote_checkpointer,
    note_checkpointer,
    run_checkpointer,
)
from langchain_sandbox.core._event_loop import on_event_loop
from langchain_sandbox.core.arguments import check_model_arguments
from langchain_sandbox.errors import ConfigurationError, SandboxError
from langchain_sandbox.providers import provider_class
from langchain_sandbox.providers.base import Capabilities, Provider, SessionSpec
from langchain_sandbox.results import DEFAULT_RENDER_CHARS, ExecutionResult
from langchain_sandbox.runtime import (
    Outcome,
    SandboxRuntime,
    StepCall,
    get_default_runtime,
)
from langchain_sandbox.state import SandboxState
from langchain_sandbox.tools.descriptions import sandbox_facts
from langchain_sandbox.tools.images import artifact_images, images_inline, place_images
from langchain_sandbox.tools.ownership import RuntimeOwner
from langchain_sandbox.tools.streaming import OUTPUT_EVENT, OutputForwarder

RUNTIME_KEY = "sandbox_runtime"
"""The context attribute / dict key and the ``configurable`` key a runtime is looked up under."""

Content = str | list[str | dict[str, Any]]

# LangChain resolves ``_run``'s (and ``_arun``'s) type hints on every call, to find the injected
# ``config``: a union or a nested generic is rebuilt each time, an alias is one opaque name.
_ToolOutput = TypeAliasType("_ToolOutput", tuple[Content, dict[str, Any]])
_RunManager = TypeAliasType("_RunManager", CallbackManagerForToolRun | None)
_AsyncRunManager = TypeAliasType("_AsyncRunManager", AsyncCallbackManagerForToolRun | None)

_HIDDEN_KEYS: dict[tuple[type, object], frozenset[str]] = {}
"""The input keys LangChain keeps out of callbacks, per tool class and schema (see
`SandboxTool._filter_injected_args`)."""


class SandboxToolArgs(BaseModel):
    """Arguments every sandbox tool accepts besides its own.

    ``runtime`` is not for the model: ``ToolNode`` fills it with its ``ToolRuntime`` (state,
    context, stream writer, tool call id). It must carry this name, which is how ``ToolNode``
    finds it on a ``BaseTool`` with an explicit schema. ``InjectedToolArg`` is how LangChain
    knows it is injected: it keeps it out of the model's schema and out of what callbacks and
    traces get (``on_tool_start``'s input string and inputs), which would otherwise hold the
    whole graph state, every message, rendered again at each call. ``SkipJsonSchema`` keeps it
    out of the input schema's JSON too (``tool.args``). It is typed ``Any``, not
    ``ToolRuntime``: outside a graph it is absent, and a ``ToolRuntime`` field would be required
    and validated.
    """

    runtime: Annotated[Any, InjectedToolArg(), SkipJsonSchema()] = None


@dataclass(frozen=True)
class SandboxCall:
    """Everything a tool needs to make one call, resolved from its arguments and the run."""

    runtime: SandboxRuntime
    thread_id: str
    record: SandboxState | None
    step_call: StepCall | None
    resumable: bool
    on_output: OutputForwarder | None
    images_inline: bool = False
    """Whether the reply's images go in its content (`langchain_sandbox.tools.images`)."""
    config: RunnableConfig | None = None
    """The run's config, as the tool got it (for tools called from code)."""
    run_manager: CallbackManagerForToolRun | AsyncCallbackManagerForToolRun | None = None
    """The tool run's callbacks (inner runs are its children)."""
    caller_loop: asyncio.AbstractEventLoop | None = None
    """The caller's event loop for an async call; ``None`` for a blocking one."""


@dataclass(frozen=True)
class ToolReply:
    """What a tool hands back: content for the model, a JSON result and the updated record."""

    content: Content
    result: dict[str, Any]
    record: SandboxState

    @property
    def artifact(self) -> dict[str, Any]:
        return {"result": self.result, "sandbox": dict(self.record)}


def _context_runtime(context: Any) -> SandboxRuntime | None:
    if isinstance(context, SandboxRuntime):
        return context
    if isinstance(context, Mapping):
        found = context.get(RUNTIME_KEY)
    else:
        found = getattr(context, RUNTIME_KEY, None)
    return found if isinstance(found, SandboxRuntime) else None


def _graph_context() -> Any:
    """The context of the LangGraph run around this call, if there is one."""
    from langgraph.runtime import get_runtime

    try:
        graph_runtime = get_runtime()
    except RuntimeError:
        return None
    return getattr(graph_runtime, "context", None)


def resolve_runtime(
    explicit: SandboxRuntime | None, tool_runtime: Any, config: RunnableConfig | None
) -> SandboxRuntime:
    """Find the runtime for a call (see the module docstring for the order)."""
    if explicit is not None:
        return explicit
    for context in (getattr(tool_runtime, "context", None), _graph_context()):
        found = _context_runtime(context)
        if found is not None:
            return found
    configured = (config or {}).get("configurable", {}).get(RUNTIME_KEY)
    if isinstance(configured, SandboxRuntime):
        return configured
    return get_default_runtime()


def is_resumable(config: RunnableConfig | None) -> bool:
    """Whether a call with this config runs in a graph with a checkpointer, so that a checkpoint
    can resume (or fork) from the record it returns."""
    return run_checkpointer(config) is not None


def private_thread_id() -> str:
    """A thread id no other owner uses: the sandbox of calls that carry no ``thread_id``."""
    return f"private-{uuid.uuid4().hex}"


def resolve_thread_id(config: RunnableConfig | None, default: str) -> str:
    """The conversation thread of a call: ``configurable.thread_id``, else ``default`` (the
    caller's own private or explicitly shared thread)."""
    thread_id = (config or {}).get("configurable", {}).get("thread_id")
    return str(thread_id) if thread_id not in (None, "") else default


def graph_record(tool_runtime: Any) -> SandboxState | None:
    """The ``sandbox`` record of the graph state a ``ToolRuntime`` carries, if any."""
    state = getattr(tool_runtime, "state", None)
    if state is None:
        return None
    record = state.get("sandbox") if isinstance(state, Mapping) else getattr(state, "sandbox", None)
    return record if isinstance(record, dict) and record else None  # type: ignore[return-value]


def graph_step(config: RunnableConfig | None) -> str | None:
    """A key naming the graph step a call runs in: the namespace of the graph running the call's
    node and the checkpoint the step started from (``None`` outside a graph run).

    Every task of one step, ``Send`` fan-out included, shares it; a fork that re-runs the step
    runs it from a new checkpoint, so under another key.
    """
    configurable = (config or {}).get("configurable") or {}
    task_ns = configurable.get("checkpoint_ns")
    checkpoints = configurable.get("checkpoint_map")
    if not isinstance(task_ns, str) or not isinstance(checkpoints, Mapping):
        return None
    graph_ns = task_ns.rpartition("|")[0]
    checkpoint_id = checkpoints.get(graph_ns)
    return f"{graph_ns}@{checkpoint_id}" if checkpoint_id else None


def step_call_of(tool_runtime: Any) -> StepCall | None:
    """The call's id, those of the other calls in the same model message and the graph step it
    runs in (see [`StepCall`][langchain_sandbox.StepCall]), from the ``ToolRuntime`` a
    ``ToolNode`` injects."""
    call_id = getattr(tool_runtime, "tool_call_id", None)
    if not call_id:
        return None
    step = graph_step(getattr(tool_runtime, "config", None))
    state = getattr(tool_runtime, "state", None)
    messages = (
        state.get("messages") if isinstance(state, Mapping) else getattr(state, "messages", None)
    )
    for message in reversed(messages or []):
        ids = [c.get("id") for c in getattr(message, "tool_calls", None) or []]
        if call_id in ids:
            return StepCall(call_id, frozenset(i for i in ids if i), step)
    return StepCall(call_id, step=step)


def execution_reply(
    outcome: Outcome[ExecutionResult], *, max_chars: int, images_inline: bool = False
) -> ToolReply:
    """The reply for a run of code or a command: compact text, images as image blocks.

    Each image is stored once: in the content when the calling model takes images there
    (``images_inline``), else in the artifact's ``images`` with a note in the content
    (`langchain_sandbox.tools.images`). The JSON result names the image artifacts without
    their data; [`execution_result`][langchain_sandbox.execution_result] puts them back together.
    """
    result = outcome.value
    content: Content
    images = [i for i, a in enumerate(result.artifacts) if a.is_image]
    if images:
        content = list(result.to_content_blocks(max_chars=max_chars))
    else:
        content = result.render(max_chars=max_chars)
    as_json = result.model_dump(mode="json", exclude={"artifacts": {i: {"data"} for i in images}})
    content, as_json = place_images(content, as_json, inline=images_inline)
    return ToolReply(content, as_json, outcome.record)


def execution_result(message: Any) -> ExecutionResult:
    """The full [`ExecutionResult`][langchain_sandbox.ExecutionResult] of a ``sandbox_exec`` / ``sandbox_shell`` tool message
    (from a graph's state or a tool call): its JSON result, with the images taken back from the
    content. In a notebook it displays with its charts drawn.

    Raises:
        ValueError: ``message`` is not the reply of a sandbox tool that runs code or commands.
    """
    artifact = getattr(message, "artifact", None)
    result = artifact.get("result") if isinstance(artifact, Mapping) else None
    if not isinstance(result, Mapping) or "artifacts" not in result:
        raise ValueError("Not the reply of sandbox_exec or sandbox_shell (no result artifact).")
    content = getattr(message, "content", None)
    blocks = [*(content if isinstance(content, list) else []), *artifact_images(artifact)]
    images = iter(
        block["base64"]
        for block in blocks
        if isinstance(block, dict) and block.get("type") == "image" and "base64" in block
    )
    artifacts = [a if "data" in a else {**a, "data": next(images, "")} for a in result["artifacts"]]
    return ExecutionResult.model_validate({**result, "artifacts": artifacts})


def notice_lines(notices: list[str]) -> str:
    """Infrastructure notices as the lines a model reads first (same form as results use)."""
    return "".join(f"[notice] {n}\n" for n in notices)


class SandboxTool(BaseTool):
    """Base class of the sandbox tools: resolution and the sync/async plumbing.

    A subclass sets ``name``, ``description`` and ``args_schema`` (a subclass of
    `SandboxToolArgs`) and implements `_acall`; the blocking path runs that same
    coroutine on the runtime's event loop, so each tool has one implementation.

    Args:
        runtime: The [`SandboxRuntime`][langchain_sandbox.SandboxRuntime] to use; otherwise one is found per call.
        provider: Build a runtime of its own on this provider instead of finding one: a name
            (``"local"``, ``"e2b"``, ``"runloop"``) or a configured provider
            (``LocalProvider(isolation="none")``, ``E2BProvider(api_key=..., template=...)``).
        provider_options: Options for a provider given by name, checked against its
            parameters (``{"isolation": "none"}`` for ``"local"``).
        max_output_chars: Characters of each output stream the model reads (head and tail kept).
        default_thread_id: The thread of calls whose config carries no ``thread_id``. By default
            each tool instance has a private one, so separate tools (and the agents holding
            them) never share a sandbox by accident; give tools the same name to share one on
            purpose. A [`SandboxToolkit`][langchain_sandbox.SandboxToolkit] gives all its tools one private thread.
    """

    response_format: Literal["content", "content_and_artifact"] = "content_and_artifact"
    handle_tool_error: bool | str | Any = True
    runtime: SandboxRuntime | None = Field(default=None, exclude=True)
    provider: str | Provider | None = None
    provider_options: dict[str, Any] | None = Field(default=None, exclude=True)
    max_output_chars: int = DEFAULT_RENDER_CHARS
    default_thread_id: str = Field(default_factory=private_thread_id)

    streams_output: ClassVar[bool] = False
    """Whether the tool forwards output to LangGraph's stream writer while it runs."""

    _owner: RuntimeOwner = PrivateAttr(default_factory=RuntimeOwner)
    about: ClassVar[str | None] = None
    """For a tool whose description ends with facts about its sandbox: the fixed part. The facts
    (network, time limit, memory) are derived when the tool is built from the runtime it is
    bound to (see `langchain_sandbox.tools.descriptions`); ``description=`` overrides."""

    @model_validator(mode="before")
    @classmethod
    def _known_arguments(cls, data: Any) -> Any:
        # Pydantic ignores unknown fields; a typo (``providr=``) or an option of the provider
        # (``isolation=``) must fail instead of being dropped.
        check_model_arguments(cls, data)
        return data

    def model_post_init(self, context: Any) -> None:
        super().model_post_init(context)
        # With ``provider=``, build its runtime now, so misconfiguration fails at construction
        # (on an event loop, where that would block, the first call builds it instead).
        if self.provider is not None and not on_event_loop():
            self._explicit_runtime()
        if self.about is not None and "description" not in self.model_fields_set:
            capabilities, spec = self._configuration()
            self.description = f"{self.about} {sandbox_facts(capabilities, spec)}"

    def _configuration(self) -> tuple[Capabilities | None, SessionSpec | None]:
        """The provider's capabilities and the session spec this tool will run with, when they
        are known before a call (``None``: the runtime is found per call)."""
        if self.runtime is not None:
            return self.runtime.capabilities, self.runtime.spec
        if isinstance(self.provider, Provider):
            return self.provider.capabilities, SessionSpec()
        if self.provider is not None:
            # What _explicit_runtime will build, known without building it.
            return provider_class(self.provider).capabilities, SessionSpec()
        return None, None

    def _explicit_runtime(self) -> SandboxRuntime | None:
        return self._owner.resolve(self.runtime, self.provider, self.provider_options)

    def close(self) -> None:
        """Close the runtime this tool built for ``provider=`` (its sandboxes are destroyed).

        A runtime passed in, or found per call, belongs to someone else and is left alone
        (`langchain_sandbox.tools.ownership`).
        """
        self._owner.close()

    async def aclose(self) -> None:
        """Async twin of `close`."""
        await self._owner.aclose()

    def _default_thread(self) -> str:
        """The thread of a call without a ``thread_id``: the one this tool was given, else the
        shared one of the runtime it was given (tools sharing a runtime share its sandbox),
        else the tool's private one."""
        if self.runtime is not None and "default_thread_id" not in self.model_fields_set:
            return self.runtime.shared_thread_id
        return self.default_thread_id

    def _prepare(
        self,
        config: RunnableConfig,
        tool_runtime: Any,
        run_manager: CallbackManagerForToolRun | AsyncCallbackManagerForToolRun | None,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> SandboxCall:
        thread_id = resolve_thread_id(config, self._default_thread())
        step_call = step_call_of(tool_runtime)
        return SandboxCall(
            runtime=resolve_runtime(self._explicit_runtime(), tool_runtime, config),
            thread_id=thread_id,
            record=graph_record(tool_runtime),
            step_call=step_call,
            resumable=is_resumable(config),
            images_inline=images_inline(tool_runtime),
            config=config,
            run_manager=run_manager,
            caller_loop=loop,
            on_output=OutputForwarder(
                tool_runtime=tool_runtime,
                run_manager=run_manager,
                thread_id=thread_id,
                tool_call_id=step_call.call_id if step_call else None,
                loop=loop,
            )
            if self.streams_output
            else None,
        )

    @abstractmethod
    async def _acall(self, call: SandboxCall, args: dict[str, Any]) -> ToolReply:
        """Do the tool's work for one call; ``args`` are the validated arguments."""

    @contextlib.contextmanager
    def _tool_errors(self) -> Iterator[None]:
        """Infrastructure failures and refused input become a message the model reads;
        misconfiguration ([`ConfigurationError`][langchain_sandbox.ConfigurationError]) is the developer's and propagates."""
        try:
            yield
        except ConfigurationError:
            raise
        except SandboxError as exc:
            raise ToolException(f"{self.name} failed: {exc}") from exc

    def _filter_injected_args(self, tool_input: dict[str, Any]) -> dict[str, Any]:
        # LangChain works the injected keys out of the schema's annotations anew at each call;
        # they are fixed per class and schema, so LangChain's own answer is asked once and kept.
        key = (type(self), self.args_schema)
        hidden = _HIDDEN_KEYS.get(key)
        if hidden is None:
            fields = getattr(self.args_schema, "model_fields", {})
            candidates = {*FILTERED_ARGS, *fields, *self._injected_args_keys}
            kept = super()._filter_injected_args(dict.fromkeys(candidates))
            hidden = _HIDDEN_KEYS[key] = frozenset(candidates - kept.keys())
        return {k: v for k, v in tool_input.items() if k not in hidden}

    def _run(
        self,
        *,
        config: RunnableConfig,
        runtime: Any = None,
        run_manager: _RunManager = None,
        **args: Any,
    ) -> _ToolOutput:
        with self._tool_errors():
            call = self._prepare(config, runtime, run_manager)
            note_checkpointer(call.runtime, config)
            reply = call.runtime.run_sync(self._acall(call, args))
        return reply.content, reply.artifact

    async def _arun(
        self,
        *,
        config: RunnableConfig,
        runtime: Any = None,
        run_manager: _AsyncRunManager = None,
        **args: Any,
    ) -> _ToolOutput:
        with self._tool_errors():
            call = self._prepare(config, runtime, run_manager, asyncio.get_running_loop())
            await anote_checkpointer(call.runtime, config)
            try:
                reply = await self._acall(call, args)
            finally:
                if call.on_output is not None:
                    await call.on_output.aclose()
        return reply.content, reply.artifact


# LangChain also takes ``_run``'s and ``_arun``'s signatures at every call (for ``run_manager``);
# they are fixed, and a function's ``__signature__`` is what ``inspect.signature`` returns at once.
SandboxTool._run.__signature__ = inspect.signature(SandboxTool._run)  # type: ignore[attr-defined]
SandboxTool._arun.__signature__ = inspect.signature(SandboxTool._arun)  # type: ignore[attr-defined]

__all__ = [
    "OUTPUT_EVENT",
    "RUNTIME_KEY",
    "SandboxCall",
    "SandboxTool",
    "SandboxToolArgs",
    "ToolReply",
    "execution_reply",
    "execution_result",
    "graph_record",
    "graph_step",
    "is_resumable",
    "notice_lines",
    "private_thread_id",
    "resolve_runtime",
    "resolve_thread_id",
    "step_call_of",
]
