"""The ``replay`` provider plugin and the recorder, with real recordings of the OpenAI path."""

from __future__ import annotations

import contextlib
import json
import math
import os
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import trio
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

import autogpt_plugins.llm_replay as llm_replay
from autogpt_core import ConfigError, LLMError, ReplayMismatchError
from autogpt_plugins.llm_openai import OpenAIConfig, OpenAIProvider
from autogpt_plugins.llm_replay import (
    Recording,
    RecordingProvider,
    ReplayProvider,
    factory,
    load_recording,
    recording_provider,
)
from hookspecs import (
    LLMProvider,
    LLMRequest,
    LLMResponse,
    Message,
    PluginSettings,
    ProviderOptions,
    Role,
    ToolCall,
    ToolSpec,
    Usage,
)

from . import strategies
from .fake_openai import FakeOpenAI, FakeToolCall, Reply, fake_openai_server

ROOT = Path(__file__).resolve().parent.parent
SECRET_TEXT = "the tool printed token=abc123"


def tool(name: str) -> ToolSpec:
    return ToolSpec(name=name, description=f"The {name} command.", parameters={"type": "object"})


TOOLS = (tool("write_file"), tool("finish"))
CALL = ToolCall("call_1", "write_file", '{"path": "a.txt", "text": "hello"}')
FIRST = LLMRequest(
    messages=(Message(Role.SYSTEM, "Your goal: write a.txt"), Message(Role.USER, "Begin.")),
    tools=TOOLS,
    model="gpt-4o-mini",
)
SECOND = LLMRequest(
    messages=(
        *FIRST.messages,
        Message(Role.ASSISTANT, "Writing it.", tool_calls=(CALL,)),
        Message(Role.TOOL, SECRET_TEXT, tool_call_id="call_1"),
    ),
    tools=TOOLS,
    model="gpt-4o-mini",
)
SCRIPT = (
    Reply(
        content="Writing it.",
        tool_calls=(FakeToolCall("write_file", CALL.arguments, id="call_1"),),
        prompt_tokens=120,
        completion_tokens=30,
    ),
    Reply(content="All done.", prompt_tokens=160, completion_tokens=8),
)


@pytest.fixture
async def server() -> AsyncIterator[FakeOpenAI]:
    async with fake_openai_server() as server:
        yield server


def openai_provider(server: FakeOpenAI) -> OpenAIProvider:
    return OpenAIProvider(OpenAIConfig(api_key="sk-test", base_url=server.base_url, max_retries=0))


async def record_session(server: FakeOpenAI, path: Path) -> list[LLMResponse]:
    """Record FIRST and SECOND through the OpenAI provider; return the live responses."""
    server.add(*SCRIPT)
    recorder = recording_provider(openai_provider(server), path)
    try:
        return [await recorder.complete(FIRST), await recorder.complete(SECOND)]
    finally:
        await recorder.aclose()


def replay(path: Path, **settings: Any) -> ReplayProvider:
    """The replay provider for ``path``, made with these plugin settings (``strict``)."""
    options = ProviderOptions(
        extra={"path": str(path)}, settings=PluginSettings("llm_replay", settings)
    )
    return factory(options)


