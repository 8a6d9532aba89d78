"""Plugins: discovery, manifests, ordering, settings, loading, the command registry.

Private: the public API is ``autogpt_core``'s."""
