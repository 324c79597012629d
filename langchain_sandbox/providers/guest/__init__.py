"""What runs inside a sandbox, and how it gets there.

Every module here but two is standard-library only and runs inside the sandbox, shipped as
source (or precompiled bytecode) by `packer`, the one way every provider ships guest code:

* `cells`: how a cell runs (Jupyter-like cells, the safe repr, tracebacks, figures, ``tools``);
* `variables`: capture and restore of an interpreter's globals (with cloudpickle's source);
* `changes`: what differs between a workspace and the listing the host holds;
* `tool_frames`: tool calls as frames in an output stream the host already reads;
* `supervisor`: the background-process supervisor, one ``python3 -c`` program;
* `local_worker`: the local provider's persistent worker;
* `command_worker`: the Runloop and Kubernetes worker, shipped as one standalone script.

Two are host-side: `packer` (reads the sources above and packs them for a sandbox) and
`persistent_shell` (writes the shell script that wraps a persistent-shell command).
"""
