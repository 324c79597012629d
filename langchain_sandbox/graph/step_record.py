"""The record a sandbox tool call in a graph continues from, when its own state does not say.

A tool call reads its record from the state its node was given (``state["sandbox"]``). Three graph
shapes hand a call less than the whole story, and without help each lost work silently:

* **parallel calls re-run after a crash.** LangGraph saves each finished task's writes (its
  *pending writes*) as soon as it finishes. When the process dies mid-step, the resume keeps those
  writes and re-runs only the calls that had not finished, with the state from before the step.
  The finished calls' records are in the step checkpoint's pending writes: written to the
  ``sandbox`` channel (a ``Send`` per call, as under ``create_agent``), or returned by a
  ``sandbox_tool_call`` task (`tool_calls`). The re-run continues
  from them merged with the state's record (by the channel's reducer), so it starts from their
  files and variables, and its own record's revision is above theirs, so the step's merge keeps
  everything. A time-travel re-run starts a fork checkpoint of its own, whose pending writes hold
  only what the re-run itself did, so nothing of the abandoned run leaks in.
* **``Send`` payloads without ``sandbox``.** A node sent ``{"messages": [...]}`` does not see the
  graph's ``sandbox`` channel; the call continues from the channel's value at the start of the
  step, read through LangGraph's per-task reader.
* **a subgraph whose parent does not pass ``sandbox``.** A subgraph added as a node keeps its state
  only for one invocation (unless compiled with ``checkpointer=True``); the record survives the
  invocation only in the parent's state. If the parent's state does not declare the channel, the
  subgraph's first checkpoint has no ``sandbox`` version, and the call is refused with a
  [`ConfigurationError`][langchain_sandbox.ConfigurationError] that says how to wire it (under
  ``create_agent``, ``SandboxMiddleware.before_agent`` checks the same before the model runs).
  Nested subgraphs are checked level by level, up to the first graph that keeps its state per
  thread (the root, or a ``checkpointer=True`` subgraph): a parent that declares ``sandbox`` but
  is itself a one-invocation subgraph of a graph without it loses the record just the same. So
  is a node in a graph with no ``sandbox`` channel at all: LangGraph would drop every record it
  returns.

A graph with no ``sandbox`` channel at all (Deep Agents) learns the same from
``step_lineage.py``. The step itself (the task config's keys, the wait for a checkpoint not saved
yet) is read through ``step.py``; this module also reads the ``@task`` result channel
(`langchain_sandbox.graph._pregel_keys`). The checks and reads only happen in a graph run with a
checkpointer: without one nothing outlives the process. ``tests/graph/test_tool_node_hooks.py``
pins their behaviour and ``tests/graph/test_langgraph_private_keys.py`` the private names on the
installed LangGraph.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import reduce
from typing import Any, cast

from langchain_core.messages import ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.prebuilt.tool_node import ToolCallRequest
from tenacity import AsyncRetrying, Retrying

from langchain_sandbox.errors import ConfigurationError
from langchain_sandbox.graph._pregel_keys import RETURN_CHANNEL
from langchain_sandbox.graph.step import CHANNEL, Step, as_record, until_saved
from langchain_sandbox.state import SandboxState, merge_sandbox_state
from langchain_sandbox.tools.base import graph_record

_NO_CHANNEL = (
    "This sandbox tool runs in a graph whose state has no `sandbox` channel, so LangGraph would "
    "drop the record of every call and a resume would find an empty sandbox. Declare it in the "
    "state schema: `sandbox: NotRequired[SandboxChannel]` (or use SandboxGraphState)."
)
_NOT_PASSED = (
    "This sandbox tool runs in a subgraph, and the subgraph `{graph}` is not passed a `sandbox` "
    "record by its parent graph: its state lasts one invocation, so the record of the tool's "
    "calls would be lost and the next invocation (or a resume in a new process) would find an "
    "empty sandbox. Declare `sandbox: NotRequired[SandboxChannel]` in the parent graph's state "
    "too (in every graph above the tool node, up to one that keeps its state per thread), or "
    "compile the subgraph with `checkpointer=True` so LangGraph keeps its state per thread."
)


def _record_of_write(channel: str, value: Any) -> SandboxState | None:
    """The sandbox record in one pending write: a ``sandbox`` channel write, or the result of a
    ``sandbox_tool_call`` task (a tool message carrying the record in its artifact)."""
    if channel == CHANNEL:
        return as_record(value)
    if channel == RETURN_CHANNEL and isinstance(value, ToolMessage):
        artifact = value.artifact
        return as_record(artifact.get(CHANNEL) if isinstance(artifact, Mapping) else None)
    return None


def _start_record(request: ToolCallRequest, step: Step) -> SandboxState | None:
    """The record before the step: the state's, else the graph channel's (a ``Send`` payload
    without it).

    Raises:
        ConfigurationError: the node's graph has no ``sandbox`` channel.
    """
    record = graph_record(request.runtime)
    if record is not None:
        return record
    declared, record = step.channel_value()
    if not declared:
        raise ConfigurationError(_NO_CHANNEL)
    return record


def _check_passed(ns: str, checkpoint: Any) -> None:
    """For one one-invocation graph level: refuse unless its parent passed it the ``sandbox``
    key (its checkpoints then carry a version of it from its input on). ``checkpoint`` is
    ``None`` where none is saved (``durability="exit"``): nothing to tell by.
    """
    if checkpoint is not None and CHANNEL not in checkpoint.checkpoint.get("channel_versions", {}):
        graph = " > ".join(part.partition(":")[0] for part in ns.split("|"))
        raise ConfigurationError(_NOT_PASSED.format(graph=graph))


def _require_home(step: Step, own: Any = None) -> None:
    """Refuse (see `_check_passed`) unless every one-invocation graph from the node's up to
    the first that keeps its state per thread is passed ``sandbox`` by its parent. ``own``: the
    node's graph's checkpoint of this step, if already read. A checkpoint of this run that is
    not saved yet (``durability="async"``) is waited for: the level's newest could be its
    invocation's input checkpoint, which carries no channel versions but the input's. The
    newest stands in only where the run's checkpoint is not known."""
    saver = step.checkpointer
    for index, (ns, at_run, latest) in enumerate(step.transient_levels()):
        checkpoint = own if index == 0 else None
        if checkpoint is None:
            checkpoint = until_saved(step, Retrying)(saver.get_tuple, at_run or latest)
        _check_passed(ns, checkpoint)


