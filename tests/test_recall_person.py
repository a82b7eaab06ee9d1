"""Recall widens to the person a question names (issue 14, ADR-0030), against the real embedding
server on 127.0.0.1 (tests/test_semantic.py's hashed bag of words, synonyms folded):

- a question naming one person who speaks in the history fuses that person's nearest lines
  with the lexical hits, even when the lexical hits cover the query well enough to skip the
  semantic channel otherwise; the lexical top three keep their places;
- when the words' best line is the person's own, their other lines the words found rank before
  other people's lines about them; when another's line is best, the words' order stands;
- a person is named by a whole word, any case, possessive or not; two people, a name inside
  another word, a speaker called "me", and the coworker's, tools' or the system's actor names
  ask for nothing.
"""

from __future__ import annotations

import numpy as np
import pytest

from runtime.home import Home
from runtime.memory.embed import SemanticCache
from runtime.memory.recall import (
    WORDS_FIRST,
    named_person,
    recall,
    recall_hybrid,
)
from runtime.store import Event, Store
from runtime.store import events as ev

from .conftest import write_config
from .test_semantic import EmbedServer, backfill_with_settings, semantic_cfg


def spoken_by_named(store: Store, text: str, matrix) -> np.ndarray | None:
    """The named person's event rows in `matrix`, or None when the text names no one."""
    person = named_person(store, text, matrix)
    return None if person is None else person.mask


ANSWER = "My automobile is a red hatchback from 2019."  # "automobile" is "car" to the embedder
QUESTION = "Which car does Dana drive?"


@pytest.fixture
def embed_server() -> EmbedServer:
    server = EmbedServer().start()
    yield server
    server.stop()


def _said(actor: str, kind: str, body: str, author_kind: str = "third_party") -> Event:
    return Event(kind=kind, body=body, actor=actor, author_kind=author_kind,
                 ts="2024-05-01T09:00:00.000Z")


@pytest.fixture
def people_home(offline_home: Home, embed_server: EmbedServer) -> tuple[Home, int]:
    """Sam drives a car for Dana all day (every word of the question); Dana said one line about
    her own car in other words, among lines about nothing of the kind."""
    write_config(offline_home.root, semantic=semantic_cfg(embed_server.url))
    rows = [_said("Sam", "message", f"I drive the car for Dana to the depot on route {i}.")
            for i in range(30)]
    rows += [_said("Dana", "message", f"Standup notes for sprint {i} are in the wiki.")
             for i in range(30)]
    rows.append(_said("Dana", "message", ANSWER))
    rows.append(_said("coworker", "note", "Dana asked about the wiki again.", "agent"))
    rows.append(_said("me", "message", "Remind me to water the plants."))  # an import's "me"
    with Store.open(offline_home.db_path) as store:
        ids = ev.append_many(store, rows)
    assert backfill_with_settings(offline_home) == len(rows)
    return offline_home, ids[-3]


def test_recall_widens_to_the_named_persons_lines(people_home):
    home, answer = people_home
    with Store.open(home.db_path, readonly=True) as store:
        embedder, matrix = SemanticCache().get(store, home.settings().semantic)
        words = [int(h.event.id or 0) for h in recall(store, QUESTION, k=20).hits]
        got = recall_hybrid(store, QUESTION, embedder=embedder, matrix=matrix, gate=0.6, k=5)
    assert answer not in words, "the words alone must miss Dana's line for this to show anything"
    ids = [int(h.event.id or 0) for h in got.hits]
    assert answer in ids, (got.channel, [h.event.body for h in got.hits])
    assert got.channel == "hybrid"
    assert ids[:WORDS_FIRST] == words[:WORDS_FIRST], "the lexical top three keep their places"


