"""Capture and restore the globals of a Python interpreter, from inside the sandbox.

This module runs inside every sandbox: the local worker loads it from a copy, the E2B and Runloop
providers send its source (``inspect.getsource``), so there is one implementation of what "the
variables" are. It imports only the standard library; the pickling is cloudpickle's, whose source
travels with this module (`prepare` loads it under a private name, so whatever cloudpickle
the user's code imports or installs is never touched, and a sandbox that has none works the same).

What a dump is: the user's globals (names starting with ``_`` are left out) pickled as **one object
graph**, so identity and aliasing survive (``b = a`` gives ``a is b`` after a restore, a registry
list holds the very functions its names hold). Functions, lambdas, closures and classes defined in
the sandbox are pickled by value, their code included: nothing runs again on restore. A restored
function's globals are the namespace itself, so it sees later assignments as it did before.
Modules are pickled by name and imported again. ``lru_cache`` functions come back with an empty
cache. A numpy view is rebuilt over its root array, so it aliases it again. With the globals go the
interpreter's working directory, recursion limit and the environment variables user code set or
unset (against the environment its process started with).

What cannot be kept is said at capture time, per name, with the reason: values pickle refuses
(a lock, an open file, a generator), and, when the dump would be larger than ``max_bytes``, the
largest variables until the rest fits. On restore, a name is only reported when its value needs
something this interpreter lacks (a package that is not installed): everything else is restored.

The host never unpickles a dump: the bytes go from one sandbox to the snapshot store and back into
a sandbox, where they are loaded.
"""

from __future__ import annotations

import io
import os
import pickle
import sys
import types
from typing import Any

FORMAT = 2
"""Version of the dump layout: a small header (names, format), then the graph."""

CLOUDPICKLE_MODULE = "_langchain_sandbox_cloudpickle"
"""The name the shipped cloudpickle is loaded under (pickles refer to its helpers by it)."""

HELPERS_MODULE = "_langchain_sandbox_variables"
"""The name of the few reducers this module adds (pickles refer to them by it)."""

_NOT_VARIABLES = frozenset({"In", "Out", "exit", "quit", "get_ipython"})  # IPython's own

# The reducers are defined in a module of their own name, so a pickle can name them whichever way
# this file was loaded (imported, exec'd into a dict, inlined into a worker script).
_HELPERS_SOURCE = '''
import functools
import importlib

targets = []
unavailable = []


class Namespace:
    """Stands for the namespace being dumped: a restored function's globals are the new one."""

    def __reduce__(self):
        return (namespace, ())


NAMESPACE = Namespace()


def namespace():
    return targets[-1]


class Unavailable:
    """Stands, while a dump loads, for what this interpreter cannot import (a missing package),
    so the other variables still load; a variable that holds one is reported, not restored."""

    missing = ""

    def __new__(cls, *args, **kwargs):
        return object.__new__(cls)

    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        return self

    def __setstate__(self, state):
        pass

    def __setitem__(self, key, value):
        pass

    def append(self, item):
        pass

    def extend(self, items):
        pass


def stand_in(missing):
    unavailable.append(missing)
    return type("Unavailable", (Unavailable,), {"missing": missing})


def import_module(name):
    try:
        return importlib.import_module(name)
    except Exception:
        return stand_in(name)()


def lru_cache(function, maxsize, typed):
    return functools.lru_cache(maxsize=maxsize, typed=typed)(function)


def array_view(root, offset, shape, strides, dtype, writeable):
    """A numpy view of ``root`` (restored once, in the same graph): it aliases it again."""
    import numpy

    view = numpy.ndarray(shape, dtype, buffer=root, offset=offset, strides=strides)
    view.flags.writeable = writeable and root.flags.writeable
    return view
'''


