"""The semantic channel (issue 6, item 3): the HTTP embedder, backfill, integrity, the gate,
fusion, the cold-model fallback, the loop, reflect and `coworker embed`.

The embedder under test talks real HTTP to `EmbedServer` below: an Ollama-style `/api/embed`
server on 127.0.0.1 with deterministic vectors (a hashed bag of words after a small synonym
table, so "automobile" and "car" land on the same words). It records every request, and can be
told to delay (a cold model), to fail with 500, to answer garbage, or to switch its model.
Ticks run in process against the local Messages API (tests/fakeapi.py); so does the CLI
(`coworker(...)` in tests/conftest.py). No test here loads the MiniLM embedder; one that does
must be marked slow.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
import socket
import sqlite3
import threading
import time
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler
from typing import Any

import numpy as np
import pytest

from rituals import reflect as rf
from runtime.home import Home
from runtime.loop import Loop
from runtime.memory import embed as em
from runtime.memory import recall as recall_mod
from runtime.memory.cards import BOOKKEEPING_KINDS
from runtime.memory.embed import EmbedError, HttpEmbedder, Matrix
from runtime.memory.recall import lexical_coverage, recall, recall_hybrid, rrf
from runtime.store import Event, Store, archive
from runtime.store import events as ev
from runtime.store import rollups as rl
from runtime.store import tags as tg
from runtime.store import vectors as vs

from .conftest import coworker, tell, write_config
from .conftest import run_tick as tick
from .fakeapi import FakeMessagesAPI, LocalServer, text

# --- a real embedding server -------------------------------------------------------------------

DIM = 64
SYNONYMS = {
    "automobile": "car", "automobiles": "car", "cars": "car", "vehicle": "car",
    "physician": "doctor", "physicians": "doctor", "doctors": "doctor", "medic": "doctor",
    "purchase": "buy", "purchased": "buy", "purchasing": "buy", "bought": "buy",
    "buying": "buy", "acquire": "buy",
    "told": "say", "said": "say", "says": "say",
}
STOP = frozenset(
    "a an the to of in on at for and or but is are was were be been we i you he she it they "
    "our my your his her its their this that these those when will would should could can do "
    "did does what which who how with about from by as so if then than next new".split())


def vector(text: str, salt: str = "", dim: int = DIM) -> list[float]:
    """A hashed bag of words (synonyms folded, stopwords dropped), unit length."""
    v = [0.0] * dim
    for w in re.findall(r"[a-z0-9]+", text.lower()):
        if w in STOP:
            continue
        w = SYNONYMS.get(w, w)
        h = hashlib.sha256((salt + "|" + w).encode()).digest()
        v[h[0] % dim] += 1.0 if h[1] & 1 else -1.0
    n = math.sqrt(sum(x * x for x in v))
    return [x / n for x in v] if n else v


class EmbedServer(LocalServer):
    """Ollama-style `POST /api/embed` {"model", "input": [...]} -> {"embeddings": [[...]]}."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.delay = 0.0  # seconds before answering: a cold model
        self.fail: int | None = None  # answer this HTTP status instead
        self.garbage = False  # answer 200 with a body that is not JSON
        self.short = False  # answer one embedding fewer than asked for
        self.words = False  # answer rows of words, not numbers
        self.dim = DIM  # a model switched to another dimension
        self.salt = ""  # "switch model": the same name now returns different vectors
        self.nan = ""  # a text holding this word is answered with NaNs (a broken model)
        self.lock = threading.Lock()
        self.closing = threading.Event()  # cuts a delay short on stop()
        srv = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                try:
                    payload = json.loads(raw)
                except ValueError:
                    payload = {}
                with srv.lock:
                    srv.requests.append({"path": self.path, "model": payload.get("model"),
                                         "inputs": list(payload.get("input") or [])})
                    delay, fail, garbage, salt = srv.delay, srv.fail, srv.garbage, srv.salt
                    short, dim, nan, words_ = srv.short, srv.dim, srv.nan, srv.words
                if delay:
                    srv.closing.wait(delay)
                if self.path != "/api/embed":
                    status, data = 404, b'{"error": "not found"}'
                elif fail:
                    status, data = fail, b'{"error": "model crashed"}'
                elif garbage:
                    status, data = 200, b"<html>surely not json</html>"
                else:
                    status = 200
                    rows = [["a", "b"] if words_ else
                            [math.nan] * dim if nan and nan in t else vector(t, salt, dim)
                            for t in payload.get("input") or []]
                    data = json.dumps({"model": payload.get("model"),
                                       "embeddings": rows[:-1] if short else rows}).encode()
                try:
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:  # the client timed out and hung up
                    pass

        self._serve(Handler)

    def stop(self) -> None:
        self.closing.set()
        super().stop()

    @property
    def inputs(self) -> list[str]:
        return [t for r in self.requests for t in r["inputs"]]



@pytest.fixture
def embed_server() -> EmbedServer:
    server = EmbedServer().start()
    yield server
    server.stop()


def closed_port_url() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}"


# --- helpers -----------------------------------------------------------------------------------

NOW = datetime.now(UTC).replace(microsecond=0)


def iso(t: datetime) -> str:
    return t.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def seed(home: Home, bodies: list[str], kind: str = "note", ts: str | None = None) -> list[int]:
    with Store.open(home.db_path) as store:
        return ev.append_many(store, [
            Event(kind=kind, body=b, actor="coworker", author_kind="agent",
                  **({"ts": ts} if ts else {})) for b in bodies])





def events_of(home: Home, kind: str) -> list[Event]:
    with Store.open(home.db_path) as store:
        return ev.tail(store, 1000, kind=kind)


def semantic_cfg(url: str, **kw: Any) -> dict[str, Any]:
    return {"enabled": True, "provider": "http", "url": url, **kw}


def backfill_with_settings(home: Home) -> int:
    settings = home.settings()
    embedder = em.make_embedder(settings.semantic)
    assert embedder is not None, "[semantic] enabled = true did not make an embedder"
    with Store.open(home.db_path) as store:
        return em.backfill(store, embedder)


