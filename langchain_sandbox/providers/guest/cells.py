"""How a cell runs inside a sandbox: one stdlib-only module, shipped into every sandbox as source.

Every provider's in-sandbox interpreter (the local worker, the Runloop devbox worker, the E2B
emulator's kernel) runs cells with this module, the way
`kernel_state` is shipped for variables, so they cannot
disagree:

* `Cells` runs a cell like Jupyter: its statements, then the value of a last bare
  expression; each cell's source is kept for tracebacks, ``inspect`` and variable dumps;
* `value_text` is the safe repr of that value: a ``repr`` that raises gives a placeholder
  value, never an error (the code itself ran), and `repr_failure` the notice the host adds;
* `describe_exception` trims a traceback to the user's own frames;
* `collect_figures` turns open matplotlib figures into PNG bytes, up to a total size;
* `FdCapture` captures file descriptor 1 or 2 (Python and child processes alike);
* `Tools` is the ``tools`` object code calls host tools through (the transport is the
  provider's: the local worker's own pipes; on E2B and Runloop frames in the output stream the
  host already reads, see `guest_tool_frames`);

Only built-in or already-loaded modules are imported at the top: the local worker's cold start
includes this module.
"""

from __future__ import annotations

import _ast
import _thread
import io
import os
import select
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    import types
    from collections.abc import Collection
    from typing import Any, Protocol

    class Sink(Protocol):
        """Where captured bytes go."""

        def write(self, data: bytes) -> None: ...


MAX_VALUE_CHARS = 100_000
"""Characters of a last value's repr kept (the rest is cut, with ``...``)."""
MAX_FIGURE_BYTES = 16 * 1024 * 1024
"""PNG bytes of figures one cell returns at most; figures past it are left out with a notice."""
CELL_PREFIX = "<cell-"
"""Cells are compiled as ``<cell-N>``."""
_REPR_FAILED = "repr() failed with"
_READ_CHUNK = 65536


class CellSources:
    """The source of every cell, for tracebacks, ``inspect.getsource`` and variable dumps.

    They belong in ``linecache.cache``, but importing ``linecache`` costs more than the rest of a
    worker's start-up (it brings ``tokenize`` and ``re``). So sources wait here until something
    imports ``linecache``; a one-shot import hook registers them the moment it is loaded, and
    later cells go straight into it.
    """

    def __init__(self) -> None:
        self._pending: dict[str, tuple[int, None, list[str], str]] = {}
        if "linecache" not in sys.modules:
            sys.meta_path.insert(0, self)

    def add(self, filename: str, code: str) -> None:
        entry = (len(code), None, code.splitlines(keepends=True), filename)
        linecache = sys.modules.get("linecache")
        if linecache is not None:
            linecache.cache[filename] = entry
        else:
            self._pending[filename] = entry

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "linecache" or self not in sys.meta_path:
            return None
        sys.meta_path.remove(self)
        from importlib.machinery import PathFinder

        spec = PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        load = spec.loader.exec_module
        pending = self._pending

        def exec_module(module: types.ModuleType) -> None:
            load(module)
            module.cache.update(pending)
            pending.clear()

        setattr(spec.loader, "exec_module", exec_module)  # noqa: B010 - an instance override
        return spec


class Cells:
    """A namespace and the cells run in it.

    Args:
        namespace: The user's globals (kept between cells).
    """

    def __init__(self, namespace: dict[str, Any]) -> None:
        self.namespace = namespace
        self.count = 0
        self.sources = CellSources()

    def run(self, code: str) -> Any:
        """Run a cell: statements, then the value of a last bare expression (``None`` if none).

        Exceptions of the user's code propagate; `describe_exception` reports them.
        """
        self.count += 1
        filename = f"{CELL_PREFIX}{self.count}>"
        self.sources.add(filename, code)
        tree = compile(code, filename, "exec", _ast.PyCF_ONLY_AST)
        assert isinstance(tree, _ast.Module)
        last: _ast.expr | None = None
        final = tree.body[-1] if tree.body else None
        if isinstance(final, _ast.Expr):
            last = final.value
            tree.body.pop()
        if tree.body:
            exec(compile(tree, filename, "exec"), self.namespace)
        if last is None:
            return None
        return eval(compile(_ast.Expression(body=last), filename, "eval"), self.namespace)


def value_text(value: Any) -> str | None:
    """The text of a cell's last value (``None`` has none), cut at `MAX_VALUE_CHARS`.

    A ``repr`` that raises gives a placeholder (see `repr_failure`) instead of an error:
    the cell's code ran, only showing its value failed.
    """
    if value is None:
        return None
    try:
        text = repr(value)
    except Exception as exc:
        try:
            error = f"{type(exc).__name__}: {exc}"
        except Exception:
            error = type(exc).__name__
        return f"<{type(value).__name__} object: {_REPR_FAILED} {error}>"
    if len(text) > MAX_VALUE_CHARS:
        return text[:MAX_VALUE_CHARS] + "..."
    return text


