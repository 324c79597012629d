"""Where a sandbox tool puts the images of its reply (a chart, an image file it read).

Chat APIs disagree on images in a tool result: Anthropic's Messages API takes them inside a
``tool_result``; OpenAI's Chat Completions API rejects a ``role: "tool"`` message with an image
part, which fails the whole request. A tool called by a plain ``create_agent(model, tools=[...])``
has no middleware to rewrite the messages, so the tool itself decides, by the model that made the
call: the ``AIMessage`` holding the call (found in the graph state the ``ToolRuntime`` carries)
names its provider in ``response_metadata["model_provider"]``.

* A provider whose API takes images in a tool result (`INLINE_PROVIDERS`): the images are
  content blocks of the tool message, where the model sees them.
* Any other, and wherever the caller cannot be told (outside a graph, a model that does not say):
  the content is text with a note, and the images are kept in the artifact
  (``artifact["result"]["images"]``), so no request breaks and nothing is lost.
  [`SandboxMiddleware`][langchain_sandbox.SandboxMiddleware] (and
  [`messages_for_model`][langchain_sandbox.messages_for_model]) then shows them to the model in the form
  its API takes: in a user message for OpenAI, in the tool result for the others.

Each image is stored once, either in the content or in the artifact.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

INLINE_PROVIDERS = frozenset({"anthropic"})
"""``model_provider`` of the chat models whose API is known to take images inside a tool result
(others may too; without a test against their client they get the safe form)."""

IMAGES_KEY = "images"
"""The key of the result, in a tool's artifact, that holds the images kept out of its content."""

_IMAGE_TYPES = frozenset({"image", "image_url"})


def is_image_block(block: Any) -> bool:
    """Whether a content block is an image (LangChain's ``image`` or OpenAI's ``image_url``)."""
    return isinstance(block, dict) and block.get("type") in _IMAGE_TYPES


def calling_provider(tool_runtime: Any) -> str | None:
    """The ``model_provider`` of the message that made this call, if the run says."""
    call_id = getattr(tool_runtime, "tool_call_id", None)
    state = getattr(tool_runtime, "state", None)
    messages = (
        state.get("messages") if isinstance(state, Mapping) else getattr(state, "messages", None)
    )
    if not call_id or not messages:
        return None
    for message in reversed(messages):
        if any(c.get("id") == call_id for c in getattr(message, "tool_calls", None) or []):
            provider = (getattr(message, "response_metadata", None) or {}).get("model_provider")
            return str(provider) if provider else None
    return None


def images_inline(tool_runtime: Any) -> bool:
    """Whether the images of this call's reply go in its content (see the module docstring)."""
    return calling_provider(tool_runtime) in INLINE_PROVIDERS


def place_images(
    content: str | list[Any], result: dict[str, Any], *, inline: bool
) -> tuple[str | list[Any], dict[str, Any]]:
    """``(content, result)`` with the content's images moved to ``result["images"]`` and a note
    in their place, unless ``inline``."""
    if inline or not isinstance(content, list):
        return content, result
    images = [b for b in content if is_image_block(b)]
    if not images:
        return content, result
    texts = [
        b if isinstance(b, str) else b.get("text", "") for b in content if not is_image_block(b)
    ]
    count = f"{len(images)} image{'s' if len(images) > 1 else ''}"
    note = (
        f"[{count} not shown in this tool result, which the calling model's API may not take "
        "images in; kept in the tool message's artifact]"
    )
    return "\n".join([*texts, note]), {**result, IMAGES_KEY: images}


def artifact_images(artifact: Any) -> list[dict[str, Any]]:
    """The images a tool kept in its artifact instead of its content (see `place_images`)."""
    result = artifact.get("result") if isinstance(artifact, Mapping) else None
    images = result.get(IMAGES_KEY) if isinstance(result, Mapping) else None
    return [b for b in images if is_image_block(b)] if isinstance(images, list) else []


__all__ = [
    "IMAGES_KEY",
    "INLINE_PROVIDERS",
    "artifact_images",
    "calling_provider",
    "images_inline",
    "is_image_block",
    "place_images",
]