def write_json(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


async def test_recorded_session_replays_the_same_responses(
    server: FakeOpenAI, tmp_path: Path
) -> None:
    """Responses recorded from the OpenAI provider come back identical, in order, offline."""
    path = tmp_path / "session.json"
    live = await record_session(server, path)
    assert live[0].message.tool_calls == (CALL,)
    assert live[0].usage.cost_usd > 0

    provider = replay(path)
    assert isinstance(provider, LLMProvider)
    assert [await provider.complete(FIRST), await provider.complete(SECOND)] == live
    assert provider.remaining == 0
    await provider.aclose()


async def test_recording_keeps_no_message_text(server: FakeOpenAI, tmp_path: Path) -> None:
    """The file holds format, version and request summaries, but no message texts."""
    path = tmp_path / "session.json"
    await record_session(server, path)
    text = path.read_text(encoding="utf-8")
    data = json.loads(text)
    assert (data["format"], data["version"]) == ("autogpt-replay", 1)
    assert data["exchanges"][1]["request"] == {
        "model": "gpt-4o-mini",
        "tools": ["write_file", "finish"],
        "message_count": 4,
        "last_message": {"role": "tool", "tool_call_id": "call_1"},
    }
    assert data["exchanges"][0]["response"]["tool_calls"] == [
        {"id": "call_1", "name": "write_file", "arguments": CALL.arguments}
    ]
    assert SECRET_TEXT not in text
    assert "Your goal" not in text


async def test_recorder_closes_the_wrapped_provider(server: FakeOpenAI, tmp_path: Path) -> None:
    """Closing the recorder closes the real provider it wraps."""
    inner = openai_provider(server)
    recorder = recording_provider(inner, tmp_path / "r.json")
    assert isinstance(recorder, RecordingProvider)
    assert isinstance(recorder, LLMProvider)
    await recorder.aclose()
    assert inner.closed


async def test_strict_mismatch_names_file_exchange_difference_and_fix(
    server: FakeOpenAI, tmp_path: Path
) -> None:
    """Offering other tools than recorded raises ReplayMismatchError saying all of it."""
    path = tmp_path / "session.json"
    await record_session(server, path)
    provider = replay(path)
    changed = LLMRequest(messages=FIRST.messages, tools=(tool("finish"), tool("read_file")))
    with pytest.raises(ReplayMismatchError) as info:
        await provider.complete(changed)
    message = str(info.value)
    assert str(path) in message
    assert "exchange 1 of 2" in message
    assert "no longer offered: write_file" in message
    assert "newly offered: read_file" in message
    assert f"--record {path}" in message
    assert "--no-strict" in message
    assert provider.remaining == 2


async def test_strict_mode_compares_the_last_message(server: FakeOpenAI, tmp_path: Path) -> None:
    """A different last message (a user turn, not the tool result) is a mismatch."""
    path = tmp_path / "session.json"
    await record_session(server, path)
    provider = replay(path)
    await provider.complete(FIRST)
    diverged = LLMRequest(messages=(*FIRST.messages, Message(Role.USER, "Stop.")), tools=TOOLS)
    with pytest.raises(ReplayMismatchError, match="exchange 2 of 2") as info:
        await provider.complete(diverged)
    assert "recorded a tool result for call_1, now a user message" in str(info.value)


async def test_strict_mode_ignores_texts_tool_order_and_model(
    server: FakeOpenAI, tmp_path: Path
) -> None:
    """Changed texts, reordered tools and another model still match in strict mode."""
    path = tmp_path / "session.json"
    live = await record_session(server, path)
    provider = replay(path)
    reworded = LLMRequest(
        messages=(Message(Role.SYSTEM, "other prompt, other paths"), Message(Role.USER, "Go.")),
        tools=tuple(reversed(TOOLS)),
        model="another-model",
    )
    assert await provider.complete(reworded) == live[0]


async def test_past_the_end_says_how_many_exchanges_and_the_fix(
    server: FakeOpenAI, tmp_path: Path
) -> None:
    """Asking for more than was recorded raises ReplayMismatchError with the count."""
    path = tmp_path / "session.json"
    await record_session(server, path)
    provider = replay(path, strict=False)
    await provider.complete(FIRST)
    await provider.complete(SECOND)
    with pytest.raises(ReplayMismatchError) as info:
        await provider.complete(SECOND)
    message = str(info.value)
    assert f"recording {path} has 2 exchanges; the session asked for more" in message
    assert "--record" in message
    assert "--max-cycles" in message


@pytest.mark.parametrize("strict", [False, "false", "off", 0])
async def test_non_strict_mode_tolerates_a_changed_request(
    server: FakeOpenAI, tmp_path: Path, strict: object
) -> None:
    """With strict off, the recorded responses play whatever is asked."""
    path = tmp_path / "session.json"
    live = await record_session(server, path)
    provider = replay(path, strict=strict)
    assert not provider.strict
    anything = LLMRequest(messages=(Message(Role.USER, "something else"),))
    assert await provider.complete(anything) == live[0]
    assert await provider.complete(anything) == live[1]


async def test_crash_mid_recording_keeps_earlier_exchanges(
    server: FakeOpenAI, tmp_path: Path
) -> None:
    """The file is valid after every exchange; a failing request leaves what was recorded."""
    path = tmp_path / "deep" / "session.json"
    server.add(SCRIPT[0], SCRIPT[1], Reply(status=500, error_message="boom"))
    recorder = recording_provider(openai_provider(server), path)
    try:
        for count, request in enumerate((FIRST, SECOND), start=1):
            await recorder.complete(request)
            assert len(json.loads(path.read_text(encoding="utf-8"))["exchanges"]) == count
        with pytest.raises(LLMError, match="boom"):
            await recorder.complete(SECOND)
        assert len(load_recording(path).exchanges) == 2
    finally:
        await recorder.aclose()
    assert len(load_recording(path).exchanges) == 2
    assert [p.name for p in path.parent.iterdir()] == ["session.json"]  # no temp files left


async def test_concurrent_exchanges_are_all_recorded(server: FakeOpenAI, tmp_path: Path) -> None:
    """Requests finishing together are all in the final file."""
    path = tmp_path / "session.json"
    server.add(*(Reply(content=f"answer {i}") for i in range(4)))
    recorder = recording_provider(openai_provider(server), path)
    try:
        async with trio.open_nursery() as nursery:
            for _ in range(4):
                nursery.start_soon(recorder.complete, FIRST)
    finally:
        await recorder.aclose()
    contents = sorted(e.response.message.content for e in load_recording(path).exchanges)
    assert contents == [f"answer {i}" for i in range(4)]


async def test_closing_an_unused_recorder_writes_an_empty_recording(tmp_path: Path) -> None:
    """A session that never asked the model still leaves a valid, empty recording."""
    path = tmp_path / "empty.json"
    await recording_provider(replay(write_json(tmp_path / "x.json", empty())), path).aclose()
    assert load_recording(path) == Recording()


async def test_replay_is_a_checkpoint(tmp_path: Path) -> None:
    """complete() checkpoints: in a cancelled scope it is cancelled before playing anything."""
    provider = replay(write_json(tmp_path / "one.json", one_exchange()))
    with trio.CancelScope() as scope:
        scope.cancel()
        await provider.complete(FIRST)
    assert scope.cancelled_caught
    assert provider.remaining == 1


async def test_hand_written_recording_without_request_summaries(tmp_path: Path) -> None:
    """Omitted request fields are not compared; object arguments become a JSON string."""
    provider = replay(write_json(tmp_path / "hand.json", one_exchange()))
    response = await provider.complete(LLMRequest(messages=(Message(Role.USER, "anything"),)))
    assert response == LLMResponse(
        message=Message(
            Role.ASSISTANT,
            "Done.",
            tool_calls=(ToolCall("call_0", "finish", '{"reason": "done"}'),),
        ),
        usage=Usage(prompt_tokens=3, completion_tokens=2, cost_usd=0.0),
        model=None,
    )


def empty() -> dict[str, Any]:
    return {"format": "autogpt-replay", "version": 1, "exchanges": []}


def one_exchange() -> dict[str, Any]:
    response = {
        "content": "Done.",
        "tool_calls": [{"name": "finish", "arguments": {"reason": "done"}}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2},
    }
    return {**empty(), "exchanges": [{"response": response}]}


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "does not exist"),
        ("{not json", "is not valid JSON (Expecting property name"),
        (json.dumps({"format": "cassette", "version": 1}), "format: must be 'autogpt-replay'"),
        (json.dumps({**empty(), "version": 2}), "version 2 is not supported"),
        (json.dumps({**empty(), "exchanges": {}}), "exchanges: must be a list"),
        (
            json.dumps({**empty(), "exchanges": [{"response": {"tool_calls": [{"id": 5}]}}]}),
            "exchanges[0].response.tool_calls[0].id: must be a string",
        ),
        (
            json.dumps({**empty(), "exchanges": [{"response": {"usage": {"prompt_tokens": -1}}}]}),
            "exchanges[0].response.usage.prompt_tokens: must be a whole number",
        ),
    ],
)
def test_invalid_recordings_name_file_field_and_fix(
    tmp_path: Path, content: str | None, expected: str
) -> None:
    """A missing or invalid recording is a ConfigError naming the file, the problem and a fix."""
    path = tmp_path / "bad.json"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        replay(path)
    assert str(path) in str(info.value)
    assert expected in str(info.value)
    assert "--record" in str(info.value)


