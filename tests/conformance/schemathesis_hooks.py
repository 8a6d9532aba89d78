"""schemathesis hooks for the conformance run (loaded by schemathesis, through
``SCHEMATHESIS_HOOKS``, in its own virtualenv: not imported by the test suite).

Every check runs on every request; ``filter_failure`` drops only the failures below, each
for a reason that holds whatever else the server does. Any other failure fails the run.
"""

from __future__ import annotations

from typing import Any

import schemathesis

#: negative_data_rejection: a request that violates the schema was accepted.
ACCEPTED_NEGATIVE_DATA = "ST201"
#: positive_data_acceptance: a request that the schema allows was refused.
REJECTED_POSITIVE_DATA = "ST202"
#: The documented extensions of a task's additional_input (docs/server.md): true or false.
TASK_FLAGS = ("autonomous", "continuous")
#: How the server's 422 for an upload begins when it refuses the file's name or directory.
UPLOAD_FIELDS = ("relative_path: ", "file: ")


@schemathesis.hook
def filter_failure(context: Any, failure: Any, case: Any, response: Any) -> bool:
    operation = case.operation.definition.raw.get("operationId")
    body = case.body if isinstance(case.body, dict) else None
    if failure.code == REJECTED_POSITIVE_DATA and response.status_code == 422:
        return not _refused_by_design(operation, body, _message(response))
    if failure.code == ACCEPTED_NEGATIVE_DATA and body is not None:
        return not _accepted_by_design(operation, body)
    return True


def _message(response: Any) -> str:
    try:
        message = response.json().get("message")
    except Exception:  # noqa: BLE001 - not the server's JSON error: no reason to drop it
        return ""
    return message if isinstance(message, str) else ""


def _refused_by_design(operation: str | None, body: dict[str, Any] | None, message: str) -> bool:
    """A 422 for a request the schema allows, where the spec leaves out what it needs.

    - A task without a goal: the spec makes the body optional and ``input`` nullable, but a
      task is its goal; without one there is nothing to run, and the 422 names ``input``
      (422 is the spec's answer to a request that cannot be processed). Nor can a task's
      ``autonomous`` or ``continuous`` be anything but true or false.
    - An upload without its file: the spec does not mark the upload's body required, yet
      ArtifactUpload requires ``file``; without one there is nothing to store.
    - An upload to a path that the workspace cannot hold: the spec's ``relative_path`` is any
      string, but the file lands in the task's workspace, so a path that leaves it (``..``,
      ``/etc``), or that no file system takes (a NUL, a name over 255 bytes), or a part's
      file name that is no plain name (``a/b``), is refused, and the 422 names the field.
    """
    if operation == "createAgentTask":
        goal = body.get("input") if body is not None else None
        if not (isinstance(goal, str) and goal.strip()):
            return True
        extra = body.get("additional_input") if body is not None else None
        return isinstance(extra, dict) and any(
            not isinstance(extra.get(flag, False), bool) for flag in TASK_FLAGS
        )
    if operation == "uploadAgentTaskArtifacts":
        return body is None or "file" not in body or message.startswith(UPLOAD_FIELDS)
    return False


def _accepted_by_design(operation: str | None, body: dict[str, Any]) -> bool:
    """An accepted request that the schema does not allow, where the difference cannot be
    seen on the wire or is read leniently on purpose.

    - An upload that has its ``file``, with a part of another JSON type than the schema's:
      every part of multipart/form-data is bytes, and schemathesis sends such a value as its
      text (``[1, 2]``), which is a valid string and a valid file. An upload without its
      ``file`` is still checked to be refused.
    - ``"additional_input": null``: the spec's TaskInput and StepInput are objects, not
      nullable; the server reads an explicit null as "none given", as it reads a missing field
      (``{}``), since clients that serialise an unset optional field as null are common
      (tests/test_server.py holds it to that). A body wrong in any other way is still refused.
    """
    if operation == "uploadAgentTaskArtifacts":
        return "file" in body
    return (
        "additional_input" in body
        and body["additional_input"] is None
        and isinstance(body.get("input"), str | None)
    )