def repr_failure(value: str | None) -> str | None:
    """The notice for a value that looks like `value_text`'s placeholder, else ``None``.

    The host adds it to the result (one place for every provider), so the model knows the value
    it reads may not be the object's repr. The value is the sandbox's text (any ``repr`` can
    return one that looks like the placeholder), so the notice quotes none of it.
    """
    if value is None or not value.startswith("<") or f" object: {_REPR_FAILED} " not in value:
        return None
    return (
        "repr() of the last value raised an exception; the value shown is a placeholder "
        "(its text, from the sandbox, names the type and the error)."
    )


def describe_exception(exc: BaseException, machinery: Collection[str] = ()) -> dict[str, str]:
    """Name, message and traceback of ``exc``, showing the user's frames only.

    Frames of this module and of the ``machinery`` files (the worker that called it) are dropped
    wherever they are, in chained exceptions too: the ones that ran the cell, and a signal
    handler that raised a timeout's ``KeyboardInterrupt``. The model should see its code only.
    """
    import traceback

    name = type(exc).__name__
    try:
        value = str(exc)
    except Exception:
        value = "<unprintable>"
    if isinstance(exc, SyntaxError):
        lines = traceback.format_exception_only(type(exc), exc)
        return {"name": name, "value": value, "traceback": "".join(lines)}
    hidden = {_OWN_FILE, *machinery}
    report = traceback.TracebackException.from_exception(exc)
    pending = [report]
    while pending:
        current = pending.pop()
        current.stack = traceback.StackSummary.from_list(
            [frame for frame in current.stack if frame.filename not in hidden]
        )
        pending += [chained for chained in (current.__cause__, current.__context__) if chained]
    return {"name": name, "value": value, "traceback": "".join(report.format())}


def failure_facts(exc: BaseException) -> dict[str, Any]:
    """What a worker reports when its own machinery (not the user's code) failed: the
    exception's class name and ``errno``, facts the host checks and words itself; the message
    would be the sandbox's words, so it is not sent."""
    errno = getattr(exc, "errno", None)
    return {"name": type(exc).__name__, "errno": errno if type(errno) is int else None}


class ToolError(Exception):
    """A host tool called from code failed: its arguments did not fit its schema, or it raised.

    The message is the tool's own (or the validation's); ``tool`` names the tool. Code catches
    it like any exception and may retry with other arguments.
    """

    def __init__(self, tool: str, message: str) -> None:
        super().__init__(message)
        self.tool = tool


class ToolLimitError(BaseException):
    """The call ran out of inner tool calls or of their time budget (the session's limits).

    A ``BaseException``, like ``KeyboardInterrupt``: a loop that swallows ``Exception`` still
    stops at the limit.
    """


class Tools:
    """The ``tools`` object of a cell: each host tool as a function, ``tools.name(**args)``,
    and its coroutine twin ``await tools.aname(**args)``.

    Args:
        specs: ``{"name", "params"}`` per tool (``params``: argument names in schema order,
            so positional arguments map onto them).
        call: The transport: ``call(name, args)`` returns the host's reply,
            ``{"ok": True, "value": ...}`` or ``{"ok": False, "kind", "error"}``. Calls run one at
            a time, in order: their sequence is what a replay after a crash lines up with.
    """

    ToolError = ToolError
    ToolLimitError = ToolLimitError

    def __init__(self, specs: list[dict[str, Any]], call: Any) -> None:
        self._specs = {str(spec["name"]): list(spec.get("params") or []) for spec in specs}
        self._call = call

    def __getattr__(self, name: str) -> Any:
        specs = self.__dict__.get("_specs", {})
        if name in specs:
            return self._function(name)
        if name.startswith("a") and name[1:] in specs:
            function = self._function(name[1:])

            async def coroutine(*args: Any, **kwargs: Any) -> Any:
                return function(*args, **kwargs)

            coroutine.__name__ = name
            return coroutine
        raise AttributeError(f"no tool named {name!r}; the tools are: {', '.join(specs) or 'none'}")

    def __dir__(self) -> list[str]:
        return sorted([*self._specs, *(f"a{name}" for name in self._specs)])

    def __repr__(self) -> str:
        listed = ", ".join(f"{name}({', '.join(params)})" for name, params in self._specs.items())
        return f"<tools: {listed or 'none'}>"

    def _function(self, name: str) -> Any:
        params = self._specs[name]

        def function(*args: Any, **kwargs: Any) -> Any:
            if len(args) > len(params):
                raise TypeError(f"{name}() takes at most {len(params)} positional arguments")
            for param, value in zip(params, args, strict=False):
                if param in kwargs:
                    raise TypeError(f"{name}() got multiple values for argument {param!r}")
                kwargs[param] = value
            reply = self._call(name, kwargs)
            if reply.get("ok"):
                return reply.get("value")
            message = str(reply.get("error", "the tool failed"))
            if reply.get("kind") == "limit":
                raise ToolLimitError(message)
            raise ToolError(name, message)

        function.__name__ = name
        return function


