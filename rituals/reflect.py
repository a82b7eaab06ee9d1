"""The weekly reflect ritual, composed from memory's parts.

In order:
1. move events older than `archive_after_days` to the archive (one transaction, then a WAL
   checkpoint);
2. seal the ladder level by level (model-written summaries within a per-run budget when a
   model is configured, extractive otherwise);
3. pass promotion candidates (durable lessons from the week's rollups, with a model) through
   the gate (the week's newest LESSON_EPISODES episodes, read as such, never the whole level);
3b. give episodes keywords kept beside their index cards (`memory.keywords`): with a model,
   one forced call per batch of episodes that have none yet, from what is left of the same
   per-run budget as the summaries (a failure is said at WARNING; the run goes on);
4. embed the events that have no vector yet, when the semantic channel is on (a failure is
   said at WARNING and leaves recall lexical for them; the run goes on);
5. merge the FTS index segments;
6. record the run and its figures in `ritual_runs`;
7. regenerate `state/memory-map.md` from the database (so the map shows this run).

Memory does not grow with the history: every step reads bounded pages (the archive move in
id ranges of `archive.BATCH` events, episodes from a stream of events, parents from groups of at
most `fanout` rollups, the lessons call from the week's newest LESSON_EPISODES episodes, the map
from its MAP_NODES newest rollups) and the card cache is capped (`cards.DF_CACHED`); what is
left grows with the history's vocabulary only (the stem cache, itself capped). Measured on the
synthetic history (`runtime.synth`): peak RSS 66 MB at 100k events, 67 MB at 300k, 72 MB at
1M, against 63 MB for a run with nothing new (issue 15; tests/test_reflect_memory.py counts
the rows held at once).

`dry_run` reports what it would archive and seal and writes nothing. A model that fails 3
summaries (or keyword calls) in a row is not asked again that run (no more summaries, no
lessons, no keywords): the rest is extractive, said once at WARNING and in `summaries` (or
`keywords`). A MEMORY.md the gate cannot read (a malformed line) costs that run its
promotions, not the run.

This module is where a model meets memory: it builds the `summarize`, `lessons` and `keywords`
callables and hands them to the ladder, the gate and `memory.keywords`, which never import the
model. The model answers through a tool it is forced to call, and pydantic checks the arguments
(ADR-0015); no pattern ever digs an answer out of free text.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, WithJsonSchema

from runtime.errors import CoworkerError, ModelError
from runtime.home import Home
from runtime.memory import gate, ladder, memmap
from runtime.memory import keywords as kw
from runtime.memory.memorymd import MemoryFile, MemoryFileError
from runtime.settings import Settings
from runtime.store import Store, turns, usage
from runtime.store import archive as arch
from runtime.store import inputs as inputs_store
from runtime.store import rituals as rr
from runtime.store import rollups as rl

log = logging.getLogger(__name__)

NAME = "reflect"
LADDER_FANOUT = 10  # rollups per rung of the ladder (was [memory] ladder_fanout)
# model calls a run may spend on summaries and episode keywords, then extractive (was [memory]
# summary_calls_per_run)
SUMMARY_CALLS_PER_RUN = 50


@dataclass
class ReflectReport:
    dry_run: bool = False
    archived: int = 0
    sealed: dict[int, int] = field(default_factory=dict)
    methods: dict[str, int] = field(default_factory=dict)
    summary_calls: int = 0
    summary_fallbacks: int = 0
    summaries: str = "not run"  # what became of the model summaries (gave up, fell back)
    keyword_calls: int = 0  # model calls for episode keywords (from the same budget)
    keywords: str = "not run"
    null_spans: int = 0
    promotions: str = "not run"
    seconds: float = 0.0
    peak_rss_mb: float = 0.0
    index_seconds: float = 0.0
    embedded: str = "semantic channel off"
    map_bytes: int = 0
    map_error: str | None = None  # the memory map could not be written (the rest was done)

    def as_stats(self) -> dict[str, Any]:
        d = asdict(self)
        d["sealed"] = {str(k): v for k, v in self.sealed.items()}
        return d


def cutoff(settings: Settings, now: datetime | None = None) -> str:
    now = now or datetime.now(UTC)
    when = now - timedelta(days=settings.memory.archive_after_days)
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def hot_from(store: Store, limit: str) -> str:
    """The archive's cutoff, held back to the first tick of an unfinished attempt the loop
    will take up again: after a month down, the turn that took the owner's message up and
    what it recorded stay in the hot log, where a resume reads them (cheaply, by kind). The
    inputs themselves may go: they are read from the archive all the same. The loop's own
    reflect runs inside a tick that is the newest attempt; its first tick is now, unless it
    takes up an older one, whose record then stays."""
    last = turns.last_attempt(store)
    if last is None or last.outcome not in turns.RESUMABLE or not inputs_store.pending(
            store, limit=1, ids=last.inputs):  # no input of it waits: nothing takes it up
        return limit
    ticks = turns.chain(store, last.tick_id)
    first = turns.started(store, ticks)
    return min(limit, first) if first else limit


def _peak_rss_mb() -> float:
    """This process's peak resident memory, in MB. On Linux the kernel's high-water mark of
    this program's own memory (VmHWM): getrusage's ru_maxrss survives exec, so a reflect
    started by a large parent (`coworker bench`) reported the parent's peak, not its own."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except (OSError, ValueError):
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


