"""What users need to test their own agents offline.

* [`ScriptedToolModel`][langchain_sandbox.testing.ScriptedToolModel]: a deterministic tool-calling chat model (``call`` builds its steps);
* emulators of the E2B and Runloop HTTP APIs and of a Kubernetes cluster running agent-sandbox,
  in their own modules (``langchain_sandbox.testing.e2b_emulator``,
  ``langchain_sandbox.testing.runloop_emulator``, ``langchain_sandbox.testing.kubernetes_emulator``).
"""

from langchain_sandbox.testing.scripted_model import ScriptedToolModel, ToolCallSpec, call

__all__ = ["ScriptedToolModel", "ToolCallSpec", "call"]
