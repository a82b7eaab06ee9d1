"""The model: the anthropic SDK's AsyncAnthropic, retries, prompt-cache marks, token usage.

Owns one call to the Messages API: a byte-stable request prefix (tools, system) with a
`cache_control` mark on its last block, tenacity retries on what is temporary (429, 529, other
5xx, 408/409, timeouts, connection errors) with a log line on every attempt, and the
translation of every failure into a ModelError that says what to do. It knows nothing of memory.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
)

from .errors import ModelError
from .settings import ModelSection
from .store.events import SURROGATE

log = logging.getLogger(__name__)


class _OnFirstUse:
    """The anthropic SDK, imported when first used: importing it costs about 3 s of CPU (its
    types), which a loop with no model, and every command that never calls one, need not pay."""

    def __getattr__(self, name: str) -> Any:
        return getattr(importlib.import_module("anthropic"), name)


if TYPE_CHECKING:
    import anthropic
    from anthropic.types import MessageParam, TextBlockParam, ToolUnionParam
else:
    anthropic = _OnFirstUse()

CACHE_MARK = {"type": "ephemeral"}
RETRY_WAIT_S = 1.0  # the first backoff; it doubles each retry (was [model] retry_wait_s)
RETRY_MAX_WAIT_S = 30.0  # the longest single wait, a Retry-After too (was [model] retry_max_wait_s)


class CallDeadline(Exception):
    """One attempt ran past `timeout_s` end to end (a hung or dripping server)."""


@dataclass(frozen=True)
class Reply:
    """What came back: content blocks as plain dicts, why it stopped, and the token usage."""

    content: list[dict[str, Any]]
    stop_reason: str | None
    model: str
    usage: dict[str, int] = field(default_factory=dict)
    attempts: int = 1

    @property
    def text(self) -> str:
        return "\n".join(b.get("text", "") for b in self.content if b.get("type") == "text").strip()

    @property
    def tool_uses(self) -> list[dict[str, Any]]:
        return [b for b in self.content if b.get("type") == "tool_use"]


def is_retryable(exc: BaseException) -> bool:
    if isinstance(exc, CallDeadline | anthropic.APIConnectionError):  # includes APITimeoutError
        return True
    if isinstance(exc, anthropic.APIStatusError):
        return exc.status_code in (408, 409, 429) or exc.status_code >= 500
    return False


def describe(exc: BaseException) -> str:
    if isinstance(exc, CallDeadline):
        return f"took longer than its deadline ({exc})"
    if isinstance(exc, anthropic.APITimeoutError):
        return "timed out"
    if isinstance(exc, anthropic.APIConnectionError):
        return f"could not connect ({exc.__cause__ or exc})"
    if isinstance(exc, anthropic.APIStatusError):
        names = {429: "rate limited", 529: "overloaded"}
        return f"HTTP {exc.status_code} {names.get(exc.status_code, '')}".strip()
    return f"{type(exc).__name__}: {exc}"


def cacheable_system(blocks: list[str]) -> list[dict[str, Any]]:
    """System text blocks with the cache mark on the last one: tools + system are the prefix."""
    out: list[dict[str, Any]] = [{"type": "text", "text": b} for b in blocks if b]
    if out:
        out[-1]["cache_control"] = dict(CACHE_MARK)
    return out


class Model:
    """One configured endpoint. `await model.create(system=..., tools=..., messages=...)`."""

    def __init__(self, cfg: ModelSection) -> None:
        self.cfg = cfg
        # The SDK's own retries are off: tenacity owns retrying so every attempt is logged.
        self.client = anthropic.AsyncAnthropic(
            api_key=cfg.resolved_api_key(),
            base_url=cfg.base_url or None,
            timeout=cfg.timeout_s,
            max_retries=0,
        )

    async def close(self) -> None:
        await self.client.close()

    def _wait(self, state: RetryCallState) -> float:
        exp = RETRY_WAIT_S * (2 ** (state.attempt_number - 1))
        wait = min(exp, RETRY_MAX_WAIT_S)
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, anthropic.APIStatusError):
            after = exc.response.headers.get("retry-after")
            try:
                if after is not None:
                    wait = min(max(wait, float(after)), RETRY_MAX_WAIT_S)
            except ValueError:
                pass
        return wait

    def _before_sleep(self, state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        log.warning(
            "model call attempt %d/%d failed (%s); retrying in %.2f s",
            state.attempt_number, self.cfg.max_retries + 1, describe(exc) if exc else "?",
            state.next_action.sleep if state.next_action else 0.0,
        )

    async def create(self, *, system: list[dict[str, Any]], tools: list[dict[str, Any]],
                     messages: list[dict[str, Any]],
                     tool_choice: dict[str, Any] | None = None) -> Reply:
        """One call, retried on what is temporary. `tool_choice` (`{"type": "tool", "name":
        ...}`) forces an answer through that tool; None leaves the choice to the model."""
        attempts = 0
        retrying = AsyncRetrying(
            retry=retry_if_exception(is_retryable),
            stop=stop_after_attempt(self.cfg.max_retries + 1),
            wait=self._wait,
            before_sleep=self._before_sleep,
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    attempts = attempt.retry_state.attempt_number
                    msg = await self._attempt(system, tools, messages, tool_choice)
        except anthropic.APIStatusError as e:
            raise ModelError(_status_advice(e, attempts), attempts=attempts,
                             blames_input=e.status_code in (400, 413, 422)) from e
        except CallDeadline as e:
            raise ModelError(
                f"model endpoint {self.cfg.base_url or 'api.anthropic.com'} {describe(e)} "
                f"after {attempts} attempt(s): the server hangs or answers too slowly; the "
                "loop retries at the next tick ([model] timeout_s)", attempts=attempts) from e
        except anthropic.APIConnectionError as e:
            raise ModelError(
                f"model endpoint {self.cfg.base_url or 'api.anthropic.com'} "
                f"{describe(e)} after {attempts} attempt(s): check [model] base_url and that "
                "the server is up", attempts=attempts
            ) from e
        except (anthropic.APIResponseValidationError, json.JSONDecodeError, ValueError) as e:
            raise ModelError(
                f"the model endpoint answered something that is not a Messages API response "
                f"({type(e).__name__}): check [model] base_url points at an Anthropic-compatible "
                "server", attempts=attempts
            ) from e
        return _to_reply(msg, attempts)


    async def _attempt(self, system: list[dict[str, Any]], tools: list[dict[str, Any]],
                       messages: list[dict[str, Any]],
                       tool_choice: dict[str, Any] | None = None) -> Any:
        """One request under a deadline for the whole call: the client's own timeout is per
        read, so a server that drips a byte a second would otherwise hold the loop for ever."""
        # no tool_choice key at all unless asked: the loop's requests stay byte for byte as before
        choice: dict[str, Any] = {} if tool_choice is None else {"tool_choice": tool_choice}
        try:
            async with asyncio.timeout(self.cfg.timeout_s):
                # the loop builds its requests as plain JSON dicts; the SDK's TypedDicts
                # describe the same shapes, and the server (not this annotation) checks them
                return await self.client.messages.create(
                    model=self.cfg.name,
                    max_tokens=self.cfg.max_tokens,
                    system=cast("list[TextBlockParam]", system),
                    tools=cast("list[ToolUnionParam]", tools),
                    messages=cast("list[MessageParam]", messages),
                    **choice,
                )
        except TimeoutError as e:
            raise CallDeadline(f"{self.cfg.timeout_s:g} s") from e


def _whole(value: Any) -> tuple[Any, int]:
    """`value` (an answer's JSON) with every lone surrogate in its strings and keys as U+FFFD,
    and how many strings held one: such a string can be neither stored nor sent back."""
    if isinstance(value, str):
        return (SURROGATE.sub("\ufffd", value), 1) if SURROGATE.search(value) else (value, 0)
    if isinstance(value, list):
        items = [_whole(v) for v in value]
        return [v for v, _ in items], sum(n for _, n in items)
    if isinstance(value, dict):
        pairs = [(_whole(k), _whole(v)) for k, v in value.items()]
        return ({k: v for (k, _), (v, _) in pairs},
                sum(a + b for (_, a), (_, b) in pairs))
    return value, 0


def _to_reply(msg: Any, attempts: int) -> Reply:
    try:
        content, broken = _whole([b.model_dump(mode="json", exclude_none=True, warnings=False)
                                  for b in msg.content])
        if broken:
            log.warning("the model's answer held %d string(s) with a lone surrogate (a JSON "
                        "\\ud800 escape, no text at all); read as U+FFFD", broken)
        usage = msg.usage
        tokens = {
            "input_tokens": int(getattr(usage, "input_tokens", 0) or 0),
            "output_tokens": int(getattr(usage, "output_tokens", 0) or 0),
            "cache_read_input_tokens": int(getattr(usage, "cache_read_input_tokens", 0) or 0),
            "cache_creation_input_tokens": int(
                getattr(usage, "cache_creation_input_tokens", 0) or 0
            ),
        }
        return Reply(content=content, stop_reason=msg.stop_reason,
                     model=SURROGATE.sub("\ufffd", str(msg.model)),
                     usage=tokens, attempts=attempts)
    except (AttributeError, TypeError, ValueError) as e:
        raise ModelError(
            f"the model endpoint answered something that is not a Messages API response "
            f"({type(e).__name__}: {e}); check [model] base_url"
        ) from e


def _status_advice(e: anthropic.APIStatusError, attempts: int) -> str:
    code = e.status_code
    if code == 401:
        return ("the model endpoint refused the API key (HTTP 401): set ANTHROPIC_API_KEY or "
                "[model] api_key in config.toml")
    if code == 403:
        return "the model endpoint refused access (HTTP 403): check the key's permissions"
    if code == 404:
        return ("the model endpoint answered 404: check [model] name and [model] base_url "
                "(the base URL without /v1/messages)")
    if code == 400:
        return f"the model endpoint rejected the request (HTTP 400): {_message_of(e)}"
    return (f"model call failed after {attempts} attempt(s), last {describe(e)}: "
            "the endpoint is busy or down; the loop retries at the next tick")


def _message_of(e: anthropic.APIStatusError) -> str:
    body = e.body
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])[:200]
    return str(e)[:200]