def test_a_block_the_words_settle_embeds_nothing(people_home, embed_server: EmbedServer):
    """The loop's block holds three items; with the lexical top three kept first, Dana's lines
    could not change it when the words cover the question: the query is not embedded."""
    home, _ = people_home
    with Store.open(home.db_path, readonly=True) as store:
        embedder, matrix = SemanticCache().get(store, home.settings().semantic)
        before = len(embed_server.requests)
        block = recall_hybrid(store, QUESTION, embedder=embedder, matrix=matrix, gate=0.6,
                              k=WORDS_FIRST)
        assert len(embed_server.requests) == before, "embedded a query it could not use"
        assert block.channel == "lexical (coverage above the gate)"
        wide = recall_hybrid(store, QUESTION, embedder=embedder, matrix=matrix, gate=0.6,
                             k=WORDS_FIRST + 1)
    assert len(embed_server.requests) == before + 1 and wide.channel == "hybrid"
    assert [h.event.id for h in wide.hits][:WORDS_FIRST] == [h.event.id for h in block.hits]


@pytest.mark.parametrize(("text", "who"), [
    (QUESTION, "Dana"),
    ("what is DANA's plan for the wiki?", "Dana"),
    ("Has Sam finished route 4", "Sam"),
    ("Did Dana tell Sam about the depot?", None),  # two people: no one in particular
    ("Is Adana on the route?", None),  # a name inside another word
    ("What did the coworker note?", None),  # the coworker is no person of the history
    ("Which car goes to the depot?", None),
    ("Remind me: which car goes to the depot?", None),  # a speaker called "me" is no name
])
def test_a_person_is_named_by_a_whole_word(people_home, text: str, who: str | None):
    home, _ = people_home
    with Store.open(home.db_path, readonly=True) as store:
        _, matrix = SemanticCache().get(store, home.settings().semantic)
        mask = spoken_by_named(store, text, matrix)
        actors = {e.id: e.actor for e in ev.tail(store, 100)}
    if who is None:
        assert mask is None
        return
    assert mask is not None and mask.dtype == np.bool_
    assert {actors[int(i)] for i in matrix.ids[mask]} == {who}
    assert int(mask.sum()) == sum(1 for a in actors.values() if a == who)


def _home_with(offline_home: Home, embed_server: EmbedServer, rows: list[Event]) -> list[int]:
    write_config(offline_home.root, semantic=semantic_cfg(embed_server.url))
    with Store.open(offline_home.db_path) as store:
        ids = ev.append_many(store, rows)
    assert backfill_with_settings(offline_home) == len(rows)
    return ids


def test_a_name_the_history_spells_two_ways_is_one_person(offline_home: Home,
                                                          embed_server: EmbedServer):
    """An import may write "Dana" and "dana" (or "José" composed and decomposed): one person,
    every line of theirs, the same in every process."""
    import unicodedata

    jose = unicodedata.normalize("NFD", "José")
    ids = _home_with(offline_home, embed_server, [
        _said("Dana", "message", "Pottery on Sunday."), _said("dana", "message", "Climbing."),
        _said(jose, "message", "Tapas tonight."), _said("Sam", "message", "Depot run.")])
    with Store.open(offline_home.db_path, readonly=True) as store:
        _, matrix = SemanticCache().get(store, offline_home.settings().semantic)
        dana = spoken_by_named(store, "What does Dana do on weekends?", matrix)
        jose_mask = spoken_by_named(store, "What did José cook?", matrix)
    assert sorted(int(i) for i in matrix.ids[dana]) == ids[:2]
    assert [int(i) for i in matrix.ids[jose_mask]] == [ids[2]]


@pytest.mark.parametrize(("text", "named"), [
    ("When is the electricity bill due?", False),  # a speaker called Bill, an ordinary word
    ("What did Bill say about the depot?", True),
    ("what did bill say about the depot", True),  # no capitals anywhere: the writer's choice
    ("Who is the owner of the billing service?", False),  # the owner's actor is no name
])
def test_a_common_word_names_someone_only_when_written_as_a_name(
        offline_home: Home, embed_server: EmbedServer, text: str, named: bool):
    _home_with(offline_home, embed_server, [
        _said("Bill", "message", "Lunch menu for Monday is soup."),
        Event.owner_message("Ship the depot report on Friday.", via="cli"),
        _said("Sam", "message", "The electricity bill arrived at the depot.")])
    with Store.open(offline_home.db_path, readonly=True) as store:
        _, matrix = SemanticCache().get(store, offline_home.settings().semantic)
        got = spoken_by_named(store, text, matrix)
    assert (got is not None) == named, text


