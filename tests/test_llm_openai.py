"""The ``openai`` provider plugin, through the real ``openai`` client and a local HTTP server."""

from __future__ import annotations

import gc
import json
import os
import socket
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
import trio
import trio.testing
import yaml

import autogpt_plugins.llm_openai as llm_openai
from autogpt_core import LLMError, MissingAPIKeyError
from autogpt_plugins.llm_openai import OpenAIConfig, OpenAIProvider, factory
from hookspecs import (
    LLMProvider,
    LLMRequest,
    Message,
    PluginSettings,
    ProviderOptions,
    Role,
    ToolCall,
    ToolSpec,
)

from .fake_openai import FakeOpenAI, FakeToolCall, Reply, fake_openai_in_thread, fake_openai_server

ROOT = Path(__file__).resolve().parent.parent
SECRET = "sk-test-0123456789abcdef"
HI = LLMRequest(messages=(Message(Role.USER, "hi"),))
WRITE_FILE = ToolSpec(
    name="write_file",
    description="Write text to a file in the workspace.",
    parameters={
        "type": "object",
        "properties": {"path": {"type": "string"}, "text": {"type": "string"}},
        "required": ["path", "text"],
    },
)


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch) -> None:
    """No key or URL from the developer's environment, and no settings from other tests."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.setattr(llm_openai, "_settings", {})


@pytest.fixture
async def server() -> AsyncIterator[FakeOpenAI]:
    async with fake_openai_server() as server:
        yield server


def make_provider(base_url: str, **config: Any) -> OpenAIProvider:
    config.setdefault("api_key", SECRET)
    config.setdefault("max_retries", 0)
    return OpenAIProvider(OpenAIConfig(base_url=base_url, **config))


@pytest.fixture
async def provider(server: FakeOpenAI) -> AsyncIterator[OpenAIProvider]:
    provider = make_provider(server.base_url)
    try:
        yield provider
    finally:
        await provider.aclose()


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


async def test_text_response(server: FakeOpenAI, provider: OpenAIProvider) -> None:
    """A text answer becomes an assistant message with that text and no tool calls."""
    server.add(Reply(content="Hello there."))
    response = await provider.complete(HI)
    assert response.message == Message(Role.ASSISTANT, "Hello there.")
    assert response.model == "gpt-4o-mini"
    assert isinstance(provider, LLMProvider)


async def test_tool_call_keeps_raw_json_arguments(
    server: FakeOpenAI, provider: OpenAIProvider
) -> None:
    """A tool call becomes a ToolCall whose arguments are the exact JSON string sent."""
    raw = '{"path": "notes.txt",  "text": "a\\nb"}'
    server.add(Reply(tool_calls=(FakeToolCall("write_file", raw, id="call_7"),)))
    response = await provider.complete(HI)
    assert response.message.tool_calls == (ToolCall("call_7", "write_file", raw),)
    assert response.message.content == ""


async def test_request_carries_tools_and_messages_in_order(
    server: FakeOpenAI, provider: OpenAIProvider
) -> None:
    """The server sees OpenAI-format tools and system, user, assistant+tool_calls, tool."""
    server.add(Reply(content="done"))
    call = ToolCall("call_1", "write_file", '{"path": "a.txt", "text": "x"}')
    request = LLMRequest(
        messages=(
            Message(Role.SYSTEM, "You are helpful."),
            Message(Role.USER, "Write a.txt"),
            Message(Role.ASSISTANT, "", tool_calls=(call,)),
            Message(Role.TOOL, "wrote 1 byte", tool_call_id="call_1"),
        ),
        tools=(WRITE_FILE,),
        model="some-model",
        temperature=0.25,
    )
    await provider.complete(request)
    [body] = server.requests
    assert body["model"] == "some-model"
    assert body["temperature"] == 0.25
    assert "max_tokens" not in body
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "write_file",
                "description": "Write text to a file in the workspace.",
                "parameters": dict(WRITE_FILE.parameters),
            },
        }
    ]
    assert body["messages"] == [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": "Write a.txt"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "write_file", "arguments": call.arguments},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "wrote 1 byte"},
    ]


async def test_no_tools_means_no_tools_field(server: FakeOpenAI, provider: OpenAIProvider) -> None:
    """A request without tools omits ``tools`` (local servers reject an empty list)."""
    server.add(Reply(content="ok"))
    await provider.complete(HI)
    assert "tools" not in server.requests[0]
    assert "temperature" not in server.requests[0]


async def test_usage_and_cost_of_a_known_model(
    server: FakeOpenAI, provider: OpenAIProvider
) -> None:
    """Usage is copied and its cost computed from the model's list price."""
    server.add(Reply(content="ok", prompt_tokens=1000, completion_tokens=2000))
    usage = (await provider.complete(HI)).usage
    assert (usage.prompt_tokens, usage.completion_tokens) == (1000, 2000)
    assert usage.cost_usd == pytest.approx(0.00015 + 2 * 0.0006)