def tamper(home: Home, item_id: int, **cols: Any) -> None:
    raw = sqlite3.connect(home.db_path)
    sets = ", ".join(f"{k} = ?" for k in cols)
    cur = raw.execute(f"UPDATE vectors SET {sets} WHERE item_kind = 'event' AND item_id = ?",
                      (*cols.values(), item_id))
    assert cur.rowcount == 1, f"no stored vector for event {item_id} to tamper with"
    raw.commit()
    raw.close()


def f32(text_: str, salt: str = "") -> bytes:
    return np.asarray(vector(text_, salt), dtype=np.float32).tobytes()


PARAPHRASED = "The physician told Dana to rest for two weeks after the surgery."
CAR = "We plan to purchase an automobile in spring, probably an electric one."
DISTRACTORS = [
    "The printer on floor three is out of toner again.",
    "Zeppelin deployment broke the staging cluster on Tuesday.",
    "Lunch order for the team offsite: pizza and salad.",
    "Quarterly billing export finished without errors.",
]


# --- the HTTP embedder -------------------------------------------------------------------------

def test_http_embedder_round_trip(embed_server: EmbedServer):
    e = HttpEmbedder(embed_server.url + "/", "all-minilm", 2.0)  # a trailing slash is fine
    assert e.name == "http:all-minilm"
    texts = ["I will purchase an automobile", "buy a car", "the printer is out of toner"]
    got = e.embed(texts)
    assert isinstance(got, np.ndarray) and got.dtype == np.float32, type(got)
    assert got.shape == (3, DIM), got.shape
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    assert np.allclose(got[0], np.asarray(vector(texts[0]), dtype=np.float32), atol=1e-6)
    assert float(got[0] @ got[1]) > 0.99, "synonyms did not land together"
    assert float(got[0] @ got[2]) < 0.5
    assert embed_server.requests == [{"path": "/api/embed", "model": "all-minilm",
                                      "inputs": texts}], embed_server.requests


@pytest.mark.parametrize("how", ["500", "refused", "not json", "one embedding short",
                                 "words, not numbers"])
def test_http_embedder_failures_raise_embed_error_with_a_hint(embed_server: EmbedServer, how):
    url = embed_server.url
    if how == "500":
        embed_server.fail = 500
    elif how == "refused":
        url = closed_port_url()
    elif how == "not json":
        embed_server.garbage = True
    elif how == "words, not numbers":
        embed_server.words = True
    else:
        embed_server.short = True
    e = HttpEmbedder(url, "all-minilm", 2.0)
    texts = ["one", "two"]
    with pytest.raises(EmbedError) as info:
        e.embed(texts)
    msg = str(info.value)
    assert url in msg, f"the error does not name the server: {msg}"
    if how == "not json":
        assert "JSON" in msg, msg
    elif how == "one embedding short":
        assert "one embedding per input" in msg, msg
    elif how == "words, not numbers":
        assert "not rows of numbers" in msg, msg
    else:
        assert "[semantic] url" in msg, f"no hint what to check: {msg}"


def test_a_local_model_that_cannot_load_raises_embed_error_with_a_hint(tmp_path):
    """A model folder that is not there (or, without the extra, no sentence-transformers at
    all) is an EmbedError that says what to check, never the library's own exception."""
    from runtime.memory.embed import LocalEmbedder

    with pytest.raises(EmbedError) as info:
        LocalEmbedder(str(tmp_path / "no-such-model")).embed(["one"])
    msg = str(info.value)
    assert "[semantic] model" in msg or "pip install" in msg, msg
    assert len(msg.splitlines()) == 1, msg


def test_http_embedder_times_out_on_a_cold_model(embed_server: EmbedServer):
    embed_server.delay = 20.0  # far past the timeout, so only the timeout can end the call
    e = HttpEmbedder(embed_server.url, "all-minilm", timeout_s=0.3)
    t0 = time.monotonic()
    with pytest.raises(EmbedError) as info:
        e.embed(["anything at all"])
    took = time.monotonic() - t0
    assert took < 10, f"the 0.3 s timeout took {took:.2f} s: the server's delay ended it"
    assert "[semantic]" in str(info.value), str(info.value)
    assert len(embed_server.requests) == 1


# --- backfill ----------------------------------------------------------------------------------

def _content_and_bookkeeping(home: Home) -> tuple[list[int], list[int], dict[int, str]]:
    """Archived and hot content events of varied length, interleaved with bookkeeping."""
    bodies = {}
    old = seed(home, [f"Old note {i}: " + "archived words " * (5 + 7 * i) for i in range(3)],
               ts="2024-01-10T09:00:00.000Z")
    with Store.open(home.db_path) as store:
        assert archive.move_older_than(store, "2024-06-01T00:00:00.000Z") == 3
    content = list(old)
    bookkeeping = []
    for i in range(24):
        body = f"Note {i} about topic{i}: " + "lorem ipsum dolor " * (3 + (i * 5) % 31)
        content += seed(home, [body], kind=["note", "message", "model_response"][i % 3])
        if i % 4 == 0:
            bookkeeping += seed(home, [f"tick {i} started"], kind="tick")
            bookkeeping += seed(home, [f"recalled #{i}"], kind="recall")
            bookkeeping += seed(home, [f"tool_x({i})"], kind="tool_call")
    seed(home, [""], kind="note")  # nothing to embed
    with Store.open(home.db_path) as store:
        for r in store.query("SELECT id, body FROM history"):
            bodies[int(r[0])] = str(r[1])
    assert {"tick", "recall", "tool_call"} <= BOOKKEEPING_KINDS
    return content, bookkeeping, bodies


