"""The names of LangGraph's private config keys and channels this package reads, in one place.

LangGraph offers no public API for a task's id, its channel reader, the run's durability, the
path kind of a ``Send`` task or the channel of a ``@task``'s result inside a running node, so
the package reads them by name (the checkpointer key and the tasks channel come from the public
``langgraph.constants`` instead). ``tests/graph/test_langgraph_private_keys.py`` holds each name
against ``langgraph._internal._constants``: the day LangGraph renames one, that test fails
loudly instead of records silently going missing.
"""

from __future__ import annotations

READ_KEY = "__pregel_read"
"""``configurable`` key of a task's channel reader (``CONFIG_KEY_READ``; Deep Agents'
``StateBackend`` reads it too)."""

TASK_ID_KEY = "__pregel_task_id"
"""``configurable`` key of the running task's id (``CONFIG_KEY_TASK_ID``)."""

DURABILITY_KEY = "__pregel_durability"
"""``configurable`` key of the run's durability mode (``CONFIG_KEY_DURABILITY``)."""

PUSH = "__pregel_push"
"""First element of a ``Send`` task's path (``metadata.langgraph_path``)."""

RETURN_CHANNEL = "__return__"
"""Channel under which LangGraph saves a ``@task``'s result among the pending writes."""
