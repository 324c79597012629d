"""The graph step a sandbox tool call runs in, as its task config tells it: the checkpointer,
the thread, the namespace and checkpoint of every graph from the root down to the node's, the
task's id, and the task's reader of the ``sandbox`` channel (`Step`); and how long a call waits
for a checkpoint of its run that is not saved yet (`SAVED_WITHIN`). What it reads from LangGraph:
the task config's ``checkpoint_ns``, ``checkpoint_map`` and ``thread_id``, the public
``CONFIG_KEY_CHECKPOINTER`` (through `run_checkpointer`), and the private names LangGraph offers
no public API for, all in `langchain_sandbox.graph._pregel_keys` (the task's channel reader, its
id, the run's durability). ``step_record.py`` and ``step_lineage.py`` read a step through it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from langchain_core.runnables import RunnableConfig
from langgraph.errors import EmptyChannelError
from tenacity import AsyncRetrying, Retrying, retry_if_result, stop_after_delay, wait_exponential

from langchain_sandbox.checkpointing.checkpointer_names import run_checkpointer
from langchain_sandbox.graph._pregel_keys import DURABILITY_KEY, READ_KEY, TASK_ID_KEY
from langchain_sandbox.state import SandboxState

CHANNEL = "sandbox"


@dataclass(frozen=True)
class Step:
    """Where in a checkpointed graph run a tool call's node runs."""

    config: RunnableConfig
    checkpointer: Any
    graph_ns: str
    checkpoint_id: str
    thread_id: str
    task_id: str | None
    checkpoints: Mapping[str, str]
    """The run's checkpoint id of every graph from the root down to the node's (by namespace)."""

    @classmethod
    def of(cls, config: RunnableConfig | None) -> Step | None:
        config = config or {}
        configurable = config.get("configurable") or {}
        checkpointer = run_checkpointer(config)
        task_ns = configurable.get("checkpoint_ns")
        checkpoints = configurable.get("checkpoint_map")
        thread_id = configurable.get("thread_id")
        if checkpointer is None or not isinstance(task_ns, str) or thread_id is None:
            return None
        graph_ns = task_ns.rpartition("|")[0]
        if not isinstance(checkpoints, Mapping) or not checkpoints.get(graph_ns):
            return None
        return cls(
            config, checkpointer, graph_ns, checkpoints[graph_ns], str(thread_id),
            configurable.get(TASK_ID_KEY), checkpoints,
        )  # fmt: skip

    def above(self) -> RunnableConfig | None:
        """The checkpoint of the step of the graph above whose task runs this graph, if a task
        runs it (its namespace segment carries a task id, ``node:<task id>``)."""
        parent_ns, _, own = self.graph_ns.rpartition("|")
        checkpoint_id = self.checkpoints.get(parent_ns)
        if ":" not in own or not checkpoint_id:
            return None
        return {
            "configurable": {
                "thread_id": self.thread_id,
                "checkpoint_ns": parent_ns,
                "checkpoint_id": checkpoint_id,
            }
        }

    @property
    def checkpoint_config(self) -> RunnableConfig:
        return {
            "configurable": {
                "thread_id": self.thread_id,
                "checkpoint_ns": self.graph_ns,
                "checkpoint_id": self.checkpoint_id,
            }
        }

    def transient_levels(self) -> list[tuple[str, RunnableConfig | None, RunnableConfig]]:
        """The node's graph and the graphs above it whose state LangGraph keeps for one
        invocation only, innermost first, up to the first that keeps it per thread: each as its
        namespace, its checkpoint of this run (``None`` if unknown) and its newest one.

        Such a graph's namespace segment carries a task id (``node:<task id>``);
        ``checkpointer=True`` subgraphs (and the root) have stable ones (``node``, ``""``).
        """
        parts = self.graph_ns.split("|") if self.graph_ns else []
        levels: list[tuple[str, RunnableConfig | None, RunnableConfig]] = []
        while parts and ":" in parts[-1]:
            ns = "|".join(parts)
            latest = {"thread_id": self.thread_id, "checkpoint_ns": ns}
            checkpoint_id = self.checkpoints.get(ns)
            at_run: RunnableConfig | None = (
                {"configurable": {**latest, "checkpoint_id": checkpoint_id}}
                if checkpoint_id
                else None
            )
            levels.append((ns, at_run, {"configurable": latest}))
            parts.pop()
        return levels

    def channel_value(self) -> tuple[bool, SandboxState | None]:
        """Whether the node's graph declares the channel, and its value at the step's start."""
        read = (self.config.get("configurable") or {}).get(READ_KEY)
        if read is None:
            return True, None
        try:
            value = read(CHANNEL, False)
        except KeyError:
            return False, None
        except EmptyChannelError:
            return True, None
        return True, as_record(value)


def as_record(value: Any) -> SandboxState | None:
    return cast("SandboxState", value) if isinstance(value, dict) and value else None


SAVED_WITHIN = 10.0
"""Seconds a call waits for a checkpoint of its run that is not saved yet, when it needs it:
under ``durability="async"`` (LangGraph's default) a step's checkpoint is saved beside its
tasks, so with a slow checkpointer a task can run first. A Deep Agents subagent needs its
parent's step (else its records are not filed under the parent's ``task`` call, and the parent's
next call continues from before the subagent), and a subgraph's first node its own first
checkpoint (else a parent that does not pass ``sandbox`` is not refused, and the record is lost
with the invocation)."""


_R = TypeVar("_R", Retrying, AsyncRetrying)


def until_saved(step: Step, retrying: type[_R]) -> _R:
    """Reads of a checkpoint of the run, repeated while it is not saved yet (not under
    ``durability="exit"``, which saves no step before the last): ``None`` after
    `SAVED_WITHIN`."""
    durability = (step.config.get("configurable") or {}).get(DURABILITY_KEY)
    within = 0.0 if durability == "exit" else SAVED_WITHIN
    return retrying(
        stop=stop_after_delay(within),
        wait=wait_exponential(multiplier=0.002, max=0.05),
        retry=retry_if_result(lambda checkpoint: checkpoint is None),
        retry_error_callback=lambda state: None,
    )


__all__ = ["CHANNEL", "SAVED_WITHIN", "Step", "as_record", "until_saved"]
