"""fetch_url against a real HTTP server on 127.0.0.1 (hypercorn, in the test's nursery)."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
from hypercorn.config import Config
from hypercorn.trio import serve

from autogpt_plugins import web
from hookspecs import CommandContext, PluginSettings, SessionView
from tests.plugincheck import check_plugin

PAGE = b"""<!doctype html>
<html><head><title>Hello page</title>
<style>body { color: red; }</style>
<script>var secret = "do not show";</script></head>
<body><h1>Welcome</h1><p>Some &amp; more   text.</p><noscript>enable js</noscript></body></html>
"""


async def app(scope: Any, receive: Any, send: Any) -> None:
    """A small ASGI app with the endpoints the tests need."""
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    path = scope["path"]

    async def respond(status: int, content_type: str, body: bytes = b"", **headers: str) -> None:
        raw_headers = [(b"content-type", content_type.encode())]
        raw_headers += [(k.encode(), v.encode()) for k, v in headers.items()]
        await send({"type": "http.response.start", "status": status, "headers": raw_headers})
        await send({"type": "http.response.body", "body": body})

    if path == "/page":
        await respond(200, "text/html; charset=utf-8", PAGE)
    elif path == "/plain":
        await respond(200, "text/plain; charset=utf-8", "plain text ✓".encode())
    elif path == "/image":
        await respond(200, "image/png", b"\x89PNG\r\n\x1a\n" + bytes(100))
    elif path == "/missing":
        await respond(404, "text/plain", b"no such page")
    elif path == "/redirect":
        await respond(302, "text/plain", location="/plain")
    elif path == "/loop":
        await respond(302, "text/plain", location="/loop")
    elif path == "/big":
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/plain")],
            }
        )
        for _ in range(100):
            await send({"type": "http.response.body", "body": b"x" * 1000, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
    elif path == "/slow":
        await trio.sleep_forever()
    elif path == "/drip":
        # Every byte arrives well within httpx's per-read timeout; only the total is too long.
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/plain")],
            }
        )
        while True:
            await send({"type": "http.response.body", "body": b".", "more_body": True})
            await trio.sleep(0.05)


@pytest.fixture
async def base_url(nursery: trio.Nursery) -> str:
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.errorlog = None
    binds: list[str] = await nursery.start(partial(serve, app, config, mode="asgi"))
    return binds[0]


def context(**settings: object) -> CommandContext:
    async def ask_user(question: str) -> str | None:
        return None

    return CommandContext(
        session=SessionView(id="s1", goal="g", workspace=Path(".")),
        plugin_id="web",
        settings=PluginSettings(plugin_id="web", values=settings),
        ask_user=ask_user,
    )


async def test_fetches_html_as_text(base_url: str) -> None:
    """An HTML page comes back as its text, without scripts, styles or tags."""
    result = await web.fetch_url(url=f"{base_url}/page", ctx=context())
    assert result.ok
    assert result.output.startswith("status: 200 OK\ncontent-type: text/html; charset=utf-8\n")
    assert "Hello page\nWelcome\nSome & more text." in result.output
    for hidden in ("secret", "color", "<", "enable js"):
        assert hidden not in result.output
    assert result.data["status"] == 200
    assert result.data["truncated"] is False


async def test_fetches_plain_text_after_a_redirect(base_url: str) -> None:
    """A redirect is followed, and the final URL reported."""
    result = await web.fetch_url(url=f"{base_url}/redirect", ctx=context())
    assert result.ok
    assert f"url: {base_url}/plain" in result.output
    assert result.output.endswith("plain text ✓")


async def test_error_status_is_reported(base_url: str) -> None:
    """A 404 is returned to the model with its status and body."""
    result = await web.fetch_url(url=f"{base_url}/missing", ctx=context())
    assert result.output.startswith("status: 404 Not Found")
    assert "no such page" in result.output


async def test_binary_content_is_not_shown(base_url: str) -> None:
    """A PNG is described, not dumped."""
    result = await web.fetch_url(url=f"{base_url}/image", ctx=context())
    assert "(108 bytes of image/png, not shown)" in result.output


async def test_redirect_loop_is_refused(base_url: str) -> None:
    """More than five redirects end the fetch with an explanation."""
    result = await web.fetch_url(url=f"{base_url}/loop", ctx=context())
    assert not result.ok
    assert result.error is not None
    assert "redirected more than 5 times" in result.error


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://example.com/x", "example.com"])
async def test_other_schemes_are_refused(url: str) -> None:
    """Only http and https URLs are fetched."""
    result = await web.fetch_url(url=url, ctx=context())
    assert not result.ok
    assert result.error is not None
    assert "only http:// and https:// URLs" in result.error


async def test_body_is_cut_at_max_bytes(base_url: str) -> None:
    """A response larger than max_bytes is cut there, and says so."""
    result = await web.fetch_url(url=f"{base_url}/big", ctx=context(max_bytes=2500))
    assert result.data["truncated"] is True
    assert result.output.endswith("x" * 2500 + "\n[cut at 2,500 bytes]")


async def test_endless_body_is_cut_at_max_bytes(base_url: str) -> None:
    """A response that never ends is still cut at max_bytes, well before the time limit."""
    result = await web.fetch_url(url=f"{base_url}/drip", ctx=context(max_bytes=10, timeout=60))
    assert result.ok
    assert result.output.endswith("\n" + "." * 10 + "\n[cut at 10 bytes]")


@pytest.mark.parametrize("path", ["/slow", "/drip"])
async def test_slow_responses_time_out(base_url: str, path: str) -> None:
    """A server that answers too slowly, or never finishes, is given up on."""
    result = await web.fetch_url(url=f"{base_url}{path}", ctx=context(timeout=0.5))
    assert not result.ok
    assert result.error is not None
    assert "took longer than 0.5 s" in result.error


def test_manifest_declares_exactly_the_registered_commands() -> None:
    """The manifest is valid, disabled by default, needs network and httpx."""
    manifest = check_plugin(web)
    assert manifest["enabled_by_default"] is False
    assert manifest["permissions"] == ["network"]
    assert manifest["requirements"] == ["httpx>=0.27"]
