"""The ``openai`` LLM provider: OpenAI, or any OpenAI-compatible server, via ``AsyncOpenAI``.

Registers the provider ``openai`` (``--llm openai``). Settings come from the plugin's
config (``api_key``, ``base_url``, ``model``, ``timeout``, ``max_retries`` and the two
prices), which ``configure`` stores; the factory's ``ProviderOptions`` (``--model``,
``--base-url``, an API key) win over them, and ``OPENAI_API_KEY``/``OPENAI_BASE_URL`` are
read when neither gives a value.

A provider owns one ``openai.AsyncOpenAI`` client; ``aclose`` closes it. The client runs
under trio as it is: its HTTP layer picks trio's network backend through sniffio. Closing
is not optional, though: the SDK's finalizer that would close a forgotten client only
knows asyncio, so under trio a forgotten client leaks its sockets.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from typing import Any, cast

import attrs
import openai
from openai.types.chat import ChatCompletion, ChatCompletionMessageParam

from autogpt_core import ConfigError, LLMError, MissingAPIKeyError, Redactor
from hookspecs import (
    JSON,
    LLMRequest,
    LLMResponse,
    Message,
    ProviderOptions,
    Role,
    ToolCall,
    ToolSpec,
    Usage,
)

PROVIDER_NAME = "openai"
DEFAULT_MODEL = "gpt-4o-mini"
DEFAULT_TIMEOUT = 60.0
DEFAULT_MAX_RETRIES = 2

#: Sent as the key to a ``base_url`` server when no key is configured: local servers
#: (Ollama, llama.cpp, vLLM) ignore it, but the client refuses to start without one.
LOCAL_SERVER_KEY = "not-needed"

MISSING_KEY_MESSAGE = (
    "No OpenAI API key: set OPENAI_API_KEY, or pass --base-url for a local "
    "OpenAI-compatible server (Ollama, llama.cpp, vLLM), or run with --demo for the "
    "offline demo"
)

#: USD per 1000 (prompt, completion) tokens: list prices at the time of writing, used for
#: cost accounting unless the ``price_per_1k_*`` settings say otherwise. A model matches
#: the longest name that is equal to it or a prefix followed by ``-`` (dated snapshots).
KNOWN_PRICES: Mapping[str, tuple[float, float]] = {
    "gpt-3.5-turbo": (0.0005, 0.0015),
    "gpt-4-turbo": (0.01, 0.03),
    "gpt-4.1": (0.002, 0.008),
    "gpt-4.1-mini": (0.0004, 0.0016),
    "gpt-4.1-nano": (0.0001, 0.0004),
    "gpt-4o": (0.0025, 0.01),
    "gpt-4o-mini": (0.00015, 0.0006),
    "gpt-5": (0.00125, 0.01),
    "gpt-5-mini": (0.00025, 0.002),
    "gpt-5-nano": (0.00005, 0.0004),
    "o3": (0.002, 0.008),
    "o3-mini": (0.0011, 0.0044),
    "o4-mini": (0.0011, 0.0044),
}


def price_for(model: str) -> tuple[float, float]:
    """USD per 1000 (prompt, completion) tokens of a known model; ``(0, 0)`` if unknown."""
    matches = [name for name in KNOWN_PRICES if model == name or model.startswith(name + "-")]
    if not matches:
        return (0.0, 0.0)
    return KNOWN_PRICES[max(matches, key=len)]


@attrs.frozen
class OpenAIConfig:
    """Everything an ``OpenAIProvider`` needs, resolved. ``api_key`` never shows in a repr."""

    api_key: str = attrs.field(repr=False)
    base_url: str | None = None
    model: str = DEFAULT_MODEL
    timeout: float = DEFAULT_TIMEOUT
    max_retries: int = DEFAULT_MAX_RETRIES
    price_per_1k_input: float | None = None
    price_per_1k_output: float | None = None

    def prices(self, model: str) -> tuple[float, float]:
        """The (input, output) prices for ``model``: the settings, else ``KNOWN_PRICES``."""
        known_in, known_out = price_for(model)
        return (
            known_in if self.price_per_1k_input is None else self.price_per_1k_input,
            known_out if self.price_per_1k_output is None else self.price_per_1k_output,
        )


def resolve_config(
    options: ProviderOptions, settings: Mapping[str, JSON] | None = None
) -> OpenAIConfig:
    """Merge options (first), settings, then the environment; raise if there is no key.

    ``options.extra`` may override ``timeout``, ``max_retries`` and the prices.
    Raises ``MissingAPIKeyError`` when there is neither a key nor a ``base_url``.
    """
    values: Mapping[str, JSON] = {} if settings is None else settings
    extra = options.extra

    base_url = _first_text(options.base_url, values.get("base_url"), _env("OPENAI_BASE_URL"))
    api_key = _first_text(options.api_key, values.get("api_key"), _env("OPENAI_API_KEY"))
    if api_key is None:
        if base_url is None:
            raise MissingAPIKeyError(MISSING_KEY_MESSAGE)
        api_key = LOCAL_SERVER_KEY
    model = _first_text(options.model, values.get("model")) or DEFAULT_MODEL

    def pick(name: str) -> JSON:
        return extra[name] if extra.get(name) is not None else values.get(name)

    timeout = _number(pick("timeout"), "timeout")
    max_retries = _number(pick("max_retries"), "max_retries")
    return OpenAIConfig(
        api_key=api_key,
        base_url=base_url,
        model=model,
        timeout=DEFAULT_TIMEOUT if timeout is None else timeout,
        max_retries=DEFAULT_MAX_RETRIES if max_retries is None else int(max_retries),
        price_per_1k_input=_number(pick("price_per_1k_input"), "price_per_1k_input"),
        price_per_1k_output=_number(pick("price_per_1k_output"), "price_per_1k_output"),
    )


def _env(name: str) -> str | None:
    return os.environ.get(name)


def _first_text(*candidates: JSON) -> str | None:
    """The first candidate that is a non-blank string (an empty env variable means unset)."""
    for value in candidates:
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def _number(value: JSON, name: str) -> float | None:
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ConfigError(
            f"llm_openai: {name} must be a number, not {value!r}: fix the plugin's "
            f"{name} setting or the option that sets it"
        ) from None
    if number < 0:
        raise ConfigError(f"llm_openai: {name} must not be negative, got {value!r}")
    return number


class OpenAIProvider:
    """An ``LLMProvider`` sending chat completions through one ``openai.AsyncOpenAI`` client.

    Await ``aclose`` when done: it closes the client's connections.
    """

    def __init__(self, config: OpenAIConfig) -> None:
        self.config = config
        self._client = openai.AsyncOpenAI(
            api_key=config.api_key,
            base_url=config.base_url,
            max_retries=config.max_retries,
            timeout=config.timeout,
        )
        # The URL users gave is the one they recognise in an error message.
        self.base_url = config.base_url or str(self._client.base_url)

    def __repr__(self) -> str:
        return f"OpenAIProvider(model={self.config.model!r}, base_url={self.base_url!r})"

    @property
    def closed(self) -> bool:
        """Whether ``aclose`` has closed the client."""
        return self._client.is_closed()

    async def aclose(self) -> None:
        """Close the HTTP client and its connections; calling it again does nothing."""
        await self._client.close()

    async def complete(self, request: LLMRequest) -> LLMResponse:
        """Send ``request`` as one chat completion and return the assistant's answer.

        Raises ``LLMError`` naming the server and what to check when the request fails.
        """
        if self.closed:
            # httpx2 would raise a bare RuntimeError; the caller deserves an LLMError.
            raise LLMError(
                f"{self!r} was used after aclose(): make a new provider for each session"
            )
        model = request.model or self.config.model
        # Optional arguments are left out rather than sent as null: several
        # OpenAI-compatible servers reject ``"tools": null`` or ``[]``.
        optional: dict[str, Any] = {}
        if request.tools:
            optional["tools"] = [tool_to_openai(tool) for tool in request.tools]
        if request.temperature is not None:
            optional["temperature"] = request.temperature
        if request.max_tokens is not None:
            # ``max_tokens`` rather than ``max_completion_tokens``: local servers know it.
            optional["max_tokens"] = request.max_tokens
        messages = [message_to_openai(m, i) for i, m in enumerate(request.messages)]
        try:
            completion: ChatCompletion = await self._client.chat.completions.create(
                model=model,
                messages=cast("list[ChatCompletionMessageParam]", messages),
                **optional,
            )
        except openai.OpenAIError as exc:
            raise self._error(exc, model) from exc
        return self._response(completion, model)

    def _response(self, completion: ChatCompletion, model: str) -> LLMResponse:
        choices = getattr(completion, "choices", None)
        if not choices:
            raise LLMError(
                f"{self.base_url} answered without choices for model {model!r}: check that "
                "the server implements OpenAI's chat completions"
            )
        raw = choices[0].message
        tool_calls = tuple(
            tool_call_from_openai(item, i)
            for i, item in enumerate(getattr(raw, "tool_calls", None) or ())
            if item is not None
        )
        message = Message(
            role=Role.ASSISTANT,
            content=getattr(raw, "content", None) or "",
            tool_calls=tool_calls,
        )
        answered_by = getattr(completion, "model", None) or model
        return LLMResponse(
            message=message,
            usage=self._usage(getattr(completion, "usage", None), model, answered_by),
            model=answered_by,
        )

    def _usage(self, usage: Any, model: str, answered_by: str) -> Usage:
        if usage is None:  # local servers may not report usage
            return Usage()
        prompt = self._count(usage, "prompt_tokens")
        completion = self._count(usage, "completion_tokens")
        price_in, price_out = self.config.prices(model)
        if (price_in, price_out) == (0.0, 0.0):
            price_in, price_out = self.config.prices(answered_by)
        cost = (prompt * price_in + completion * price_out) / 1000
        if not (math.isfinite(cost) and cost >= 0):
            raise LLMError(
                f"the cost of a request to {self.base_url} came out as {cost!r}: check the "
                "llm_openai settings price_per_1k_input and price_per_1k_output (finite "
                "numbers, 0 or more)"
            )
        return Usage(prompt_tokens=prompt, completion_tokens=completion, cost_usd=cost)

    def _count(self, usage: Any, field: str) -> int:
        """A token count the server reported: a whole number, 0 or more (it is not checked
        by the client, and a NaN or a negative count would poison the session's budget)."""
        value = getattr(usage, field, 0) or 0
        if isinstance(value, bool) or not isinstance(value, int | float):
            value = None
        elif isinstance(value, float):
            value = int(value) if math.isfinite(value) and value.is_integer() else None
        if value is None or value < 0:
            raise LLMError(
                f"{self.base_url} reported usage.{field} = {getattr(usage, field, None)!r}, "
                "not a whole number of tokens: check the server (its answer is not used)"
            )
        return value

    def _error(self, exc: openai.OpenAIError, model: str) -> LLMError:
        where = self.base_url
        if isinstance(exc, openai.APITimeoutError):
            text = (
                f"{where} did not answer within {self.config.timeout:g} s (model {model!r}): "
                "check the server, or raise the llm_openai timeout setting"
            )
        elif isinstance(exc, openai.APIConnectionError):
            cause = exc.__cause__ or exc
            text = (
                f"cannot connect to {where} ({cause}): check that the server is running and "
                "that --base-url (or OPENAI_BASE_URL) is right"
            )
        elif isinstance(exc, openai.APIStatusError):
            text = self._status_text(exc, where, model)
        else:
            text = f"the OpenAI client failed talking to {where} (model {model!r}): {exc}"
        return LLMError(self._redact(text))

    def _status_text(self, exc: openai.APIStatusError, where: str, model: str) -> str:
        status = f"HTTP {exc.status_code}"
        detail = _detail(exc.body)
        said = f"{status}: {detail}" if detail else status
        if isinstance(exc, openai.AuthenticationError):
            return (
                f"{where} rejected the API key ({said}): check OPENAI_API_KEY or the "
                "llm_openai api_key setting"
            )
        if isinstance(exc, openai.PermissionDeniedError):
            return (
                f"{where} refused access to model {model!r} ({said}): check that your key, "
                "organization and project may use it"
            )
        if isinstance(exc, openai.NotFoundError):
            return (
                f"{where} has no model {model!r} or no chat completions endpoint ({said}): "
                "check --model, and that --base-url ends in /v1"
            )
        if isinstance(exc, openai.RateLimitError):
            return (
                f"{where} rate-limited the request or the quota is used up ({said}): wait and "
                "try again, or check your plan and billing"
            )
        if isinstance(exc, openai.BadRequestError | openai.UnprocessableEntityError):
            return (
                f"{where} refused the request for model {model!r} ({said}): check that the "
                "model supports tool calling and that the conversation fits its context"
            )
        if exc.status_code >= 500:
            return (
                f"{where} failed ({said}) after {self.config.max_retries} retries: try again "
                "later, or check the server's logs"
            )
        return f"{where} answered {said} for model {model!r}"

    def _redact(self, text: str) -> str:
        key = self.config.api_key
        if key and key != LOCAL_SERVER_KEY:
            # The core's rule, so that a short test key cannot mangle the message.
            text = Redactor([key]).text(text)
        return text


def _detail(body: object) -> str:
    """The error message in an error body, shortened; ``""`` if there is none."""
    message: object = body
    if isinstance(body, Mapping):
        message = body.get("message") or body.get("error") or ""
    text = message if isinstance(message, str) else json.dumps(message, default=str)
    text = " ".join(text.split())
    return text if len(text) <= 300 else text[:297] + "..."


def tool_to_openai(tool: ToolSpec) -> dict[str, Any]:
    """A ``ToolSpec`` as an OpenAI ``function`` tool."""
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": dict(tool.parameters),
        },
    }