def test_factory_needs_a_path() -> None:
    """Without extra["path"] the factory says to use --llm replay:FILE."""
    with pytest.raises(ConfigError, match="--llm replay:FILE"):
        factory(ProviderOptions())


def test_factory_refuses_an_unreadable_strict_flag(tmp_path: Path) -> None:
    """A strict option that is not a boolean is a ConfigError."""
    with pytest.raises(ConfigError, match="strict must be true or false"):
        replay(write_json(tmp_path / "e.json", empty()), strict="sometimes")


def test_register_llm_providers_offers_replay() -> None:
    """The hook registers the replay factory, and nothing else: recording is a wrapper."""
    registered: dict[str, Any] = {}
    llm_replay.register_llm_providers(register=registered.__setitem__)
    assert registered == {"replay": factory}


async def test_skip_resumes_after_played_exchanges(tmp_path: Path) -> None:
    """A resumed session's replay starts after the exchanges its completed cycles used."""
    exchanges = [{"response": {"content": f"answer {i}"}} for i in range(3)]
    path = write_json(tmp_path / "r.json", {**empty(), "exchanges": exchanges})
    provider = factory(ProviderOptions(extra={"path": str(path)}, resume_after=2))
    assert (await provider.complete(FIRST)).message.content == "answer 2"
    assert provider.remaining == 0