LESSON_EPISODES = 60  # the newest episodes of the week the lessons call reads

# [(rollup id, text)] -> [{"text", "source_events", "confidence"}]
Lessons = Callable[[Sequence[tuple[int, str]]], list[dict[str, Any]]]


def _embed(settings: Settings, store: Store) -> str:
    """Backfill vectors for the semantic channel, when it is on; a failure is loud, not fatal."""
    from runtime.memory import embed as em

    embedder = em.make_embedder(settings.semantic)
    if embedder is None:
        return "semantic channel off"
    try:
        n = em.backfill(store, embedder)
        r = em.backfill_rollups(store, embedder)
        return f"{n} events embedded" + (f", {r} rollups" if r else "")
    except Exception as e:
        log.warning("embedding backfill failed (%s: %s); recall stays lexical for new events",
                    type(e).__name__, e)
        return f"backfill failed: {type(e).__name__}"


def _keywords(store: Store, keywords: kw.Ask | None, summarizer: ladder.Summarizer,
              report: ReflectReport) -> None:
    """Step 3b: keywords beside the episodes' cards; never breaks the run."""
    if keywords is None:
        report.keywords = "off: no model configured"
        return
    try:
        got = kw.from_model(store, keywords, summarizer)
        report.keyword_calls = got.calls
        report.keywords = f"model: {got.outcome()}"
    except Exception as e:  # a memory failure is loud and never breaks the ritual
        log.warning("episode keywords failed (%s: %s); the cards stay as they are",
                    type(e).__name__, e)
        report.keywords = f"failed: {type(e).__name__}"


def _promote(home: Home, settings: Settings, store: Store, lessons: Lessons | None,
             now: datetime | None) -> str:
    """Step 3: durable lessons from the week's rollups, each through the one gate."""
    if settings.memory.memory_promotions == "off":
        return 'off: memory_promotions is "off", nothing proposed'
    if lessons is None:
        return "no model configured: no lessons proposed"
    since = ((now or datetime.now(UTC)) - timedelta(days=7)).isoformat().replace("+00:00", "Z")
    newest = rl.recent_at_level(store, 1, since, LESSON_EPISODES)  # never the whole level
    week = [(r.id, f"{r.title}. {r.body}") for r in newest]
    if not week:
        return "nothing sealed this week: no lessons proposed"
    try:  # the gate reads MEMORY.md for every lesson: one it cannot read is no call at all
        MemoryFile.load(home.memory_md)
    except MemoryFileError as e:
        return _unreadable(e)
    try:
        proposed = lessons(week)
    except Exception as e:  # a memory failure is loud and never breaks the ritual
        log.warning("lessons call failed (%s: %s); no promotions this run", type(e).__name__, e)
        return f"lessons call failed: {type(e).__name__}"
    counts: dict[str, int] = {}
    for item in proposed[:20]:
        try:
            lesson = checked(Lesson, item, "proposed lesson")
        except ValueError as e:
            log.warning("%s; skipped", e)
            counts["malformed"] = counts.get("malformed", 0) + 1
            continue
        cand = gate.Candidate(lesson.text, lesson.source_events, lesson.confidence, "reflect")
        try:
            verdict = gate.consider(store, home, settings, cand)
        except MemoryFileError as e:  # edited meanwhile: the rest waits for a readable file
            return _unreadable(e)
        counts[verdict.status] = counts.get(verdict.status, 0) + 1
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "no lessons proposed"