def message_to_openai(message: Message, index: int = 0) -> dict[str, Any]:
    """A ``Message`` in the chat completions format; ``index`` is used in error messages."""
    if message.role is Role.TOOL:
        if message.tool_call_id is None:
            raise LLMError(
                f"message {index} is a tool result without a tool_call_id: OpenAI cannot "
                "pair it with a tool call (this is a bug in whatever built the conversation)"
            )
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    if message.role is Role.ASSISTANT and message.tool_calls:
        return {
            "role": "assistant",
            # OpenAI wants null, not "", beside tool calls when there is no text.
            "content": message.content or None,
            "tool_calls": [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for call in message.tool_calls
            ],
        }
    return {"role": str(message.role), "content": message.content}


def tool_call_from_openai(item: Any, index: int) -> ToolCall:
    """A ``ToolCall`` from one entry of ``message.tool_calls``, however incomplete.

    Whatever is missing becomes ``""`` (the core tells the model what was wrong) and
    ``arguments`` stays the raw string; servers that send an object get it as JSON.
    A call without an id gets ``call_<index>`` so its result can still be paired with it.
    """
    function = getattr(item, "function", None)
    if function is None and getattr(item, "custom", None) is not None:
        custom = item.custom
        name, arguments = getattr(custom, "name", None), getattr(custom, "input", None)
    else:
        name, arguments = getattr(function, "name", None), getattr(function, "arguments", None)
    if arguments is None:
        arguments = ""
    elif not isinstance(arguments, str):
        arguments = json.dumps(arguments)
    call_id = getattr(item, "id", None)
    return ToolCall(
        id=call_id if isinstance(call_id, str) and call_id else f"call_{index}",
        name=name if isinstance(name, str) else "",
        arguments=arguments,
    )


__all__ = [
    "DEFAULT_MAX_RETRIES",
    "DEFAULT_MODEL",
    "DEFAULT_TIMEOUT",
    "KNOWN_PRICES",
    "LOCAL_SERVER_KEY",
    "MISSING_KEY_MESSAGE",
    "OpenAIConfig",
    "OpenAIProvider",
    "PROVIDER_NAME",
    "message_to_openai",
    "price_for",
    "resolve_config",
    "tool_call_from_openai",
    "tool_to_openai",
]
