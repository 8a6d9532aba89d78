"""``fetch_url``: fetch a web page over http(s) and return its text, within size and time limits."""

from __future__ import annotations

import html.parser
from urllib.parse import urlsplit

import httpx
import trio

from hookspecs import CommandContext, CommandResult, RegisterCommand, hookimpl

DEFAULT_MAX_BYTES = 1024 * 1024
DEFAULT_TIMEOUT = 20.0
MAX_REDIRECTS = 5
USER_AGENT = "autogpt-core-web/0.1"

_TEXT_TYPES = ("application/json", "application/xml", "application/javascript")


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
            return await _fetch(url, max_bytes, timeout)
    except (trio.TooSlowError, httpx.TimeoutException):
        return CommandResult.failure(too_slow)
    except httpx.TooManyRedirects:
        return CommandResult.failure(
            f"fetching {url} was redirected more than {MAX_REDIRECTS} times; "
            "the URL is probably wrong, try the site's main address"
        )
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        return CommandResult.failure(f"fetching {url} failed: {type(exc).__name__}: {exc}")


async def _fetch(url: str, max_bytes: int, io_timeout: float) -> CommandResult:
    async with (
        httpx.AsyncClient(
            follow_redirects=True,
            max_redirects=MAX_REDIRECTS,
            timeout=io_timeout,
            headers={"User-Agent": USER_AGENT},
        ) as client,
        client.stream("GET", url) as response,
    ):
        body = bytearray()
        # Streamed, so a huge (or endless) response costs about max_bytes of memory. Enough
        # read, the reading is cancelled rather than left with `break`: the cancellation
        # unwinds httpx's chain of async generators, where `break` would leave them to the
        # garbage collector (and trio warns about each).
        with trio.CancelScope() as reading:
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > max_bytes:
                    reading.cancel()
        cut = len(body) > max_bytes
        del body[max_bytes:]
        content_type = response.headers.get("content-type", "")
        # The reason phrase the server sent is optional (HTTP/2 has none): use the standard one.
        status = (
            f"{response.status_code} {httpx.codes.get_reason_phrase(response.status_code)}".strip()
        )
        final_url = str(response.url)
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