def test_strict_is_the_plugins_setting_and_defaults_to_true(tmp_path: Path) -> None:
    """Without settings (or without ``strict`` in them) the replay is strict; the core
    sends no replay option through ``extra``."""
    path = write_json(tmp_path / "e.json", empty())
    assert factory(ProviderOptions(extra={"path": str(path)})).strict
    assert replay(path).strict
    assert not replay(path, strict=False).strict
    assert factory(ProviderOptions(extra={"path": str(path), "strict": False})).strict


def test_manifest_is_valid() -> None:
    """The manifest passes the schema: enabled by default, no permissions, no commands."""
    path = ROOT / "autogpt_plugins" / "llm_replay" / "autogpt-plugin.yaml"
    manifest = yaml.safe_load(path.read_text(encoding="utf-8"))
    schema = json.loads((ROOT / "hookspecs" / "manifest.schema.json").read_text("utf-8"))
    jsonschema.validate(manifest, schema)
    assert manifest["id"] == "llm_replay"
    assert manifest["enabled_by_default"] is True
    assert manifest["permissions"] == []
    assert manifest["capabilities"]["commands"] == []


# --- bounded, validated recordings -------------------------------------------------------


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def _unblock_fifo_later(path: Path, after: float) -> threading.Thread:
    """Open ``path`` for writing after ``after`` seconds, then close it: a reader blocked
    opening the FIFO is released, so a regression fails the test instead of hanging it."""

    def writer() -> None:
        time.sleep(after)
        with contextlib.suppress(OSError):
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            os.close(fd)

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    return thread


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")
def test_a_fifo_a_device_or_a_directory_is_refused_at_once(tmp_path: Path) -> None:
    """A recording path that is not a regular file is refused without reading (a FIFO
    would wait for a writer, /dev/zero never ends), naming the file, what it is and the fix."""
    fifo = tmp_path / "rec.fifo"
    os.mkfifo(fifo)
    thread = _unblock_fifo_later(fifo, after=5.0)
    started = time.monotonic()
    with pytest.raises(ConfigError) as info:
        replay(fifo)
    assert time.monotonic() - started < 2.0
    assert f"recording {fifo} is a FIFO (named pipe), not a regular file" in str(info.value)
    assert "--record FILE" in str(info.value)
    for path, kind in ((Path("/dev/zero"), "a device"), (tmp_path, "a directory")):
        with pytest.raises(ConfigError, match=f"is {kind}, not a regular file"):
            replay(path)
    thread.join()


