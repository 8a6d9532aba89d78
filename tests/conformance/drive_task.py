"""Drive one task to its last step with the official client, ``agent-protocol-client``.

Run by tests/test_server_conformance.py with the python of the client's own virtualenv (the
client needs pydantic 1; the project does not use it), never imported by the test suite::

    python drive_task.py URL TOKEN GOAL

It creates a task, executes steps until one ``is_last``, lists the task's artifacts and
downloads each, all through the client's own API and models, and prints what it saw as one
JSON object: the task, its steps, its artifacts and each artifact's content (base64).
"""

from __future__ import annotations

import asyncio
import base64
import json
import sys
from typing import Any

from agent_protocol_client import (
    AgentApi,
    ApiClient,
    Configuration,
    StepRequestBody,
    TaskRequestBody,
)

#: More steps than the task needs: a server that never says ``is_last`` fails, not hangs.
MAX_STEPS = 20


async def drive(url: str, token: str, goal: str) -> dict[str, Any]:
    configuration = Configuration(host=url)
    async with ApiClient(configuration) as client:
        # The spec declares no security scheme, so the client sends no credentials of its
        # own accord: the bearer token goes in as a default header.
        client.set_default_header("Authorization", f"Bearer {token}")
        api = AgentApi(client)
        task = await api.create_agent_task(task_request_body=TaskRequestBody(input=goal))
        steps = []
        for _ in range(MAX_STEPS):
            step = await api.execute_agent_task_step(
                task_id=task.task_id, step_request_body=StepRequestBody()
            )
            steps.append(step.to_dict())
            if step.is_last:
                break
        else:
            raise SystemExit(f"no step of task {task.task_id} was the last in {MAX_STEPS}")
        listed = await api.list_agent_task_artifacts(task_id=task.task_id)
        contents = {}
        for artifact in listed.artifacts:
            data = await api.download_agent_task_artifact(
                task_id=task.task_id, artifact_id=artifact.artifact_id
            )
            contents[artifact.artifact_id] = base64.b64encode(bytes(data)).decode("ascii")
        fetched = await api.get_agent_task(task_id=task.task_id)
        return {
            "task": fetched.to_dict(),
            "steps": steps,
            "artifacts": [a.to_dict() for a in listed.artifacts],
            "pagination": listed.pagination.to_dict(),
            "contents": contents,
        }


def main() -> None:
    url, token, goal = sys.argv[1:4]
    print(json.dumps(asyncio.run(drive(url, token, goal))))


if __name__ == "__main__":
    main()
