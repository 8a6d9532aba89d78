"""The ``autogpt`` command line.

Private: the public API is ``autogpt_core``'s."""