def prepare(cloudpickle_source: str) -> None:
    """Load the shipped cloudpickle and this module's reducers (once per interpreter)."""
    if CLOUDPICKLE_MODULE not in sys.modules:
        module = types.ModuleType(CLOUDPICKLE_MODULE)
        exec(compile(cloudpickle_source, "cloudpickle.py", "exec"), module.__dict__)
        sys.modules[CLOUDPICKLE_MODULE] = module
    if HELPERS_MODULE not in sys.modules:
        helpers = types.ModuleType(HELPERS_MODULE)
        exec(compile(_HELPERS_SOURCE, "kernel_state_helpers.py", "exec"), helpers.__dict__)
        helpers.__dict__["baseline_environ"] = _started_environ()
        sys.modules[HELPERS_MODULE] = helpers


def _started_environ() -> dict[str, str]:
    """The environment the interpreter's process started with (Linux keeps it in
    ``/proc/self/environ``), against which a dump keeps what user code set or unset; where it
    cannot be read, the environment at the first dump (changes before it are then missed)."""
    try:
        with open("/proc/self/environ", "rb") as handle:
            entries = handle.read().split(b"\0")
    except OSError:
        return dict(os.environ)
    started: dict[str, str] = {}
    for entry in entries:
        key, sep, value = entry.partition(b"=")
        if sep and key:
            started[os.fsdecode(key)] = os.fsdecode(value)
    return started


def _modules() -> tuple[Any, Any]:
    try:
        return sys.modules[CLOUDPICKLE_MODULE], sys.modules[HELPERS_MODULE]
    except KeyError:
        raise RuntimeError("kernel_state.prepare() was not called") from None


def _is_variable(name: str) -> bool:
    return not name.startswith("_") and name not in _NOT_VARIABLES


class _Sink:
    """Where a pickle is written: kept up to ``keep`` bytes, only counted past it."""

    def __init__(self, keep: int | None) -> None:
        self.size = 0
        self._keep = keep
        self._data = bytearray()

    def write(self, data: Any) -> int:
        count = memoryview(data).nbytes
        self.size += count
        if self._keep is None or self.size <= self._keep:
            self._data += data
        return count

    def value(self) -> bytes:
        return bytes(self._data)


_PICKLER: list[type] = []


def _pickler(sink: _Sink, namespace: dict[str, Any]) -> Any:
    if not _PICKLER:
        _PICKLER.append(_pickler_class())
    return _PICKLER[0](sink, namespace)


def _as_view(obj: Any) -> tuple[Any, ...] | None:
    """A numpy view as ``(root, offset, shape, strides, dtype, writeable)``, to rebuild over its
    root array (pickled once in the graph) instead of as a copy; ``None`` for anything else,
    and for a view whose root is not a C-contiguous array owning its data (pickled as numpy
    does: a copy)."""
    numpy = sys.modules.get("numpy")
    if numpy is None or type(obj) is not numpy.ndarray or not isinstance(obj.base, numpy.ndarray):
        return None
    root = obj.base
    while isinstance(root.base, numpy.ndarray):
        root = root.base
    if root.base is not None or type(root) is not numpy.ndarray or not root.flags.c_contiguous:
        return None
    if obj.dtype.hasobject:
        return None
    offset = obj.__array_interface__["data"][0] - root.__array_interface__["data"][0]
    return (root, offset, obj.shape, obj.strides, obj.dtype, bool(obj.flags.writeable))


