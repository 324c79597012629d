"""The old Pyodide-based package's module of this name; importing it says what replaces it."""

from langchain_sandbox._removed_api import removed_module_error

raise removed_module_error(__name__)