def test_a_recording_over_the_size_limit_is_refused_unread(tmp_path: Path) -> None:
    """A file larger than 64 MiB is refused with the limit and what to check."""
    path = tmp_path / "huge.json"
    with path.open("wb") as file:
        file.truncate(llm_replay.MAX_RECORDING_BYTES + 1)  # sparse: nothing is written
    with pytest.raises(ConfigError) as info:
        replay(path)
    assert f"recording {path} is larger than 64 MiB" in str(info.value)


@pytest.mark.parametrize(
    "text",
    [
        "[" * 10_000 + "]" * 10_000,
        json.dumps(
            {
                **empty(),
                "exchanges": [
                    {"response": {"tool_calls": [{"name": "f", "arguments": _nested(200)}]}}
                ],
            }
        ),
    ],
)
def test_deeply_nested_recordings_are_refused(tmp_path: Path, text: str) -> None:
    """JSON nested past the limit, whether too deep for the parser or not, is refused
    naming the file and the limit: never a RecursionError."""
    path = tmp_path / "deep.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        replay(path)
    assert f"recording {path} nests arrays and objects more than 100 levels deep" in str(info.value)


@pytest.mark.parametrize(
    ("cost", "expected"),
    [
        ("NaN", "is not valid JSON (NaN is not a number JSON allows)"),
        ("Infinity", "is not valid JSON (Infinity is not a number JSON allows)"),
        ("1e999", "usage.cost_usd: must be a number from 0 to 1,000,000, not inf"),
        ("-0.5", "usage.cost_usd: must be a number from 0 to 1,000,000, not -0.5"),
        ("1e300", "usage.cost_usd: must be a number from 0 to 1,000,000, not 1e+300"),
        ('"1"', "usage.cost_usd: must be a number >= 0"),
    ],
)
def test_costs_must_be_finite_and_in_range(tmp_path: Path, cost: str, expected: str) -> None:
    """A cost that is NaN, infinite, negative or absurd is refused when the file is loaded,
    before any session starts, so no session is left unable to store its budget."""
    text = json.dumps(one_exchange()).replace('"completion_tokens": 2', f'"cost_usd": {cost}')
    path = tmp_path / "cost.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        replay(path)
    assert f"recording {path}" in str(info.value)
    assert expected in str(info.value)


class _ReportsNaN:
    """A provider whose usage report is broken."""

    async def complete(self, request: LLMRequest) -> LLMResponse:
        return LLMResponse(Message(Role.ASSISTANT, "hi"), usage=Usage(cost_usd=math.nan))

    async def aclose(self) -> None:
        pass


async def test_the_recorder_refuses_a_usage_it_could_not_replay(tmp_path: Path) -> None:
    """An exchange whose usage is NaN is an LLMError naming the provider, and is not
    recorded: the file stays valid JSON that loads."""
    path = tmp_path / "rec.json"
    recorder = recording_provider(_ReportsNaN(), path)
    with pytest.raises(LLMError, match=r"usage\.cost_usd: must be a number from 0"):
        await recorder.complete(FIRST)
    await recorder.aclose()
    assert load_recording(path).exchanges == ()


