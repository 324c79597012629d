"""How images in tool results reach each chat model, in the form its API accepts.

A sandbox tool puts a chart (or an image file it read) in its ``ToolMessage`` as an image content
block. Chat APIs disagree on where images may go:

* Anthropic's Messages API accepts images inside a ``tool_result``: the image stays in the tool
  message (``"tool_result"``);
* OpenAI's Chat Completions API rejects image parts in a ``role: "tool"`` message ("Image URLs are
  only allowed for messages with role 'user'"): the tool message keeps its text and a note, and
  the images follow, right after the tool messages of that step, in a user message
  (``"user_message"``).

[`messages_for_model`][langchain_sandbox.messages_for_model] rewrites the messages sent to a model that way; the graph state keeps
the tool messages as they are (each image is stored once). ``SandboxMiddleware`` applies it to
every model call of a ``create_agent`` agent; a hand-built graph calls it in its model node.

A sandbox tool keeps its images out of a tool message when it cannot tell that the calling model
takes them there (`langchain_sandbox.tools.images`); those images, in the message's artifact,
are brought back here too, in the form the model takes.

``"auto"`` (the default) picks by the model: ``"user_message"`` for OpenAI's chat models
(``ChatOpenAI``, ``AzureChatOpenAI``), ``"tool_result"`` for every other model, which keeps the
image with the call that made it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, TypeAlias

from langchain_core.messages import BaseMessage, HumanMessage, ToolMessage

from langchain_sandbox.tools.images import artifact_images, is_image_block

ImagePolicy: TypeAlias = Literal["auto", "tool_result", "user_message"]
"""Where tool-result images go: decided by the model (``"auto"``), inside the tool result, or in
a user message after the step's tool messages."""

IMAGE_POLICIES: tuple[ImagePolicy, ...] = ("auto", "tool_result", "user_message")

_USER_MESSAGE_MODELS = frozenset({"openai-chat", "azure-openai-chat"})
"""``_llm_type`` of the chat models whose API takes images only from the user."""


def image_placement(
    model: Any, policy: ImagePolicy = "auto"
) -> Literal["tool_result", "user_message"]:
    """Where tool-result images go for ``model`` (a chat model, bound or not) under ``policy``."""
    check_image_policy(policy)
    if policy != "auto":
        return policy
    chat_model = getattr(model, "bound", model)  # through bind_tools' RunnableBinding
    llm_type = getattr(chat_model, "_llm_type", None)
    return "user_message" if llm_type in _USER_MESSAGE_MODELS else "tool_result"


def check_image_policy(policy: str) -> None:
    """Raise ``ValueError`` unless ``policy`` is one of `IMAGE_POLICIES`."""
    if policy not in IMAGE_POLICIES:
        raise ValueError(f"image_policy must be one of {IMAGE_POLICIES}, not {policy!r}.")


def messages_for_model(
    messages: Sequence[BaseMessage], model: Any, policy: ImagePolicy = "auto"
) -> list[BaseMessage]:
    """``messages`` with tool-result images where ``model``'s API accepts them (see the module
    docstring). Messages without images come back unchanged; the input is not modified."""
    if image_placement(model, policy) == "tool_result":
        return [_with_kept_images(m) if isinstance(m, ToolMessage) else m for m in messages]
    out: list[BaseMessage] = []
    images: list[dict[str, Any]] = []
    calls: list[str] = []
    for message in messages:
        if not isinstance(message, ToolMessage) and images:
            out.append(_images_message(images, calls))
            images, calls = [], []
        if isinstance(message, ToolMessage):
            kept = artifact_images(message.artifact)
            found = (
                [b for b in message.content if _is_image(b)]
                if isinstance(message.content, list)
                else []
            )
            if found or kept:
                message = _without_images(message, len(found) + len(kept))
                images.extend([*found, *kept])  # type: ignore[list-item]
                calls.append(message.tool_call_id)
        out.append(message)
    if images:
        out.append(_images_message(images, calls))
    return out


def _is_image(block: Any) -> bool:
    return is_image_block(block)


def _with_kept_images(message: ToolMessage) -> ToolMessage:
    """A tool message whose images its tool kept in the artifact (the caller's model could not
    be told to take them) with those images back in its content, for a model that takes them."""
    kept = artifact_images(message.artifact)
    if not kept:
        return message
    return message.model_copy(update={"content": [*_blocks(message), *kept]})


def _blocks(message: ToolMessage) -> list[Any]:
    content = message.content if isinstance(message.content, list) else [message.content]
    return [{"type": "text", "text": b} if isinstance(b, str) else b for b in content]


def _without_images(message: ToolMessage, count: int) -> ToolMessage:
    kept = [b for b in _blocks(message) if not _is_image(b)]
    note = f"[{count} image{'s' if count > 1 else ''} attached in the next user message]"
    return message.model_copy(update={"content": [*kept, {"type": "text", "text": note}]})


def _images_message(images: list[dict[str, Any]], calls: list[str]) -> HumanMessage:
    text = (
        f"The image{'s' if len(images) > 1 else ''} returned by tool call"
        f"{'s' if len(calls) > 1 else ''} {', '.join(calls)} (this model takes images only "
        "from the user):"
    )
    return HumanMessage(content=[{"type": "text", "text": text}, *images])


__all__ = [
    "IMAGE_POLICIES",
    "ImagePolicy",
    "check_image_policy",
    "image_placement",
    "messages_for_model",
]