async def test_configured_prices_win_and_unknown_models_cost_nothing(
    server: FakeOpenAI,
) -> None:
    """price_per_1k_* settings set the cost; a model with no known price costs 0."""
    server.add(
        Reply(content="a", prompt_tokens=500, completion_tokens=100),
        Reply(content="b", prompt_tokens=500, completion_tokens=100),
    )
    priced = make_provider(
        server.base_url, model="llama3", price_per_1k_input=1.0, price_per_1k_output=2.0
    )
    free = make_provider(server.base_url, model="llama3")
    try:
        assert (await priced.complete(HI)).usage.cost_usd == pytest.approx(0.5 + 0.2)
        assert (await free.complete(HI)).usage.cost_usd == 0.0
    finally:
        await priced.aclose()
        await free.aclose()


def test_price_for_matches_dated_snapshots() -> None:
    """A dated model name takes the price of its longest known prefix."""
    assert llm_openai.price_for("gpt-4o-mini-2024-07-18") == llm_openai.KNOWN_PRICES["gpt-4o-mini"]
    assert llm_openai.price_for("gpt-4o-2024-08-06") == llm_openai.KNOWN_PRICES["gpt-4o"]
    assert llm_openai.price_for("gpt-4omni") == (0.0, 0.0)


async def test_missing_key_raises_with_the_hint() -> None:
    """No key from options, settings or environment, and no base URL: MissingAPIKeyError."""
    with pytest.raises(MissingAPIKeyError) as info:
        factory(ProviderOptions())
    assert str(info.value) == llm_openai.MISSING_KEY_MESSAGE
    for hint in ("OPENAI_API_KEY", "--base-url", "Ollama", "--demo"):
        assert hint in str(info.value)


async def test_base_url_without_key_sends_a_placeholder(server: FakeOpenAI) -> None:
    """A base URL and no key works: local servers get a placeholder bearer token."""
    server.add(Reply(content="local answer"))
    provider = factory(ProviderOptions(base_url=server.base_url, extra={"max_retries": 0}))
    try:
        assert (await provider.complete(HI)).message.content == "local answer"
    finally:
        await provider.aclose()
    assert server.headers[0]["authorization"] == f"Bearer {llm_openai.LOCAL_SERVER_KEY}"