def test_backfill_embeds_every_content_event_once_in_batches_by_volume(
        offline_home: Home, embed_server: EmbedServer):
    content, bookkeeping, bodies = _content_and_bookkeeping(offline_home)
    e = HttpEmbedder(embed_server.url, "all-minilm", 2.0)
    progress: list[int] = []
    with Store.open(offline_home.db_path) as store:
        done = em.backfill(store, e, batch_chars=1000, progress=progress.append)
    assert done == len(content), (done, len(content))
    assert embed_server.inputs == [bodies[i] for i in content], (
        "each content event (hot and archived) must be sent exactly once, in id order; "
        "bookkeeping kinds and empty bodies never")
    batches = [r["inputs"] for r in embed_server.requests]
    assert len(batches) > 3, f"only {len(batches)} batches: the volume rule was not exercised"
    for n, b in enumerate(batches):
        chars = sum(len(t) for t in b)
        if n < len(batches) - 1:
            assert chars >= 1000, f"batch {n} has {chars} characters, under batch_chars 1000"
        assert chars - len(b[-1]) < 1000, f"batch {n} ran on past 1000 characters ({chars})"
    assert progress == [len(b) for b in batches], progress
    assert sum(progress) == done

    # a second backfill has nothing to do
    with Store.open(offline_home.db_path) as store:
        assert em.backfill(store, e, batch_chars=1000, progress=progress.append) == 0
    assert len(embed_server.requests) == len(batches), "the second backfill embedded again"

    raw = sqlite3.connect(offline_home.db_path)
    rows = raw.execute("SELECT item_kind, item_id, model, dim, vector, text_hash FROM vectors "
                       "ORDER BY item_id").fetchall()
    raw.close()
    assert [r[1] for r in rows] == content, "vectors for exactly the content events"
    assert not set(bookkeeping) & {r[1] for r in rows}
    for kind, item_id, model, dim, blob, digest in rows:
        assert (kind, model, dim, len(blob)) == ("event", "http:all-minilm", DIM, DIM * 4)
        assert digest == hashlib.sha256(bodies[item_id].encode()).hexdigest()[:16]
        assert np.allclose(np.frombuffer(blob, dtype=np.float32),
                           np.asarray(vector(bodies[item_id]), dtype=np.float32), atol=1e-6)


def test_backfill_batches_stay_sized_by_volume_across_pages(offline_home: Home,
                                                             embed_server: EmbedServer):
    """More events than one page of `vectors.missing_events` (500): a short batch may only
    come at the very end, not at every page boundary."""
    bodies = [f"short event number {i:04d} with a few words" for i in range(620)]
    seed(offline_home, bodies)
    e = HttpEmbedder(embed_server.url, "all-minilm", 5.0)
    with Store.open(offline_home.db_path) as store:
        assert em.backfill(store, e, batch_chars=8000) == 620
    assert embed_server.inputs == bodies
    sizes = [sum(len(t) for t in r["inputs"]) for r in embed_server.requests]
    short = [(n, s) for n, s in enumerate(sizes[:-1]) if s < 8000]
    assert not short, (
        f"batches {short} are under batch_chars 8000 though more events followed (sizes "
        f"{sizes}): runtime/memory/embed.py backfill flushes the partial batch at the end of "
        "every 500-event page of vectors.missing_events; carry `batch`/`size` over to the "
        "next page and flush the remainder only when no events are left")


# --- the integrity check -----------------------------------------------------------------------

def _backfilled(home: Home, server: EmbedServer) -> tuple[list[int], HttpEmbedder]:
    ids = seed(home, [PARAPHRASED, CAR, *DISTRACTORS,
                      *(f"Meeting notes {i}: agenda item {i} moved." for i in range(6))])
    e = HttpEmbedder(server.url, "all-minilm", 2.0)
    with Store.open(home.db_path) as store:
        assert em.backfill(store, e) == len(ids)
    return ids, e


def test_integrity_all_agree_after_a_fresh_backfill(offline_home: Home,
                                                    embed_server: EmbedServer):
    ids, e = _backfilled(offline_home, embed_server)
    with Store.open(offline_home.db_path) as store:
        checked, agree, bad = em.integrity(store, e, sample=50)
        assert (checked, agree, bad) == (len(ids), len(ids), []), (checked, agree, bad)
        # a sample smaller than the table checks that many
        assert em.integrity(store, e, sample=4)[:2] == (4, 4)
    assert [len(r["inputs"]) for r in embed_server.requests] == [len(ids), len(ids), 4]


@pytest.mark.parametrize("what", ["vector", "text_hash", "damaged"])
def test_integrity_detects_a_tampered_vector(offline_home: Home, embed_server: EmbedServer,
                                             what: str):
    ids, e = _backfilled(offline_home, embed_server)
    victim = ids[1]
    if what == "vector":  # another event's vector under this id
        tamper(offline_home, victim, vector=f32(DISTRACTORS[0]))
    elif what == "damaged":  # bytes that are no float32s: what a damaged-row WARNING sends here
        tamper(offline_home, victim, vector=b"\x00\x00\x80")
    else:  # the text it was computed from is not this event's text
        tamper(offline_home, victim, text_hash="0123456789abcdef")
    with Store.open(offline_home.db_path) as store:
        checked, agree, bad = em.integrity(store, e, sample=50)
    assert bad == [victim], f"tampered event {victim} not (only) flagged: {bad}"
    assert (checked, agree) == (len(ids), len(ids) - 1)


def test_integrity_detects_a_switched_model(offline_home: Home, embed_server: EmbedServer):
    ids, e = _backfilled(offline_home, embed_server)
    embed_server.salt = "another-model"  # the server now serves other vectors under that name
    with Store.open(offline_home.db_path) as store:
        checked, agree, bad = em.integrity(store, e, sample=50)
    assert (checked, agree) == (len(ids), 0), (checked, agree, bad)
    assert sorted(bad) == ids


def test_a_reader_of_a_database_before_m015_keeps_its_semantic_cache(
        offline_home: Home, embed_server: EmbedServer):
    """A read-only door never migrates: on a database an older version wrote (no
    vector_changes), the cache's signature falls back to the figures it used before."""
    ids, e = _backfilled(offline_home, embed_server)
    raw = sqlite3.connect(offline_home.db_path)
    raw.executescript("DROP TRIGGER vectors_inserted; DROP TRIGGER vectors_deleted; "
                      "DROP TRIGGER vectors_updated; DROP TABLE vector_changes; "
                      "DELETE FROM _migrations WHERE name = 'm015_count_vector_changes';")
    raw.close()
    with Store.open(offline_home.db_path, readonly=True) as store:
        before = vs.signature(store, e.name)
    with Store.open(offline_home.db_path, migrate=False) as store:
        em.backfill(store, e)  # nothing to do: the signature holds still
        assert vs.signature(store, e.name) == before
        store.execute("DELETE FROM vectors WHERE item_id = ?", (ids[-1],))
        assert vs.signature(store, e.name) != before


