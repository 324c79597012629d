"""Attack classes run for real in a bubblewrap sandbox; each asserts the host and limits hold."""