async def test_options_win_over_settings_and_settings_over_environment(
    server: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--model and --base-url override the settings; a key setting beats OPENAI_API_KEY."""
    monkeypatch.setenv("OPENAI_API_KEY", "env-key")
    llm_openai.configure(
        PluginSettings(
            "llm_openai",
            {"api_key": "setting-key", "model": "setting-model", "base_url": closed_port_url()},
        )
    )
    server.add(Reply(content="ok"), Reply(content="ok"))
    provider = factory(ProviderOptions(model="option-model", base_url=server.base_url))
    try:
        await provider.complete(HI)
    finally:
        await provider.aclose()
    assert server.requests[0]["model"] == "option-model"
    assert server.headers[0]["authorization"] == "Bearer setting-key"

    llm_openai.configure(PluginSettings("llm_openai", {}))
    provider = factory(ProviderOptions(base_url=server.base_url))
    try:
        await provider.complete(HI)
    finally:
        await provider.aclose()
    assert server.requests[1]["model"] == llm_openai.DEFAULT_MODEL
    assert server.headers[1]["authorization"] == "Bearer env-key"


def test_register_llm_providers_offers_openai() -> None:
    """The hook registers the factory under the name ``openai``."""
    registered: dict[str, Any] = {}
    llm_openai.register_llm_providers(register=registered.__setitem__)
    assert registered == {"openai": factory}


async def test_rejected_key_is_an_llm_error_without_the_key() -> None:
    """HTTP 401 becomes an LLMError saying what to check, with the key nowhere in it."""
    providers: list[OpenAIProvider] = []

    async def ask() -> None:
        # The server's context manager lets the error out as it is, not in an ExceptionGroup.
        async with fake_openai_server(require_key="the-right-key") as server:
            providers.append(make_provider(server.base_url))
            try:
                await providers[0].complete(HI)
            finally:
                await providers[0].aclose()

    with pytest.raises(LLMError) as info:
        await ask()
    message = str(info.value)
    assert "HTTP 401" in message
    assert "OPENAI_API_KEY" in message
    assert providers[0].base_url in message
    for text in (message, repr(info.value), repr(providers[0]), repr(providers[0].config)):
        assert SECRET not in text


async def test_a_server_echoing_the_key_is_redacted(
    server: FakeOpenAI, provider: OpenAIProvider
) -> None:
    """An error body that repeats the key has it replaced before it reaches a message."""
    server.add(Reply(status=401, error_message=f"Incorrect API key provided: {SECRET}."))
    with pytest.raises(LLMError) as info:
        await provider.complete(HI)
    assert SECRET not in str(info.value)
    assert "Incorrect API key provided: ***." in str(info.value)


async def test_a_one_letter_key_does_not_mangle_messages(server: FakeOpenAI) -> None:
    """OPENAI_API_KEY=k masks nothing: the server's words reach the message intact."""
    provider = make_provider(server.base_url, api_key="k")
    server.add(Reply(status=401, error_message="fake key: check your key"))
    try:
        with pytest.raises(LLMError) as info:
            await provider.complete(HI)
    finally:
        await provider.aclose()
    assert "fake key: check your key" in str(info.value)


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (400, "context"),
        (403, "may use it"),
        (404, "--model"),
        (429, "billing"),
        (500, "try again later"),
        (418, "HTTP 418"),
    ],
)
async def test_status_errors_say_what_to_check(
    server: FakeOpenAI, provider: OpenAIProvider, status: int, expected: str
) -> None:
    """Each HTTP error status becomes an LLMError with the server's message and a fix."""
    server.add(Reply(status=status, error_message="the server's own words"))
    with pytest.raises(LLMError) as info:
        await provider.complete(HI)
    assert expected in str(info.value)
    assert f"HTTP {status}: the server's own words" in str(info.value)


async def test_connection_refused_names_the_base_url() -> None:
    """Nothing listening at the base URL: an LLMError naming that URL."""
    url = closed_port_url()
    provider = make_provider(url)
    try:
        with pytest.raises(LLMError) as info:
            await provider.complete(HI)
    finally:
        await provider.aclose()
    assert url in str(info.value)
    assert "cannot connect" in str(info.value)


async def test_aclose_closes_the_client(server: FakeOpenAI) -> None:
    """aclose closes the client (no ResourceWarning from its pooled connection); reuse fails."""
    server.add(Reply(content="ok"))
    provider = make_provider(server.base_url)
    await provider.complete(HI)
    assert not provider.closed
    await provider.aclose()
    await provider.aclose()
    assert provider.closed
    with pytest.raises(LLMError, match="used after aclose"):
        await provider.complete(HI)
    del provider
    gc.collect()  # an unclosed socket would warn here, and warnings are errors


async def test_cancelled_request_leaves_the_provider_usable(
    server: FakeOpenAI, provider: OpenAIProvider
) -> None:
    """Cancelling an in-flight request (trio cancel scope) works; the next request succeeds."""
    server.add(Reply(content="too late", delay=3600), Reply(content="next"))
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(provider.complete, HI)
            while not server.requests:
                await trio.testing.wait_all_tasks_blocked()
            scope.cancel()
    assert scope.cancelled_caught
    assert (await provider.complete(HI)).message.content == "next"


async def test_concurrent_requests_share_one_provider(
    server: FakeOpenAI, provider: OpenAIProvider
) -> None:
    """Several tasks can use one provider at once; each gets one of the answers."""
    server.add(*(Reply(content=f"answer {i}") for i in range(3)))
    answers: list[str] = []

    async def ask() -> None:
        answers.append((await provider.complete(HI)).message.content)

    async with trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(ask)
    assert sorted(answers) == ["answer 0", "answer 1", "answer 2"]


