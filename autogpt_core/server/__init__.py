"""``autogpt serve``: the runtime's sessions over HTTP (Agent Protocol v1, docs/server.md)."""
