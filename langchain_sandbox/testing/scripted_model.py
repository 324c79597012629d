"""A deterministic tool-calling chat model for tests, the demo and notebooks.

LangChain's fake chat models cannot drive an agent: none implements ``bind_tools`` (which
``create_agent`` always calls), and ``GenericFakeChatModel`` drops tool calls when streamed. This
model answers from a *script*, and what it answers is a pure function of the conversation it is
given, so a rerun, a resume from a checkpoint or a new process replaying the thread all see the same
reply at the same point. That property is what lets crash-and-resume tests and re-executed notebook
cells use it.

A script is either a callable ``(messages) -> step`` or a list of steps; with a list, the step used
is the one at index "number of AI messages already in the conversation". A step is one of:

* a ``str``: a final answer (no tool calls);
* a [`ToolCallSpec`][langchain_sandbox.testing.ToolCallSpec] or a list of them: tool calls in one AI message (several = parallel);
* an `AIMessage`: returned as is;
* a callable ``(messages) -> step``: decided from the conversation (e.g. from a tool's output).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeAlias

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.messages.tool import tool_call_chunk
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import BaseModel, ConfigDict, field_validator


class ToolCallSpec(BaseModel):
    """One tool call a scripted step makes.

    Attributes:
        name: The tool's name, as bound with ``bind_tools``.
        args: The arguments, JSON-safe.
        id: The call id; by default ``call_<turn>_<position>``, unique within a conversation and
            the same on every rerun.
    """

    model_config = ConfigDict(frozen=True)

    name: str
    args: dict[str, Any] = {}
    id: str | None = None


def call(name: str, /, **args: Any) -> ToolCallSpec:
    """Shorthand for ``ToolCallSpec(name=name, args=args)``: ``call("sandbox_exec", code="1+1")``."""
    return ToolCallSpec(name=name, args=args)


Step: TypeAlias = (
    str | AIMessage | ToolCallSpec | list[ToolCallSpec] | Callable[[list[BaseMessage]], Any]
)
"""What the model answers at one turn (see the module docstring)."""

Script: TypeAlias = Sequence[Step] | Callable[[list[BaseMessage]], Step]


class ScriptedToolModel(BaseChatModel):
    """A chat model that issues the tool calls and answers its script says, deterministically.

    ```python
    from langchain_sandbox.testing import ScriptedToolModel, call

    model = ScriptedToolModel(
        script=[
            call("sandbox_exec", code="x = 21"),
            [call("sandbox_exec", code="x * 2"), call("sandbox_exec", code="x + 1")],  # parallel
            "x doubled is 42.",
        ]
    )
    agent = create_agent(model, tools=[SandboxExecTool()])
    ```

    Streaming works: ``stream`` yields the text word by word and the tool calls as
    ``tool_call_chunks`` in a last chunk, so ``stream_mode="messages"`` shows them.

    Attributes:
        script: The steps, or a function of the conversation returning the step.
        check_tool_names: Refuse (with a clear error) to call a tool that was not bound with
            ``bind_tools``; catches a misconfigured agent instead of a confusing tool error later.
    """

    script: Any
    check_tool_names: bool = True

    model_config = ConfigDict(arbitrary_types_allowed=True)

    @field_validator("script")
    @classmethod
    def _check_script(cls, script: Any) -> Any:
        if callable(script) or (isinstance(script, Sequence) and not isinstance(script, str)):
            return script
        raise TypeError(
            "script must be a list of steps or a function of the messages returning a step, "
            f"not {type(script).__name__}."
        )

    @property
    def _llm_type(self) -> str:
        return "scripted-tool-model"

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """Bind tools the way real chat models do, so calls to unknown tools can be refused."""
        del tool_choice  # the script decides which tools are called
        formatted = [convert_to_openai_tool(tool) for tool in tools]
        return self.bind(tools=formatted, **kwargs)

    def reply(
        self, messages: Sequence[BaseMessage], tools: Sequence[dict[str, Any]] = ()
    ) -> AIMessage:
        """The AI message the script gives for ``messages`` (what ``invoke`` returns)."""
        history = list(messages)
        turn = sum(isinstance(message, AIMessage) for message in history)
        step: Any = self.script
        if not callable(step):
            if turn >= len(step):
                raise ValueError(
                    f"ScriptedToolModel's script has {len(step)} steps but the conversation "
                    f"already has {turn} AI messages; add a final answer (a str) to the script."
                )
            step = step[turn]
        message = _to_message(_resolve(step, history), turn)
        self._check_tool_names(message, tools)
        return message

    def _check_tool_names(self, message: AIMessage, tools: Sequence[dict[str, Any]]) -> None:
        if not self.check_tool_names or not message.tool_calls:
            return
        bound = {tool["function"]["name"] for tool in tools}
        unknown = [c["name"] for c in message.tool_calls if c["name"] not in bound]
        if unknown:
            raise ValueError(
                f"ScriptedToolModel's script calls {unknown}, but the bound tools are "
                f"{sorted(bound)}; fix the script or bind the tool."
            )

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        message = self.reply(messages, kwargs.get("tools", ()))
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        message = self.reply(messages, kwargs.get("tools", ()))
        text = message.content if isinstance(message.content, str) else ""
        words = text.split(" ") if text else []
        for i, word in enumerate(words):
            piece = word if i == len(words) - 1 else word + " "
            chunk = ChatGenerationChunk(message=AIMessageChunk(content=piece, id=message.id))
            if run_manager is not None:
                run_manager.on_llm_new_token(piece, chunk=chunk)
            yield chunk
        yield ChatGenerationChunk(
            message=AIMessageChunk(
                content="",
                id=message.id,
                tool_call_chunks=[
                    tool_call_chunk(name=c["name"], args=json.dumps(c["args"]), id=c["id"], index=i)
                    for i, c in enumerate(message.tool_calls)
                ],
                chunk_position="last",
            )
        )


def _resolve(step: Any, history: list[BaseMessage]) -> Any:
    """Call step functions until a concrete step comes out."""
    while callable(step) and not isinstance(step, BaseModel):
        step = step(history)
    return step


def _to_message(step: Any, turn: int) -> AIMessage:
    """Turn a concrete step into the AI message of turn ``turn`` (ids are deterministic)."""
    message_id = f"scripted-{turn}"
    if isinstance(step, AIMessage):
        return step if step.id else step.model_copy(update={"id": message_id})
    if isinstance(step, str):
        return AIMessage(content=step, id=message_id)
    calls = [step] if isinstance(step, ToolCallSpec) else step
    if not isinstance(calls, list) or not all(isinstance(c, ToolCallSpec) for c in calls):
        raise TypeError(
            "A script step must be a str, an AIMessage, a ToolCallSpec, a list of ToolCallSpec "
            f"or a function of the messages returning one; got {type(step).__name__}."
        )
    return AIMessage(
        content="",
        id=message_id,
        tool_calls=[
            {
                "name": c.name,
                "args": dict(c.args),
                "id": c.id or f"call_{turn}_{i}",
                "type": "tool_call",
            }
            for i, c in enumerate(calls)
        ],
    )


__all__ = ["Script", "ScriptedToolModel", "Step", "ToolCallSpec", "call"]
