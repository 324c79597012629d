"""The private LangGraph config keys the package reads still mean what it assumes.

LangGraph offers no public API for a task's id, its channel reader or the run's durability
inside a node, so the package reads them by name (the checkpointer key and the tasks channel
come from the public ``langgraph.constants``); this test fails loudly the day LangGraph renames
the private ones instead of letting records silently go missing."""

from __future__ import annotations

from langgraph._internal import _constants as pregel

from langchain_sandbox.deepagents import _lineage
from langchain_sandbox.graph import step_record


def test_step_record_reads_langgraphs_current_private_keys() -> None:
    assert step_record._READ_KEY == pregel.CONFIG_KEY_READ
    assert step_record._TASK_ID_KEY == pregel.CONFIG_KEY_TASK_ID
    assert step_record._DURABILITY_KEY == pregel.CONFIG_KEY_DURABILITY


def test_deepagents_lineage_reads_langgraphs_current_channel_reader_key() -> None:
    assert _lineage._READ_KEY == pregel.CONFIG_KEY_READ
