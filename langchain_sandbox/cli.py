"""The ``langchain-sandbox`` command: run code in a sandbox, check the machine, run the demo, reap
orphans. ``langchain-sandbox --help`` shows `EXAMPLES`."""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import sys
from collections.abc import Sequence

from langchain_sandbox.errors import InvalidInputError, SandboxError
from langchain_sandbox.providers import get_provider
from langchain_sandbox.providers.base import Limits, SessionSpec
from langchain_sandbox.providers.names import E2B, KUBERNETES, LOCAL, PROVIDER_NAMES, RUNLOOP
from langchain_sandbox.results import ExecutionResult

DESCRIPTION = "Run code in a sandbox, check this machine, run the demo, reap orphans."
EXAMPLES = """examples:
  langchain-sandbox exec 'x = 6 * 7; print(x); x'   stateful Python; prints stdout, then [value] 42
  langchain-sandbox exec --file script.py           run a file (exec - reads standard input)
  langchain-sandbox shell 'echo hi; exit 3'         a shell command; exits with its code
  langchain-sandbox doctor                          isolation and providers available here
  langchain-sandbox demo                            an agent end to end on the local provider
  langchain-sandbox gc [--yes]                      sandboxes and snapshot blobs nobody uses
"""
VALUE_LABEL = "[value] "
"""Printed before the last expression's value, so it cannot be mistaken for printed output."""

_PROVIDER_REQUIREMENTS = {
    LOCAL: ((), ()),
    E2B: (("e2b_code_interpreter",), ("E2B_API_KEY",)),
    RUNLOOP: (("runloop_api_client",), ("RUNLOOP_API_KEY",)),
    # Credentials are the kubeconfig's or the pod's service account: no variable is required.
    KUBERNETES: (("k8s_agent_sandbox", "kubernetes_asyncio"), ()),
}


def _print_result(result: ExecutionResult, *, as_json: bool) -> int:
    if as_json:
        print(result.model_dump_json(indent=2))
    else:
        sys.stdout.write(result.stdout)
        if result.value is not None and result.stdout and not result.stdout.endswith("\n"):
            sys.stdout.write("\n")
        sys.stderr.write(result.stderr)
        for notice in result.notices:
            print(f"[notice] {notice}", file=sys.stderr)
        # A run stopped at its time limit was interrupted by the sandbox; the KeyboardInterrupt
        # traceback that leaves is the sandbox's doing, not the code's, so "[timed out]" says it.
        interrupted = result.timed_out and _is_interrupt(result)
        if result.error is not None and not interrupted:
            sys.stderr.write(
                result.error.traceback or f"{result.error.name}: {result.error.value}\n"
            )
        if result.timed_out:
            print("[timed out]", file=sys.stderr)
            if interrupted:
                sys.stderr.write(_where_stopped(result))
        if result.truncated:
            print(f"[output truncated: {result.omitted_bytes} bytes omitted]", file=sys.stderr)
        if result.value is not None:
            print(f"{VALUE_LABEL}{result.value}")
    if result.timed_out:
        return 124
    if result.error is not None:
        return 1
    return result.exit_code or 0


def _is_interrupt(result: ExecutionResult) -> bool:
    return result.error is not None and result.error.name == "KeyboardInterrupt"


def _where_stopped(result: ExecutionResult) -> str:
    """The frames of the code a timeout stopped, without the ``Traceback`` and
    ``KeyboardInterrupt`` lines around them."""
    traceback = result.error.traceback if result.error is not None else None
    lines = (traceback or "").splitlines()
    frames = [line for line in lines if line.startswith(" ")]
    return "".join(f"{line}\n" for line in ["stopped in:", *frames]) if frames else ""


async def _run_once(args: argparse.Namespace) -> int:
    provider = get_provider(args.provider)
    spec = SessionSpec(
        template=args.template, network=args.network, limits=Limits(timeout=args.timeout)
    )
    try:
        async with await provider.create(spec) as session:
            if args.command == "exec":
                result = await session.run_code(args.code)
            else:
                result = await session.run_command(args.code)
    finally:
        await provider.aclose()
    return _print_result(result, as_json=args.json)