def test_a_month_named_as_a_date_names_no_speaker_of_that_name(offline_home: Home,
                                                                embed_server: EmbedServer):
    """"in May 2024" is a month recall reads by date, not the speaker May."""
    _home_with(offline_home, embed_server, [
        _said("May", "message", "The tomatoes in the garden are ripe."),
        Event.owner_message("We shipped the billing export.", via="cli")])
    with Store.open(offline_home.db_path, readonly=True) as store:
        _, matrix = SemanticCache().get(store, offline_home.settings().semantic)
        month = spoken_by_named(store, "What did we ship in May 2024?", matrix)
        person = spoken_by_named(store, "What did May plant in the garden?", matrix)
    assert month is None
    assert person is not None and int(person.sum()) == 1


def test_a_named_person_never_lifts_the_evidence_floor(offline_home: Home,
                                                       embed_server: EmbedServer):
    """The words cover the question but their evidence is below the floor: recall injects
    nothing, named person or not (the person's lines only widen what the words found)."""
    from runtime.memory.recall import Budget

    rows = [_said("Sam", "message", f"The invoice for the depot arrived on day {i}.")
            for i in range(6)]
    rows += [_said("Sam", "message", f"Dana is in the office on day {i}.") for i in range(3)]
    rows += [_said("Dana", "message", f"Lunch menu for Friday {i} is pasta.") for i in range(6)]
    rows.append(_said("Sam", "message", "She purchased an automobile."))
    _home_with(offline_home, embed_server, rows)
    question = "Which car did Dana buy after the invoice arrived?"
    with Store.open(offline_home.db_path, readonly=True) as store:
        embedder, matrix = SemanticCache().get(store, offline_home.settings().semantic)
        words = recall(store, question, k=3)
        got = recall_hybrid(store, question, embedder=embedder, matrix=matrix, gate=0.6, k=3)
    assert words.skipped == "low_evidence", words.skipped
    assert got.block(Budget()) is None, got.block(Budget())


def test_words_that_fall_short_still_get_the_whole_historys_nearest(
        offline_home: Home, embed_server: EmbedServer):
    """A named person adds their lines beside the whole history's nearest, never instead:
    when the words fall short, the answer another person gave still reaches the block."""
    rows = [_said("coworker", f"Backup job {i} finished for shard {i * 7}.", "agent")
            for i in range(40)]
    rows.append(_said("Sam", "message", "The electricity bill arrived at the depot on day 1 "
                      "with parcels, letters, flyers, catalogues, samples and coupons."))
    rows += [_said("Bill", "message", f"Lunch menu for Monday {i} is soup.") for i in range(6)]
    rows.append(_said("Sam", "message", "We purchased an automobile."))
    ids = _home_with(offline_home, embed_server, rows)
    question = "Which car did we buy with Bill's electricity invoice?"
    with Store.open(offline_home.db_path, readonly=True) as store:
        embedder, matrix = SemanticCache().get(store, offline_home.settings().semantic)
        assert spoken_by_named(store, question, matrix) is not None
        got = recall_hybrid(store, question, embedder=embedder, matrix=matrix, gate=0.6, k=3)
    assert got.channel == "hybrid" and got.coverage < 0.6, (got.channel, got.coverage)
    assert ids[-1] in [int(h.event.id or 0) for h in got.hits], [h.event.body for h in got.hits]


class _People:
    """A stand-in for the matrix's `people()`: only the names matter to `named_people`."""

    def __init__(self, *actors: str) -> None:
        from runtime.memory.embed import name_key

        self.names: dict[str, tuple[str, ...]] = {}
        for a in actors:
            self.names[name_key(a)] = (*self.names.get(name_key(a), ()), a)


