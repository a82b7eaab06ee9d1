"""`coworker eval locomo`: the LoCoMo evidence-retrieval task, through the loop's recall path.

Owns loading the file, giving each conversation its own fresh, isolated home (turns imported as
events with their session dates and `meta.dia_id`, then reflect as in life, so old turns sit in
the archive under the ladder), asking every question of categories 1-4, and the metrics:
turn recall@k, hit@k, MRR@10, session recall@k, overall and per category, with explicit
denominators (questions whose evidence does not resolve are counted and left out), the
invariant hit@1 <= MRR@10 <= hit@1 + (hit@10 - hit@1)/2 checked on every run, and latency.

It also measures what the recall reflex would inject (issue 14), for the lexical and hybrid
channels (the loop has no bm25 path, so `bm25` reports none). For every scored question it
builds the block the loop itself would inject: the same `recall` / `recall_hybrid` call with
the loop's arguments (k = `BUDGET.max_items`, `MAX_TERMS`), the loop's budget
(`recall.BUDGET`: items, characters each, characters in all), and the loop's decision
(`mode = "on"` and a block at all; `Recall.block` is None when recall decided the turn needs no
memory); the question comes after the whole conversation, so no `before_id` is needed. Each
question is then exactly one of
- `quiet`: no block injected;
- `injected` and holding evidence: the block shows at least one of the question's evidence turns;
- `noise`: a block was injected and shows none of the question's evidence turns.
`injected_rate` = injected / n and `noise_rate` = noise / n, over the same n questions as the
recall metrics (every evidence turn resolves). On LoCoMo every question has its evidence in
memory, so this noise is "the block missed the annotated evidence", an upper bound on what the
model sees as irrelevant (a block may still hold a turn that restates the fact), and quiet is a
miss, not a virtue; it is not the issue's noise against an empty memory, which the paraphrase
set's unanswerable questions measure (`coworker eval paraphrase`). Category-5 (adversarial)
questions are asked for these noise figures only, as their own row, never for the recall
metrics: their answer is absent from the conversation, but they carry evidence turns (the turn
the false premise twists), so they do not measure noise against an empty memory either.
"""

from __future__ import annotations

import json
import re
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import CoworkerError, UsageError
from ..home import Home
from ..memory.cards import Distinctive
from ..memory.recall import MAX_TERMS, Recall, recall
from ..memory.walk import query_tokens
from ..store import Event, Store
from ..store import events as ev

if TYPE_CHECKING:
    from ..memory.embed import Embedder

CATEGORIES = (1, 2, 3, 4)
ADVERSARIAL = 5  # asked for the noise figures only
CATEGORY_NAMES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop",
                  5: "adversarial"}
NOISE_DEFINITION = (
    "For every scored question the block the loop would inject is built (the loop's recall "
    "call, k = [recall] max_items, and its budget and decision from the home's [recall] "
    "settings). quiet: no block; injected: a block; noise: a block holding none of the "
    "question's evidence turns. injected_rate = injected / n, noise_rate = noise / n, over the "
    "same n as the recall metrics. Every LoCoMo question has evidence in memory, so noise here "
    "is 'the block missed the annotated evidence' (an upper bound: a block may hold a turn that "
    "restates the fact) and quiet is a miss; noise against an empty memory is measured by the "
    "paraphrase set's unanswerable questions (coworker eval paraphrase).")
ADVERSARIAL_NOTE = (
    "Category 5 (adversarial) is asked for the noise figures only: the answer is absent from "
    "the conversation, but each question carries evidence turns (the turn its false premise "
    "twists), so this row does not measure noise against an empty memory.")
_DT = re.compile(r"(\d{1,2}):(\d{2})\s*(am|pm)\s+on\s+(\d{1,2})\s+(\w+),?\s+(\d{4})", re.I)


class InvariantViolated(CoworkerError):
    """The metrics contradict each other: a bug in the metric code, not in memory."""


def session_time(text: str) -> datetime:
    m = _DT.search(text or "")
    if not m:
        raise ValueError(f"unreadable session date {text!r}")
    hour, minute, ampm, day, month, year = m.groups()
    h = int(hour) % 12 + (12 if ampm.lower() == "pm" else 0)
    when = datetime.strptime(f"{day} {month} {year}", "%d %B %Y")
    return when.replace(hour=h, minute=int(minute), tzinfo=UTC)


