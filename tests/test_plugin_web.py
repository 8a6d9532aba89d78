"""fetch_url against a real HTTP server on 127.0.0.1 (hypercorn, in the test's nursery).

That server is on this machine, so most tests grant ``network.local``; the tests of the
local-address guard refuse it and check the server was never reached. Names are resolved by
trio's resolver, which a test may replace with a ``FakeResolver``.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import pytest
import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from hypothesis import given

from autogpt_core._config import DEFAULT_GRANTS
from autogpt_core.agent._session import RunOptions
from autogpt_plugins import web
from hookspecs import CommandContext, Confirmation, PluginSettings, SessionView, hookimpl
from tests import strategies
from tests.plugincheck import check_plugin
from tests.scripted import _reply, _run, _tool_answers

#: One request the test server received: (address it was received on, path, Host header).
Seen = tuple[str, str, str]

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
    elif path == "/to":
        location = parse_qs(scope["query_string"].decode())["url"][0]
        await respond(302, "text/plain", location=location)
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


async def start_server(nursery: trio.Nursery, seen: list[Seen], bind: str) -> str:
    """Serve ``app`` on ``bind`` ("host:port"), noting every request in ``seen``; its URL."""

    async def recording_app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            host = dict(scope["headers"]).get(b"host", b"").decode()
            seen.append((scope["server"][0], scope["path"], host))
        await app(scope, receive, send)

    config = Config()
    config.bind = [bind]
    config.accesslog = None
    config.errorlog = None
    binds: list[str] = await nursery.start(partial(serve, recording_app, config, mode="asgi"))
    return binds[0]


@pytest.fixture
def seen() -> list[Seen]:
    return []


@pytest.fixture
async def base_url(nursery: trio.Nursery, seen: list[Seen]) -> str:
    return await start_server(nursery, seen, "127.0.0.1:0")


@pytest.fixture
async def twin_port(nursery: trio.Nursery, seen: list[Seen]) -> int:
    """A port served on both 127.0.0.2 and 127.0.0.1 (two loopback addresses, one port)."""
    port = _port_free_on("127.0.0.2", "127.0.0.1")
    await start_server(nursery, seen, f"127.0.0.2:{port}")
    await start_server(nursery, seen, f"127.0.0.1:{port}")
    return port


def _port_free_on(*hosts: str) -> int:
    """A port no socket uses on any of ``hosts`` now: the one the system picks for the
    first is often taken on another (by a connection's local end), so pick again then."""
    for _ in range(100):
        with contextlib.ExitStack() as stack:
            first = stack.enter_context(socket.socket())
            first.bind((hosts[0], 0))
            port = first.getsockname()[1]
            try:
                for host in hosts[1:]:
                    stack.enter_context(socket.socket()).bind((host, port))
            except OSError:
                continue
            return int(port)
    raise RuntimeError(f"no port is free on all of {hosts}")


class FakeResolver(trio.abc.HostnameResolver):
    """Answers trio's getaddrinfo for the names in ``answers``: each call takes the next
    list of addresses, the last one repeating. Other names do not exist."""

    def __init__(self, answers: dict[str, list[list[str]]]) -> None:
        self.answers = answers
        self.calls: list[str] = []

    async def getaddrinfo(
        self, host: bytes | None, port: bytes | str | int | None, *args: Any, **kwargs: Any
    ) -> list[Any]:
        name = (host or b"").decode()
        self.calls.append(name)
        if name not in self.answers:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        queue = self.answers[name]
        addresses = queue.pop(0) if len(queue) > 1 else queue[0]
        return [
            (socket.AF_INET6, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (a, port, 0, 0))
            if ":" in a
            else (socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (a, port))
            for a in addresses
        ]

    async def getnameinfo(self, sockaddr: Any, flags: int) -> tuple[str, str]:
        # Part of trio's resolver interface; the web plugin never does a reverse lookup,
        # and a test that made it do one should fail loudly.
        raise AssertionError(f"unexpected reverse lookup of {sockaddr!r}")


def use_resolver(answers: dict[str, list[list[str]]]) -> FakeResolver:
    """Install a ``FakeResolver`` for the rest of this test's trio run."""
    resolver = FakeResolver(answers)
    trio.socket.set_custom_hostname_resolver(resolver)
    return resolver


def treat_as_public(monkeypatch: pytest.MonkeyPatch, address: str) -> None:
    """Make the plugin's classifier call ``address`` public (it is really loopback)."""
    classify = web.address_kind
    public = ipaddress.ip_address(address)
    monkeypatch.setattr(web, "address_kind", lambda ip: None if ip == public else classify(ip))


def context(
    *, local: bool = True, asked: list[tuple[str, str]] | None = None, **settings: object
) -> CommandContext:
    """A context whose ask_permission answers ``local``, noting each question in ``asked``."""

    async def ask_user(question: str) -> str | None:
        return None

    async def ask_permission(permission: str, reason: str) -> bool:
        if asked is not None:
            asked.append((permission, reason))
        return local

    return CommandContext(
        session=SessionView(id="s1", goal="g", workspace=Path(".")),
        plugin_id="web",
        settings=PluginSettings(plugin_id="web", values=settings),
        ask_user=ask_user,
        ask_permission=ask_permission,
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
    """The manifest is valid, off by default, needs httpx, network, and network.local per call."""
    manifest = check_plugin(web)
    assert manifest["enabled_by_default"] is False
    assert manifest["permissions"] == ["network", "network.local"]
    assert manifest["capabilities"]["commands"][0]["permissions"] == ["network"]
    assert manifest["requirements"] == ["httpx>=0.27"]


# --- addresses on this machine or its network ---------------------------------------------


async def test_loopback_url_is_refused_without_network_local(
    base_url: str, seen: list[Seen]
) -> None:
    """Without network.local a loopback URL is refused, with the fix, before any request."""
    asked: list[tuple[str, str]] = []
    url = f"{base_url}/plain"
    result = await web.fetch_url(url=url, ctx=context(local=False, asked=asked))
    assert not result.ok
    assert result.error is not None
    for part in (url, "127.0.0.1", "loopback", "'network.local'", "permissions.grant"):
        assert part in result.error
    reason = f"{url} resolves to 127.0.0.1, a loopback address on this machine or its network"
    assert asked == [("network.local", reason)]
    assert seen == []


async def test_loopback_url_is_fetched_with_network_local(base_url: str, seen: list[Seen]) -> None:
    """With network.local given, the loopback URL is fetched, after asking exactly once."""
    asked: list[tuple[str, str]] = []
    result = await web.fetch_url(url=f"{base_url}/plain", ctx=context(asked=asked))
    assert result.ok
    assert result.output.endswith("plain text ✓")
    assert [permission for permission, _ in asked] == ["network.local"]
    host = base_url.removeprefix("http://")
    assert seen == [("127.0.0.1", "/plain", host)]


async def test_redirect_to_loopback_is_refused_at_the_hop(
    twin_port: int, seen: list[Seen], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A redirect to loopback is refused at that hop (classifier patched: 127.0.0.2 public)."""
    treat_as_public(monkeypatch, "127.0.0.2")
    target = f"http://127.0.0.1:{twin_port}/plain"
    start = f"http://127.0.0.2:{twin_port}/to?url={target}"
    asked: list[tuple[str, str]] = []
    result = await web.fetch_url(url=start, ctx=context(local=False, asked=asked))
    assert not result.ok
    assert result.error is not None
    assert f"{target} (where {start} redirected)" in result.error
    assert "resolves to 127.0.0.1, a loopback address" in result.error
    assert [reason for _, reason in asked] == [
        f"{target} resolves to 127.0.0.1, a loopback address on this machine or its network"
    ]
    assert seen == [("127.0.0.2", "/to", f"127.0.0.2:{twin_port}")]


async def test_connects_to_the_address_it_checked(
    twin_port: int, seen: list[Seen], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The request goes to the address checked, not a re-resolved one (127.0.0.2 made public)."""
    # The name resolves to 127.0.0.2 first, then to 127.0.0.1: resolving it again for the
    # connection, as httpx would, would reach 127.0.0.1.
    treat_as_public(monkeypatch, "127.0.0.2")
    resolver = use_resolver({"rebind.test": [["127.0.0.2"], ["127.0.0.1"]]})
    url = f"http://rebind.test:{twin_port}/plain"
    result = await web.fetch_url(url=url, ctx=context(local=False))
    assert result.ok, result.error
    assert result.output.endswith("plain text ✓")
    assert seen == [("127.0.0.2", "/plain", f"rebind.test:{twin_port}")]
    assert resolver.calls == ["rebind.test"]


async def test_localhost_is_refused(base_url: str, seen: list[Seen]) -> None:
    """The name localhost resolves to a loopback address and is refused."""
    url = base_url.replace("127.0.0.1", "localhost") + "/plain"
    result = await web.fetch_url(url=url, ctx=context(local=False))
    assert not result.ok
    assert result.error is not None
    assert f"fetch_url did not fetch {url}: it resolves to " in result.error
    assert "a loopback address" in result.error
    assert seen == []


async def test_every_address_a_name_resolves_to_must_be_public() -> None:
    """A name resolving to a public and a private address is refused for the private one."""
    resolver = use_resolver({"mixed.test": [["93.184.215.14", "10.1.2.3"]]})
    asked: list[tuple[str, str]] = []
    url = "https://mixed.test/page"
    result = await web.fetch_url(url=url, ctx=context(local=False, asked=asked, timeout=5))
    assert not result.ok
    assert result.error is not None
    assert f"{url}: it resolves to 10.1.2.3, a private address" in result.error
    assert asked == [
        (
            "network.local",
            f"{url} resolves to 10.1.2.3, a private address on this machine or its network",
        )
    ]
    assert resolver.calls == ["mixed.test"]


#: How the message shows ::ffff:127.0.0.1 (Python 3.11 and 3.13 print IPv6 differently).
MAPPED_LOOPBACK = f"{ipaddress.IPv6Address('::ffff:127.0.0.1')} (IPv4 127.0.0.1)"


@pytest.mark.parametrize(
    ("host", "address", "kind"),
    [
        ("127.0.0.1", "127.0.0.1", "loopback"),
        ("0x7f.1", "127.0.0.1", "loopback"),
        ("0x7f000001", "127.0.0.1", "loopback"),
        ("2130706433", "127.0.0.1", "loopback"),
        ("017700000001", "127.0.0.1", "loopback"),
        ("127.1", "127.0.0.1", "loopback"),
        ("[::1]", "::1", "loopback"),
        ("[::ffff:127.0.0.1]", MAPPED_LOOPBACK, "loopback"),
        ("[::ffff:7f00:1]", MAPPED_LOOPBACK, "loopback"),
        ("0", "0.0.0.0", "unspecified"),
        ("0.0.0.0", "0.0.0.0", "unspecified"),
        ("[::]", "::", "unspecified"),
        ("169.254.169.254", "169.254.169.254", "link-local"),
        ("[fe80::1]", "fe80::1", "link-local"),
        ("10.0.0.1", "10.0.0.1", "private"),
        ("192.168.1.1", "192.168.1.1", "private"),
        ("[fd00::1]", "fd00::1", "private"),
        ("224.0.0.1", "224.0.0.1", "multicast"),
        ("[ff02::1]", "ff02::1", "multicast"),
        ("240.0.0.1", "240.0.0.1", "reserved"),
        ("100.64.0.1", "100.64.0.1", "non-public"),
    ],
)
async def test_literal_local_addresses_are_refused(
    base_url: str, seen: list[Seen], host: str, address: str, kind: str
) -> None:
    """Every spelling of a non-public address in a URL is refused, naming the address."""
    port = base_url.rpartition(":")[2]
    url = f"http://{host}:{port}/plain"
    result = await web.fetch_url(url=url, ctx=context(local=False))
    assert not result.ok
    assert result.error is not None
    article = "an" if kind[0] in "aeiou" else "a"
    assert f"{url}: it resolves to {address}, {article} {kind} address" in result.error
    assert seen == []


NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


def stated_rule(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Public: global and not multicast by ``ipaddress``; for IPv6 also not reserved nor
    site-local (deprecated ranges Python 3.11 calls global), and an IPv4 address carried in
    it (mapped or NAT64: only it; 6to4: it too) must be public."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return stated_rule(ip.ipv4_mapped)
        if ip in NAT64:
            return stated_rule(ipaddress.IPv4Address(int(ip) & 0xFFFF_FFFF))
        if ip.sixtofour is not None and not stated_rule(ip.sixtofour):
            return False
        if ip.is_reserved or ip.is_site_local:
            return False
    return ip.is_global and not ip.is_multicast


@given(ip=strategies.ip_addresses())
def test_classifier_follows_the_stated_rule(
    ip: ipaddress.IPv4Address | ipaddress.IPv6Address,
) -> None:
    """address_kind calls an address public exactly when the stated rule does."""
    kind = web.address_kind(ip)
    assert (kind is None) == stated_rule(ip)
    if isinstance(ip, ipaddress.IPv4Address):
        assert (kind is None) == (ip.is_global and not ip.is_multicast)


class Approver:
    def __init__(self) -> None:
        self.asked: list[Any] = []

    @hookimpl
    def confirm(self, session: Any, request: Any) -> Confirmation:
        self.asked.append(request)
        return Confirmation(approved=True, reason="test says so")


def fetch_and_finish(url: str) -> list[Any]:
    return [_reply("fetch_url", {"url": url}, "w1"), _reply("finish", {"result": "ok"}, "f1")]


async def test_user_is_asked_about_a_local_address_and_may_allow_it(
    tmp_path: Path, base_url: str, seen: list[Seen]
) -> None:
    """In a real session the user is asked for network.local, with the reason, and may allow."""
    approver = Approver()
    url = f"{base_url}/plain"
    _, provider, _ = await _run(
        tmp_path,
        fetch_and_finish(url),
        extra_plugins=[approver],
        enable=frozenset({"web"}),
        grants=DEFAULT_GRANTS | {"network"},
    )
    [request] = approver.asked
    assert request.missing_permissions == ("network.local",)
    assert request.reason.startswith(f"{url} resolves to 127.0.0.1, a loopback address")
    assert "plain text ✓" in _tool_answers(provider.requests[1])[0]
    assert len(seen) == 1


async def test_continuous_mode_reaches_local_addresses_only_when_granted(
    tmp_path: Path, base_url: str, seen: list[Seen]
) -> None:
    """Unattended, a local URL is refused unless the config grants network.local."""
    url = f"{base_url}/plain"
    continuous = RunOptions(continuous=True)
    _, provider, _ = await _run(
        tmp_path / "refused",
        fetch_and_finish(url),
        options=continuous,
        enable=frozenset({"web"}),
        grants=DEFAULT_GRANTS | {"network"},
    )
    answer = _tool_answers(provider.requests[1])[0]
    assert "resolves to 127.0.0.1, a loopback address" in answer
    assert "network.local under permissions.grant" in answer
    assert seen == []
    _, provider, _ = await _run(
        tmp_path / "granted",
        fetch_and_finish(url),
        options=continuous,
        enable=frozenset({"web"}),
        grants=DEFAULT_GRANTS | {"network", "network.local"},
    )
    assert "plain text ✓" in _tool_answers(provider.requests[1])[0]
    assert len(seen) == 1
