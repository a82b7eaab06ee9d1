"""The semantic channel at the walk and search (issue 14, ADR-0020), against a real embedding
server on 127.0.0.1 (tests/test_semantic.py's, a hashed bag of words with synonyms folded):

- the walk enters through the episode the vectors point at only when no lexical entry reaches
  the threshold and the probe's calibrated confidence does; its trace says so; it embeds only
  when lexical refuses; an ambiguous probe is a refusal that quotes it;
- search fuses the nearest events when lexical covers too little of the query;
- recall injects nothing when neither side is sure;
- every door (the CLI, the MCP tool, the loop's memory_walk tool) takes the same path.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from runtime.home import Home
from runtime.memory import nearest
from runtime.memory.embed import Matrix, SemanticCache
from runtime.memory.recall import recall_hybrid
from runtime.memory.search import search
from runtime.memory.walk import walk_result
from runtime.render import walk_reason
from runtime.store import Store
from runtime.tools import ToolContext, default_registry

from .conftest import coworker, write_config
from .test_semantic import (
    CAR,
    DISTRACTORS,
    PARAPHRASED,
    EmbedServer,
    backfill_with_settings,
    seed,
    semantic_cfg,
)

PARAPHRASE = "When will we buy the car?"  # no word of it is in the history
AMBIGUOUS = "When will we buy the car? Dana asked again."  # the car, or Dana's rest?


@pytest.fixture
def embed_server() -> EmbedServer:
    server = EmbedServer().start()
    yield server
    server.stop()


@pytest.fixture
def sem_home(offline_home: Home, embed_server: EmbedServer) -> tuple[Home, list[int]]:
    write_config(offline_home.root, semantic=semantic_cfg(embed_server.url))
    ids = seed(offline_home, [PARAPHRASED, CAR, *DISTRACTORS], ts="2024-05-01T09:00:00.000Z")
    assert backfill_with_settings(offline_home) == len(ids)
    return offline_home, ids


def _semantic(home: Home, store: Store, text: str, calls: list[str]):
    cache = SemanticCache()
    inner = cache.for_query(store, home.settings().semantic, text)
    assert inner is not None

    def semantic():
        calls.append(text)
        return inner()
    return semantic


def test_the_walk_enters_by_meaning_when_no_words_match(sem_home):
    home, ids = sem_home
    calls: list[str] = []
    with Store.open(home.db_path, readonly=True) as store:
        lexical = walk_result(store, PARAPHRASE)
        got = walk_result(store, PARAPHRASE, semantic=_semantic(home, store, PARAPHRASE, calls))
    assert lexical.refused, "the paraphrase must share no word with the history"
    assert not got.refused, got.why
    assert got.entry == "semantic" and got.confidence >= 0.5, (got.entry, got.confidence)
    assert [f.event.id for f in got.events][:1] == [ids[1]], [f.event.id for f in got.events]
    assert ids[0] not in [f.event.id for f in got.events], "Dana's event is not about the car"
    first = got.trace[0].why
    assert "semantic match" in first and "cosine" in first and "margin" in first, first
    assert "below the threshold" in first, "the trace must say why lexical was not used"
    assert calls == [PARAPHRASE]
    assert got.as_dict()["entry"] == "semantic"


def test_a_model_that_answered_wrongly_never_enters_the_walk(sem_home, monkeypatch):
    """Issue 39: mpnet's semantic entry answered a held question of the work set wrongly, so
    with it the walk enters lexically only and says a search may find more; MiniLM's stays."""
    from runtime.memory import nearest
    from runtime.render import walk_reason

    assert "all-mpnet-base-v2" in nearest.NO_WALK_ENTRY
    assert "all-minilm-l6-v2" not in nearest.NO_WALK_ENTRY
    monkeypatch.setattr(nearest, "NO_WALK_ENTRY", frozenset({"all-minilm-l6-v2"}))
    home, _ = sem_home
    with Store.open(home.db_path, readonly=True) as store:
        got = walk_result(store, PARAPHRASE, semantic=_semantic(home, store, PARAPHRASE, []))
    assert got.refused and got.why is not None and got.why.code == "below_threshold"
    assert got.why.probe is not None and got.why.probe.confidence >= 0.5  # it would have entered
    assert "`coworker search`" in (walk_reason(got) or "")


def test_the_walk_does_not_embed_when_lexical_enters(sem_home):
    home, ids = sem_home
    calls: list[str] = []
    query = "printer toner"
    with Store.open(home.db_path, readonly=True) as store:
        got = walk_result(store, query, semantic=_semantic(home, store, query, calls))
    assert got.entry == "lexical" and not got.refused
    assert calls == [], "the semantic side was asked although lexical entered"