# --- fusion ------------------------------------------------------------------------------------

def test_rrf_exact_scores_with_k_60():
    got = rrf([1, 2, 3], [3, 1, 4])
    want = [(1, 1 / 61 + 1 / 62), (3, 1 / 63 + 1 / 61), (2, 1 / 62), (4, 1 / 63)]
    assert [i for i, _ in got] == [i for i, _ in want], got
    for (_, s), (_, w) in zip(got, want, strict=True):
        assert s == pytest.approx(w, rel=1e-12, abs=0), (got, want)
    # equal fused scores: the smaller id first, deterministically
    assert rrf([5, 6], [6, 5]) == [(5, 1 / 61 + 1 / 62), (6, 1 / 62 + 1 / 61)]
    assert rrf([7], k=1) == [(7, 0.5)]
    assert rrf() == []


# --- the gate ----------------------------------------------------------------------------------

def _hybrid(home: Home, e: HttpEmbedder, query: str, gate: float = 0.6):
    with Store.open(home.db_path) as store:
        matrix = Matrix.load(store, e.name)
        return recall_hybrid(store, query, embedder=e, matrix=matrix, gate=gate)


def test_gate_a_well_covered_query_does_not_call_the_embedder(offline_home: Home,
                                                              embed_server: EmbedServer):
    ids, e = _backfilled(offline_home, embed_server)
    before = len(embed_server.requests)
    got = _hybrid(offline_home, e, "zeppelin deployment staging cluster")
    assert len(embed_server.requests) == before, "the embedder was asked although lexical " \
        "covers the whole query"
    assert got.channel.startswith("lexical") and "failed" not in got.channel, got.channel
    assert got.coverage == 1.0, got.coverage
    assert got.hits and got.hits[0].event.id == ids[3], [h.event.id for h in got.hits]


def test_gate_a_paraphrase_asks_the_embedder_and_finds_it(offline_home: Home,
                                                          embed_server: EmbedServer):
    ids, e = _backfilled(offline_home, embed_server)
    query = "When will we buy the car?"
    with Store.open(offline_home.db_path) as store:
        assert recall(store, query).hits == [], "the query must share no words with the log"
    before = len(embed_server.requests)
    got = _hybrid(offline_home, e, query)
    assert len(embed_server.requests) == before + 1, "the semantic channel was not asked"
    assert embed_server.requests[-1]["inputs"] == [query]
    assert got.channel == "hybrid", got.channel
    assert got.coverage == 0.0
    assert got.hits and got.hits[0].event.id == ids[1], (
        f"the paraphrased event {ids[1]} is not first: {[h.event.id for h in got.hits]}")
    assert got.hits[0].score == pytest.approx(1 / 61)


def test_gate_a_tag_only_match_is_not_lexical_coverage(offline_home: Home,
                                                       embed_server: EmbedServer):
    ids, e = _backfilled(offline_home, embed_server)
    target = ids[5]  # "Quarterly billing export finished without errors."
    with Store.open(offline_home.db_path) as store:
        assert tg.add(store, "event", target, ["outage"]) == ["outage"]
        lex = recall(store, "outage")
        assert [h.event.id for h in lex.hits] == [target], "the tag did not make it findable"
        assert lexical_coverage(lex) == 0.0, "a keyword counted as evidence of the text"
    before = len(embed_server.requests)
    got = _hybrid(offline_home, e, "outage")
    assert len(embed_server.requests) == before + 1, (
        "a tag-only match kept the semantic channel from being asked")
    assert got.channel == "hybrid" and got.coverage == 0.0, (got.channel, got.coverage)
    assert target in [h.event.id for h in got.hits]


def test_a_cold_model_falls_back_to_lexical_with_a_warning(offline_home: Home,
                                                           embed_server: EmbedServer, caplog):
    ids, _ = _backfilled(offline_home, embed_server)
    cold = HttpEmbedder(embed_server.url, "all-minilm", timeout_s=0.3)
    embed_server.delay = 20.0  # far past the timeout, so only the timeout can end the call
    query = "zeppelin car"  # half covered: under the gate
    with caplog.at_level(logging.WARNING):
        t0 = time.monotonic()
        got = _hybrid(offline_home, cold, query)
        took = time.monotonic() - t0
    assert got.channel == "lexical (semantic failed)", got.channel
    assert [h.event.id for h in got.hits] == [ids[3]], [h.event.id for h in got.hits]
    assert took < 10, f"a 0.3 s embedding timeout held recall for {took:.2f} s"
    warned = [r for r in caplog.records if r.levelno == logging.WARNING
              and "semantic channel unavailable" in r.getMessage()]
    assert warned, [r.getMessage() for r in caplog.records]


def test_a_model_switched_to_another_dimension_falls_back_to_lexical(
        offline_home: Home, embed_server: EmbedServer, caplog):
    """The server's model changed under the same name, and with it the vector size: the
    semantic channel is unusable until a new backfill, and lexical recall must carry on."""
    ids, e = _backfilled(offline_home, embed_server)
    embed_server.dim = 32
    with caplog.at_level(logging.WARNING):
        try:
            got = _hybrid(offline_home, e, "zeppelin car")
        except ValueError as exc:
            pytest.fail(
                f"recall_hybrid raised {type(exc).__name__} ({str(exc)[:80]}...) on a query "
                "vector of another dimension than the stored ones, so the loop loses the whole "
                "recall (lexical too): runtime/memory/recall.py recall_hybrid calls "
                "matrix.nearest unguarded; check vec.shape[0] == matrix.rows.shape[1] (or catch "
                "the error) and fall back to lexical with the WARNING, as for a timeout")
    assert got.channel == "lexical (semantic failed)", got.channel
    assert [h.event.id for h in got.hits] == [ids[3]]


