"""What users need to test their own agents offline.

* [`ScriptedToolModel`][langchain_sandbox.testing.ScriptedToolModel]: a deterministic tool-calling chat model (``call`` builds its steps);
* emulators of the E2B and Runloop HTTP APIs, in their own modules
  (``langchain_sandbox.testing.e2b_emulator``, ``langchain_sandbox.testing.runloop_emulator``).
"""

from langchain_sandbox.testing.scripted_model import ScriptedToolModel, ToolCallSpec, call

__all__ = ["ScriptedToolModel", "ToolCallSpec", "call"]