@pytest.mark.parametrize(("actors", "text", "want"), [
    (("Dana", "Dana Smith"), "What did Dana Smith approve?", {"dana smith"}),  # the longest
    (("Dana", "Dana Smith"), "What did Dana approve?", {"dana"}),
    (("Dana  Lee", "Dana"), "What did Dana Lee say?", {"dana lee"}),  # spaces collapsed
    (("jdoe",), "What did jdoe say about the CI deploy?", {"jdoe"}),  # written lower case
    (("Dana",), "what did dana say, I forgot", {"dana"}),  # "I" is not the text's capitals
    (("O'Brien",), "What did O’Brien decide?", {"o'brien"}),  # curly apostrophe
    (("Zoë",), "What did Zoe decide?", {"zoe"}),  # accents folded, as search folds them
    (("Jose",), "What did José decide?", {"jose"}),
    (("Dana",), "What did ‘Dana’ say?", {"dana"}),
    (("Li",), "What did Li say about the launch?", {"li"}),  # short, capitalised, not first
    (("Will",), "What did Will say about the launch?", {"will"}),
    (("Will",), "Will we ship on Friday?", set()),  # the first word: a verb, not Will
    (("Will",), "We will ship on Friday.", set()),
    (("Dr. Smith",), "What did Dr. Smith prescribe?", {"dr smith"}),  # dots at a word's end
    (("Dr. Smith",), "What did Dr Smith prescribe?", {"dr smith"}),
    (("J.R.",), "What did J.R. say about the oil?", {"j.r"}),
    (("Sam Smith Jr.",), "Where did Sam Smith Jr. move?", {"sam smith jr"}),
    (("Dana",), "What about Dana—did she sign?", {"dana"}),  # dashes, markup, handles
    (("Dana",), "What did **Dana** say?", {"dana"}),
    (("Dana",), "Ask @Dana…", {"dana"}),
    (("Dana", "Sam"), "Dana/Sam: who signed?", {"dana", "sam"}),
])
def test_names_are_read_as_a_person_would(actors, text: str, want: set[str]):
    from runtime.memory.recall import named_people

    assert named_people(text, _People(*actors).names) == want


def test_a_probe_below_a_line_said_thrice_is_never_confident(offline_home: Home):
    """However near the entry is, a line said three times that ranks above it may be the
    answer: the probe gives it no confidence, so neither the walk nor a weak recall enters."""
    from runtime.memory import nearest
    from runtime.memory.embed import Matrix

    from .test_semantic_entry import _unit as unit

    query = unit(1, 0, 0, 0)
    rule, near = unit(0.97, 0, 0, 0.243), unit(0.92, 0.39, 0, 0)
    matrix = Matrix(np.array([1, 2, 3, 4, 5], dtype=np.int64),
                    np.vstack([rule, rule, rule, near, unit(0.2, 0, 0.98, 0)]))
    with Store.open(offline_home.db_path) as store:
        pr = nearest.probe(store, query, matrix)
    assert pr is not None and pr.behind_routine and pr.events[0][0] == 4
    assert pr.best > 0.9 and pr.confidence == 0.0, pr


def test_search_widens_to_the_named_person_when_it_takes_the_hybrid_path(offline_home: Home):
    """`coworker search` and `memory_search` fuse the same person's nearest lines as recall
    when their words fall short of the gate (search embeds nothing otherwise). The vectors are
    set by hand: twenty-five notes sit nearer the query than Dana's line, so only her own
    nearest can bring it."""
    from runtime.memory.embed import Matrix
    from runtime.memory.search import search

    rows = [_said("Sam", "message", f"I drive the car for Dana to the depot on route {i}.")
            for i in range(5)]
    rows += [_said("coworker", "note", f"Backup job {i} finished.", "agent") for i in range(25)]
    rows.append(_said("Dana", "message", "My automobile is red."))
    with Store.open(offline_home.db_path) as store:
        ids = ev.append_many(store, rows)
    rng = np.random.default_rng(7)
    query = np.zeros(16, dtype=np.float32)
    query[0] = 1.0

    def near(cos: float) -> np.ndarray:
        v = rng.standard_normal(16).astype(np.float32)
        v[0] = 0.0
        v *= np.sqrt(1 - cos * cos) / np.linalg.norm(v)
        v[0] = cos
        return v

    vectors = [near(0.6) for _ in range(5)] + [near(0.5) for _ in range(25)] + [near(0.3)]
    matrix = Matrix(np.asarray(ids, dtype=np.int64), np.vstack(vectors))
    question = "Which car does Dana drive to the coast on sunny weekends?"
    with Store.open(offline_home.db_path, readonly=True) as store:
        found = search(store, question, limit=10, gate=0.6,
                       semantic=lambda text=None: (query, matrix))
    events = [h.id for h in found if h.kind == "event"]
    assert ids[-1] in events, [h.excerpt for h in found]
    assert ids[0] in events  # the words' hits are still there