def turns(sample: dict[str, Any]) -> list[tuple[str, datetime, str, str]]:
    """(dia_id, time, speaker, text) for every turn, in order; a shared photo is described."""
    conv = sample["conversation"]
    out = []
    n = 1
    while f"session_{n}" in conv:
        start = session_time(conv.get(f"session_{n}_date_time", ""))
        for i, t in enumerate(conv[f"session_{n}"]):
            if not all(isinstance(t.get(k), str) for k in ("speaker", "dia_id")) or not \
                    isinstance(t.get("text", ""), str):
                raise TypeError(f"session_{n} turn {i}: speaker, dia_id and text must be text")
            text = t.get("text", "")
            if t.get("blip_caption"):
                text += f" [shares a photo: {t['blip_caption']}]"
            out.append((t["dia_id"], start + timedelta(seconds=30 * i), t["speaker"], text))
        n += 1
    return out


# --- metrics ---------------------------------------------------------------------------------

def session_of(dia_id: str) -> str:
    return dia_id.split(":")[0]


def question_metrics(ranked: Sequence[str], evidence: Sequence[str], k: int) -> dict[str, float]:
    ev_set = set(evidence)
    top = list(ranked[:k])
    first = next((i for i, d in enumerate(ranked[:10]) if d in ev_set), None)
    sessions = {session_of(d) for d in ev_set}
    return {
        "turn_recall": len(ev_set & set(top)) / len(ev_set),
        "hit": 1.0 if ev_set & set(top) else 0.0,
        "mrr10": 0.0 if first is None else 1.0 / (first + 1),
        "session_recall": len(sessions & {session_of(d) for d in top}) / len(sessions),
        "hit1": 1.0 if ranked[:1] and ranked[0] in ev_set else 0.0,
        "hit10": 1.0 if ev_set & set(ranked[:10]) else 0.0,
    }


def aggregate(rows: Iterable[dict[str, float]]) -> dict[str, float]:
    rows = list(rows)
    if not rows:
        return {"n": 0}
    keys = rows[0].keys()
    return {"n": len(rows), **{key: round(sum(r[key] for r in rows) / len(rows), 4)
                               for key in keys}}


def check_invariant(agg: dict[str, float], where: str = "overall") -> None:
    """hit@1 <= MRR@10 <= hit@1 + (hit@10 - hit@1)/2, which any correct MRR satisfies."""
    if not agg.get("n"):
        return
    h1, mrr, h10 = agg["hit1"], agg["mrr10"], agg["hit10"]
    eps = 1e-4  # the aggregates are rounded to 4 places
    if not (h1 - eps <= mrr <= h1 + (h10 - h1) / 2 + eps):
        raise InvariantViolated(
            f"metric invariant violated ({where}): hit@1 {h1} <= MRR@10 {mrr} <= hit@1 + "
            f"(hit@10 - hit@1)/2 = {h1 + (h10 - h1) / 2:.4f} does not hold; the metric code "
            "is wrong")


def noise_counts(rows: Iterable[dict[str, bool]]) -> dict[str, Any]:
    """quiet / injected / noise counts over questions judged by `Reflex.judge`, with the rates
    over all n (None when n is 0). Each question is quiet or injected, never both; a noisy one
    is an injected one."""
    rows = list(rows)
    n = len(rows)
    injected = sum(1 for r in rows if r["injected"])
    noise = sum(1 for r in rows if r["noise"])
    if any(r["noise"] and not r["injected"] for r in rows):
        raise InvariantViolated("a question counted as noise had no block injected; the noise "
                                "code is wrong")
    return {"injected": injected, "noise": noise, "quiet": n - injected,
            "injected_rate": round(injected / n, 4) if n else None,
            "noise_rate": round(noise / n, 4) if n else None}


# --- channels ---------------------------------------------------------------------------------

def _bm25_ranker(store: Store) -> Callable[[str, int], list[Event]]:
    """The baseline: plain FTS5 bm25 over the turns, same tokenizer, same query words."""
    def rank(question: str, n: int) -> list[Event]:
        match = ev.fts_query(query_tokens(question))
        return [e for e, _, _ in ev.fts_search(store, match, n)] if match else []
    return rank


