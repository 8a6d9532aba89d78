"""The agent: the runtime, a session's cycle, masking, the workspace sandbox.

Private: the public API is ``autogpt_core``'s."""
