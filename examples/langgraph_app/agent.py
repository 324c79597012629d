"""A LangGraph app with a durable sandbox per thread, for `langgraph dev` or LangGraph Server.

Run it:

    cd examples/langgraph_app && langgraph dev

The server brings its own checkpointer, so every thread keeps its sandbox (files and variables)
from one run to the next. Set ``SANDBOX_AGENT_MODEL`` (e.g. ``anthropic:claude-sonnet-5-5`` or
``openai:gpt-4.1``, with that provider's API key and package installed) to talk to a real model;
without it the agent runs the Python each user message contains, which needs no model and no
network (handy to try the server, and what the test suite does).
"""

from __future__ import annotations

import os
from typing import Any

from langchain.agents import create_agent
from langchain.chat_models import init_chat_model
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from langchain_sandbox import SandboxMiddleware
from langchain_sandbox.testing import ScriptedToolModel, call


def _run_the_users_code(messages: list[BaseMessage]) -> Any:
    """The offline model: run the last user message as Python, then report what it printed."""
    last = messages[-1]
    if isinstance(last, HumanMessage):
        return call("sandbox_exec", code=str(last.text))
    if isinstance(last, ToolMessage):
        return f"The sandbox answered:\n{last.text}"
    return AIMessage(content="Send me some Python to run.")


def _model() -> BaseChatModel:
    name = os.environ.get("SANDBOX_AGENT_MODEL")
    if name:
        return init_chat_model(name)
    return ScriptedToolModel(script=_run_the_users_code)


graph = create_agent(
    _model(),
    system_prompt="You are a data analyst. Run Python in the sandbox to answer.",
    middleware=[SandboxMiddleware()],
)