# --- the named person's lines are found with the question in their own words -----------------

@pytest.mark.parametrize(("text", "key", "asked"), [
    ("What do Melanie's kids like?", "melanie", "What do my kids like?"),
    ("Where has Melanie camped?", "melanie", "Where have I camped?"),
    ("Is Melanie coming?", "melanie", "Am I coming?"),
    ("What did people say to Melanie about her art?", "melanie",
     "What did people say to me about my art?"),
    ("melanie’s dog.", "melanie", "my dog."),
    ("Which books are James' favourites?", "james", "Which books are my favourites?"),
    ("When does Dana Smith fly? Dana Smith's seat.", "dana smith", "When do I fly? my seat."),
    # "May 2024" is a date, not the speaker May; "she" is taken to be the person named
    ("What did May plant in May 2024, and why did she?", "may",
     "What did I plant in May 2024, and why did I?"),
    # a date between the verb and the name stays; so do the quotes around a name
    ("What did 3 May 2024 Dana say?", "dana", "What did 3 May 2024 I say?"),
    ("Did 'Jess' call?", "jess", "Did 'I' call?"),
    # a pronoun inside the name is the name's ("He" is a surname too)
    ("What did He Jing say to his team?", "he jing", "What did I say to my team?"),
    ("Has she met Dana's team? Did he give him hers?", "dana",
     "Have I met my team? Did I give me mine?"),
    ("What did Dana's husband buy her?", "dana", "What did my husband buy me?"),
    ("Did Dana buy her a gift for her art?", "dana", "Did I buy me a gift for my art?"),
])
def test_a_question_is_put_in_the_named_persons_words(text: str, key: str, asked: str):
    from runtime.memory import dates
    from runtime.memory.recall import in_their_words

    names = {"melanie": ("Melanie",), "james": ("James",), "dana smith": ("Dana Smith",),
             "may": ("May",), "dana": ("Dana",), "jess": ("Jess",), "he jing": ("He Jing",)}
    assert in_their_words(text, dates.named(text)[1], key, names) == asked


SIGNED = "Which car does Dana drive?"
OWN_ANSWER = "My automobile is blue, old and rusty."


def _signed(home: Home, embed_server: EmbedServer, drives: int) -> tuple[Home, int]:
    """Dana signs her notes with her name; one line of hers, unsigned, is about her own car in
    other words; Sam drives the car for Dana `drives` times. Asked with her name, her signed
    notes sit nearer the question than her answer; asked as she would say it ("Which car do I
    drive?"), only the answer is near."""
    write_config(home.root, semantic=semantic_cfg(embed_server.url))
    rows = [_said("Sam", "message", f"I drive the car for Dana to the depot on route {i}.")
            for i in range(drives)]
    rows += [_said("Dana", "message", f"Dana here: sprint {i} notes are in the wiki. Dana")
             for i in range(30)]
    rows.append(_said("Dana", "message", OWN_ANSWER))
    with Store.open(home.db_path) as store:
        ids = ev.append_many(store, rows)
    assert backfill_with_settings(home) == len(rows)
    return home, ids[-1]


@pytest.fixture
def signed_home(offline_home: Home, embed_server: EmbedServer) -> tuple[Home, int]:
    return _signed(offline_home, embed_server, 30)


def test_the_named_persons_lines_are_found_with_the_question_in_their_words(
        signed_home, embed_server: EmbedServer):
    home, answer = signed_home
    with Store.open(home.db_path, readonly=True) as store:
        embedder, matrix = SemanticCache().get(store, home.settings().semantic)
        person = named_person(store, SIGNED, matrix)
        assert person is not None and person.asked == "Which car do I drive?"
        as_asked = matrix.nearest(embedder.embed([SIGNED])[0], 20, among=person.mask)
        assert answer not in as_asked, "her signed notes must crowd out the answer as asked"
        embed_server.requests.clear()
        got = recall_hybrid(store, SIGNED, embedder=embedder, matrix=matrix, gate=0.6, k=10)
    assert got.channel == "hybrid"
    assert answer in [int(h.event.id or 0) for h in got.hits], [h.event.body for h in got.hits]
    # one request: the question and the question in her words, in one batch
    assert [r["inputs"] for r in embed_server.requests] == [[SIGNED, "Which car do I drive?"]]


