"""What ties a thread's sandbox to LangGraph's checkpointer and to other workers: the name a run's
checkpointer is filed under, per-thread turn leases and the Postgres lock, and records filed by
their place in a conversation (for hosts with no ``sandbox`` channel, such as Deep Agents)."""