def test_an_ambiguous_probe_is_a_refusal_that_quotes_it(sem_home):
    home, _ = sem_home
    calls: list[str] = []
    with Store.open(home.db_path, readonly=True) as store:
        got = walk_result(store, AMBIGUOUS, semantic=_semantic(home, store, AMBIGUOUS, calls))
    assert got.refused, f"an ambiguous probe entered: {got.as_dict()}"
    assert got.entry is None and got.why is not None and got.why.probe is not None, got.why
    assert got.code == "below_threshold" and "semantic match" in (walk_reason(got) or "")
    assert got.confidence < 0.5
    assert calls == [AMBIGUOUS]


def test_the_probe_confidence_is_the_calibrated_logistic():
    c = nearest.CALIBRATION
    for best, margin in ((0.3, 0.0), (0.5, 0.1), (0.8, 0.4)):
        z = c["bias"] + c["best"] * best + c["margin"] * margin
        assert nearest.confidence(best, margin) == round(1 / (1 + np.exp(-z)), 4)
    # more margin over the other episodes means more confidence, all else equal
    assert nearest.confidence(0.5, 0.2) > nearest.confidence(0.5, 0.05)


def test_search_fuses_the_nearest_events_when_lexical_covers_too_little(sem_home):
    home, ids = sem_home
    calls: list[str] = []
    with Store.open(home.db_path, readonly=True) as store:
        assert search(store, PARAPHRASE) == []
        hits = search(store, PARAPHRASE, 5, semantic=_semantic(home, store, PARAPHRASE, calls))
        covered = search(store, "printer toner floor", 5,
                         semantic=_semantic(home, store, "printer toner floor", calls))
    assert hits and (hits[0].kind, hits[0].id, hits[0].source) == ("event", ids[1], "semantic")
    assert calls == [PARAPHRASE], "a well-covered query must not be embedded"
    assert covered and covered[0].id == ids[2]


def test_hybrid_recall_injects_nothing_when_neither_side_is_sure(sem_home):
    home, _ = sem_home
    settings = home.settings()
    cache = SemanticCache()
    with Store.open(home.db_path, readonly=True) as store:
        embedder, matrix = cache.get(store, settings.semantic)
        sure = recall_hybrid(store, PARAPHRASE, embedder=embedder, matrix=matrix, gate=0.6)
        unsure = recall_hybrid(store, AMBIGUOUS, embedder=embedder, matrix=matrix, gate=0.6)
    assert sure.skipped is None and sure.channel == "hybrid", sure.skipped
    from runtime.memory.recall import Budget

    assert unsure.skipped == "low_evidence_semantic", unsure.skipped
    assert unsure.skip_confidence is not None and unsure.skip_confidence < 0.5
    assert unsure.block(Budget()) is None, "noise: a block for a turn neither side is sure of"
    assert unsure.semantic is not None and unsure.semantic["confidence"] < 0.5
    assert unsure.as_meta(Budget())["semantic"]["confidence"] < 0.5


def test_the_cli_walk_and_search_take_the_semantic_path(sem_home):
    home, ids = sem_home
    walked = coworker("walk", *PARAPHRASE.split(), "--json")
    assert walked.returncode == 0, walked.stderr
    got = json.loads(walked.stdout)
    assert got["entry"] == "semantic" and got["events"][0]["id"] == ids[1], got
    human = coworker("walk", *PARAPHRASE.split())  # says how it entered, not "(0/3: )"
    first = human.stdout.splitlines()[0]
    assert human.returncode == 0 and "(by meaning:" in first and "no words matched" in first, \
        human.stdout
    found = coworker("search", *PARAPHRASE.split(), "--json")
    assert found.returncode == 0, found.stderr
    first = json.loads(found.stdout.splitlines()[0])
    assert (first["id"], first["source"]) == (ids[1], "semantic"), found.stdout


def test_the_loops_walk_tool_takes_the_semantic_path(sem_home):
    home, ids = sem_home
    registry = default_registry()
    with Store.open(home.db_path) as store:
        ctx = ToolContext(store=store, home_root=home.root, settings=home.settings(),
                          tick_id=None, live=False, semantic=SemanticCache())
        result = registry.dispatch(ctx, "memory_walk", {"query": PARAPHRASE})
        plain = registry.dispatch(
            ToolContext(store=store, home_root=home.root, settings=home.settings(),
                        tick_id=None, live=False), "memory_walk", {"query": PARAPHRASE})
    assert not result.is_error, result.text
    assert json.loads(result.text)["entry"] == "semantic"
    assert json.loads(plain.text)["refused"], "without the cache the tool is lexical only"


