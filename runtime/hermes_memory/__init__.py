"""coworker as a Hermes memory provider (a MemoryProvider for hermes-agent's plugins/memory).

A thin client of `coworker serve`'s Hermes door (`/hermes/*`), written with Python's standard
library only, so it runs inside any Hermes environment with nothing of coworker's installed:
the coworker it talks to does the reading and writing. `coworker hermes install` copies this
file into `$HERMES_HOME/plugins/coworker/` with a `config.json` beside it (the server's URL,
the Hermes token, the owner's user ids); Hermes selects it with `memory.provider: coworker`.

What Hermes calls, and what it does:
- `is_available()`: the config holds a URL and a token and the server answers `/hermes/ping`
  within PING_S.
- `initialize(session_id, platform=..., user_id=..., chat_type=..., agent_context=...)`:
  whose session it is. The owner's own sessions are the CLI's (no user id) and the private
  chats (DMs) of the gateway users the owner listed as PLATFORM:ID (`owner_ids`); any other
  session, a group, channel or thread the owner speaks in too, gets nothing from coworker (no
  recall, no tools, no system prompt text: everyone there reads the answers) and records
  nothing. Only the primary context writes (never a subagent, cron or a flush).
- `system_prompt_block()`: the owner's pins and MEMORY.md, within the server's budget (read
  at initialize and at a session switch).
- `prefetch(query)`: the recall block coworker's own loop would append for that text (the
  same budget, stale marks and refusals), under a line that says it is memory to weigh, not
  instructions.
- `sync_turn(user, assistant)`: both sides recorded as events of actor `hermes` (never the
  owner's authority, never an input of coworker's loop), by a writer thread: Hermes' turn never
  waits for it.
- `on_pre_compress(messages)` and `on_session_end(messages)`: the messages written before
  Hermes lets them go (in batches; Hermes' own summaries and synthetic messages left out), and
  waited for; the server keeps each message once (by its conversation, role and text), so
  what `sync_turn` wrote, or an earlier call, is not written again. A compression's new
  session id goes on as the same conversation (`on_session_switch` without `reset`).
- `on_memory_write(action, target, content)`: Hermes' own memory writes mirrored as events of
  kind `hermes_memory`, so coworker's history holds what Hermes chose to remember (searchable,
  walkable); they never reach coworker's MEMORY.md, which only its owner's gate writes.
- tools `coworker_walk`, `coworker_search` and `coworker_map`, answered with coworker's own
  result shapes.
- `shutdown()`: the writer drained (up to DRAIN_S) and stopped.

Every failure is logged at WARNING and answered empty (a write that failed is sent again by
the next on_pre_compress or on_session_end): a memory that is down never breaks a Hermes turn.
Safe when Hermes calls it from several threads (one lock over its state, one writer thread,
restarted if it ever stops, a new HTTP connection per request).
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

try:  # inside Hermes: its base class; elsewhere (coworker's doctor and tests) a stand-in
    from agent.memory_provider import MemoryProvider  # type: ignore[import-not-found]  # only inside Hermes
except ImportError:  # pragma: no cover - exercised without Hermes installed
    class MemoryProvider:  # type: ignore[no-redef]  # the stand-in, where Hermes is absent
        """Stand-in for hermes-agent's abstract MemoryProvider when Hermes is not importable."""

log = logging.getLogger("coworker.hermes")