def _unreadable(e: MemoryFileError) -> str:
    why = (f"MEMORY.md cannot be read ({e}): no promotions this run; fix the file "
           "(`coworker doctor` shows the line)")
    log.warning("%s", why)
    return why


def reflect(home: Home, settings: Settings, store: Store, *, dry_run: bool = False,
            summarize: ladder.Summarize | None = None, summarizer_name: str = "model",
            lessons: Lessons | None = None, keywords: kw.Ask | None = None,
            now: datetime | None = None,
            progress: Callable[[int], None] | None = None) -> ReflectReport:
    t0 = time.monotonic()
    report = ReflectReport(dry_run=dry_run)
    limit = hot_from(store, cutoff(settings, now))
    fanout = LADDER_FANOUT
    if dry_run:
        report.archived = arch.count_older_than(store, limit)
        report.sealed = ladder.plan(store, fanout)
        report.promotions = "dry run: nothing gathered"
        report.seconds = round(time.monotonic() - t0, 3)
        return report

    run_id = rr.start(store, NAME)
    try:
        report.archived = arch.move_older_than(store, limit)
        if report.archived:
            log.info("reflect: archived %d events older than %s", report.archived, limit)
        summarizer = ladder.Summarizer(summarize, summarizer_name, SUMMARY_CALLS_PER_RUN)
        sealed = ladder.seal(store, fanout, summarizer, progress)
        report.sealed = dict(sorted(sealed.sealed.items()))
        report.methods = dict(sealed.methods)
        report.summary_calls = summarizer.used
        report.summary_fallbacks = sealed.summary_fallbacks
        report.null_spans = sealed.null_spans
        report.summaries = summarizer.outcome()
        if (summarizer.gave_up and lessons is not None
                and settings.memory.memory_promotions != "off"):
            # the same model, one more call: it failed every summary in a row this run
            report.promotions = (f"skipped: model summaries failed {summarizer.streak} times "
                                 "in a row this run, so no lessons were asked for")
        else:
            report.promotions = _promote(home, settings, store, lessons, now)
        _keywords(store, keywords, summarizer, report)
        report.embedded = _embed(settings, store)
        t_idx = time.monotonic()
        arch.optimize_indexes(store)
        report.index_seconds = round(time.monotonic() - t_idx, 3)
        report.seconds = round(time.monotonic() - t0, 3)
        report.peak_rss_mb = round(_peak_rss_mb(), 1)
        rr.finish(store, run_id, "ok", report.as_stats())
    except BaseException as e:
        log.error("reflect failed: %s: %s", type(e).__name__, e)
        try:
            rr.finish(store, run_id, "failed", {"error": f"{type(e).__name__}: {e}"})
        except Exception:
            log.exception("could not record the failed reflect run")
        raise
    # after the run's row, which the map shows as the last reflect; a map not written is said
    # in that row's figures too
    report.map_bytes, report.map_error = _write_map(home, settings, store)
    if report.map_error:
        rr.finish(store, run_id, "ok", report.as_stats())
    log.info("reflect: sealed %s, %.1f s, map %d bytes", report.sealed or "nothing",
             report.seconds, report.map_bytes)
    return report


def _write_map(home: Home, settings: Settings, store: Store) -> tuple[int, str | None]:
    """The memory map written: its size, or 0 and why not. A map that cannot be written (its
    path taken by a folder, a full disk) is an ERROR in the log and in the run's figures; the
    ladder sealed above stands, and the next reflect writes the map again."""
    try:
        return memmap.write(store, home.memory_map, settings.coworker.name, home.memory_md), None
    except (OSError, CoworkerError) as e:
        why = f"{type(e).__name__}: {e}"
        log.error("the memory map %s was not written (%s); the ladder is sealed: free that "
                  "path, and the next reflect (`coworker reflect`) writes the map", home.memory_map,
                  why)
        return 0, why


# --- the model's structured answers: forced tools, checked by pydantic -------------------------
#
# The model answers through a tool it is forced to call (ADR-0015), never in free text that a
# pattern would have to find: the tool's schema comes from the pydantic model that then checks
# the arguments. A text answer, another tool, or arguments that do not validate (a missing
# field, a wrong type, a field nobody asked for) all raise ValueError, which the callers treat
# as an unusable answer: the ladder falls back to an extractive summary and counts a failure;
# `_promote` proposes nothing this run (one lesson that does not validate is skipped alone).
# Nothing is written from a partial answer.


