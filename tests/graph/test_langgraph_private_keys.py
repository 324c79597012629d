"""The private LangGraph config keys and channels the package reads still mean what it assumes.

LangGraph offers no public API for a task's id, its channel reader, the run's durability or
the run's checkpointer inside a node, so the package reads them by name; this test fails
loudly the day LangGraph renames them instead of letting records silently go missing."""

from __future__ import annotations

from langgraph._internal import _constants as pregel

from langchain_sandbox import checkpointer_names
from langchain_sandbox.deepagents import _lineage
from langchain_sandbox.graph import step_record


def test_step_record_reads_langgraphs_current_keys() -> None:
    assert step_record._READ_KEY == pregel.CONFIG_KEY_READ
    assert step_record._TASK_ID_KEY == pregel.CONFIG_KEY_TASK_ID
    assert step_record._DURABILITY_KEY == pregel.CONFIG_KEY_DURABILITY
    assert step_record._TASKS_CHANNEL == pregel.TASKS


def test_checkpointer_and_lineage_read_langgraphs_current_keys() -> None:
    assert checkpointer_names._CHECKPOINTER_KEY == pregel.CONFIG_KEY_CHECKPOINTER
    assert _lineage._READ_KEY == pregel.CONFIG_KEY_READ