def test_a_dead_embedding_server_leaves_the_walk_lexical_with_a_warning(sem_home, embed_server,
                                                                         caplog):
    home, _ = sem_home
    embed_server.fail = 500
    with Store.open(home.db_path, readonly=True) as store, caplog.at_level("WARNING"):
        got = walk_result(store, PARAPHRASE, semantic=SemanticCache().for_query(
            store, home.settings().semantic, PARAPHRASE))
    assert got.refused and got.why is not None and got.why.probe is None, got.why
    assert any("semantic channel unavailable" in r.getMessage() for r in caplog.records)


def _unit(*xs: float) -> np.ndarray:
    v = np.asarray(xs, dtype=np.float32)
    return v / np.linalg.norm(v)


def test_a_line_said_three_times_neither_enters_nor_competes(offline_home: Home):
    """A routine line (a reminder said in every episode) ranked below the answer does not
    shrink its margin: the probe measures it against the next real stranger. Ranked above the
    answer, it may be the answer said thrice: the entry then has no margin. Said twice, a line
    is still a statement and still counts."""
    query = _unit(1, 0, 0, 0)
    answer, stranger = _unit(0.6, 0.8, 0, 0), _unit(0.3, 0, 0.95, 0)
    below, above = _unit(0.55, 0, 0, 0.835), _unit(0.65, 0, 0, 0.76)
    ids = np.array([10, 20, 30, 40, 50], dtype=np.int64)
    with Store.open(offline_home.db_path) as store:
        got = nearest.probe(store, query, Matrix(ids, np.vstack(
            [answer, below, below, below, stranger])))
        assert got is not None and got.events[0][0] == 10 and not got.behind_routine, got
        assert got.margin == pytest.approx(float(answer @ query - stranger @ query), abs=1e-4)
        assert got.confidence >= 0.5, got
        behind = nearest.probe(store, query, Matrix(ids, np.vstack(
            [answer, above, above, above, stranger])))
        assert behind is not None and behind.events[0][0] == 10, behind
        assert behind.behind_routine and behind.margin == 0.0 and behind.confidence < 0.5
        twice = nearest.probe(store, query, Matrix(np.array([10, 20, 30, 50], dtype=np.int64),
                                                   np.vstack([answer, above, above, stranger])))
    assert twice is not None and twice.events[0][0] == 20, twice  # twice is not routine
    assert list(nearest.routine(np.vstack([answer, above, above]))) == [False] * 3
    assert list(nearest.routine(np.vstack([answer, above, above, above, stranger]))) == [
        False, True, True, True, False]


def test_an_unread_competitor_bounds_the_margin(offline_home: Home,
                                               monkeypatch: pytest.MonkeyPatch):
    """When every other event the probe read was routine, the best other episode lies among
    those it did not read: the margin is taken to the last cosine read, never to zero."""
    query = _unit(1, 0, 0, 0)
    answer, stranger = _unit(0.6, 0.8, 0, 0), _unit(0.3, 0, 0.95, 0)
    reminder = _unit(0.55, 0, 0, 0.835)  # below the answer: set aside, not above it
    matrix = Matrix(np.array([10, 20, 30, 40, 50], dtype=np.int64),
                    np.vstack([answer, reminder, reminder, reminder, stranger]))
    monkeypatch.setattr(nearest, "READ", 4)  # the stranger is not read
    with Store.open(offline_home.db_path) as store:
        got = nearest.probe(store, query, matrix)
    assert got is not None and got.events[0][0] == 10 and not got.behind_routine, got
    assert got.margin == pytest.approx(float(answer @ query - reminder @ query), abs=1e-4), got


def test_matrix_load_is_the_probes_input(sem_home):
    """The probe reads the vectors it is handed: an empty matrix means no probe at all."""
    home, _ = sem_home
    empty = Matrix(np.zeros(0, dtype=np.int64), np.zeros((0, 0), dtype=np.float32))
    with Store.open(home.db_path, readonly=True) as store:
        assert nearest.probe(store, np.ones(64, dtype=np.float32) / 8, empty) is None


