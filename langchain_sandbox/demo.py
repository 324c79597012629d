"""``langchain-sandbox demo``: an agent that analyses data in a sandbox, end to end, offline.

The agent is ``create_agent`` + [`SandboxMiddleware`][langchain_sandbox.SandboxMiddleware] with an
in-memory checkpointer, on the local (bubblewrap) provider. The model is
[`ScriptedToolModel`][langchain_sandbox.testing.ScriptedToolModel] unless a real one is asked for and available
(``ANTHROPIC_API_KEY`` with ``langchain-anthropic``, or ``OPENAI_API_KEY`` with ``langchain-openai``).
The run shows what the package is for: several stateful steps (variables made in one call are used
in the next), two tool calls in one AI message sharing one sandbox, and a matplotlib chart copied out
of the sandbox to a PNG on the host. On the local provider the sandbox runs in the default sandbox
environment (numpy, pandas, matplotlib), which the first run on a machine builds. It prints a
transcript, what happened to the environment, and the chart's path, or why there is none.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from langchain_sandbox.errors import MissingDependencyError, SandboxError
from langchain_sandbox.providers.names import LOCAL, PROVIDER_NAMES
from langchain_sandbox.testing.scripted_model import ScriptedToolModel, call

if TYPE_CHECKING:
    from langchain_sandbox.providers.local import EnvironmentStatus

CHART_NAME = "monthly_sales.png"

TASK = (
    "Here are monthly sales figures. Load them into Python, compute the total and the best "
    "month, and draw a bar chart saved as " + CHART_NAME + " in the working directory.\n"
    "Jan 120, Feb 95, Mar 143, Apr 131, May 160, Jun 152"
)

SYSTEM_PROMPT = (
    "You analyse data with the sandbox tools. Python state persists between sandbox_exec calls. "
    "Save charts as PNG files with matplotlib (backend Agg) in the working directory."
)

_LOAD = """\
sales = {"Jan": 120, "Feb": 95, "Mar": 143, "Apr": 131, "May": 160, "Jun": 152}
print(f"loaded {len(sales)} months")
"""

_TOTAL = 'total = sum(sales.values())\nprint(f"total = {total}")'
_BEST = 'best = max(sales, key=sales.get)\nprint(f"best = {best} ({sales[best]})")'

_SAVED = f"saved {CHART_NAME}"

_CHART = f"""\
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

fig, ax = plt.subplots(figsize=(6, 3.5))
ax.bar(list(sales), list(sales.values()), color="#4C72B0")
ax.set_title(f"Monthly sales (total {{total}}, best {{best}})")
fig.tight_layout()
fig.savefig("{CHART_NAME}", dpi=100)
plt.close(fig)
print("{_SAVED}")
"""


def _summary(messages: list[BaseMessage]) -> str:
    """The scripted model's last answer, written from what the tools actually printed."""
    outputs = [m.text for m in messages if isinstance(m, ToolMessage)]
    lines = [line for out in outputs for line in out.splitlines()]
    found = [line for line in lines if line.startswith(("total", "best"))]
    facts = "; ".join(found) or "no figures were computed"
    if any(line.strip() == _SAVED for line in lines):
        return f"Done. {facts}. The chart is {CHART_NAME} in the sandbox."
    errors = [line for line in lines if "Error" in line]
    reason = f" ({errors[-1].strip()})" if errors else ""
    return f"{facts}. The chart could not be made{reason}."


def scripted_model() -> ScriptedToolModel:
    """The demo's offline model: load, two parallel computations, a chart, a summary."""
    return ScriptedToolModel(
        script=[
            call("sandbox_exec", code=_LOAD),
            [call("sandbox_exec", code=_TOTAL), call("sandbox_exec", code=_BEST)],
            call("sandbox_exec", code=_CHART),
            _summary,
        ]
    )


def real_model() -> BaseChatModel | None:
    """A real chat model when its API key and integration package are both present."""
    from langchain.chat_models import init_chat_model

    if os.environ.get("ANTHROPIC_API_KEY") and importlib.util.find_spec("langchain_anthropic"):
        return init_chat_model("anthropic:claude-sonnet-5-5", temperature=0)
    if os.environ.get("OPENAI_API_KEY") and importlib.util.find_spec("langchain_openai"):
        return init_chat_model("openai:gpt-4o-mini", temperature=0)
    return None


@dataclass
class DemoResult:
    """What a demo run produced.

    Attributes:
        chart: Path of the chart on the host (a PNG file), or ``None`` if the agent made none.
        messages: The whole conversation.
        transcript: The lines printed.
        model: ``"scripted"`` or the real model's class name.
    """

    chart: Path | None
    messages: list[BaseMessage]
    transcript: list[str] = field(default_factory=list)
    model: str = "scripted"
    environment: str | None = None
    """What happened to the local sandbox environment ("built in 31 s", "reused"), if local."""


def _describe(message: BaseMessage) -> list[str]:
    """Readable transcript lines for one message."""
    if isinstance(message, AIMessage):
        lines = [f"assistant: {message.text}"] if message.text else []
        if len(message.tool_calls) > 1:
            lines.append(f"assistant: {len(message.tool_calls)} tool calls in one message")
        for tool_call in message.tool_calls:
            code = str(tool_call["args"].get("code", tool_call["args"])).strip()
            lines.append(f"  -> {tool_call['name']}:")
            lines.extend(f"       {line}" for line in code.splitlines())
        return lines
    if isinstance(message, ToolMessage):
        return [f"  <- {message.name}:"] + [f"       {line}" for line in message.text.splitlines()]
    return [f"{message.type}: {message.text}"]