NAME = "coworker"
CONFIG = Path(__file__).with_name("config.json")
PING_S = 1.5  # is_available's wait for the server
TIMEOUT_S = 5.0  # any other request's
DRAIN_S = 10.0  # shutdown's wait for the writes queued
FLUSH_S = 30.0  # on_pre_compress's and on_session_end's wait for them
TEXT_CHARS = 60_000  # of one message sent (the server keeps 64,000 of it): a longer one is cut
BATCH = 200  # messages a request (the server takes 500)
# characters a request: the server takes a body of 1 MiB, and a character is at most 6 bytes
# of JSON (a control character's \\u escape; UTF-8 is at most 4)
BATCH_CHARS = 150_000
OWN_PLATFORMS = ("cli",)  # a session on these with no user id is the owner's own
PRIVATE_CHATS = ("", "dm")  # a gateway's chat types where only the owner reads the answers
SCAFFOLDING = ("[CONTEXT COMPACTION", "[CONTEXT SUMMARY]")  # Hermes' summaries begin so
TOOLS = [
    {"name": "coworker_walk",
     "description": "Walk the owner's coworker's memory (its whole history, from coarse "
                    "summaries down to raw events) for a few content words, or refuse when it "
                    "does not hold them with confidence. Returns {refused, confidence, trace, "
                    "events, ...}; cite the event ids you use. Two refusals in a row: stop and "
                    "say the memory does not hold it.",
     "parameters": {"type": "object", "properties": {
         "query": {"type": "string", "description": "a few content words"}},
         "required": ["query"]}},
    {"name": "coworker_search",
     "description": "Keyword search (BM25, best first) over the coworker's whole history and "
                    "its summaries. Returns {hits: [{kind, id, ts, label, excerpt, score}], "
                    "next_cursor}.",
     "parameters": {"type": "object", "properties": {
         "query": {"type": "string"},
         "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 10}},
         "required": ["query"]}},
    {"name": "coworker_map",
     "description": "The map of the coworker's memory: its summary ladder, coarsest first "
                    "(what periods and topics it holds), to choose what to walk for.",
     "parameters": {"type": "object", "properties": {}}},
]
_PATHS = {"coworker_walk": "walk", "coworker_search": "search", "coworker_map": "map"}
_STOP = object()


def _text_of(content: Any) -> str:
    """A message's text: a string, or the text parts of a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content
                         if isinstance(p, dict) and p.get("type") in ("text", "input_text"))
    return ""


def _cut(text: str) -> str:
    if len(text) <= TEXT_CHARS:
        return text
    return (f"{text[:TEXT_CHARS]}\n[cut by coworker's Hermes provider: the first "
            f"{TEXT_CHARS:,} of {len(text):,} characters]")


def _hermes_own(m: dict[str, Any], text: str) -> bool:
    """Whether a message is Hermes' own scaffolding, not the conversation: a compaction
    summary (`_compressed_summary`, or its text's prefix) or a synthetic message
    (`_todo_snapshot_synthetic` and its kin)."""
    marked = any(k.startswith("_") and v and (k.endswith("_synthetic") or "summary" in k)
                 for k, v in m.items() if isinstance(k, str))
    return marked or text.lstrip().startswith(SCAFFOLDING)


def messages_of(messages: Any) -> list[dict[str, str]]:
    """What of Hermes' OpenAI-style messages coworker keeps: the user's, the assistant's and
    the tools' text, each cut at TEXT_CHARS (a system message, an empty one and Hermes' own
    scaffolding are left out)."""
    out = []
    for m in messages or []:
        if isinstance(m, dict) and m.get("role") in ("user", "assistant", "tool"):
            text = _text_of(m.get("content"))
            if text.strip() and not _hermes_own(m, text):
                out.append({"role": str(m["role"]), "text": _cut(text)})
    return out


def last_turn(messages: Any) -> list[dict[str, str]]:
    """The completed turn at the end of a transcript: from its last user message on."""
    kept = messages_of(messages)
    starts = [i for i, m in enumerate(kept) if m["role"] == "user"]
    return kept[starts[-1]:] if starts else kept


def batches(messages: list[dict[str, str]]) -> list[list[dict[str, str]]]:
    """`messages` in order, in requests of at most BATCH messages and BATCH_CHARS characters."""
    out: list[list[dict[str, str]]] = []
    size = 0
    for m in messages:
        if not out or len(out[-1]) >= BATCH or size + len(m["text"]) > BATCH_CHARS:
            out.append([])
            size = 0
        out[-1].append(m)
        size += len(m["text"])
    return out


class CoworkerMemory(MemoryProvider):
    """The provider Hermes loads (see the module's docstring)."""

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        self.config = dict(config) if config is not None else _read_config()
        self.url = str(self.config.get("url") or "").rstrip("/")
        self.token = str(self.config.get("token") or "")
        self.owner_ids = {str(i) for i in self.config.get("owner_ids") or []}
        self._lock = threading.Lock()
        self.session, self.platform = "", "cli"
        self.lineage = ""  # the session a compression continued from: the messages' key
        self.owners, self.primary = False, False
        self._context = ""
        self._queue: queue.Queue[Any] = queue.Queue()
        self._writer: threading.Thread | None = None

    @property
    def name(self) -> str:
        return NAME

    # -- HTTP ------------------------------------------------------------------------------------
    def _post(self, path: str, body: dict[str, Any], timeout: float = TIMEOUT_S) -> Any:
        """POST `body` to /hermes/<path>; the answer's JSON. Raises OSError (urllib's errors,
        a timeout) or ValueError (not JSON)."""
        data = json.dumps(body, ensure_ascii=False).encode("utf-8", "replace")
        request = urllib.request.Request(
            f"{self.url}/hermes/{path}", data=data, method="POST",
            headers={"Authorization": f"Bearer {self.token}",
                     "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=timeout) as answer:  # noqa: S310 - the owner's URL
            return json.loads(answer.read().decode("utf-8"))

    def _ask(self, path: str, body: dict[str, Any], what: str) -> Any:
        """`_post`, with a failure logged at WARNING and answered None."""
        try:
            return self._post(path, body)
        except urllib.error.HTTPError as e:
            log.warning("coworker: %s failed: HTTP %s %s", what, e.code, _said(e))
        except Exception as e:  # noqa: BLE001 - never into Hermes: http.client's too
            log.warning("coworker: %s failed (%s: %s); is `coworker serve` running at %s?",
                        what, type(e).__name__, e, self.url)
        return None

    # -- lifecycle -------------------------------------------------------------------------------
    def is_available(self) -> bool:
        if not (self.url and self.token):
            return False
        try:
            return bool(self._post("ping", {}, timeout=PING_S).get("coworker"))
        except Exception as e:  # noqa: BLE001 - never into Hermes
            log.warning("coworker: not available (%s: %s)", type(e).__name__, e)
            return False

    def initialize(self, session_id: str, **kwargs: Any) -> None:
        with self._lock:
            self.session = self.lineage = session_id
            self.platform = str(kwargs.get("platform") or "cli")
            self.owners = self._owners(kwargs)
            self.primary = kwargs.get("agent_context", "primary") == "primary"
            if self.owners and self.primary:
                self._start_writer()
        if not self.owners:
            log.info("coworker: session %s (%s) is not the owner's: coworker gives it nothing",
                     session_id, self.platform)
        self._refresh_context()

    def _owners(self, given: dict[str, Any]) -> bool:
        """Whether the session is the owner's own: the CLI without a user id, or a private
        chat (a DM) of a user id the owner listed as PLATFORM:ID. A group, a channel or a
        thread is not, whoever speaks in it: everyone there reads the answers."""
        user = str(given.get("user_id") or "")
        if self.platform in OWN_PLATFORMS and not user:
            return True
        ids = {f"{self.platform}:{u}" for u in (user, str(given.get("user_id_alt") or "")) if u}
        return bool(ids & self.owner_ids) and str(given.get("chat_type") or "") in PRIVATE_CHATS

    def _start_writer(self) -> None:
        """The writer thread, started (again, if it ever stopped)."""
        if self._writer is None or not self._writer.is_alive():
            self._writer = threading.Thread(target=self._write_queued, daemon=True,
                                            name="coworker-hermes-writer")
            self._writer.start()

    def on_session_switch(self, new_session_id: str, *, parent_session_id: str = "",
                          reset: bool = False, **kwargs: Any) -> None:
        """A new session id: a new conversation after /new or /reset; after a compression,
        /resume or /branch the same one goes on (its messages keep their keys)."""
        with self._lock:
            self.session = new_session_id
            if reset or not parent_session_id:
                self.lineage = new_session_id
        self._refresh_context()

    def _refresh_context(self) -> None:
        got = self._ask("context", {}, "reading the pins and MEMORY.md") if self.owners else None
        with self._lock:
            self._context = str(got.get("block") or "") if isinstance(got, dict) else ""

    def system_prompt_block(self) -> str:
        with self._lock:
            return self._context if self.owners else ""

    def prefetch(self, query: str, *, session_id: str = "") -> str:
        if not self.owners or not query.strip():
            return ""
        got = self._ask("prefetch", {"query": query}, "recall")
        return str(got.get("block") or "") if isinstance(got, dict) else ""

    # -- writes ----------------------------------------------------------------------------------
    def _writes(self) -> bool:
        return self.owners and self.primary

    def _record(self, messages: list[dict[str, str]], session_id: str = "") -> None:
        """Send `messages` in batches, in order; a batch that fails is logged (WARNING) and the
        next ones are still sent (the server keeps each message once, so a later
        on_pre_compress or on_session_end sends the lost ones again)."""
        for batch in batches(messages):
            self._ask("record", {"session": session_id or self.lineage,
                                 "platform": self.platform, "messages": batch},
                      f"recording {len(batch)} message(s)")

    def _write_queued(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            if isinstance(item, threading.Event):  # a flush waits for it
                item.set()
                continue
            try:
                self._record(*item)
            except Exception as e:  # noqa: BLE001 - the writer outlives any one write
                log.warning("coworker: a queued write failed (%s: %s)", type(e).__name__, e)

    def _flush(self) -> None:
        """Wait, up to FLUSH_S, for the writes queued so far (the writer keeps their order)."""
        with self._lock:
            self._start_writer()
        done = threading.Event()
        self._queue.put(done)
        if not done.wait(FLUSH_S):
            log.warning("coworker: the queued writes were not sent within %.0f s; going on",
                        FLUSH_S)

    def sync_turn(self, user_content: str, assistant_content: str, *, session_id: str = "",
                  messages: list[dict[str, Any]] | None = None) -> None:
        if not self._writes():
            return
        # the transcript's own text when Hermes gives it: a compression later sends the same
        # (Hermes gives sync_turn the user's words without a skill's scaffolding)
        turn = last_turn(messages) if messages else messages_of(
            [{"role": "user", "content": user_content},
             {"role": "assistant", "content": assistant_content}])
        self._queue.put((turn, ""))

    def on_pre_compress(self, messages: list[dict[str, Any]]) -> str:
        if self._writes():
            self._flush()
            self._record(messages_of(messages))
        return ""

    def on_session_end(self, messages: list[dict[str, Any]]) -> None:
        self.on_pre_compress(messages)

    def on_memory_write(self, action: str, target: str, content: str,
                        metadata: dict[str, Any] | None = None) -> None:
        if self._writes() and content.strip():
            self._queue.put(([{"role": "memory",
                               "text": _cut(f"{action} {target}: {content}")}], ""))

    # -- tools -----------------------------------------------------------------------------------
    def get_tool_schemas(self) -> list[dict[str, Any]]:
        return [dict(t) for t in TOOLS]

    def handle_tool_call(self, tool_name: str, args: dict[str, Any], **kwargs: Any) -> str:
        if tool_name not in _PATHS:
            return json.dumps({"error": f"coworker has no tool {tool_name!r}"})
        if not self.owners:
            return json.dumps({"error": "coworker's memory is its owner's: it is not open to "
                                        "this session"})
        try:
            return json.dumps(self._post(_PATHS[tool_name], dict(args or {})))
        except urllib.error.HTTPError as e:
            return json.dumps({"error": f"HTTP {e.code}: {_said(e)}"})
        except Exception as e:  # noqa: BLE001 - a tool's answer, never an exception in Hermes
            log.warning("coworker: %s failed (%s: %s)", tool_name, type(e).__name__, e)
            return json.dumps({"error": f"coworker did not answer ({type(e).__name__}); is "
                                        "`coworker serve` running?"})

    def shutdown(self) -> None:
        writer = self._writer
        if writer is None:
            return
        self._queue.put(_STOP)
        writer.join(DRAIN_S)
        if writer.is_alive():
            log.warning("coworker: %d write(s) still queued at shutdown after %.0f s",
                        self._queue.qsize(), DRAIN_S)
        with self._lock:
            self._writer = None


def _said(e: urllib.error.HTTPError) -> str:
    try:
        return str(json.loads(e.read().decode("utf-8")).get("error", ""))[:300]
    except Exception:  # noqa: BLE001 - the reason is enough
        return str(e.reason)


def _read_config() -> dict[str, Any]:
    try:
        got = json.loads(CONFIG.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        log.warning("coworker: %s cannot be read (%s); run `coworker hermes install` again",
                    CONFIG, e)
        return {}
    return got if isinstance(got, dict) else {}


def register(ctx: Any) -> None:
    """Hermes' plugin entry: hand it the provider."""
    ctx.register_memory_provider(CoworkerMemory())
