"""``fetch_url``: fetch a web page over http(s) and return its text, within size and time limits.

Addresses on this machine or its network (loopback, private, link-local and the like) are
reached only with the ``network.local`` permission. The check is made after DNS resolution,
on every address a name resolves to, again at every redirect hop, and the connection then
goes to an address that was checked: a name cannot resolve to a public address for the check
and to a private one for the connection (DNS rebinding).
"""

from __future__ import annotations

import html.parser
import ipaddress
from collections.abc import Callable
from urllib.parse import urlsplit

import httpx
import trio

from hookspecs import CommandContext, CommandResult, RegisterCommand, hookimpl

DEFAULT_MAX_BYTES = 1024 * 1024
DEFAULT_TIMEOUT = 20.0
MAX_REDIRECTS = 5
USER_AGENT = "autogpt-core-web/0.1"
#: The permission that lets fetch_url reach an address that :func:`address_kind` refuses.
LOCAL_PERMISSION = "network.local"

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_TEXT_TYPES = ("application/json", "application/xml", "application/javascript")
_DEFAULT_PORTS = {"http": 80, "https": 443}
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


@hookimpl
def register_commands(register: RegisterCommand) -> None:
    register("fetch_url", fetch_url)


async def fetch_url(url: str, ctx: CommandContext) -> CommandResult:
    """GET ``url`` and return its status, content type and text (HTML reduced to text)."""
    max_bytes = int(ctx.settings.values.get("max_bytes", DEFAULT_MAX_BYTES))
    timeout = float(ctx.settings.values.get("timeout", DEFAULT_TIMEOUT))
    scheme = urlsplit(url).scheme.lower()
    if scheme not in ("http", "https"):
        return CommandResult.failure(
            f"fetch_url fetches only http:// and https:// URLs, and {url!r} "
            f"{f'is a {scheme}: URL' if scheme else 'has no scheme'}; give a full http(s) URL"
        )
    too_slow = (
        f"fetching {url} took longer than {timeout:g} s and was stopped; try another URL, "
        "or ask the user to raise the web plugin's timeout setting"
    )
    try:
        # httpx's timeout limits each network operation; fail_after limits the whole fetch,
        # which a server dripping bytes slowly would otherwise stretch without end.
        with trio.fail_after(timeout):
            return await _fetch(url, ctx, max_bytes, timeout)
    except (trio.TooSlowError, httpx.TimeoutException):
        return CommandResult.failure(too_slow)
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        return CommandResult.failure(f"fetching {url} failed: {type(exc).__name__}: {exc}")


def address_kind(ip: IPAddress) -> str | None:
    """Why ``ip`` is not public (``"loopback"``, ``"private"``, ...), or ``None`` if it is.

    Public means global and not multicast, as Python's ``ipaddress`` has it, and not in the
    deprecated IPv6 ranges it still calls global (IPv4-compatible ``::/96`` is reserved,
    ``fec0::/10`` site-local). An IPv6 address that carries an IPv4 address is judged by
    that address: only by it when IPv4-mapped or NAT64 (``64:ff9b::/96``, which the network
    translates to the IPv4 address), by both when 6to4.
    """
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return address_kind(ip.ipv4_mapped)
        if ip in _NAT64:
            return address_kind(ipaddress.IPv4Address(int(ip) & 0xFFFF_FFFF))
        if ip.sixtofour is not None and (kind := address_kind(ip.sixtofour)) is not None:
            return kind
        if ip.is_site_local:
            return "site-local"
    # Most specific first: 127.0.0.1 is also private, and the message should say loopback.
    kinds = (
        ("unspecified", ip.is_unspecified),
        ("loopback", ip.is_loopback),
        ("link-local", ip.is_link_local),
        ("multicast", ip.is_multicast),
        ("reserved", ip.is_reserved),
        ("private", ip.is_private),
        ("non-public", not ip.is_global),  # e.g. 100.64.0.0/10, carrier-grade NAT
    )
    return next((kind for kind, is_kind in kinds if is_kind), None)


async def resolve(host: str, port: int) -> list[IPAddress]:
    """Every address ``host`` resolves to, in the resolver's order, without repeats.

    Numeric hosts in any form the system accepts (``0x7f.1``, ``2130706433``) come back as
    the address they stand for. Resolution runs in a worker thread, off the trio loop.
    """
    infos = await trio.socket.getaddrinfo(host, port, type=trio.socket.SOCK_STREAM)
    addresses: list[IPAddress] = []
    for *_, sockaddr in infos:
        ip = ipaddress.ip_address(sockaddr[0])
        if ip not in addresses:
            addresses.append(ip)
    return addresses