def _lexical_ranker(store: Store) -> Callable[[str, int], list[Event]]:
    scorer = Distinctive(store)

    def rank(question: str, n: int) -> list[Event]:
        return [h.event for h in recall(store, question, k=n, scorer=scorer).hits]
    return rank


def _hybrid_ranker(store: Store, embedder: Embedder, gate: float
                   ) -> Callable[[str, int], list[Event]]:
    from ..memory.embed import Matrix
    from ..memory.recall import recall_hybrid

    scorer = Distinctive(store)
    matrix = Matrix.load(store, embedder.name)

    def rank(question: str, n: int) -> list[Event]:
        return [h.event for h in recall_hybrid(store, question, embedder=embedder,
                                               matrix=matrix, gate=gate, k=n,
                                               scorer=scorer).hits]
    return rank


Ranker = Callable[[str, int], list[Event]]
RANKERS: dict[str, Callable[..., Ranker]] = {
    "lexical": _lexical_ranker, "bm25": _bm25_ranker, "hybrid": _hybrid_ranker}


def loop_recall(store: Store, text: str, embedder: Embedder | None, matrix: Any, gate: float,
                scorer: Distinctive) -> Recall:
    """Recall as the loop calls it for its block (k = the budget's items), lexical or hybrid;
    the two evals ask the block through this one call."""
    from ..memory.recall import BUDGET, recall_hybrid

    if embedder is None:
        return recall(store, text, k=BUDGET.max_items, scorer=scorer)
    return recall_hybrid(store, text, embedder=embedder, matrix=matrix, gate=gate,
                         k=BUDGET.max_items, scorer=scorer)


class Reflex:
    """The recall block the loop would inject for a question (see the module docstring): the
    loop's call (`runtime.loop.turn` `recall`) with the home's [recall] settings, on one store."""

    _ITEM = re.compile(r"^- \[event (\d+) ·", re.M)

    def __init__(self, store: Store, home: Home, embedder: Embedder | None, gate: float) -> None:
        from ..memory.recall import BUDGET

        self.store, self.embedder, self.gate = store, embedder, gate
        self.cfg = home.settings().recall
        self.budget = BUDGET
        self.scorer = Distinctive(store)
        self.matrix = None
        if embedder is not None:
            from ..memory.embed import Matrix

            self.matrix = Matrix.load(store, embedder.name)

    def settings(self) -> dict[str, Any]:
        return {"mode": self.cfg.mode, "max_items": self.budget.max_items,
                "item_chars": self.budget.item_chars, "total_chars": self.budget.total_chars,
                "max_terms": MAX_TERMS,
                "call": "recall" if self.embedder is None else "recall_hybrid"}

    def shown(self, text: str) -> set[str] | None:
        """The dia_ids of the turns the injected block shows; None when nothing is injected."""
        if self.cfg.mode != "on":  # the loop injects nothing
            return None
        found = loop_recall(self.store, text, self.embedder, self.matrix, self.gate, self.scorer)
        block = found.block(self.budget)
        if block is None:
            return None
        ids = {int(i) for i in self._ITEM.findall(block)}
        return {str(h.event.meta.get("dia_id")) for h in found.hits
                if int(h.event.id or 0) in ids and h.event.meta.get("dia_id")}

    def judge(self, text: str, evidence: Sequence[str]) -> dict[str, bool]:
        shown = self.shown(text)
        return {"injected": shown is not None,
                "noise": shown is not None and not shown & set(evidence)}


def eval_embedder(model: str | None = None) -> tuple[Embedder, float]:
    """The embedder for `--channels hybrid`, checked before any work (a missing model is one
    usage error): the packaged local `model` when one is named (`--model`), else the
    [semantic] settings of the coworker home in COWORKER_HOME or the current folder when it
    enables one, else all-MiniLM in process."""
    from ..memory.embed import EmbedError, LocalEmbedder, make_embedder
    from ..memory.recall import SEMANTIC_GATE

    embedder: Embedder | None = None
    gate = SEMANTIC_GATE
    home = Home.locate()
    if model is None and home.is_initialised():
        cfg = home.settings().semantic
        embedder = make_embedder(cfg)
    if embedder is None:
        embedder = LocalEmbedder(model or "all-minilm")
    try:
        embedder.embed(["probe"])
    except EmbedError as e:
        raise UsageError(f"--channels hybrid needs the semantic channel: {e}") from e
    return embedder, gate