# As compiled: the source path, or the name given when it was compiled or shipped.
_OWN_FILE = describe_exception.__code__.co_filename


def collect_figures(max_bytes: int = MAX_FIGURE_BYTES) -> tuple[list[bytes], list[int], int]:
    """PNGs of the open matplotlib figures (all closed afterwards), the numbers of the figures
    that could not be drawn (why goes to stderr, the cell's own output) and the number of the
    first figure left out because the total would pass ``max_bytes`` (0: none).

    Facts, not sentences: the host words the notices itself
    (`figure_notices`).
    """
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is None:
        return [], [], 0
    pngs: list[bytes] = []
    failed: list[int] = []
    left_out = 0
    total = 0
    try:
        for number in pyplot.get_fignums():
            buffer = io.BytesIO()
            try:
                pyplot.figure(number).savefig(buffer, format="png")
            except Exception as exc:
                _print_stderr(f"figure {number} could not be drawn: {type(exc).__name__}: {exc}")
                failed.append(number)
                continue
            data = buffer.getvalue()
            if total + len(data) > max_bytes:
                left_out = number
                break
            total += len(data)
            pngs.append(data)
    finally:
        pyplot.close("all")
    return pngs, failed, left_out


def _print_stderr(text: str) -> None:
    try:
        print(text, file=sys.stderr, flush=True)
    except Exception:
        return  # a stream user code broke: the host's notice still names the figure


class FdCapture:
    """Captures everything written to file descriptor 1 or 2, by Python or by child processes.

    The descriptor is the write end of a pipe; a daemon thread drains the read end into the
    current `sink` (or discards it between cells). `attach` and `detach` take
    what is still in the pipe first, under the same lock, so nothing is lost or reordered and
    what background processes wrote between cells belongs to no cell.
    """

    def __init__(self, target_fd: int) -> None:
        read_fd, write_fd = os.pipe()
        os.set_blocking(read_fd, False)
        self.target_fd = target_fd
        self._read_fd = read_fd
        self._write_fd = write_fd
        self._lock = _thread.allocate_lock()
        self.sink: Sink | None = None
        self.restore()
        _thread.start_new_thread(self._pump, ())

    def restore(self) -> None:
        """(Re)point the target descriptor at the pipe, in case user code closed or replaced it."""
        os.dup2(self._write_fd, self.target_fd, inheritable=True)

    def attach(self, sink: Sink) -> None:
        with self._lock:
            self._read_available()
            self.sink = sink

    def detach(self) -> None:
        with self._lock:
            self._read_available()
            self.sink = None

    def _pump(self) -> None:
        poller = select.poll()
        poller.register(self._read_fd, select.POLLIN)
        while True:
            poller.poll()
            with self._lock:
                self._read_available()

    def _read_available(self) -> None:
        while True:
            try:
                chunk = os.read(self._read_fd, _READ_CHUNK)
            except BlockingIOError:
                return
            if not chunk:
                return
            if self.sink is not None:
                self.sink.write(chunk)


def text_stream(fd: int) -> io.TextIOWrapper:
    """A line-buffered UTF-8 text stream on ``fd`` that never closes the descriptor."""
    return io.TextIOWrapper(
        io.FileIO(fd, "w", closefd=False),
        encoding="utf-8",
        errors="backslashreplace",
        line_buffering=True,
    )


def flush_streams() -> None:
    """Flush ``sys.stdout`` and ``sys.stderr``; a stream user code broke is skipped."""
    for name in ("stdout", "stderr"):
        try:
            getattr(sys, name).flush()
        except Exception:
            continue


def apply_env(env: dict[str, str]) -> dict[str, str | None]:
    """Set a call's variables; returns what `restore_env` needs to undo it."""
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update({str(k): str(v) for k, v in env.items()})
    return saved


def restore_env(saved: dict[str, str | None]) -> None:
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


__all__ = [
    "CELL_PREFIX",
    "MAX_FIGURE_BYTES",
    "MAX_VALUE_CHARS",
    "CellSources",
    "Cells",
    "FdCapture",
    "ToolError",
    "ToolLimitError",
    "Tools",
    "apply_env",
    "collect_figures",
    "describe_exception",
    "failure_facts",
    "flush_streams",
    "repr_failure",
    "restore_env",
    "text_stream",
    "value_text",
]