def _pickler_class() -> type:
    import functools

    cloudpickle, helpers = _modules()

    class Pickler(cloudpickle.Pickler):  # type: ignore[misc,name-defined]
        def __init__(self, sink: _Sink, namespace: dict[str, Any]) -> None:
            super().__init__(sink, protocol=pickle.HIGHEST_PROTOCOL)
            self.namespace = namespace

        def reducer_override(self, obj: Any) -> Any:
            if isinstance(obj, types.ModuleType):
                name = obj.__name__
                if name != "__main__" and sys.modules.get(name) is obj:
                    return (helpers.import_module, (name,))
            elif (view := _as_view(obj)) is not None:
                return (helpers.array_view, view)
            elif (
                isinstance(obj, functools._lru_cache_wrapper)
                and getattr(obj, "__module__", None) == "__main__"
            ):
                # Its own reduction names it as a global of __main__, which a new interpreter
                # lacks: rebuild it from the function (by value) instead, with an empty cache.
                parameters = obj.cache_parameters()
                arguments = (obj.__wrapped__, parameters["maxsize"], parameters["typed"])
                return (helpers.lru_cache, arguments, dict(obj.__dict__))
            reduced = super().reducer_override(obj)
            if (
                isinstance(obj, types.FunctionType)
                and obj.__globals__ is self.namespace
                and isinstance(reduced, tuple)
            ):
                # cloudpickle gives a function of the namespace fresh globals of its own; this one
                # gets the namespace it is restored into, as it had before.
                code, _, *rest = reduced[1]
                reduced = (reduced[0], (code, helpers.NAMESPACE, *rest), *reduced[2:])
            return reduced

    return Pickler