async def _arequire_home(step: Step, own: Any = None) -> None:
    """Async twin of `_require_home`."""
    saver = step.checkpointer
    for index, (ns, at_run, latest) in enumerate(step.transient_levels()):
        checkpoint = own if index == 0 else None
        if checkpoint is None:
            checkpoint = await until_saved(step, AsyncRetrying)(saver.aget_tuple, at_run or latest)
        _check_passed(ns, checkpoint)


def _with_record(
    request: ToolCallRequest, step: Step, record: SandboxState | None, checkpoint: Any
) -> ToolCallRequest:
    """``request`` continuing from ``record`` merged with the records of the step's finished
    calls saved in ``checkpoint`` (``None`` if the step's checkpoint is not saved yet: the step
    then has no saved writes either)."""
    finished = [
        found
        for task_id, channel, value in (checkpoint.pending_writes or [] if checkpoint else [])
        if task_id != step.task_id and (found := _record_of_write(channel, value)) is not None
    ]
    if not finished and record is graph_record(request.runtime):
        return request
    merged = reduce(merge_sandbox_state, finished, record or SandboxState())
    return request.override(state={**request.state, CHANNEL: merged})


def _config(request: ToolCallRequest) -> RunnableConfig:
    return cast("RunnableConfig", getattr(request.runtime, "config", None) or {})


def require_record_home(config: RunnableConfig | None) -> None:
    """For a node that starts a sandbox's life in a graph run with no record in its state
    (``SandboxMiddleware.before_agent``): refuse a one-invocation subgraph whose parent does
    not pass ``sandbox`` (see the module docstring).

    Raises:
        ConfigurationError: the record would be lost at the end of the invocation.
    """
    step = Step.of(config)
    if step is not None:
        _require_home(step)


async def arequire_record_home(config: RunnableConfig | None) -> None:
    """Async twin of `require_record_home`."""
    step = Step.of(config)
    if step is not None:
        await _arequire_home(step)


def continue_from_step(request: ToolCallRequest) -> ToolCallRequest:
    """``request``, its state's ``sandbox`` set to the record the call continues from (see the
    module docstring).

    Raises:
        ConfigurationError: the record has nowhere to live in this graph.
    """
    step = Step.of(_config(request))
    if step is None or not isinstance(request.state, Mapping):
        return request
    record = _start_record(request, step)
    checkpoint = step.checkpointer.get_tuple(step.checkpoint_config)
    if record is None:
        _require_home(step, checkpoint)
    return _with_record(request, step, record, checkpoint)


async def acontinue_from_step(request: ToolCallRequest) -> ToolCallRequest:
    """Async twin of `continue_from_step`."""
    step = Step.of(_config(request))
    if step is None or not isinstance(request.state, Mapping):
        return request
    record = _start_record(request, step)
    checkpoint = await step.checkpointer.aget_tuple(step.checkpoint_config)
    if record is None:
        await _arequire_home(step, checkpoint)
    return _with_record(request, step, record, checkpoint)


__all__ = [
    "acontinue_from_step",
    "arequire_record_home",
    "continue_from_step",
    "require_record_home",
]