def test_search_keeps_its_lexical_page_when_the_model_changed_dimension(
        offline_home: Home, embed_server: EmbedServer, caplog):
    """`coworker search` and `memory_search` take the semantic path when their words fall
    short; vectors of another size must leave the lexical page standing, with a WARNING."""
    from runtime.memory.search import search

    ids, e = _backfilled(offline_home, embed_server)
    embed_server.dim = 32
    with Store.open(offline_home.db_path) as store, caplog.at_level(logging.WARNING):
        matrix = Matrix.load(store, e.name)
        got = search(store, "zeppelin rocket", semantic=lambda text=None: (
            e.embed(["zeppelin rocket"])[0], matrix))
    assert [h.id for h in got if h.kind == "event"] == [ids[3]], got
    assert any("search" in r.getMessage() and "lexical only" in r.getMessage() for r in caplog.records
               if r.levelno == logging.WARNING), [r.getMessage() for r in caplog.records]


def test_vectors_of_two_sizes_load_as_the_newest_size(offline_home: Home,
                                                     embed_server: EmbedServer, caplog):
    """The error's own advice after a model change is a backfill; it embeds the new events at
    the new size beside the old ones. Loading them must not fail (it took all recall, lexical
    too, with it): the old size is left out with a WARNING, and the new lines are found."""
    ids, e = _backfilled(offline_home, embed_server)
    embed_server.dim = 32
    newer = seed(offline_home, ["We will purchase a vehicle for the depot."])
    tamper(offline_home, ids[0], vector=b"\x00\x00\x80")  # a damaged row, too
    with Store.open(offline_home.db_path) as store:
        assert em.backfill(store, e) == 1
        with caplog.at_level(logging.WARNING):
            matrix = Matrix.load(store, e.name)
        assert [int(i) for i in matrix.ids] == newer and matrix.rows.shape == (1, 32)
        got = recall_hybrid(store, "When do we buy the car?", embedder=e, matrix=matrix,
                            gate=0.99)
    assert newer[0] in [h.event.id for h in got.hits], got.hits
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(f"{len(ids) - 1} event vectors" in m and "not of the newest" in m for m in warned)
    assert any("1 event vectors of model" in m and "damaged" in m for m in warned), warned


def test_the_cache_reloads_when_the_window_slides_by_as_many_as_it_gains(
        offline_home: Home, embed_server: EmbedServer, monkeypatch: pytest.MonkeyPatch):
    """Once the history is longer than the window, one event in and one embedded slides the
    window by one: the count of vectors in it is unchanged, yet the new line must be found,
    and so must a vector written again after a redaction dropped it."""
    from runtime.settings import SemanticSection
    from runtime.store import redactions

    window = 1000
    seed(offline_home, [f"Status line {i}: {DISTRACTORS[i % 4]}" for i in range(window + 2)])
    cfg = SemanticSection(enabled=True, provider="http", url=embed_server.url,
                          model="all-minilm")
    monkeypatch.setattr(em, "WINDOW", window)
    e = em.make_embedder(cfg)
    cache = em.SemanticCache()
    with Store.open(offline_home.db_path) as store:
        em.backfill(store, e, window=window)
        first = cache.get(store, cfg)[1]
        [new] = seed(offline_home, [CAR])
        assert em.backfill(store, e, window=window) == 1
        assert vs.count(store, e.name, "event", vs.window_start(store, window)) == len(first.ids)
        second = cache.get(store, cfg)[1]
        assert new in {int(i) for i in second.ids}, "the cache kept a matrix without it"
        assert second.nearest(np.asarray(vector("buy a car")), 1) == [new]
        redactions.overwrite_event(store, redactions.event_text(store, new),
                                   "the plan is private", "owner")
        [wiped] = store.query("SELECT body FROM history WHERE id = ?", (new,))[0]
        assert em.backfill(store, e, window=window) == 1  # the marker's text, embedded again
        third = cache.get(store, cfg)[1]
    assert third is not second, "a redacted line's old vector stayed loaded"
    assert third.nearest(np.asarray(vector(wiped)), 1) == [new]
    # `embed --check` says: delete the drifted vectors, then backfill; the count and the top
    # rowids come back as they were, the vectors do not
    raw = sqlite3.connect(offline_home.db_path)
    raw.execute("DELETE FROM vectors WHERE item_kind = 'event' AND item_id = ?", (new,))
    raw.commit()
    raw.close()
    embed_server.salt = "a retrained model"
    with Store.open(offline_home.db_path) as store:
        assert em.backfill(store, e, window=window) == 1
        fourth = cache.get(store, cfg)[1]
    assert fourth is not third, "vectors written again were not reloaded"


# --- the loop ----------------------------------------------------------------------------------

def test_values_that_are_not_numbers_are_never_stored_nor_used(
        offline_home: Home, embed_server: EmbedServer, caplog):
    """A model (or server) that answers NaN: backfill stores none of those rows and says so; a
    query answered so falls back to lexical with a WARNING; a NaN row already in the store (an
    older version, a damaged file) is left out of the matrix, loudly, and the integrity check
    counts it as drifted."""
    from runtime.settings import SemanticSection

    embed_server.nan = "Zeppelin"  # DISTRACTORS[1] and any query naming it
    with caplog.at_level(logging.WARNING):
        ids, e = (seed(offline_home, [PARAPHRASED, CAR, *DISTRACTORS]),
                  HttpEmbedder(embed_server.url, "all-minilm", 2.0))
        with Store.open(offline_home.db_path) as store:
            assert em.backfill(store, e) == len(ids) - 1
            stored = {i for i, _, _ in vs.all_for(store, e.name, "event", 0)}
            assert stored == set(ids) - {ids[3]}, stored
            got = recall_hybrid(store, "Zeppelin rockets", embedder=e,
                                matrix=Matrix.load(store, e.name), gate=0.99)
            cfg = SemanticSection(enabled=True, url=embed_server.url)
            handed = em.SemanticCache().for_query(store, cfg, "Zeppelin rockets")
            assert handed is not None and handed() is None
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("1 of 6 events were embedded" in m and "not numbers" in m for m in warned), warned
    assert got.channel == "lexical (semantic failed)", got.channel
    assert sum("not numbers" in m and "lexical only" in m for m in warned) == 2, warned
    tamper(offline_home, ids[0], vector=np.full(DIM, np.nan, dtype=np.float32).tobytes())
    caplog.clear()
    embed_server.nan = ""
    with Store.open(offline_home.db_path) as store, caplog.at_level(logging.WARNING):
        matrix = Matrix.load(store, e.name)
        checked, agree, bad = em.integrity(store, e, sample=50)
    assert ids[0] not in {int(i) for i in matrix.ids} and np.isfinite(matrix.rows).all()
    assert any("1 event vectors" in r.getMessage() and "not numbers" in r.getMessage()
               for r in caplog.records), [r.getMessage() for r in caplog.records]
    assert ids[0] in bad and agree == checked - 1, (checked, agree, bad)