def test_search_finds_the_named_persons_lines_in_their_words(offline_home: Home,
                                                             embed_server: EmbedServer):
    """The door's semantic function embeds the question in the person's words when asked:
    `coworker search` widens to Dana's nearest as recall does. A door that could only embed
    the question as asked misses her answer behind her signed notes."""
    from runtime.memory.search import search

    home, answer = _signed(offline_home, embed_server, 5)
    question = "Which car does Dana drive on sunny weekends at the coast?"  # words fall short
    cfg = home.settings().semantic
    with Store.open(home.db_path, readonly=True) as store:
        door = SemanticCache().for_query(store, cfg, question)
        found = search(store, question, limit=20, gate=0.6, semantic=door)
        as_asked = search(store, question, limit=20, gate=0.6,
                          semantic=lambda text=None: door())
    assert "Which car do I drive on sunny weekends at the coast?" in embed_server.inputs
    assert answer in [h.id for h in found if h.kind == "event"], [h.excerpt for h in found]
    assert answer not in [h.id for h in as_asked if h.kind == "event"]




TYRES = "The depot car got tyres, mirrors, seats, wipers, lamps, brakes and mats."
EXTRAS = ("needs keys cut before Monday", "wants fuel receipts filed weekly",
          "lacks a parking permit downtown", "insurance renewal arrives in June",
          "paint job looks scratched underneath", "radio crackles during long trips",
          "jack went missing last winter", "smells of coffee every morning",
          "horn sounds weak in the rain", "seat belt sticks on cold days",
          "boot lid rattles over cobbles", "mileage log is due on Friday")
DEPOT = "Which car did Dana buy for the depot?"


def _depot_home(offline_home: Home, embed_server: EmbedServer, first: str, tyres_by: str = "Dana"
                ) -> tuple[int, int, set[int]]:
    """Dana's line on the depot car's tyres matches two words of the question and no more;
    Sam's lines naming Dana match three, so the words rank them above it; Dana's many lines
    on buying a vehicle sit nearer her question by meaning, so her nearest lines miss it too.
    `first` says who said the line the words rank first (the same words either way). Returns
    the ids of Dana's line on the tyres, of that first line, and of Sam's other lines.
    `tyres_by`: how the history spells Dana on that line (an import may write "dana")."""
    rows = [_said(tyres_by, "message", TYRES)]
    rows += [_said("Dana", "message", f"We purchased an automobile, a vehicle, for yard {i}.")
             for i in range(30)]
    rows += [_said("Sam", "message", f"Dana, the depot car {x}.") for x in EXTRAS]
    rows.append(_said(first, "message", "Dana's depot car: I buy the depot car for Dana."))
    ids = _home_with(offline_home, embed_server, rows)
    return ids[0], ids[-1], {i for i, r in zip(ids[:-1], rows, strict=False) if r.actor == "Sam"}


def _before(ids: list[int], tyres: int, sams: set[int]) -> list[int]:
    """Sam's lines after the top three that rank before Dana's line on the tyres."""
    cut = ids.index(tyres) if tyres in ids else len(ids)
    return [i for i in ids[WORDS_FIRST:cut] if i in sams]


@pytest.mark.parametrize(("first", "tyres_by"), [("Dana", "Dana"), ("Sam", "Dana"),
                                                 ("Dana", "dana")])
def test_the_named_persons_own_lines_come_first_when_the_words_best_is_theirs(
        offline_home: Home, embed_server: EmbedServer, first: str, tyres_by: str):
    """When the words' best line is the named person's own, their other lines among the best
    twenty rank before other people's lines about them, after the top three (a question about
    them is answered in their own lines); when another person's line is best (the question may
    name the wrong person), the words' order stands. Lexical recall, with no vectors. A line of
    hers the history spells "dana" is hers too."""
    tyres, top, sams = _depot_home(offline_home, embed_server, first, tyres_by)
    with Store.open(offline_home.db_path, readonly=True) as store:
        wide = [int(h.event.id or 0) for h in recall(store, DEPOT, k=20).hits]
        ten = [int(h.event.id or 0) for h in recall(store, DEPOT, k=10).hits]
        three = [int(h.event.id or 0) for h in recall(store, DEPOT, k=3).hits]
    assert wide[0] == top and three == wide[:3] == ten[:3], (wide, three)
    if first == "Sam":  # the words alone: Sam's lines above hers, and hers not in the ten
        assert _before(wide, tyres, sams) and tyres in wide and tyres not in ten, wide
    else:  # and the ten are chosen from the twenty: hers is among them
        assert _before(wide, tyres, sams) == [] == _before(ten, tyres, sams), wide
        assert tyres in ten, ten