def checked_model(channels: str, model: str | None) -> None:
    """A usage error for channels that are not ours, and for `--model` without hybrid."""
    if channels not in RANKERS:
        raise UsageError(f"unknown channels {channels!r}: use one of {', '.join(RANKERS)}")
    if model is not None and channels != "hybrid":
        raise UsageError("--model names the embedder of --channels hybrid: add --channels hybrid")


# --- the run ----------------------------------------------------------------------------------

@dataclass
class Report:
    channels: str
    k: int
    conversations: int = 0
    questions_total: int = 0
    questions_valid: int = 0
    questions_invalid: int = 0
    overall: dict[str, Any] = field(default_factory=dict)
    per_category: dict[str, dict[str, Any]] = field(default_factory=dict)
    latency_ms: dict[str, float] = field(default_factory=dict)
    # The injected block (module docstring): its definition and the loop's settings; empty for
    # bm25, which the loop has no path for.
    reflex: dict[str, Any] = field(default_factory=dict)
    # Category 5, noise figures only: questions asked, left out (evidence unresolved), n scored.
    adversarial: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def table(self) -> tuple[list[str], list[list[str]]]:
        """The text table's headers and rows: overall, each category with questions, and the
        category-5 noise-only row; the injected and noise rates (of n; the counts are in
        `as_dict`) unless the channel is bm25."""
        k, blocks = self.k, bool(self.reflex)

        def cells(agg: dict[str, Any]) -> list[str]:
            return [f"{agg['injected_rate']:.3f}", f"{agg['noise_rate']:.3f}"] if blocks else []

        headers = ["", "n", f"turn recall@{k}", f"hit@{k}", "MRR@10", f"session recall@{k}",
                   *(["injected", "noise"] if blocks else [])]
        rows = [[name, str(agg["n"]), f"{agg['turn_recall']:.3f}", f"{agg['hit']:.3f}",
                 f"{agg['mrr10']:.3f}", f"{agg['session_recall']:.3f}", *cells(agg)]
                for name, agg in [("overall", self.overall), *self.per_category.items()]
                if agg.get("n")]
        if blocks and self.adversarial.get("n"):
            adv = self.adversarial
            rows.append([adv["category"], str(adv["n"]), "-", "-", "-", "-",
                         *cells(adv)])
        return headers, rows

    def notes(self) -> list[str]:
        """What the table's block columns mean, one line each (none for bm25)."""
        if not self.reflex:
            return []
        s = self.reflex["settings"]
        return [f"injected / noise: share of the n questions given the block the loop would "
                f"inject ({s['call']}, {s['max_items']} items, {s['total_chars']} chars) / given a "
                "block holding none of their evidence turns; every question has evidence in "
                "memory, so noise here is a block that missed it, and no block is a miss",
                ADVERSARIAL_NOTE]


