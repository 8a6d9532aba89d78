"""Calling hooks: the awaitable caller over pluggy, deadlines, isolation, tracing.

Private: the public API is ``autogpt_core``'s."""