async def _fetch(url: str, ctx: CommandContext, max_bytes: int, io_timeout: float) -> CommandResult:
    target = httpx.URL(url)
    came_from: httpx.URL | None = None
    # Cookies are kept here, by host name: the client would file them under the addresses.
    cookies = httpx.Cookies()
    # Redirects are followed here, not by httpx, so that every hop's addresses are checked.
    for _ in range(MAX_REDIRECTS + 1):
        checked = await _checked_addresses(target, came_from, ctx)
        if isinstance(checked, CommandResult):
            return checked
        # A client per hop: a pooled connection, verified for one name, is never reused for
        # another name that happens to resolve to the same address. The explicit transport
        # keeps httpx from using a proxy named in the environment: a proxy would connect to
        # wherever the name resolves for it, not to the address checked here.
        async with httpx.AsyncClient(
            transport=httpx.AsyncHTTPTransport(),
            timeout=io_timeout,
            headers={"User-Agent": USER_AGENT},
        ) as client:
            response = await _send(client, target, checked, cookies)
            try:
                if response.has_redirect_location:
                    cookies.extract_cookies(
                        httpx.Response(
                            response.status_code,
                            headers=response.headers,
                            request=httpx.Request("GET", target),
                        )
                    )
                    came_from, target = target, target.join(response.headers["location"])
                    continue
                return await _read(response, str(target), url, max_bytes)
            finally:
                await response.aclose()
    return CommandResult.failure(
        f"fetching {url} was redirected more than {MAX_REDIRECTS} times; "
        "the URL is probably wrong, try the site's main address"
    )


async def _checked_addresses(
    target: httpx.URL, came_from: httpx.URL | None, ctx: CommandContext
) -> list[IPAddress] | CommandResult:
    """The addresses ``target`` may be fetched from, or the failure that says why none."""
    where = f"{target} (where {came_from} redirected)" if came_from else str(target)
    if target.scheme not in _DEFAULT_PORTS:
        return CommandResult.failure(
            f"fetching {came_from} was redirected to {target}, which is not an http(s) URL, "
            "so it was not followed; try another URL"
        )
    host = target.raw_host.decode("ascii")
    if not host:
        return CommandResult.failure(f"fetch_url needs a host name in {where}; give a full URL")
    return await allowed_addresses(
        host,
        target.port or _DEFAULT_PORTS[target.scheme],
        ctx,
        asked=lambda what: f"{target} resolves to {what} on this machine or its network",
        unresolved=lambda error: (
            f"fetching {where} failed: the host {host!r} could not be resolved ({error}); "
            "check the spelling of the URL"
        ),
        refused=lambda what: (
            f"fetch_url did not fetch {where}: it resolves to {what}, which "
            "reaches this machine or its network rather than the public internet; the "
            f"web plugin goes there only with the {LOCAL_PERMISSION!r} permission, which "
            f"was not given. Fetch a public URL instead, or ask the user to grant "
            f"{LOCAL_PERMISSION} under permissions.grant in the config"
        ),
    )


async def allowed_addresses(
    host: str,
    port: int,
    ctx: CommandContext,
    *,
    asked: Callable[[str], str],
    unresolved: Callable[[str], str],
    refused: Callable[[str], str],
) -> list[IPAddress] | CommandResult:
    """The addresses of ``host`` a command may connect to, or the failure that says why
    none: a name resolving to a loopback, link-local or private address needs
    ``network.local`` (asked with ``asked(what)``; ``refused(what)`` if not given), and the
    connection must then go to these addresses (``send_pinned``), never to whatever the
    name resolves to later. Shared by the plugins that reach the network (web, openapi)."""
    try:
        addresses = await resolve(host, port)
    except OSError as exc:
        addresses, error = [], str(exc)
    else:
        error = "it has no address"
    if not addresses:
        return CommandResult.failure(unresolved(error))
    for ip in addresses:
        kind = address_kind(ip)
        if kind is None:
            continue
        what = f"{_shown(ip)}, {_an(kind)} {kind} address"
        if not await ctx.ask_permission(LOCAL_PERMISSION, asked(what)):
            return CommandResult.failure(refused(what))
        # One answer covers the name: every other address it resolves to is allowed too.
        break
    return addresses