def test_a_long_running_loop_reloads_its_vectors_by_tenths_of_the_window(
        offline_home: Home, embed_server: EmbedServer, monkeypatch: pytest.MonkeyPatch):
    """Once the history is longer than the window, every event written moves the window's
    exact start. Reloading on that would reload the whole window on every turn; the cache
    reloads when the start has moved on by a tenth of the window (or a vector changed), so 100
    events written one by one into a window of 1,000 cost exactly one reload."""
    from runtime.settings import SemanticSection

    window = 1000
    seed(offline_home, [f"Status line {i}: {DISTRACTORS[i % 4]}" for i in range(window + 2)])
    cfg = SemanticSection(enabled=True, provider="http", url=embed_server.url,
                          model="all-minilm")
    monkeypatch.setattr(em, "WINDOW", window)
    e = em.make_embedder(cfg)
    cache = em.SemanticCache()
    reloads = 0
    with Store.open(offline_home.db_path) as store:
        em.backfill(store, e, window=window)
        held = cache.get(store, cfg)[1]
        for i in range(100):
            ev.append(store, Event(kind="note", body=f"Reply {i}", actor="coworker",
                                   author_kind="agent"))
            now = cache.get(store, cfg)[1]
            reloads += now is not held
            held = now
        assert len(held.ids) <= window + window // 10, len(held.ids)
    assert reloads == 1, f"{reloads} reloads for 100 events (one per tenth of the window)"


def test_the_channel_says_when_it_has_no_vectors_or_their_size_changed(
        offline_home: Home, embed_server: EmbedServer, caplog):
    """On with nothing embedded yet, the channel says once, with the command that embeds; a
    model whose vectors changed size leaves the walk lexical with a WARNING (recall's and
    search's are tested above), never silently."""
    from runtime.memory.walk import walk_result
    from runtime.settings import SemanticSection

    seed(offline_home, [PARAPHRASED, CAR])
    cfg = SemanticSection(enabled=True, url=embed_server.url)
    cache = em.SemanticCache()
    with Store.open(offline_home.db_path) as store, caplog.at_level(logging.WARNING):
        for _ in range(3):
            assert len(cache.get(store, cfg)[1].ids) == 0
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert sum("vector" in m and "coworker embed --backfill" in m
               for m in warned) == 1, warned
    before = len(embed_server.requests)
    with Store.open(offline_home.db_path) as store:  # recall pays no embedding for nothing
        embedder, matrix = cache.get(store, cfg)
        got = recall_hybrid(store, "vehicle to acquire", embedder=embedder, matrix=matrix,
                            gate=0.99)
    assert got.channel == "lexical (no vectors yet)" and len(embed_server.requests) == before
    with Store.open(offline_home.db_path) as store:
        em.backfill(store, em.make_embedder(cfg))
    embed_server.dim = 32
    caplog.clear()
    with Store.open(offline_home.db_path) as store, caplog.at_level(logging.WARNING):
        got = walk_result(store, "vehicle to acquire",
                          semantic=cache.for_query(store, cfg, "vehicle to acquire"))
    assert got.refused
    assert any("32 dimensions" in r.getMessage() and "lexical only" in r.getMessage()
               for r in caplog.records), [r.getMessage() for r in caplog.records]


@pytest.mark.parametrize("query", ["?", "...", "  !  ", "the of and"])
def test_a_query_with_no_words_is_refused_without_asking_the_embedder(
        offline_home: Home, embed_server: EmbedServer, query: str):
    """Nothing to match means nothing to look for by meaning either: "?" embeds as near some
    line as any question does, and once entered confidently on a line it never asked for."""
    from runtime.memory.walk import walk_result
    from runtime.settings import SemanticSection

    _backfilled(offline_home, embed_server)
    cfg = SemanticSection(enabled=True, url=embed_server.url)
    before = len(embed_server.requests)
    with Store.open(offline_home.db_path) as store:
        got = walk_result(store, query, semantic=em.SemanticCache().for_query(store, cfg, query))
    assert got.refused and got.entry is None, got
    assert got.code == "no_words" and got.why is not None and got.why.probe is None, got.why
    assert len(embed_server.requests) == before, "the walk embedded a query with no words"


@pytest.mark.parametrize("query", ["?!.,;", "the and of"])
def test_a_search_with_no_words_finds_nothing_by_meaning_either(
        offline_home: Home, embed_server: EmbedServer, query: str):
    """With the channel on, "?!.,;" listed ten unrelated lines (and "more:"), where with it
    off the same query finds nothing: no words, no hits, and no embedding."""
    from runtime.memory.search import search
    from runtime.settings import SemanticSection

    _backfilled(offline_home, embed_server)
    cfg = SemanticSection(enabled=True, url=embed_server.url)
    before = len(embed_server.requests)
    with Store.open(offline_home.db_path) as store:
        got = search(store, query, semantic=em.SemanticCache().for_query(store, cfg, query),
                     gate=1.0)
    assert list(got) == [] and got.next_cursor is None, got
    assert len(embed_server.requests) == before, "search embedded a query with no words"