_DEMO = ROOT / "autogpt_core" / "demo" / "demo.replay.json"
_SPOT = "@@damaged@@"


@settings(max_examples=80, deadline=None)
@given(
    path=st.lists(st.integers(min_value=0, max_value=50), max_size=9),
    damage=strategies.damaged_json,
)
def test_a_damaged_recording_loads_or_is_a_config_error(
    tmp_path_factory: pytest.TempPathFactory, path: list[int], damage: object
) -> None:
    """Any value of a recording replaced by anything a damaged file may hold (not JSON,
    cut short, nested thousands deep, NaN, huge numbers, wrong types): loading gives a
    valid recording or a ConfigError naming the recording, never another exception."""
    data = json.loads(_DEMO.read_text(encoding="utf-8"))
    text = json.dumps(strategies.replace_in_json(data, path, _SPOT))
    if isinstance(damage, bytes):
        raw = damage.decode("latin-1")
    else:
        raw = damage if isinstance(damage, str) else json.dumps(damage)
    file = tmp_path_factory.mktemp("rec") / "r.json"
    file.write_text(text.replace(json.dumps(_SPOT), raw, 1), encoding="utf-8")
    try:
        recording = load_recording(file)
    except ConfigError as exc:
        problem: str | None = str(exc)
        recording = Recording()
    else:
        problem = None
    assert problem is None or str(file) in problem
    for exchange in recording.exchanges:
        usage = exchange.response.usage
        assert usage.prompt_tokens >= 0
        assert usage.completion_tokens >= 0
        assert math.isfinite(usage.cost_usd)
        assert usage.cost_usd >= 0


# --- recording sessions: the llm_request wrapper -----------------------------------------


async def _record_run(
    tmp_path: Path,
    replies: list[LLMResponse],
    record: str,
    *,
    environ: dict[str, str] | None = None,
    options: Any = None,
) -> Any:
    """Run a scripted session with llm_replay's ``record`` setting, as --record sets it."""
    from autogpt_core.agent._options import RunOptions
    from autogpt_core.agent._runtime import Runtime
    from autogpt_core.plugins._loader import load
    from tests.scripted import GOAL, ScriptedProvider, _config

    cfg = _config(tmp_path, plugin_settings={"llm_replay": {"record": record}})
    plugins = load(cfg, environ=environ or {})
    plugins.providers["scripted"] = ("tests", lambda _: ScriptedProvider(list(replies)))
    async with Runtime(cfg, plugins=plugins) as rt:
        return await rt.run(GOAL, options or RunOptions(llm="scripted", workspace=tmp_path / "ws"))


async def test_a_session_is_recorded_by_the_wrapper_and_replays(tmp_path: Path) -> None:
    """With ``record`` set, every exchange of the session is recorded, whichever provider
    answered; the recording replays the session to the same end."""
    from autogpt_core.agent._options import RunOptions
    from autogpt_core.agent._runtime import Runtime
    from tests.scripted import GOAL, _config, _reply

    path = tmp_path / "session.json"
    replies = [
        _reply("write_file", {"path": "a.txt", "content": "hi"}, "w1"),
        _reply("finish", {"result": "done"}, "f1"),
    ]
    outcome = await _record_run(tmp_path, replies, str(path))
    assert (outcome.status, outcome.result) == ("finished", "done")
    recorded = load_recording(path)
    assert [e.response for e in recorded.exchanges] == replies
    assert recorded.exchanges[1].request["last_message"] == {"role": "tool", "tool_call_id": "w1"}

    async with Runtime(_config(tmp_path / "again")) as rt:
        again = await rt.run(
            GOAL, RunOptions(llm=f"replay:{path}", workspace=tmp_path / "again" / "ws")
        )
    assert (again.status, again.result) == ("finished", "done")