def test_hybrid_search_never_shows_an_event_and_the_episode_that_holds_it(
        offline_home: Home, embed_server: EmbedServer):
    """Rollups are embedded and fused as a ranking of their own; an event inside an episode
    already shown (or an episode holding an event already shown) is folded into it, so five
    hits are five different places in the history."""
    from rituals import reflect as rf
    from runtime.store import rollups as rl
    from runtime.store import vectors as vs

    write_config(offline_home.root, semantic=semantic_cfg(embed_server.url))
    bodies = [CAR, PARAPHRASED, *DISTRACTORS] * 8  # several episodes, each with a car event
    seed(offline_home, bodies, ts="2024-05-01T09:00:00.000Z")
    with Store.open(offline_home.db_path) as store:
        rf.reflect(offline_home, offline_home.settings(), store)  # embeds events and rollups
    cache = SemanticCache()
    with Store.open(offline_home.db_path) as store:
        assert vs.count(store, "http:all-minilm", "rollup") >= 2
        hits = search(store, PARAPHRASE, 5, semantic=cache.for_query(
            store, offline_home.settings().semantic, PARAPHRASE))
        episodes = [rl.get(store, h.id) for h in hits if h.kind == "rollup"]
    assert any(h.source == "semantic" for h in hits), hits
    for r in episodes:
        if r is not None and r.level == 1:
            inside = [h.id for h in hits if h.kind == "event"
                      and r.first_event <= h.id <= r.last_event]
            assert not inside, f"events {inside} shown beside their episode {r.id}"


def test_hybrid_search_shows_a_text_said_again_once(offline_home: Home,
                                                     embed_server: EmbedServer):
    """A line posted again and again (a weekly reminder) that is nearer the query than the fact
    asked about is one hit, not the whole page: its best copy stands for the rest and the fact
    gets its place."""
    reminder = "Remember to purchase the automobile stickers."  # nearer than CAR by meaning
    write_config(offline_home.root, semantic=semantic_cfg(embed_server.url))
    ids = seed(offline_home, [reminder, *DISTRACTORS[:2]] * 3 + [reminder.upper(), CAR]
               + [f"  {reminder}  "] * 2, ts="2024-05-01T09:00:00.000Z")
    assert backfill_with_settings(offline_home) == len(ids)
    with Store.open(offline_home.db_path, readonly=True) as store:
        assert not search(store, PARAPHRASE, 5), "the query must share no word with the history"
        hits = search(store, PARAPHRASE, 5, semantic=SemanticCache().for_query(
            store, offline_home.settings().semantic, PARAPHRASE))
    said = [h for h in hits if " ".join(h.excerpt.casefold().split()) == reminder.casefold()]
    assert len(said) == 1, [h.excerpt for h in hits]
    assert ids[-3] in [h.id for h in hits if h.kind == "event"], [h.excerpt for h in hits]


def test_an_answer_said_three_times_is_a_refusal_not_a_lesser_line(offline_home: Home,
                                                                   embed_server):
    """The owner said the rule on three days in the same words: set aside as routine, it still
    ranks above whatever the probe would enter on (the prod password's line), so that entry
    has no margin and is not confident: a refusal, not an answer with another line."""
    from runtime.store import Event
    from runtime.store import events as ev

    from .test_semantic import backfill_with_settings, semantic_cfg

    embed_server.dim = 1024  # fewer hash collisions among the filler lines
    write_config(offline_home.root, semantic=semantic_cfg(embed_server.url))
    rule = "The staging password rotates every Friday at noon."
    rows = [Event(kind="message", body=rule, actor="owner", author_kind="user",
                  ts=f"2024-05-0{d}T09:00:00.000Z") for d in (1, 3, 6)]
    rows.append(Event(kind="message", body="The prod password rotates on demand.", actor="Sam",
                      author_kind="third_party", ts="2024-05-07T09:00:00.000Z"))
    rows += [Event(kind="note", body=f"Backup job {i} finished for shard {i * 7}.",
                   actor="coworker", author_kind="agent", ts="2024-05-08T09:00:00.000Z")
             for i in range(30)]
    with Store.open(offline_home.db_path) as store:
        ev.append_many(store, rows)
    assert backfill_with_settings(offline_home) == len(rows)
    with Store.open(offline_home.db_path, readonly=True) as store:
        embedder, matrix = SemanticCache().get(store, offline_home.settings().semantic)
        pr = nearest.probe(store, embedder.embed(["When does the staging password rotate?"])[0],
                           matrix)
    assert pr is not None and pr.behind_routine and pr.margin == 0.0, pr
    assert pr.confidence < 0.5, pr  # the walk's semantic entry refuses below 0.5
    assert "three times or more" in pr.why()