def _reason(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= 300 else text[:297] + "..."


def _size_text(size: int) -> str:
    if size < 1024 * 1024:
        return f"{size / 1024:.1f} KB"
    return f"{size / (1024 * 1024):.1f} MB"


def dump_namespace(
    namespace: dict[str, Any], max_bytes: int | None = None
) -> tuple[bytes, list[str], dict[str, str]]:
    """Return ``(blob, saved, skipped)`` for the user globals in ``namespace``.

    ``skipped`` maps each name that was left out to why: its value cannot be pickled, or the
    dump would be larger than ``max_bytes`` with it (the largest go first).
    """
    helpers = _modules()[1]
    values = {
        name: helpers.NAMESPACE if value is namespace else value
        for name, value in namespace.items()
        if _is_variable(name)
    }
    skipped: dict[str, str] = {}
    sizes: dict[str, int] = {}

    def size_alone(name: str) -> int:
        if name not in sizes:
            sink = _Sink(0)
            _pickler(sink, namespace).dump(values[name])
            sizes[name] = sink.size
        return sizes[name]

    while True:
        sink = _Sink(max_bytes)
        try:
            _pickler(sink, namespace).dump(values)
        except Exception as exc:
            culprits = _unpicklable(values, namespace) or dict.fromkeys(values, _reason(exc))
            skipped.update(culprits)
            for name in culprits:
                del values[name]
            continue
        header = pickle.dumps(
            {"format": FORMAT, "names": sorted(values), "process": _process_state()}, protocol=4
        )
        if not values or max_bytes is None or len(header) + sink.size <= max_bytes:
            break
        largest = max(values, key=size_alone)
        skipped[largest] = (
            f"it takes {_size_text(size_alone(largest))} pickled, and the variables of a "
            f"snapshot may take {_size_text(max_bytes)}"
        )
        del values[largest]
    return header + sink.value(), sorted(values), dict(sorted(skipped.items()))


def _process_state() -> dict[str, Any]:
    """What user code may have changed in the interpreter besides its globals: the working
    directory, the recursion limit, and the environment variables set or unset since it
    started."""
    baseline: dict[str, str] = getattr(_modules()[1], "baseline_environ", {})
    return {
        "cwd": os.getcwd(),
        "recursion_limit": sys.getrecursionlimit(),
        "environ": {k: v for k, v in os.environ.items() if baseline.get(k) != v},
        "unset": sorted(k for k in baseline if k not in os.environ),
    }


def _restore_process_state(state: Any) -> dict[str, str]:
    """Bring back what `_process_state` saved (a dump of an earlier version has none);
    what cannot come back is returned by what it is, with the reason."""
    if not isinstance(state, dict):
        return {}
    baseline: dict[str, str] = getattr(_modules()[1], "baseline_environ", {})
    unset = set(state.get("unset") or ())
    wanted = {k: v for k, v in baseline.items() if k not in unset}
    wanted.update(state.get("environ") or {})
    for key in [k for k in os.environ if k not in wanted]:
        del os.environ[key]
    for key, value in wanted.items():
        if os.environ.get(key) != value:
            os.environ[key] = value
    failed: dict[str, str] = {}
    limit = state.get("recursion_limit")
    if isinstance(limit, int):
        sys.setrecursionlimit(limit)
    cwd = state.get("cwd")
    if isinstance(cwd, str):
        try:
            os.chdir(cwd)
        except OSError as exc:
            failed["(working directory)"] = f"{cwd} cannot be entered here: {_reason(exc)}"
    return failed


def _unpicklable(values: dict[str, Any], namespace: dict[str, Any]) -> dict[str, str]:
    """The names whose value fails to pickle on its own, with the reason."""
    failed: dict[str, str] = {}
    for name, value in values.items():
        try:
            _pickler(_Sink(0), namespace).dump(value)
        except Exception as exc:
            failed[name] = _reason(exc)
    return failed


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        try:
            return super().find_class(module, name)
        except (ImportError, AttributeError):
            return sys.modules[HELPERS_MODULE].stand_in(f"{module}.{name}")


def load_namespace(namespace: dict[str, Any], blob: bytes) -> dict[str, str]:
    """Make the user globals of ``namespace`` those of a blob from `dump_namespace`; return
    the names that could not be restored, with the reason.

    User globals the blob does not have are removed first (and those that fail to load), so a
    live interpreter ends as a fresh one would.

    The blob comes from this package's own snapshot store (content-addressed, written only by the
    package), and it is unpickled *inside* the sandbox, so a hostile blob can do no more than the
    sandboxed code itself could.
    """
    helpers = _modules()[1]
    stream = io.BytesIO(blob)
    header = pickle.load(stream)
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise ValueError("not a variables snapshot of a known format")
    names = [str(name) for name in header["names"]]
    # User globals the dump does not have go first, so loading into a namespace that moved on (a
    # rewind of a live session) leaves the same globals as loading into a fresh one.
    for name in [name for name in namespace if _is_variable(name) and name not in names]:
        del namespace[name]
    builtins = namespace.get("__builtins__")
    helpers.targets.append(namespace)
    del helpers.unavailable[:]
    try:
        values = _Unpickler(stream).load()
    except Exception as exc:
        for name in names:
            namespace.pop(name, None)
        return dict.fromkeys(names, f"the variables could not be loaded: {_reason(exc)}")
    finally:
        helpers.targets.pop()
        if builtins is not None:
            namespace["__builtins__"] = builtins  # cloudpickle sets its own while it loads
    failed = _restore_process_state(header.get("process"))
    for name, value in values.items():
        missing = _stand_in_within(value, namespace) if helpers.unavailable else None
        if missing is not None:
            failed[name] = f"it needs {missing}, which cannot be imported here"
            namespace.pop(name, None)
        else:
            namespace[name] = value
    if helpers.unavailable:
        # Restored functions put the globals they use into the namespace as they load; a stand-in
        # among them must not pass for the real thing.
        for name in [name for name, value in namespace.items() if _is_stand_in(value)]:
            del namespace[name]
    return failed


def _is_stand_in(value: Any) -> bool:
    stand_in = sys.modules[HELPERS_MODULE].Unavailable
    return isinstance(value, stand_in) or (isinstance(value, type) and issubclass(value, stand_in))


def _stand_in_within(value: Any, namespace: dict[str, Any]) -> str | None:
    """What ``value`` needs and could not import (a stand-in within it), or ``None``."""
    import gc

    seen: set[int] = set()
    pending = [value]
    while pending:
        item = pending.pop()
        if id(item) in seen or item is namespace or isinstance(item, types.ModuleType):
            continue
        seen.add(id(item))
        if _is_stand_in(item):
            return str(item.missing)
        pending.extend(gc.get_referents(item))
    return None