def run_demo(
    output_dir: str | os.PathLike[str] = "sandbox-demo",
    *,
    model: Literal["auto", "scripted"] | BaseChatModel = "auto",
    provider: str = "local",
    echo: Callable[[str], None] = print,
) -> DemoResult:
    """Run the demo agent once and copy its chart to ``output_dir``.

    Args:
        output_dir: Host directory the chart is copied into (created if needed).
        model: ``"auto"`` (a real model if configured, else scripted), ``"scripted"``, or a model.
        provider: The sandbox provider (``"local"`` needs no account).
        echo: Where transcript lines go.
    """
    try:
        from langchain.agents import create_agent
    except ImportError as exc:
        raise MissingDependencyError("langchain", "agents", purpose="The demo") from exc
    from langgraph.checkpoint.memory import InMemorySaver

    from langchain_sandbox.graph.middleware import SandboxMiddleware
    from langchain_sandbox.providers.base import Provider
    from langchain_sandbox.providers.local import LocalProvider
    from langchain_sandbox.runtime import SandboxRuntime
    from langchain_sandbox.snapshots import LocalDirectoryBlobStore, Snapshotter

    chosen = model if isinstance(model, BaseChatModel) else None
    if model == "auto":
        chosen = real_model()
    chat_model = chosen or scripted_model()
    transcript: list[str] = []

    def say(line: str) -> None:
        transcript.append(line)
        echo(line)

    local = (
        LocalProvider(progress=lambda line: say(f"  [environment] {line}"))
        if provider == LOCAL
        else None
    )
    sandboxes: str | Provider = local or provider
    environment: str | None = None
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="lcsb-demo-") as blobs:
        runtime = SandboxRuntime(sandboxes, snapshotter=Snapshotter(LocalDirectoryBlobStore(blobs)))
        try:
            if local is not None:
                # Built once per machine (pip's progress is shown), reused afterwards.
                environment = _describe_environment(runtime.run_sync(local.prepare_environment()))
            agent = create_agent(
                chat_model,
                system_prompt=SYSTEM_PROMPT,
                middleware=[SandboxMiddleware(runtime=runtime)],
                checkpointer=InMemorySaver(),
            )
            thread_id = f"demo-{uuid.uuid4().hex[:8]}"
            config: Any = {"configurable": {"thread_id": thread_id}}
            say(f"user: {TASK}")
            for update in agent.stream(
                {"messages": [HumanMessage(TASK)]}, config, stream_mode="updates"
            ):
                for node_update in update.values():
                    # Node updates are dicts; the sandbox calls' own task results (bare
                    # ToolMessages) also stream by and are shown with the tools node's update.
                    if isinstance(node_update, dict):
                        for message in node_update.get("messages", []):
                            for line in _describe(message):
                                say(line)
            messages = list(agent.get_state(config).values["messages"])
            chart = _copy_out(runtime, thread_id, out)
        finally:
            runtime.close()
    if environment:
        say(f"sandbox environment 'default': {environment}")
    say(f"chart saved to {chart}" if chart else "the agent made no chart (see the transcript)")
    name = "scripted" if isinstance(chat_model, ScriptedToolModel) else type(chat_model).__name__
    return DemoResult(
        chart=chart, messages=messages, transcript=transcript, model=name, environment=environment
    )


def _describe_environment(status: EnvironmentStatus) -> str:
    """What happened to the default sandbox environment: built by this run, or reused."""
    if status.built_now:
        return f"built in {status.build_seconds:.0f} s ({(status.size_bytes or 0) / 1e6:.0f} MB)"
    return f"reused, built earlier ({(status.size_bytes or 0) / 1e6:.0f} MB)"


def _copy_out(runtime: Any, thread_id: str, out: Path) -> Path | None:
    """Copy the chart from the thread's sandbox to ``out``; ``None`` if the sandbox has none."""
    from langchain_sandbox.errors import InvalidPathError

    try:
        files = runtime.read_files(thread_id, [CHART_NAME]).value
    except InvalidPathError:
        return None
    if not files[CHART_NAME].startswith(b"\x89PNG\r\n\x1a\n"):
        return None
    target = out / CHART_NAME
    target.write_bytes(files[CHART_NAME])
    return target.resolve()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``langchain-sandbox demo``; returns the exit code."""
    parser = argparse.ArgumentParser(
        prog="langchain-sandbox demo",
        description="Run an agent that analyses data in an isolated sandbox.",
    )
    parser.add_argument("--output-dir", default="sandbox-demo", help="where the chart is copied")
    parser.add_argument(
        "--model",
        choices=["auto", "scripted"],
        default="auto",
        help="auto: a real model if its API key and package are present, else the scripted one",
    )
    parser.add_argument(
        "--provider",
        default=LOCAL,
        choices=PROVIDER_NAMES,
        help="where the agent's code runs: local (bubblewrap, the default), e2b or runloop",
    )
    args = parser.parse_args(argv)
    try:
        result = run_demo(args.output_dir, model=args.model, provider=args.provider)
    except SandboxError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0 if result.chart is not None else 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