def _doctor() -> int:
    from langchain_sandbox.providers.local import isolation_levels, probe_isolation

    report = probe_isolation()
    print("isolation levels (LocalProvider(isolation=...)):")
    for level, problem in isolation_levels().items():
        print(f"  {level + ':':<18} {'available' if not problem else 'not available: ' + problem}")
    print("local provider:")
    print(f"  bubblewrap:        {report.bubblewrap or 'not found'}")
    print(f"  isolation works:   {'yes' if report.bubblewrap_usable else 'no'}")
    print(f"  network isolation: {'yes' if report.network_isolation else 'no'}")
    print(f"  seccomp filter:    {'yes' if report.syscall_filter else 'no'}")
    print(f"  memory limit:      {report.memory_limit}")
    print(f"  process limit:     {report.process_limit}")
    print(f"  sandbox user:      {report.sandbox_user}")
    print(f"  workspace quota:   {report.workspace_quota}")
    for problem in report.problems:
        print(f"  problem: {problem}")
    print("providers:")
    for name in PROVIDER_NAMES:
        modules, keys = _PROVIDER_REQUIREMENTS[name]
        missing = [m for m in modules if importlib.util.find_spec(m) is None]
        unset = [k for k in keys if not os.environ.get(k)]
        if name == LOCAL:
            state = "ready" if report.bubblewrap_usable else "unavailable (see problems above)"
        elif missing:
            state = f"SDK not installed (pip install 'langchain-sandbox[{name}]')"
        elif unset:
            state = f"SDK installed; set {', '.join(unset)} to use it"
        else:
            state = "ready"
        print(f"  {name:8} {state}")
    _print_network_policies(report.bubblewrap_usable)
    _print_environments()
    return 0 if report.bubblewrap_usable else 1


def _print_network_policies(local_usable: bool) -> None:
    """Which providers enforce a ``NetworkPolicy`` (allowed hosts, secrets) here."""
    egress = [m for m in ("cryptography", "h11") if importlib.util.find_spec(m) is None]
    if not local_usable:
        local = "no (bubblewrap isolation is not available)"
    elif egress:
        local = "no: pip install 'langchain-sandbox[egress]'"
    else:
        local = "yes (isolation='bubblewrap' or 'gvisor'): hosts, wildcards, ports, secrets"
    print("network policies (SessionSpec(network=NetworkPolicy(...))):")
    print(f"  {LOCAL:8} {local}")
    print(f"  {E2B:8} host names and wildcards (allow_out); secrets, ports, addresses refused")
    print(f"  {RUNLOOP:8} host names, wildcards, IPv4 addresses; secrets, named ports refused")
    print(f"  {KUBERNETES:8} refused (egress is the cluster's NetworkPolicy on the pods)")


def _print_environments() -> None:
    """The local provider's sandbox environments: built or not, size, what they are made of."""
    from langchain_sandbox.providers.local import HOST_ENVIRONMENT, LocalProvider

    provider = LocalProvider()
    try:
        statuses = asyncio.run(provider.environment_statuses())
    except SandboxError as exc:
        print(f"sandbox environments: cannot list them ({exc})")
        return
    print(f"sandbox environments (cached in {provider.environments_dir}):")
    for status in statuses:
        state = (
            f"built, {(status.size_bytes or 0) / 1e6:.0f} MB"
            if status.built
            else "not built (the first session that selects it builds it)"
        )
        print(f"  {status.name:10} {state}; key {status.key}")
        print(f"  {'':10} requirements: {' '.join(status.inputs.get('requirements', [])) or '-'}")
        python = status.inputs.get("python_build", "").split(" ")[0]
        print(f"  {'':10} python {python} at {status.inputs.get('python')}")
        if status.inputs.get("index"):
            print(f"  {'':10} pip options: {' '.join(status.inputs['index'])}")
    print(f"  {HOST_ENVIRONMENT:10} the interpreter's own site-packages (opt-in, never built)")


async def _gc(args: argparse.Namespace) -> int:
    from langchain_sandbox.gc import collect_garbage
    from langchain_sandbox.snapshots import LocalDirectoryBlobStore, Snapshotter

    store = LocalDirectoryBlobStore(args.blobs) if args.blobs else None
    report = await collect_garbage(
        providers=args.providers or ["local"],
        checkpointer_url=args.checkpointers or (),
        snapshotter=Snapshotter(store),
        dry_run=not args.yes,
        grace_seconds=args.grace,
        allow_empty_checkpointer=args.allow_empty_checkpointer,
        forget_checkpointers=args.forget_checkpointers or (),
    )
    print(json.dumps(report, indent=2) if args.json else "\n".join(report["summary"]))
    return 0