async def test_the_recording_keeps_the_models_answers_masked(tmp_path: Path) -> None:
    """A secret the model repeats is masked before the recorder sees the answer."""
    from tests.scripted import _reply

    secret = "sk-recorded-secret-4242"
    path = tmp_path / "masked.json"
    replies = [_reply("finish", {"result": f"the key is {secret}"}, "f1")]
    outcome = await _record_run(tmp_path, replies, str(path), environ={"OPENAI_API_KEY": secret})
    assert outcome.result == "the key is ***"
    text = path.read_text(encoding="utf-8")
    assert secret not in text
    assert "the key is ***" in text


async def test_a_session_that_asked_nothing_leaves_an_empty_recording(tmp_path: Path) -> None:
    """A failed request is not recorded; the session's end still leaves a valid file."""

    class Down:
        async def complete(self, request: LLMRequest) -> LLMResponse:
            raise LLMError("the model is down")

        async def aclose(self) -> None:
            pass

    from autogpt_core.agent._options import RunOptions
    from autogpt_core.agent._runtime import Runtime
    from autogpt_core.plugins._loader import load
    from tests.scripted import GOAL, _config

    path = tmp_path / "empty.json"
    cfg = _config(tmp_path, plugin_settings={"llm_replay": {"record": str(path)}})
    plugins = load(cfg, environ={})
    plugins.providers["down"] = ("tests", lambda _: Down())
    async with Runtime(cfg, plugins=plugins) as rt:
        outcome = await rt.run(GOAL, RunOptions(llm="down", workspace=tmp_path / "ws"))
    assert (outcome.status, outcome.result) == ("failed", "the model is down")
    assert load_recording(path) == Recording()


async def test_concurrent_sessions_record_into_files_of_their_own(tmp_path: Path) -> None:
    """``{session_id}`` gives each session its own file; without it, a second session
    recording into the same file at the same time is refused, naming the fix."""
    from autogpt_core.agent._options import RunOptions
    from autogpt_core.agent._runtime import Runtime
    from autogpt_core.plugins._loader import load
    from tests.scripted import GOAL, _config, _reply

    class Gate:
        """Answers 'finish' once both sessions have asked."""

        def __init__(self, both: trio.Event, asked: list[str]) -> None:
            self.both, self.asked = both, asked

        async def complete(self, request: LLMRequest) -> LLMResponse:
            self.asked.append("x")
            if len(self.asked) == 2:
                self.both.set()
            await self.both.wait()
            return _reply("finish", {"result": "ok"}, "f1")

        async def aclose(self) -> None:
            pass

    async def two_sessions(record: str) -> list[Any]:
        cfg = _config(tmp_path, plugin_settings={"llm_replay": {"record": record}})
        plugins = load(cfg, environ={})
        both, asked = trio.Event(), []
        plugins.providers["gate"] = ("tests", lambda _: Gate(both, asked))
        outcomes: dict[str, Any] = {}
        async with Runtime(cfg, plugins=plugins) as rt:

            async def one(session_id: str) -> None:
                options = RunOptions(llm="gate", session_id=session_id, workspace=tmp_path / "w")
                outcomes[session_id] = await rt.run(GOAL, options)

            with trio.fail_after(30):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(one, f"a{len(record)}")
                    nursery.start_soon(one, f"b{len(record)}")
        return [outcomes[key] for key in sorted(outcomes)]

    each = str(tmp_path / "rec-{session_id}.json")
    assert [o.status for o in await two_sessions(each)] == ["finished", "finished"]
    for name in (f"a{len(each)}", f"b{len(each)}"):
        assert len(load_recording(tmp_path / f"rec-{name}.json").exchanges) == 1

    shared = str(tmp_path / "shared.json")
    outcomes = await two_sessions(shared)
    assert sorted(o.status for o in outcomes) == ["failed", "finished"]
    (refused,) = [o.result for o in outcomes if o.status == "failed"]
    assert "is being recorded into it" in refused
    assert "{session_id}" in refused
    assert len(load_recording(shared).exchanges) == 1