async def _send(
    client: httpx.AsyncClient,
    target: httpx.URL,
    addresses: list[IPAddress],
    cookies: httpx.Cookies,
) -> httpx.Response:
    """GET ``target`` from the first of ``addresses`` that takes the connection."""
    return await send_pinned(
        client, client.build_request("GET", target, cookies=cookies), addresses
    )


async def send_pinned(
    client: httpx.AsyncClient, named: httpx.Request, addresses: list[IPAddress]
) -> httpx.Response:
    """Send ``named`` (the request as it would go to the name: its Host header, cookies and
    body) to the first of ``addresses`` that takes the connection, streamed: httpx never
    resolves the name itself. For https the TLS server name is the name, so the certificate
    is still verified for it."""
    target = named.url
    extensions = (
        {"sni_hostname": target.raw_host.decode("ascii")} if target.scheme == "https" else {}
    )
    for n, ip in enumerate(addresses):
        request = client.build_request(
            named.method,
            target.copy_with(host=str(ip)),
            headers=named.headers,
            content=named.content or None,
            extensions=extensions,
        )
        try:
            return await client.send(request, stream=True)
        except httpx.ConnectError:
            if n == len(addresses) - 1:
                raise
    raise httpx.ConnectError(f"no address to connect to for {target.host}")


async def _read(
    response: httpx.Response, final_url: str, url: str, max_bytes: int
) -> CommandResult:
    body = bytearray()
    # Streamed, so a huge (or endless) response costs about max_bytes of memory. Enough read,
    # the reading is cancelled rather than left with `break`: the cancellation unwinds
    # httpx's chain of async generators, where `break` would leave them to the garbage
    # collector (and trio warns about each).
    with trio.CancelScope() as reading:
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > max_bytes:
                reading.cancel()
    cut = len(body) > max_bytes
    del body[max_bytes:]
    content_type = response.headers.get("content-type", "")
    # The reason phrase the server sent is optional (HTTP/2 has none): use the standard one.
    status = f"{response.status_code} {httpx.codes.get_reason_phrase(response.status_code)}".strip()
    text = _decode(bytes(body), content_type, response.charset_encoding)

    lines = [f"status: {status}", f"content-type: {content_type or '(none)'}"]
    if final_url != url:
        lines.append(f"url: {final_url}")
    output = "\n".join(lines) + "\n\n" + text
    if cut:
        output += f"\n[cut at {max_bytes:,} bytes]"
    return CommandResult.success(
        output,
        data={
            "status": response.status_code,
            "content_type": content_type,
            "url": final_url,
            "truncated": cut,
        },
    )


def _shown(ip: IPAddress) -> str:
    """``ip`` for a message, with the IPv4 address an IPv4-mapped address stands for."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return f"{ip} (IPv4 {ip.ipv4_mapped})"
    return str(ip)


def _an(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def _decode(body: bytes, content_type: str, charset: str | None) -> str:
    media_type = content_type.split(";", 1)[0].strip().lower()
    is_text = (
        not media_type
        or media_type.startswith("text/")
        or media_type in _TEXT_TYPES
        or media_type.endswith(("+json", "+xml"))
    )
    if not is_text:
        return f"({len(body):,} bytes of {media_type}, not shown)"
    try:
        text = body.decode(charset or "utf-8", errors="replace")
    except LookupError:  # a charset Python does not know
        text = body.decode("utf-8", errors="replace")
    if media_type in ("text/html", "application/xhtml+xml"):
        return html_to_text(text)
    return text


def html_to_text(markup: str) -> str:
    """The readable text of an HTML page, crudely: no tags, scripts or styles."""
    parser = _TextExtractor()
    parser.feed(markup)
    parser.close()
    lines = (" ".join(line.split()) for line in "".join(parser.parts).splitlines())
    return "\n".join(line for line in lines if line)


class _TextExtractor(html.parser.HTMLParser):
    _SKIP = frozenset({"script", "style", "noscript", "template", "svg"})
    _BLOCK = frozenset(
        "address article aside blockquote br dd div dl dt footer form h1 h2 h3 h4 h5 h6 "
        "header hr li main nav ol p pre section table title tr ul".split()
    )

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skipping = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self._SKIP:
            self._skipping += 1
        elif tag in self._BLOCK:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self._SKIP:
            self._skipping = max(self._skipping - 1, 0)
        elif tag in self._BLOCK:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self._skipping:
            self.parts.append(data)