def load(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise UsageError(f"no such file: {path}; give a LoCoMo data file: data/locomo10.json "
                         "from https://github.com/snap-research/LoCoMo (CC BY-NC 4.0; see "
                         "docs/benchmarks.md)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError too
        raise UsageError(f"{path.name} is not JSON ({str(e)[:120]}); give a LoCoMo file") from e
    if not isinstance(data, list) or not all(
            isinstance(s, dict) and isinstance(s.get("qa"), list)
            and isinstance(s.get("conversation"), dict) for s in data):
        raise UsageError(f"{path.name} is not a LoCoMo file (a list of samples with "
                         "'conversation' and 'qa')")
    if not data:
        raise UsageError(f"{path.name} holds no conversations; give a LoCoMo file with at least "
                         "one sample")
    for i, sample in enumerate(data):
        try:  # read every turn now: a damaged sample is one line, before any work
            turns(sample)
            if not all(isinstance(qa, dict) and isinstance(qa.get("evidence", []), list)
                       for qa in sample["qa"]):
                raise TypeError("a question that is not an object with a list of evidence")
        except (KeyError, TypeError, AttributeError, ValueError) as e:
            what = f"missing {e}" if isinstance(e, KeyError) else str(e)[:120]
            raise UsageError(f"{path.name}: sample {i} ({sample.get('sample_id', '?')}) is not "
                             f"a LoCoMo conversation ({what}); give the file as published") from e
    return data


EVAL_SECRET = "EVAL_STORE"  # the name the eval's home reads its PostgreSQL URL under


def new_home(root: Path, store_url: str | None = None) -> Home:
    """A fresh coworker home (`coworker init`); with `store_url` (a PostgreSQL URL) its store
    is a schema of its own on that database (coworker id `eval_<random>`; the URL in
    state/secrets.toml, never config.toml), which `drop_store` removes."""
    from ..settings import new_coworker_id

    home = Home(root)
    if store_url is None:
        home.init()
        return home
    home.init(store_url=f"secret:{EVAL_SECRET}", coworker_id=new_coworker_id("eval"))
    with (home.state / "secrets.toml").open("a", encoding="utf-8") as f:
        f.write(f"\n[secrets]\n{EVAL_SECRET} = {json.dumps(store_url)}\n")
    return home


@contextmanager
def eval_home(root: Path, store_url: str | None = None) -> Iterator[Home]:
    """`new_home` for one run; its PostgreSQL schema dropped afterwards, even on an error."""
    home = new_home(root, store_url)
    try:
        yield home
    finally:
        drop_store(home)


def drop_store(home: Home) -> None:
    """Drop the PostgreSQL schema of a home `new_home` made on a database (none for SQLite)."""
    url = home.store_url()
    if url is not None:
        from ..store import pg_schema

        pg_schema.drop(url, str(home.settings().coworker.id))


def build_home(root: Path, sample: dict[str, Any],
               embedder: Embedder | None = None) -> tuple[Home, set[str]]:
    """A fresh coworker home holding one conversation, reflected as in life (and embedded,
    for the hybrid channel); a home `new_home` already made at `root` keeps its store."""
    from rituals.reflect import reflect

    home = Home(root)
    home.init()
    rows = turns(sample)
    with home.open_store() as store:
        ev.append_many(store, [
            Event(kind="message", body=text, actor=speaker, author_kind="third_party",
                  ts=when.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                  meta={"dia_id": dia, "imported": True})
            for dia, when, speaker, text in rows])
        reflect(home, home.settings(), store)
        if embedder is not None:
            from ..memory.embed import backfill

            backfill(store, embedder)
    return home, {r[0] for r in rows}


@dataclass
class _Tally:
    """What the questions of one run gave, before aggregation."""
    scored: list[tuple[int, dict[str, float], dict[str, bool] | None]] = field(
        default_factory=list)
    adversarial: list[dict[str, bool]] = field(default_factory=list)
    adversarial_total: int = 0
    latencies: list[float] = field(default_factory=list)


class _Conversation:
    """Asks one conversation's questions on its home's read-only store."""

    def __init__(self, store: Store, home: Home, channels: str, embedder: Embedder | None,
                 gate: float, dia_ids: set[str]) -> None:
        self.rank = (_hybrid_ranker(store, embedder, gate) if embedder is not None
                     else RANKERS[channels](store))
        self.reflex = None if channels == "bm25" else Reflex(store, home, embedder, gate)
        self.dia_ids = dia_ids

    def evidence(self, qa: dict[str, Any]) -> list[str] | None:
        """The question's evidence turns, None unless every one of them resolves."""
        evidence = [d for d in qa.get("evidence", []) if isinstance(d, str)]
        valid = [d for d in evidence if d in self.dia_ids]
        return valid if valid and len(valid) == len(evidence) else None

    def ask(self, qa: dict[str, Any], k: int, report: Report, tally: _Tally) -> list[str] | None:
        """Ask one question; the ranked dia_ids for the --out rows (None: not ranked)."""
        category, question = qa.get("category"), str(qa.get("question", ""))
        if category == ADVERSARIAL:
            if self.reflex is not None:
                tally.adversarial_total += 1
                valid = self.evidence(qa)
                if valid is not None:
                    tally.adversarial.append(self.reflex.judge(question, valid))
            return None
        if category not in CATEGORIES:
            return None
        report.questions_total += 1
        t0 = time.perf_counter()
        ranked_events = self.rank(question, max(k, 10))
        tally.latencies.append((time.perf_counter() - t0) * 1000)
        ranked = list(dict.fromkeys(
            str(e.meta["dia_id"]) for e in ranked_events if e.meta.get("dia_id")))
        valid = self.evidence(qa)
        if valid is None:
            report.questions_invalid += 1
            return ranked
        report.questions_valid += 1
        judged = self.reflex.judge(question, valid) if self.reflex is not None else None
        tally.scored.append((int(category), question_metrics(ranked, valid, k), judged))
        return ranked


def _row(scored: list[tuple[int, dict[str, float], dict[str, bool] | None]],
         where: str) -> dict[str, Any]:
    """One row of the table: the recall metrics and, when measured, the injected block's
    counts, over the same n questions."""
    agg: dict[str, Any] = dict(aggregate(m for _, m, _ in scored))
    check_invariant(agg, where)
    judged = [j for _, _, j in scored if j is not None]
    if scored and len(judged) == len(scored):
        agg.update(noise_counts(judged))
    return agg


def _finish(report: Report, tally: _Tally) -> None:
    report.overall = _row(tally.scored, "overall")
    for c in CATEGORIES:
        report.per_category[f"{c} {CATEGORY_NAMES[c]}"] = _row(
            [t for t in tally.scored if t[0] == c], f"category {c}")
    if report.reflex:
        n = len(tally.adversarial)
        report.adversarial = {
            "category": f"{ADVERSARIAL} {CATEGORY_NAMES[ADVERSARIAL]}",
            "questions_total": tally.adversarial_total,
            "questions_invalid": tally.adversarial_total - n, "n": n,
            **noise_counts(tally.adversarial), "note": ADVERSARIAL_NOTE}
    if tally.latencies:
        xs = sorted(tally.latencies)
        report.latency_ms = {"p50": round(statistics.median(xs), 3),
                             "p95": round(xs[min(len(xs) - 1, int(0.95 * (len(xs) - 1) + 0.5))], 3)}


def run(path: Path, k: int = 10, channels: str = "lexical", out: Path | None = None,
        progress: Callable[[str], None] | None = None, model: str | None = None,
        made: tuple[Embedder, float] | None = None, store_url: str | None = None) -> Report:
    """LoCoMo through `channels` (see the module docstring); `model`: with hybrid, the
    packaged local model to embed with instead of the home's [semantic] settings; `made`: an
    embedder and gate already made (the ablation's, asked again run after run); `store_url`:
    each conversation's store on that PostgreSQL database, in a schema of its own dropped
    after it (`eval_home`), instead of a SQLite file."""
    checked_model(channels, model)
    samples = load(path)
    report = Report(channels, k)
    embedder, gate = (None, 0.0) if channels != "hybrid" else made or eval_embedder(model)
    tally = _Tally()
    try:
        out_f = out.open("w", encoding="utf-8") if out else None
    except OSError as e:
        raise UsageError(f"cannot write {out} ({e.strerror}); give --out a file in a folder "
                         "you can write") from e
    try:
        for sample in samples:
            report.conversations += 1
            if progress:
                progress(sample.get("sample_id", "?"))
            with tempfile.TemporaryDirectory() as tmp, \
                    eval_home(Path(tmp) / "home", store_url) as made_home:
                home, dia_ids = build_home(made_home.root, sample, embedder)
                with home.open_store(readonly=True) as store:
                    conv = _Conversation(store, home, channels, embedder, gate, dia_ids)
                    if conv.reflex is not None and not report.reflex:
                        report.reflex = {"definition": NOISE_DEFINITION,
                                         "settings": conv.reflex.settings()}
                    for qi, qa in enumerate(sample["qa"]):
                        ranked = conv.ask(qa, k, report, tally)
                        if out_f and ranked is not None:
                            out_f.write(json.dumps({"sample_id": sample.get("sample_id"),
                                                    "qa_index": qi, "ranked": ranked[:k]}) + "\n")
    finally:
        if out_f:
            out_f.close()
    _finish(report, tally)
    return report