@pytest.mark.parametrize("first", ["Dana", "Sam"])
def test_hybrid_recall_keeps_the_named_persons_own_lines_first(
        offline_home: Home, embed_server: EmbedServer, first: str):
    """The same through hybrid recall: Dana's nearest lines by meaning miss the tyres line, so
    only her own lines coming first among what the words found puts it before Sam's."""
    tyres, top, sams = _depot_home(offline_home, embed_server, first)
    with Store.open(offline_home.db_path, readonly=True) as store:
        embedder, matrix = SemanticCache().get(store, offline_home.settings().semantic)
        person = named_person(store, DEPOT, matrix)
        assert person is not None
        near = matrix.nearest(embedder.embed([person.asked])[0], 20, among=person.mask)
        got = recall_hybrid(store, DEPOT, embedder=embedder, matrix=matrix, gate=0.6, k=20)
    assert tyres not in near, "her nearest lines must miss it for this to show anything"
    ids = [int(h.event.id or 0) for h in got.hits]
    assert got.channel == "hybrid" and got.coverage >= 0.6 and ids[0] == top
    assert (_before(ids, tyres, sams) == []) == (first == "Dana"), [h.event.body for h in got.hits]


# Lines where the rule's edges meet: Sam's lines about Dana's depot car rank above Dana's own;
# May (a speaker whose name is a month) and the coworker's notes speak too
EDGES = ([_said("Sam", "message", f"Dana, the depot car {x}.") for x in (
            "needs keys", "wants receipts", "lacks a permit", "insurance due", "paint scratched",
            "radio crackles", "jack missing", "smells of coffee", "horn weak", "belt sticks")]
         + [_said("Dana", "message", f"The depot car: I sorted item {i} for the depot car.")
            for i in range(8)]
         + [_said("May", "message", "The depot car schedule for the depot car is on the wiki.")]
         + [_said("coworker", "note", "Note: the depot car depot car plan for Dana.", "agent")]
         + [_said("coworker", "note", f"Note {i}: a plan, filed.", "agent") for i in range(3)]
         + [_said("Sam", "message", "Sam here: the depot car, the depot car, I drove it.")]
         + [_said("Dana", "message", "Dana here: the depot car, the depot car, I bought it.")])


def _as_ranked(store: Store, text: str, monkeypatch: pytest.MonkeyPatch) -> list[Event]:
    """Recall's best 20 for `text` with the own-lines rule turned off: the words' order."""
    import runtime.memory.recall as recall_module

    with monkeypatch.context() as m:
        m.setattr(recall_module, "_theirs_first", lambda ranked, who: ranked)
        return [h.event for h in recall(store, text, k=20).hits]


@pytest.mark.parametrize(("text", "who"), [
    ("Which depot car did Dana buy?", {"Dana"}),  # hers first, each side in the words' order
    ("What did Dana say about the depot car in May 2024?", {"Dana"}),  # May 2024 is a date
    ("Which depot car did Dana buy for May?", set()),  # two people named: the order stands
    ("What did the Coworker plan for the depot car?", set()),  # the coworker is no person
])
def test_the_own_lines_rule_against_the_words_order(offline_home: Home,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    text: str, who: set[str]):
    """Recall's ten are the words' best 20 with the top three kept, then the named person's
    lines, then everyone else's, each side in the words' order; or the words' ten when the
    rule does not apply."""
    with Store.open(offline_home.db_path) as store:
        ev.append_many(store, EDGES)
    with Store.open(offline_home.db_path, readonly=True) as store:
        words = _as_ranked(store, text, monkeypatch)
        got = [int(h.event.id or 0) for h in recall(store, text, k=10).hits]
    assert len(words) > 10, [e.body for e in words]
    want = words
    if who:
        assert words[0].actor in who, "the best line must be hers for the rule to apply"
        rest = words[WORDS_FIRST:]
        want = (words[:WORDS_FIRST] + [e for e in rest if e.actor in who]
                + [e for e in rest if e.actor not in who])
        assert want[:10] != words[:10], "the case must move a line to show anything"
    assert got == [int(e.id or 0) for e in want[:10]], [(e.actor, e.body) for e in words]


