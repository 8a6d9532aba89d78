"""What a browser may do to the server: requests from other sites are refused.

Bearer tokens already keep other sites out (a browser sends no token of ours by itself),
but ``--no-auth`` has no token to rely on. Two ASGI checks, before any route runs:

- a request whose ``Origin`` is not the server's own (a page of another site posting to
  it, cross-site request forgery) gets 403;
- without tokens, a request whose ``Host`` is not a loopback name gets 403: a page of
  another site that made its own name resolve to 127.0.0.1 (DNS rebinding) would
  otherwise read the answers.
"""

from __future__ import annotations

import json
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from ._hosts import is_loopback


class SameOrigin:
    def __init__(self, app: ASGIApp, *, loopback_hosts_only: bool) -> None:
        self.app = app
        self.loopback_hosts_only = loopback_hosts_only

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        host = headers.get("host", "")
        problem = None
        origin = headers.get("origin")
        if origin is not None and origin != "null":
            parts = urlsplit(origin)
            if parts.netloc.lower() != host.lower():
                problem = f"a request from another site ({origin}) is refused"
        elif origin == "null":
            problem = "a request from an opaque origin is refused"
        if problem is None and self.loopback_hosts_only:
            name = urlsplit(f"//{host}").hostname or ""
            if not is_loopback(name):
                problem = (
                    f"without tokens (--no-auth) only loopback names may be used as Host, "
                    f"not {host!r}: open http://127.0.0.1:PORT/"
                )
        if problem is None:
            await self.app(scope, receive, send)
            return
        body = json.dumps({"message": problem}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 403,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