def test_a_tick_recalls_through_the_hybrid_channel(home: Home, api: FakeMessagesAPI,
                                                    embed_server: EmbedServer,
                                                    monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(recall_mod, "SEMANTIC_GATE", 0.99)
    write_config(home.root, api.url, semantic=semantic_cfg(embed_server.url))
    ids = seed(home, [PARAPHRASED, CAR, *DISTRACTORS], ts="2024-05-01T09:00:00.000Z")
    assert backfill_with_settings(home) == len(ids)
    # no word of it is in the history: only the semantic channel can find the car event
    msg = tell(home, "When will we buy the car?")
    api.enqueue(text("Noted."))
    outcome = tick(Loop(home, home.settings()))
    assert outcome.kind == "no_action", outcome
    [rec] = events_of(home, "recall")
    assert rec.meta["channel"] == "hybrid", rec.meta
    assert isinstance(rec.meta["coverage"], float) and rec.meta["coverage"] < 0.99, rec.meta
    got = [i["id"] for i in rec.meta["items"]]
    assert ids[1] in got and msg not in got, got
    assert any(r["inputs"] and "buy the car" in r["inputs"][0]
               for r in embed_server.requests), "the loop never asked the embedding server"
    assert f"[event {ids[1]} " in json.dumps(api.bodies[-1]["messages"][-1])


@pytest.mark.parametrize("how", ["down", "cold"])
def test_a_tick_survives_the_embedding_server_failing(home: Home, api: FakeMessagesAPI,
                                                      embed_server: EmbedServer, caplog, how,
                                                      monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(recall_mod, "SEMANTIC_GATE", 0.99)
    monkeypatch.setattr("runtime.memory.embed.TIMEOUT_S", 0.3)
    write_config(home.root, api.url, semantic=semantic_cfg(embed_server.url))
    ids = seed(home, [PARAPHRASED, CAR, *DISTRACTORS], ts="2024-05-01T09:00:00.000Z")
    assert backfill_with_settings(home) == len(ids)
    if how == "down":
        embed_server.stop()
    else:
        embed_server.delay = 1.5
    tell(home, "When will we buy the car? And the zeppelin staging cluster?")
    api.enqueue(text("Nothing to add."))
    with caplog.at_level(logging.WARNING):
        outcome = tick(Loop(home, home.settings()))
    assert outcome.kind == "no_action", f"the tick did not survive the embedder: {outcome}"
    assert len(api.bodies) == 1, "the model was not called"
    assert events_of(home, "tick_failed") == []
    assert [e.meta["outcome"] for e in events_of(home, "tick_end")] == ["no_action"]
    [rec] = events_of(home, "recall")
    assert rec.meta["channel"] == "lexical (semantic failed)", rec.meta
    assert ids[3] in [i["id"] for i in rec.meta["items"]], rec.meta["items"]
    assert any("semantic channel unavailable" in r.getMessage() for r in caplog.records
               if r.levelno == logging.WARNING), [r.getMessage() for r in caplog.records]


def test_a_tick_keeps_lexical_recall_when_the_vectors_cannot_be_read(
        home: Home, api: FakeMessagesAPI, embed_server: EmbedServer, caplog,
        monkeypatch: pytest.MonkeyPatch):
    """Whatever breaks the semantic channel (here its table is gone from a damaged store),
    the tick's recall goes on with the words, and says so at WARNING."""
    monkeypatch.setattr(recall_mod, "SEMANTIC_GATE", 0.99)
    write_config(home.root, api.url, semantic=semantic_cfg(embed_server.url))
    ids = seed(home, [PARAPHRASED, CAR, *DISTRACTORS], ts="2024-05-01T09:00:00.000Z")
    assert backfill_with_settings(home) == len(ids)
    raw = sqlite3.connect(home.db_path)
    raw.execute("ALTER TABLE vectors RENAME TO vectors_damaged")
    raw.commit()
    raw.close()
    tell(home, "When will we buy the car? And the zeppelin staging cluster?")
    api.enqueue(text("Nothing to add."))
    with caplog.at_level(logging.WARNING):
        outcome = tick(Loop(home, home.settings()))
    assert outcome.kind == "no_action", outcome
    [rec] = events_of(home, "recall")
    assert ids[3] in [i["id"] for i in rec.meta["items"]], rec.meta
    assert f"[event {ids[3]} " in json.dumps(api.bodies[-1]["messages"][-1])
    assert any("recall" in r.getMessage() and "lexical only" in r.getMessage() for r in caplog.records
               if r.levelno == logging.WARNING), [r.getMessage() for r in caplog.records]


# --- reflect -----------------------------------------------------------------------------------

def _old_history(home: Home) -> list[int]:
    start = NOW - timedelta(days=60)
    events = [Event(kind="note", body=f"Old note {i}: the zeppelin rollout step {i} is done.",
                    actor="coworker", author_kind="agent",
                    ts=iso(start + timedelta(minutes=40 * i))) for i in range(12)]
    events += [Event(kind="tick", body=f"tick {i}", actor="coworker", author_kind="system",
                     ts=iso(start + timedelta(minutes=40 * i + 1))) for i in range(4)]
    events += [Event(kind="message", body="A recent message about buying a car.",
                     actor="owner", author_kind="user", ts=iso(NOW - timedelta(hours=1)))]
    with Store.open(home.db_path) as store:
        ids = ev.append_many(store, events)
    return [i for i, e in zip(ids, events, strict=True) if e.kind != "tick"]


def test_reflect_backfills_when_the_channel_is_on(isolated_home, embed_server: EmbedServer):
    home = Home.locate(isolated_home)
    home.init()
    write_config(home.root, semantic=semantic_cfg(embed_server.url))
    content = _old_history(home)
    with Store.open(home.db_path) as store:
        report = rf.reflect(home, home.settings(), store, now=NOW)
        assert report.archived == 16, report
        rollups = [r.id for r in rl.all_(store)]
        assert rollups, "reflect sealed no rollup"
        assert report.embedded == f"{len(content)} events embedded, {len(rollups)} rollups", \
            report.embedded
        assert sorted(r[0] for r in vs.all_for(store, "http:all-minilm")) == content
        assert sorted(r[0] for r in vs.all_for(store, "http:all-minilm", "rollup")) == rollups
        again = rf.reflect(home, home.settings(), store, now=NOW)
        assert again.embedded == "0 events embedded", again.embedded
    assert len(embed_server.inputs) == len(content) + len(rollups)


def test_reflect_embeds_nothing_when_off_and_survives_a_dead_server(isolated_home,
                                                                    embed_server: EmbedServer):
    home = Home.locate(isolated_home)
    home.init()
    write_config(home.root, semantic={"url": embed_server.url})  # enabled defaults to false
    _old_history(home)
    with Store.open(home.db_path) as store:
        assert rf.reflect(home, home.settings(), store, now=NOW).embedded == \
            "semantic channel off"
    assert embed_server.requests == []
    write_config(home.root, semantic=semantic_cfg(closed_port_url()))
    with Store.open(home.db_path) as store:
        report = rf.reflect(home, home.settings(), store, now=NOW)
    assert report.embedded == "backfill failed: EmbedError", report.embedded


# --- coworker embed ----------------------------------------------------------------------------

def test_cli_embed_backfill_then_check(offline_home: Home, embed_server: EmbedServer):
    write_config(offline_home.root, semantic=semantic_cfg(embed_server.url))
    ids = seed(offline_home, [PARAPHRASED, CAR, *DISTRACTORS])
    seed(offline_home, ["tick 1"], kind="tick")
    r = coworker("embed", "--backfill")
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    n = len(ids)
    assert f"embedded {n} events" in r.stdout and "http:all-minilm" in r.stdout, r.stdout
    assert f"{n} vectors in all" in r.stdout, r.stdout
    assert embed_server.inputs == [PARAPHRASED, CAR, *DISTRACTORS]
    r = coworker("embed", "--check")
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    assert f"integrity: {n}/{n}" in r.stdout and "match" in r.stdout, r.stdout
    r = coworker("embed", "--backfill")
    assert r.returncode == 0 and "embedded 0 events" in r.stdout, r.stdout
    assert f"{n} vectors" in r.stdout, r.stdout

    tamper(offline_home, ids[2], vector=f32(CAR))
    r = coworker("embed", "--check")
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    assert f"integrity: {n - 1}/{n}" in r.stdout, r.stdout
    assert str(ids[2]) in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


@pytest.mark.parametrize("args", [["--backfill"], ["--check"], []])
def test_cli_embed_with_the_channel_off_exits_2_with_one_line(offline_home: Home,
                                                             embed_server: EmbedServer, args):
    write_config(offline_home.root, semantic={"url": embed_server.url})
    r = coworker("embed", *args)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "[semantic] enabled = true" in lines[0], r.stderr
    assert embed_server.requests == []


def test_cli_embed_without_an_action_exits_2(offline_home: Home, embed_server: EmbedServer):
    write_config(offline_home.root, semantic=semantic_cfg(embed_server.url))
    r = coworker("embed")
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert len(r.stderr.strip().splitlines()) == 1 and "--backfill" in r.stderr, r.stderr


def test_only_the_newest_window_of_events_is_embedded_and_loaded(offline_home: Home,
                                                                 embed_server: EmbedServer):
    """Issue 15: at a million events every vector would be 1.5 GB and a brute-force pass per
    query. Backfill embeds the newest `window` events; older ones keep no vector (a vector
    already stored is never deleted, only no longer loaded); every rollup is embedded."""
    ids = seed(offline_home, [f"Status line {i}: the {DISTRACTORS[i % 4]}" for i in range(60)])
    e = HttpEmbedder(embed_server.url, "all-minilm", 2.0)
    with Store.open(offline_home.db_path) as store:
        first = em.backfill(store, e, batch_chars=1000, window=ids[-1] - ids[0] + 1)
        assert first == 60  # the whole history fits the window
        newer = seed(offline_home, [f"Later note {i} about {PARAPHRASED}" for i in range(25)])
        done = em.backfill(store, e, batch_chars=1000, window=10)
        assert done == 10, "only the newest 10 events may be embedded"
        embedded = {r[0] for r in store.query(
            "SELECT item_id FROM vectors WHERE item_kind = 'event'")}
        assert set(newer[-10:]) <= embedded and not set(newer[:-10]) & embedded
        assert set(ids) <= embedded, "vectors already stored are kept"
        window = Matrix.load(store, e.name, window=10)
        assert sorted(int(i) for i in window.ids) == newer[-10:]
        assert len(Matrix.load(store, e.name).ids) == 70  # no window: every stored vector


def test_the_probe_finds_each_events_episode_by_lookup(offline_home: Home):
    """The probe groups its nearest events by the level-1 episode covering each, one indexed
    look-up per event (not a read of every episode): the same episode a scan of all spans
    gives, and None for events no episode covers yet."""
    from runtime.memory import nearest

    old = iso(NOW - timedelta(days=60))
    seed(offline_home, [f"Old note {i} about {DISTRACTORS[i % 4]}" for i in range(80)], ts=old)
    with Store.open(offline_home.db_path) as store:
        rf.reflect(offline_home, offline_home.settings(), store)
    fresh = seed(offline_home, ["A note no episode covers yet."])
    with Store.open(offline_home.db_path) as store:
        spans = [(int(r[0]), int(r[1]), int(r[2])) for r in store.query(
            "SELECT id, first_event, last_event FROM rollups WHERE level = 1 AND "
            "first_event IS NOT NULL")]
        assert len(spans) > 3
        top = int(store.scalar("SELECT MAX(id) FROM history"))
        probe_ids = np.arange(1, top + 1, dtype=np.int64)
        want = [next((r for r, a, b in spans if a <= i <= b), None) for i in probe_ids]
        assert nearest._group(store, probe_ids) == want
        assert want[fresh[0] - 1] is None


def test_a_turn_pays_one_pass_over_the_vectors(offline_home: Home):
    """Hybrid recall asks for the nearest events and then the probe, with the same query
    vector: the cosines are computed once (a pass over 100,000 vectors costs milliseconds)."""
    from runtime.memory.nearest import probe

    class Counting(np.ndarray):
        passes = 0

        def __matmul__(self, other):  # noqa: ANN001, ANN204
            Counting.passes += 1
            return np.asarray(self) @ other

    rows = np.random.default_rng(0).standard_normal((50, 8)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    matrix = Matrix(np.arange(1, 51, dtype=np.int64), rows.view(Counting))
    query = rows[3].copy()
    with Store.open(offline_home.db_path) as store:
        assert matrix.nearest(query, 5)[0] == 4
        got = probe(store, query, matrix)
        assert got is not None and got.events[0][0] == 4
        assert Counting.passes == 1
        other = rows[7].copy()  # a new query is computed afresh
        assert matrix.nearest(other, 5)[0] == 8 and Counting.passes == 2