COAST = "Which depot car did Dana buy on sunny weekends at the coast?"  # the words fall short


def test_the_fused_ranking_keeps_the_named_persons_own_lines_first(
        offline_home: Home, embed_server: EmbedServer, monkeypatch: pytest.MonkeyPatch):
    """The whole history's nearest lines, fused with the words', bring Sam's lines about Dana
    in between Dana's own lines on her car. The fused ranking follows the rule the words'
    ranking follows: its best line is hers, so her lines come first after the top three, each
    side in the fused order."""
    import runtime.memory.recall as recall_module

    rows = [_said("Dana", "message", "Dana's depot car: I buy the depot car, an automobile, for Dana.")]
    rows += [_said("Sam", "message", f"Dana, the depot car {x}.") for x in EXTRAS]
    rows += [_said("Dana", "message", TYRES), _said("Dana", "message", "We purchased an automobile.")]
    rows += [_said("Dana", "message", f"On trip {i} I parked my automobile by the harbour.")
             for i in range(20)]
    _home_with(offline_home, embed_server, rows)
    with Store.open(offline_home.db_path, readonly=True) as store:
        embedder, matrix = SemanticCache().get(store, offline_home.settings().semantic)
        got = recall_hybrid(store, COAST, embedder=embedder, matrix=matrix, gate=0.6, k=10)
        with monkeypatch.context() as m:  # the fused order, the rule left out
            m.setattr(recall_module, "_fused_theirs_first", lambda pool, person, k: pool[:k])
            fused = recall_hybrid(store, COAST, embedder=embedder, matrix=matrix, gate=0.6,
                                  k=20).hits
    assert got.channel == "hybrid" and got.coverage < 0.6, (got.channel, got.coverage)
    assert fused[0].event.actor == "Dana", [(h.event.actor, h.event.body) for h in fused]
    rest = fused[WORDS_FIRST:]
    want = (fused[:WORDS_FIRST] + [h for h in rest if h.event.actor == "Dana"]
            + [h for h in rest if h.event.actor != "Dana"])
    assert want[:10] != fused[:10], "the case must move a line to show anything"
    assert [h.event.id for h in got.hits] == [h.event.id for h in want[:10]], \
        [(h.event.actor, h.event.body) for h in fused]


@pytest.mark.parametrize(("best", "named", "k", "moved"), [
    ("Dana", ("Dana",), 10, True),
    ("Sam", ("Dana",), 10, False),  # another's line is best: the question may name the wrong one
    ("Dana", (), 10, False),  # no one named
    ("Dana", ("Dana",), WORDS_FIRST, False),  # the top three are all there is: nothing to move
])
def test_the_fused_rule_applies_only_when_the_best_line_is_the_named_persons(
        best: str, named: tuple[str, ...], k: int, moved: bool):
    from runtime.memory.recall import Hit, Person, _fused_theirs_first

    actors = [best, "Sam", "Sam", "Sam", "Sam", "Dana", "Sam", "Dana", "Dana", "Sam", "Dana"]
    pool = [Hit(_said(a, "message", f"line {i}"), 1.0 / (i + 1), None) for i, a in enumerate(actors)]
    person = Person(None, named) if named else None  # type: ignore[arg-type]  # no rows needed
    got = _fused_theirs_first(pool, person, k)
    head, rest = pool[:WORDS_FIRST], pool[WORDS_FIRST:]
    want = (head + [h for h in rest if h.event.actor == "Dana"]
            + [h for h in rest if h.event.actor != "Dana"]) if moved else pool
    assert [h.event.body for h in got] == [h.event.body for h in want[:k]]
