"""The runtime's machinery that knows nothing of LangGraph: threads and their live sessions, the
rehydration engine, services, the private event loop, argument checks, retries, and the workspace's
paths and environment. `langchain_sandbox.runtime` puts it behind the public `SandboxRuntime`."""
