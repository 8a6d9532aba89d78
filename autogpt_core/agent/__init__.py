"""The agent: the runtime and what it wires for each session.

``_runtime`` (the runtime) makes, per session, an ``_emitter`` (the masking boundary), a
``_caller`` (hook calls), a ``_dispatcher`` (commands) and a ``_session`` (the cycle), and
keeps its ``_model`` (provider) for the core's ``llm_request`` implementation. ``_options``
is the runtime's input; ``_redact`` decides what is secret; ``_workspace`` is the file
sandbox the workspace plugin uses.

Private: the public API is ``autogpt_core``'s."""
