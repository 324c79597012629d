"""Parallel calls of one message start their tasks in message order, whatever order their
threads arrive in (LangGraph finds a node's tasks again on a re-run by that order)."""

from __future__ import annotations

import threading
import time

from langchain_sandbox.graph.tool_calls import _NODE_CALL_ORDER, call_order


def test_calls_take_their_turn_in_message_order() -> None:
    started: list[str] = []
    with call_order(["a", "b", "c"]):
        order = _NODE_CALL_ORDER.get()
        assert order is not None

        def arrive(call_id: str) -> None:
            with order.turn(call_id):
                started.append(call_id)

        threads = []
        for call_id in ["c", "b", "a"]:  # the last call arrives first
            thread = threading.Thread(target=arrive, args=(call_id,))
            thread.start()
            threads.append(thread)
            time.sleep(0.05)  # only to make the arrival order the reverse one
        for thread in threads:
            thread.join(timeout=30)
    assert started == ["a", "b", "c"]
    assert _NODE_CALL_ORDER.get() is None


def test_calls_outside_the_message_do_not_wait() -> None:
    with call_order(["a"]):
        order = _NODE_CALL_ORDER.get()
        assert order is not None
        with order.turn("not-a-sandbox-call"):
            pass
        with order.turn("a"):
            pass