async def test_malformed_tool_calls_pass_through(
    server: FakeOpenAI, provider: OpenAIProvider
) -> None:
    """Arguments that are not JSON stay raw; a call without name or id does not crash."""
    server.add(
        Reply(
            raw_tool_calls=[
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{oops"}},
                {"id": "c2", "type": "function", "function": {"arguments": "{}"}},
                {"type": "function", "function": {"name": "g", "arguments": {"k": 1}}},
                {"id": "c4", "type": "function"},
            ]
        )
    )
    calls = (await provider.complete(HI)).message.tool_calls
    assert calls == (
        ToolCall("c1", "f", "{oops"),
        ToolCall("c2", "", "{}"),
        ToolCall("call_2", "g", '{"k": 1}'),
        ToolCall("c4", "", ""),
    )


async def test_missing_usage_is_zero(server: FakeOpenAI, provider: OpenAIProvider) -> None:
    """A server that reports no usage gives zero tokens and zero cost."""
    server.add(Reply(content="ok", include_usage=False))
    usage = (await provider.complete(HI)).usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.cost_usd) == (0, 0, 0.0)


def test_tool_message_without_call_id_is_refused() -> None:
    """A tool result without a tool_call_id is an LLMError naming the message."""
    with pytest.raises(LLMError, match="message 3 is a tool result"):
        llm_openai.message_to_openai(Message(Role.TOOL, "x"), 3)


async def test_fake_server_rejects_malformed_bodies(server: FakeOpenAI) -> None:
    """The fake server answers 400 to non-JSON, 422 to a body without model/messages."""
    url = server.base_url + "/chat/completions"
    async with httpx.AsyncClient() as client:
        not_json = await client.post(url, content=b"{nope")
        no_messages = await client.post(url, json={"model": "m"})
        wrong_path = await client.post(server.base_url + "/completions", json={})
    assert not_json.status_code == 400
    assert no_messages.status_code == 422
    assert wrong_path.status_code == 404
    assert "error" in no_messages.json()
    assert server.requests == []


def test_manifest_is_valid_and_declares_the_settings() -> None:
    """The manifest passes the schema and declares the key as a secret from OPENAI_API_KEY."""
    path = ROOT / "autogpt_plugins" / "llm_openai" / "autogpt-plugin.yaml"
    manifest = yaml.safe_load(path.read_text(encoding="utf-8"))
    schema = json.loads((ROOT / "hookspecs" / "manifest.schema.json").read_text("utf-8"))
    jsonschema.validate(manifest, schema)
    assert manifest["id"] == "llm_openai"
    assert manifest["enabled_by_default"] is True
    assert manifest["permissions"] == ["network", "secrets:OPENAI_API_KEY"]
    settings = manifest["config"]["settings"]
    assert settings["api_key"] == {
        "type": "string",
        "secret": True,
        "env": "OPENAI_API_KEY",
        "description": settings["api_key"]["description"],
    }
    assert settings["base_url"]["env"] == "OPENAI_BASE_URL"
    assert settings["model"]["default"] == llm_openai.DEFAULT_MODEL


@pytest.mark.slow
def test_thread_server_serves_a_client_in_a_subprocess() -> None:
    """The threaded fake server answers a provider running in another process."""
    code = textwrap.dedent(
        """
        import sys, trio
        from autogpt_plugins.llm_openai import factory
        from hookspecs import LLMRequest, Message, ProviderOptions, Role

        async def main():
            options = ProviderOptions(base_url=sys.argv[1], extra={"max_retries": 0})
            provider = factory(options)
            try:
                response = await provider.complete(
                    LLMRequest(messages=(Message(Role.USER, "hi"),))
                )
            finally:
                await provider.aclose()
            print(response.message.content)

        trio.run(main)
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    with fake_openai_in_thread([Reply(content="from the thread")]) as server:
        result = subprocess.run(
            [sys.executable, "-W", "error", "-c", code, server.base_url],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "from the thread"
    assert server.requests[0]["messages"] == [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize("tokens", [-3, float("nan"), float("inf"), 2.5])
async def test_a_usage_that_is_not_a_token_count_is_an_error(
    server: FakeOpenAI, provider: OpenAIProvider, tokens: float
) -> None:
    """A server reporting a negative, fractional, NaN or infinite token count gets a clear
    LLMError naming the field, not a poisoned budget or a ValueError."""
    server.add(Reply(content="hi", prompt_tokens=tokens))  # type: ignore[arg-type]
    with pytest.raises(LLMError, match=r"usage\.prompt_tokens"):
        await provider.complete(HI)
