"""Parallel calls of one message start their tasks in message order, whatever order their
threads arrive in (LangGraph finds a node's tasks again on a re-run by that order). The order is
read from the request's state, through ToolNode's public ``ToolCallRequest``."""

from __future__ import annotations

import threading
import time
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.prebuilt.tool_node import ToolCallRequest

from langchain_sandbox.graph.tool_calls import CallOrders


class _Runtime:
    config: dict[str, Any] = {"configurable": {"checkpoint_ns": "tools:1"}}


def _requests(names: list[tuple[str, str]]) -> dict[str, ToolCallRequest]:
    calls = [{"name": name, "args": {}, "id": call_id} for call_id, name in names]
    message = AIMessage(content="", tool_calls=calls)
    state = {"messages": [HumanMessage("go"), message]}
    return {
        call["id"]: ToolCallRequest(
            tool_call=call,  # type: ignore[arg-type]
            tool=None,
            state=state,
            runtime=_Runtime(),  # type: ignore[arg-type]
        )
        for call in calls
    }


def test_calls_take_their_turn_in_message_order_and_the_order_is_dropped_after() -> None:
    orders = CallOrders({"sandbox_exec"})
    requests = _requests([("a", "sandbox_exec"), ("x", "other"), ("b", "sandbox_exec")])
    started: list[str] = []

    def arrive(call_id: str) -> None:
        with orders.turn(requests[call_id]):
            started.append(call_id)

    threads = []
    for call_id in ["b", "x", "a"]:  # the last call arrives first
        thread = threading.Thread(target=arrive, args=(call_id,))
        thread.start()
        threads.append(thread)
        time.sleep(0.05)  # only to make the arrival order the reverse one
    for thread in threads:
        thread.join(timeout=30)
    assert started.index("a") < started.index("b")
    assert orders._orders == {}, "a re-run of the node starts from the first call again"


def test_a_lone_call_and_calls_of_unknown_tools_do_not_wait() -> None:
    orders = CallOrders({"sandbox_exec"})
    lone = _requests([("a", "sandbox_exec"), ("x", "other")])
    with orders.turn(lone["x"]):
        pass
    with orders.turn(lone["a"]):
        pass
    assert orders._orders == {}