def _version() -> str:
    from langchain_sandbox import __version__

    return f"langchain-sandbox {__version__}"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="langchain-sandbox",
        description=DESCRIPTION,
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=_version())
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    provider_help = "where the code runs: local (bubblewrap, the default), e2b or runloop"
    for name, help_text, what in (
        ("exec", "run Python code", "Python code"),
        ("shell", "run a shell command", "the command"),
    ):
        cmd = commands.add_parser(
            name, help=help_text, description=f"{help_text} in a fresh sandbox"
        )
        source = cmd.add_mutually_exclusive_group(required=True)
        source.add_argument("code", nargs="?", help=f"{what}; '-' reads it from standard input")
        source.add_argument("--file", metavar="PATH", help=f"read {what} from this host file")
        cmd.add_argument("--provider", default="local", choices=PROVIDER_NAMES, help=provider_help)
        cmd.add_argument("--timeout", type=float, default=60.0, help="seconds (default 60)")
        cmd.add_argument("--network", action="store_true", help="let the code reach the network")
        cmd.add_argument(
            "--template",
            help="the provider's template; on local, the sandbox environment (default: 'default')",
        )
        cmd.add_argument("--json", action="store_true", help="print the whole result as JSON")
    commands.add_parser(
        "doctor",
        help="what isolation and which providers are available here",
        description="Check what isolation the local provider has on this machine (bubblewrap, "
        "network, memory and process limits) and which providers are usable. Exits 0 when "
        "local isolation works.",
    )
    commands.add_parser(
        "demo",
        help="run an agent end to end on the local provider (see 'demo --help')",
        add_help=False,
    )
    gc = commands.add_parser(
        "gc",
        help="list (and with --yes destroy) orphaned sandboxes and blobs",
        description="List sandboxes and snapshot blobs nobody uses; --yes destroys them.",
    )
    gc.add_argument(
        "--provider",
        dest="providers",
        action="append",
        choices=PROVIDER_NAMES,
        help="provider whose sandboxes to look at (repeatable; default: local)",
    )
    gc.add_argument(
        "--checkpointer",
        dest="checkpointers",
        action="append",
        help="sqlite:///path or postgresql://... whose threads are live (repeatable: every "
        "application whose snapshots are in the blob store)",
    )
    gc.add_argument(
        "--forget-checkpointer",
        dest="forget_checkpointers",
        action="append",
        metavar="NAME",
        help="drop a checkpointer the blob store names from its list, because its application "
        "and checkpoints are gone (repeatable)",
    )
    gc.add_argument(
        "--allow-empty-checkpointer",
        action="store_true",
        help="accept a checkpointer that does not exist or holds no checkpoint "
        "(then no snapshot blob is referenced)",
    )
    gc.add_argument("--blobs", help="snapshot blob directory (default: the local default store)")
    gc.add_argument("--grace", type=float, default=3600.0, help="keep anything younger (seconds)")
    gc.add_argument("--yes", action="store_true", help="destroy what is listed (default: dry run)")
    gc.add_argument("--json", action="store_true", help="print the whole report as JSON")
    return parser


def _read_code(args: argparse.Namespace) -> str:
    if args.file is not None:
        try:
            with open(args.file, encoding="utf-8") as handle:
                return handle.read()
        except OSError as exc:
            raise InvalidInputError(f"Cannot read {args.file}: {exc.strerror}") from exc
    code: str = sys.stdin.read() if args.code == "-" else args.code
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``langchain-sandbox`` command; returns the process exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv[:1] == ["demo"]:
            # The demo parses its own options (--model, ...); argparse would reject them here.
            from langchain_sandbox.demo import main as demo_main

            status: int = demo_main(argv[1:])
            return status
        args = _parser().parse_args(argv)
        if args.command in ("exec", "shell"):
            args.code = _read_code(args)
            return asyncio.run(_run_once(args))
        if args.command == "doctor":
            return _doctor()
        return asyncio.run(_gc(args))
    except SandboxError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
