"""The model adapter against a real HTTP server that speaks the Messages API."""

from __future__ import annotations

import asyncio
import logging

import pytest

from runtime.errors import ModelError
from runtime.model import Model, cacheable_system
from runtime.settings import ModelSection

from .fakeapi import FakeMessagesAPI, Scripted, error, text, tool_use

MSG = [{"role": "user", "content": "hi"}]


def make(api: FakeMessagesAPI, **kw) -> Model:
    cfg = {"api_key": "k", "base_url": api.url, "max_retries": 3, "timeout_s": 5.0, **kw}
    return Model(ModelSection(**cfg))


def call(model: Model, **kw):
    async def go():
        try:
            return await model.create(system=cacheable_system(["role"]), tools=[], messages=MSG,
                                      **kw)
        finally:
            await model.close()
    return asyncio.run(go())


def test_429_then_529_then_success_is_retried_and_logged(api, caplog):
    api.enqueue(error(429, "rate_limit_error"), error(529, "overloaded_error"),
                tool_use("note", {"text": "x"}, cache_read=40, cache_write=7))
    with caplog.at_level(logging.WARNING, logger="runtime.model"):
        reply = call(make(api))
    assert len(api.requests) == 3
    assert reply.attempts == 3
    assert reply.tool_uses[0]["name"] == "note"
    assert reply.usage == {"input_tokens": 100, "output_tokens": 20,
                           "cache_read_input_tokens": 40, "cache_creation_input_tokens": 7}
    attempts = [r.getMessage() for r in caplog.records if "attempt" in r.getMessage()]
    assert len(attempts) == 2 and "429" in attempts[0] and "529" in attempts[1]


def test_retry_after_header_is_honoured_up_to_the_cap(api, monkeypatch):
    api.enqueue(error(429, headers={"retry-after": "0.3"}), text("ok"))
    monkeypatch.setattr("runtime.model.RETRY_MAX_WAIT_S", 0.5)
    import time
    t0 = time.monotonic()
    call(make(api))
    assert time.monotonic() - t0 >= 0.3


def test_permanent_failure_raises_model_error_after_all_attempts(api):
    for _ in range(4):
        api.enqueue(error(503, "api_error"))
    with pytest.raises(ModelError, match="after 4 attempt"):
        call(make(api))
    assert len(api.requests) == 4


def test_client_errors_are_not_retried_and_say_what_to_do(api):
    api.enqueue(error(401, "authentication_error"))
    with pytest.raises(ModelError, match="ANTHROPIC_API_KEY"):
        call(make(api))
    assert len(api.requests) == 1


@pytest.mark.parametrize("garbage", [
    Scripted(200, "this is not json"),
    Scripted(200, {"unexpected": "shape"}),
    Scripted(200, "<html>hello</html>", {"content-type": "text/html"}),
])
def test_garbage_answers_become_model_errors(api, garbage):
    api.enqueue(garbage)
    with pytest.raises(ModelError, match="not a Messages API response"):
        call(make(api))


def test_connection_refused_is_retried_then_explained():
    dead = FakeMessagesAPI().start()
    url = dead.url
    dead.stop()
    model = Model(ModelSection(api_key="k", base_url=url, max_retries=1))
    with pytest.raises(ModelError, match="could not connect"):
        call(model)


def test_timeout_is_retried(api):
    api.enqueue(Scripted(200, text("late"), delay=1.0), text("on time"))
    reply = call(make(api, timeout_s=0.3))
    assert reply.text == "on time"
    assert reply.attempts == 2


def test_cache_mark_sits_on_the_last_system_block(api):
    call(make(api))
    system = api.bodies[0]["system"]
    assert system[-1]["cache_control"] == {"type": "ephemeral"}
    headers = {k.lower(): v for k, v in api.requests[0]["headers"].items()}
    # SDK versions differ on the header (x-api-key or a bearer token); the key must be sent.
    assert headers.get("x-api-key") == "k" or headers.get("authorization") == "Bearer k"
