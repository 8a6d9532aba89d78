"""The session store: SQLite, schema migrations, leases.

Private: the public API is ``autogpt_core``'s."""
