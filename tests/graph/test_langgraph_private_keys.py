"""The private LangGraph names the package reads (`langchain_sandbox.graph._pregel_keys`) still
mean what it assumes.

LangGraph offers no public API for a task's id, its channel reader, the run's durability, a
``Send`` task's path kind or a ``@task``'s result channel inside a node, so the package reads them
by name (the checkpointer key and the tasks channel come from the public ``langgraph.constants``);
this test fails loudly the day LangGraph renames one instead of letting records silently go
missing."""

from __future__ import annotations

from langgraph._internal import _constants as pregel

from langchain_sandbox.graph import _pregel_keys


def test_the_private_names_are_langgraphs_current_ones() -> None:
    assert _pregel_keys.READ_KEY == pregel.CONFIG_KEY_READ
    assert _pregel_keys.TASK_ID_KEY == pregel.CONFIG_KEY_TASK_ID
    assert _pregel_keys.DURABILITY_KEY == pregel.CONFIG_KEY_DURABILITY
    assert _pregel_keys.PUSH == pregel.PUSH
    assert _pregel_keys.RETURN_CHANNEL == pregel.RETURN