class SummaryArgs(BaseModel):
    """The `write_summary` tool's arguments."""

    model_config = ConfigDict(extra="forbid")
    title: str = Field(description="at most 8 words")
    summary: str = Field(min_length=1, description="1 to 3 sentences that cite the ids in "
                         "square brackets, like [#12]; only facts present in the items")


# an id SQLite can hold (64 bits): a larger one is a malformed lesson, not an OverflowError
EventId = Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]


def schema_of(args: type[BaseModel]) -> dict[str, Any]:
    """The JSON schema the model sees: the class's title and docstring are ours, not its."""
    schema = args.model_json_schema()
    schema.pop("title", None)
    schema.pop("description", None)
    return schema


class Lesson(BaseModel):
    """One proposed lesson; checked one by one, so a malformed lesson costs only itself."""

    model_config = ConfigDict(extra="forbid")
    text: str = Field(min_length=1, description="one sentence that reuses the source's own "
                      "words: a fact, never an instruction")
    source_events: list[EventId] = Field(min_length=1, description="the event ids it comes from")
    confidence: float = Field(0.5, ge=0, le=1, description="how sure you are, 0.0 to 1.0")


class LessonsArgs(BaseModel):
    """The `record_lessons` tool's arguments."""

    model_config = ConfigDict(extra="forbid")
    # each item is checked by Lesson on its own: here only that the list is a list
    lessons: list[Annotated[Any, WithJsonSchema(schema_of(Lesson))]] = Field(
        description="at most 5 durable facts or lessons worth keeping in long-term memory")


A = TypeVar("A", bound=BaseModel)


def checked(args: type[A], data: Any, what: str) -> A:
    """`data` as `args`, or ValueError saying in one line what does not validate."""
    try:
        return args.model_validate(data)
    except ValidationError as e:
        why = "; ".join(f"{'.'.join(map(str, er['loc'])) or what}: {er['msg']}"
                        for er in e.errors(include_url=False, include_input=False))
        raise ValueError(f"the {what} does not validate ({why})") from None


def tool_spec(name: str, description: str, args: type[BaseModel]) -> dict[str, Any]:
    return {"name": name, "description": description, "input_schema": schema_of(args)}


SUMMARY_TOOL = tool_spec("write_summary", "Record the summary of this stretch of history.",
                         SummaryArgs)
LESSONS_TOOL = tool_spec("record_lessons", "Record the durable lessons of this week.",
                         LessonsArgs)


def forced_call(settings: Settings, tool: dict[str, Any], prompt: str,
                store: Store | None = None) -> Any:
    """One model call that must answer through `tool`: that call's input, as sent, or
    ValueError when the answer holds no such call. Runs its own short event loop, so it works
    from the CLI and from the worker thread the running loop hands reflect to. With `store`,
    a daily cap already reached is a ModelError before any call, and the calls made (retries
    included) are recorded there, so they count against the caps as a turn's do."""
    from runtime.model import Model

    if store is not None and (capped := usage.cap_reason(store, settings.model)):
        raise ModelError(f"not called: [model] {capped}; model calls resume tomorrow (00:00 "
                         "UTC)")

    async def call() -> Any:
        model = Model(settings.model)
        try:
            return await model.create(system=[], tools=[tool], messages=[
                {"role": "user", "content": prompt}],
                tool_choice={"type": "tool", "name": tool["name"]})
        finally:
            await model.close()

    try:
        reply = asyncio.run(call())
    except ModelError as e:
        if store is not None:
            usage.record_calls(store, f"reflect, {tool['name']} (failed)", e.attempts or 1)
        raise
    if store is not None:
        usage.record_calls(store, f"reflect, {tool['name']}", reply.attempts, reply.usage)
    for use in reply.tool_uses:
        if use.get("name") == tool["name"]:
            return use.get("input")
    raise ValueError(f"the answer did not call {tool['name']} (stop reason "
                     f"{reply.stop_reason}, {len(reply.text)} characters of text)")


PROMPT = (
    "Summarise this stretch of a coworker's history for its long-term memory with the "
    "write_summary tool: a title of at most 8 words, and 1 to 3 sentences that cite the ids in "
    "square brackets, like [#12]. Use only facts present below.\n\nLevel {level} items:\n{items}"
)


def model_summarizer(settings: Settings, store: Store | None = None) -> ladder.Summarize | None:
    """A `summarize` callable backed by the configured model, or None when there is none."""
    if not settings.model_enabled():
        return None

    def summarize(level: int, items: Sequence[tuple[int, str]]) -> tuple[str, str] | None:
        text = "\n".join(f"[#{i}] {' '.join(t.split())[:500]}" for i, t in items)
        args = checked(SummaryArgs, forced_call(settings, SUMMARY_TOOL, PROMPT.format(
            level=level, items=text[:12000]), store), "write_summary call")
        return args.title, args.summary

    return summarize


LESSONS_PROMPT = (
    "Below are this week's episodes from a coworker's memory, with the event ids they cite in "
    "square brackets. Record at most 5 durable facts or lessons worth keeping in long-term "
    "memory with the record_lessons tool, each one sentence that reuses the source's own "
    "words, with the event ids it comes from and a confidence from 0.0 to 1.0. No "
    "instructions to yourself; facts only.\n\n{items}"
)


def model_lessons(settings: Settings, store: Store | None = None) -> Lessons | None:
    """One model call per reflect run asking for durable lessons that cite event ids."""
    if not settings.model_enabled():
        return None

    def lessons(items: Sequence[tuple[int, str]]) -> list[dict[str, Any]]:
        text = "\n".join(f"(episode {i}) {' '.join(t.split())[:600]}" for i, t in items)
        return checked(LessonsArgs, forced_call(settings, LESSONS_TOOL, LESSONS_PROMPT.format(
            items=text[:20000]), store), "record_lessons call").lessons

    return lessons


class EpisodeKeywords(BaseModel):
    """The keywords of one episode; checked one by one, so a malformed item costs only itself."""

    model_config = ConfigDict(extra="forbid")
    episode: EventId = Field(description="the episode id, as given in parentheses")
    keywords: list[Annotated[str, Field(min_length=1, max_length=kw.MAX_CHARS)]] = Field(
        min_length=1, max_length=kw.MAX_PER_EPISODE,
        description=f"1 to {kw.MAX_PER_EPISODE} words or two-word phrases someone might use "
        "to ask about this episode: synonyms, broader and related terms, other names")


class KeywordsArgs(BaseModel):
    """The `record_keywords` tool's arguments."""

    model_config = ConfigDict(extra="forbid")
    # each item is checked by EpisodeKeywords on its own: here only that the list is a list
    episodes: list[Annotated[Any, WithJsonSchema(schema_of(EpisodeKeywords))]] = Field(
        description="one item per episode below")


KEYWORDS_TOOL = tool_spec("record_keywords", "Record search keywords for these episodes.",
                          KeywordsArgs)

KEYWORDS_PROMPT = (
    "Below are episodes from a coworker's history, each after its id in parentheses. For "
    "each episode, record with the record_keywords tool up to {most} keywords: single words or "
    "two-word phrases a person might use to ask about it later in their own words (synonyms, "
    "broader terms, other names for the same things), preferably words the episode does not "
    "use itself.\n\n{items}"
)


def model_keywords(settings: Settings, store: Store | None = None) -> kw.Ask | None:
    """A `keywords` callable backed by the configured model, or None when there is none."""
    if not settings.model_enabled():
        return None

    def keywords(items: Sequence[tuple[int, str]]) -> kw.Answer:
        text = "\n".join(f"(episode {i}) {t}" for i, t in items)
        args = checked(KeywordsArgs, forced_call(settings, KEYWORDS_TOOL, KEYWORDS_PROMPT.format(
            most=kw.MAX_PER_EPISODE, items=text[:16000]), store), "record_keywords call")
        answer = kw.Answer()
        for item in args.episodes:
            try:
                one = checked(EpisodeKeywords, item, "keywords of one episode")
            except ValueError as e:
                rid = item.get("episode") if isinstance(item, dict) else None
                answer.dropped.append(f"episode {rid!r}: {e}" if rid is not None else str(e))
                continue
            answer.keywords.setdefault(one.episode, []).extend(one.keywords)
        return answer

    return keywords


def run(home: Home, settings: Settings, *, dry_run: bool = False,
        progress: Callable[[int], None] | None = None) -> ReflectReport:
    """Open the store, run reflect with the configured model parts, close the store."""
    with home.open_store() as store:
        return reflect(home, settings, store, dry_run=dry_run,
                       summarize=model_summarizer(settings, store),
                       summarizer_name=settings.model.name,
                       lessons=model_lessons(settings, store),
                       keywords=model_keywords(settings, store), progress=progress)
