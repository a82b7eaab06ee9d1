"""How the CLI shows things to a person: the two consoles, times, events, tables, the walk's tree.

Owns the text layout of every human-readable output. User text (event bodies, MEMORY.md
entries, pins, promotion texts, rollup titles, tags) is printed verbatim, never read as markup:
`[m2]`, `[#12]` or `[/x]` in a body shows as written. The consoles are made with markup off,
and every table cell is a `Text`, which rich never parses.

It never reads the database except through the store it is handed, never writes, and never
decides anything: the data comes from runtime/actions.py and the modules the CLI calls.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from typing import Any

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from .store import Event, Store

# Control characters and bidi overrides in user text would act on the terminal (erase a line,
# recolour it, reorder it): each is shown as its escape instead, \x1b for ESC
_BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c")
_SHOWN = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7f, 0xa0)) if chr(c) not in "\t\n"}
_SHOWN.update({ord(c): f"\\u{ord(c):04x}" for c in _BIDI})


def clean(text: str) -> str:
    """`text` with every control character and bidi override shown as its escape, so what a
    body, an actor or a title holds is printed, never obeyed, by the terminal."""
    return text.translate(_SHOWN)


class _Console(Console):
    """A console that shows the control characters of every text it prints as escapes
    (`clean`): a line built from a body, an actor, an error quoting what was typed or
    imported never drives the terminal, wherever it is printed."""

    def print(self, *objects: Any, **kwargs: Any) -> None:  # noqa: A003 - rich's name
        super().print(*(_cleaned(o) for o in objects), **kwargs)


def _cleaned(o: Any) -> Any:
    """A str or Text with its control characters shown (a Text that needs it keeps its
    style, not its inner spans); anything else as it is (a table cleans its own cells)."""
    if isinstance(o, str):
        return clean(o)
    if isinstance(o, Text) and clean(o.plain) != o.plain:
        return Text(clean(o.plain), style=o.style)
    return o


out = _Console(highlight=False, soft_wrap=True, markup=False)
err = _Console(stderr=True, highlight=False, soft_wrap=True, markup=False)


def table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> Table:
    """A borderless table whose cells are plain text, shown exactly as given."""
    t = Table(*headers, box=None)
    for row in rows:
        t.add_row(*(Text("" if cell is None else clean(str(cell))) for cell in row))
    return t


def json_line(data: Any, **kw: Any) -> None:
    click.echo(json.dumps(data, ensure_ascii=False, **kw))


def duration(s: float) -> str:
    s = int(s)
    if s < 90:
        return f"{s}s"
    if s < 5400:
        return f"{s // 60}m"
    if s < 86400 * 2:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d"


def ago(iso: str | None, now: datetime | None = None) -> str:
    """An event time with how long ago (or how soon) it is: `2026-11-30T10:00:00Z (3h00m ago)`."""
    if not iso:
        return "never"
    when = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    delta = ((now or datetime.now(UTC)) - when).total_seconds()
    if delta >= 0:
        return f"{iso[:19]}Z ({duration(delta)} ago)"
    return f"{iso[:19]}Z (in {duration(-delta)})"


def day(ts: str | None, zone: tzinfo) -> str:
    """The owner's day of a stored UTC `ts` ("2025-03-05"), as `[coworker] timezone` reads
    days; a ts that is no time is shown as stored (ADR-0008)."""
    return when(ts, zone)[:10]


def when(ts: str | None, zone: tzinfo) -> str:
    """The owner's time of a stored `ts` (UTC when it names no offset, as the store writes
    it), to the minute ("2025-03-05 12:30"); a ts that is no time is shown as stored
    (ADR-0008)."""
    if not ts:
        return ""
    try:
        at = datetime.fromisoformat(ts)
        at = (at if at.tzinfo else at.replace(tzinfo=UTC)).astimezone(zone)
        return at.replace(tzinfo=None).isoformat(sep=" ", timespec="minutes")
    except (ValueError, OverflowError):
        return ts[:16].replace("T", " ")


def one_line(text: str, limit: int) -> str:
    return clean(" ".join(text.split())[:limit])


def event(e: Event, as_json: bool) -> None:
    """One event as `coworker log` shows it: a JSON object, or one dimmed-header line."""
    if as_json:
        json_line(e.as_dict())
        return
    line = Text()
    line.append(f"{e.id:>6} {e.ts[:19]}", style="dim")
    line.append(" ")
    line.append(clean(e.kind), style="bold")
    line.append(" ")
    line.append(clean(f"{e.actor}/{e.author_kind}"), style="dim")
    if e.imported:  # whatever actor it claims: the words of search, walk and recall
        line.append(" (imported: not your owner's words)", style="dim")
    line.append(" " + one_line(e.body, 300))
    out.print(line)


_CONFIG = {True: "the running process uses config.toml as on disk",
           False: "config.toml changed on disk; the next tick applies it (or reports why it "
                  "cannot)",
           None: "unknown"}
_WRITES = {"live": "LIVE (reply and other side-effect tools act)",
           "dry-run": "dry-run (recorded, not carried out; `--live` to act)"}


def status(data: dict[str, Any]) -> None:
    """`coworker status` for a person (the same figures as --json)."""
    store = data.get("store") or {}
    if not data["running"] and store.get("runs_on"):
        out.print(f"runs on {store['runs_on']}, not on this host ({store['where']}); "
                  "`coworker status` there shows its ticks")
    elif not data["running"]:
        out.print(f"not running in {data['home']} (start it: `coworker start` or `coworker run`)")
    else:
        _running(data)
    counts, inputs = data["events"], data["inputs"]
    kinds = ", ".join(f"{k} {v}" for k, v in data["events_by_kind"].items()) or "none"
    out.print(f"events: {counts['hot']} hot, {counts['archived']} archived ({kinds})")
    out.print(f"inputs: {inputs['pending']} pending, {inputs['consumed']} consumed, "
              f"{inputs['set_aside']} set aside")
    for a in data["set_aside"]:
        out.print(f"  set aside: #{a['id']} ({a['kind']}, {a['failures']} failed turns: "
                  f"{a['error']}) {one_line(a['body'], 80)}; `coworker retry {a['id']}` puts it "
                  "back")
    failure = data["last_failure"]
    if failure:
        out.print(f"last failure: {ago(failure['at'])} on input #{failure['input']}: "
                  f"{failure['error']}")
    _inbox(data["inbox"])
    walks = data["walks_7d"]
    out.print(f"memory walks, last 7 days: {walks['walks']} ({walks['refusals']} refused)")
    waiting = data.get("actions", {}).get("waiting", 0)
    out.print(f"actions: {waiting} waiting for approval (`coworker actions`)")
    _deliveries(data.get("deliveries"))
    serve = data.get("serve")
    if serve:
        out.print(f"serve: {serve['url']} (" + ("listening" if serve["listening"] else
                  "not answering; it starts with the loop, or `coworker serve`") + ")")


def _deliveries(d: dict[str, Any] | None) -> None:
    """One line on the [[notify]] deliveries, when a target is configured."""
    if not d or not d["targets"]:
        return
    out.print(f"deliveries: {d['pending']} pending ({d['retrying']} retrying), {d['failed']} "
              "given up in 7 days" + (f"; last error: {one_line(d['last_error'], 160)}"
                                      if d["last_error"] else ""))


def _running(data: dict[str, Any]) -> None:
    """The lines of `coworker status` about the running process."""
    up = data["uptime_s"]
    out.print(f"running: pid {data['pid']}, " + (
        f"up {duration(up)}" if up is not None else "starting"))
    last = data["last_tick_at"]
    out.print(f"last tick: {ago(last)} -> {data['last_outcome']}" if last else
              "last tick: none yet")
    out.print(f"next tick: {ago(data['next_tick_at'])}")
    out.print("config: " + (
        "config.toml on disk is INVALID; the last good config is running (the log says "
        "why; fix the file)" if data["config_rejected"] else _CONFIG[data["config_in_use"]]))
    out.print(f"model: {data['model'] or 'none configured (inputs are recorded only)'}"
              + (f"; SPENDING CAP reached: {data['capped']}" if data["capped"] else ""))
    out.print("side effects: " + _WRITES.get(data["writes"],
                                              "not known yet (the coworker is starting)"))


def _inbox(box: dict[str, Any]) -> None:
    waiting = f"{len(box['waiting'])} file(s) waiting" + (
        f" ({', '.join(map(clean, box['waiting'][:3]))})" if box["waiting"] else "")
    rejected = "" if not box["rejected"] else (
        f"; {box['rejected']} moved to inbox/rejected/, never read (newest: "
        f"{', '.join(map(clean, box['newest_rejected']))}; the log says why)")
    out.print(f"inbox: {waiting}{rejected}")


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def actions(rows: Sequence[Any], show_all: bool) -> None:
    """`coworker actions`: the queued MCP tool calls (`store.approvals.Approval`), newest
    first, one block each, so the tool, its arguments and the model's reason show whole and
    verbatim however narrow the terminal: they are what the owner approves."""
    if not rows:
        out.print("no actions yet" if show_all else "nothing waits for approval")
        return
    for a in rows:
        head = Text()
        head.append(f"#{a.id} {a.status}", style="bold")
        head.append(f" {a.name}")
        where = [f"tick {a.tick_id}" if a.tick_id is not None else "no tick",
                 "from events " + ", ".join(f"#{i}" for i in a.sources) if a.sources
                 else "from no event"]
        if a.status == "waiting":
            where.append(f"expires {ago(a.expires_at)}")
        elif a.decided_at:
            where.append(f"decided {a.decided_at[:19]}Z")
        head.append(f" ({'; '.join(where)})", style="dim")
        out.print(head)
        out.print(Text("  arguments: " + _compact(a.arguments)))
        out.print(Text("  reason: " + (a.reason or "(none given)")))
        if a.why:
            out.print(Text("  why: " + a.why))
        if a.result_event is not None:
            out.print(Text(f"  result: event #{a.result_event} (`coworker log --kind "
                           "action_result`)"))
    if any(a.status == "waiting" for a in rows):
        out.print("approve: coworker actions approve ID; reject: coworker actions reject ID "
                  '--why "TEXT"')


def decided_action(a: Any, woke_pid: int | None) -> str:
    """The line `coworker actions approve|reject` prints."""
    if a.status != "approved":
        return f"action {a.id} rejected: {a.name} never runs"
    when = (f"woke pid {woke_pid}" if woke_pid is not None else
            "no coworker runs here now: `coworker start --live`")
    return (f"action {a.id} approved: {a.name} runs once, at the next tick where its server "
            f"and the coworker run live ({when})")


def mcp_tools(reports: Sequence[Any], live: bool) -> None:
    """`coworker mcp-tools`: each server's tools (`hands.survey.ServerReport`) with their
    class and what a call does now, then why each server that did not start did not."""
    if not reports:
        out.print("no MCP servers configured: add one as a [[mcp.servers]] table in "
                  "config.toml (name, command, args; docs/design.md, section 3, [mcp])")
        return
    out.print(f"the coworker runs {'live' if live else 'dry-run'}: a server's side effects "
              'run only when its mode is "live" and the coworker runs live')
    cells: list[Sequence[object]] = []
    for r in reports:
        if not r.ok:
            cells.append((r.name, "FAILED", "", "", ""))
            continue
        cells += [(r.name, f"ready ({r.mode})", t.name, t.side_effect.name, t.now)
                  for t in r.tools] or [(r.name, f"ready ({r.mode})", "(no tools)", "", "")]
    t = Table(box=None)
    for header in ("server", "state", "tool", "class", "now"):
        t.add_column(header, overflow="fold")  # a name is shown whole, never cut with "…"
    for row in cells:
        t.add_row(*(Text(str(cell)) for cell in row))
    out.print(t)
    for r in reports:
        if r.skipped:
            out.print(f"{r.name}: {len(r.skipped)} tool(s) skipped, their names do not fit "
                      f"<server>__<tool> in 64 characters: {', '.join(r.skipped)}")
        if not r.ok:
            out.print(f"{r.name} cannot start: {r.reason}; check its command (or url), args "
                      f'and env in the [[mcp.servers]] table with name = "{r.name}" in '
                      "config.toml, then run `coworker mcp-tools` again")


def _words(matched: Sequence[str], n: int) -> str:
    """Matched words and their share of the query's: "parser, crash (2/3)"."""
    return f"{', '.join(matched)} ({len(matched)}/{n})"


def _lexical(r: Any, n: int) -> str:
    """What a refusal says of the best lexical match (`memory.walk.Why`)."""
    why, seen = r.why, r.matched_tokens
    if why.code == "no_words":
        return ("the query has no words to match (only stopwords or punctuation); best lexical "
                "match 0/0 (0.00)")
    lexical = f"best lexical match {len(seen)}/{n} ({len(seen) / n:.2f})"
    if why.code != "low_weight":
        return lexical
    if not why.entered:  # the entry is the best match seen
        return (f"{lexical} holding {why.weight:.2f} of the query's weight (its rarer words are "
                "missing)")
    return (f"the best lexical entry, {_words(why.entered, n)}, holding {why.weight:.2f} "
            "of the query's weight (its rarer words are missing),")


def walk_reason(r: Any) -> str | None:
    """A walk's refusal in words (`memory.walk.WalkResult`; None when it did not refuse): the
    sentence `coworker walk`, its --json `reason`, memory_walk and the MCP tool give."""
    why = r.why
    if why is None:
        return None
    n = len(r.query_tokens)
    if why.code == "no_event_holds":
        return (f"no confident entry point: the walk entered on {_words(why.entered, n)}, but "
                "no event it reached holds them")
    semantic = f"; {why.probe.why()}" if why.probe is not None else ""
    if why.probe is not None and not why.probe.may_enter and why.probe.confidence >= why.threshold:
        semantic += ("; this embedding model does not enter the walk (it answered wrongly when "
                     "measured): `coworker search` may find more")
    return (f"no confident entry point: {_lexical(r, n)} is below the {why.threshold} "
            f"threshold{semantic}")


def walk_json(r: Any) -> dict[str, Any]:
    """A walk as every door returns it (docs/design.md): `WalkResult.as_dict` with the English
    `reason` made from its code, after `refused`."""
    data = r.as_dict()
    if r.why is None:
        return data
    return {"refused": data.pop("refused"), "reason": walk_reason(r), **data}



def recall_skip(found: Any) -> str | None:
    """Why a recall gives no block, in words (`memory.recall.Recall.skipped`; None: it gives
    one): the `recall` event's and `coworker recall`'s decision."""
    from .memory.recall import SEMANTIC_FLOOR, Skip

    if found.skipped is None:
        return None
    if found.skipped is Skip.NO_TERMS:
        return "no informative terms"
    if found.skipped is Skip.LOW_EVIDENCE:
        return "evidence below the floor"
    return ("evidence below the floor, lexical and semantic (confidence "
            f"{found.skip_confidence or 0.0:.2f} < {SEMANTIC_FLOOR})")


def recall_decision(found: Any) -> str:
    """"inject", or "none: " and why not (`recall_skip`)."""
    why = recall_skip(found)
    return "inject" if why is None else f"none: {why}"


def walk(store: Store, query: str, result: dict[str, Any], zone: tzinfo = UTC) -> None:
    """A walk as a tree (`walk_json`'s dict): rollups from the coarsest the walk kept down to
    the raw events, their times the owner's (`zone`)."""
    from .memory.cards import MAX_QUERY_CHARS

    cut = (f"(only the first {MAX_QUERY_CHARS} characters of the query were read)"
           if result.get("query_truncated") else None)
    if result["refused"]:
        out.print(f"refused: {result['reason']}")
    else:
        _walk_tree(store, query, result, zone)
    if cut:
        out.print(cut)


@dataclass
class _Tree:
    """A walk's nodes (trace lines by id), their rollups, its events, and those shown."""
    nodes: dict[int, dict[str, Any]]
    rollups: dict[int, Any]
    events: dict[int, dict[str, Any]]
    zone: tzinfo
    shown: set[int] = field(default_factory=set)


def _walk_tree(store: Store, query: str, result: dict[str, Any], zone: tzinfo) -> None:
    from .store import rollups as rl

    out.print(_walk_head(query, result))
    nodes = {t["id"]: t for t in result["trace"] if t["level"] > 0}
    rollups = {i: r for i in nodes if (r := rl.get(store, i)) is not None}
    tree = _Tree(nodes, rollups, {e["id"]: e for e in result["events"]}, zone)
    for rid in [i for i, r in rollups.items() if r.parent_id not in nodes]:
        _show(tree, rid, 0)
    rest = [e for eid, e in tree.events.items() if eid not in tree.shown]
    if rest:
        out.print("not yet under a rollup:")
        for e in rest:
            _event_line("  ", e, zone)
    if result["truncated"]:
        out.print("(truncated: a cap was reached; narrow the query)")


def _walk_head(query: str, result: dict[str, Any]) -> str:
    matched, n = result["matched_tokens"], len(result["query_tokens"])
    how = (f"by meaning: no words matched enough ({len(matched)}/{n})"
           if result.get("entry") == "semantic" else f"{len(matched)}/{n}: {', '.join(matched)}")
    return f'walk "{query}": confidence {result["confidence"]:.2f} ({how})'


def _show(tree: _Tree, rid: int, depth: int) -> None:
    """A node, its children the walk kept, and (level 1) the events of its span."""
    r, zone = tree.rollups[rid], tree.zone
    pad = "  " * depth
    out.print(f"{pad}L{r.level} #{r.id} {day(r.first_ts, zone)}..{day(r.last_ts, zone)} "
              f"{clean(r.title)}: {one_line(r.body, 100)}")
    out.print(f"{pad}  ({tree.nodes[rid]['why']})", style="dim")
    for cid in [c for c, k in tree.rollups.items() if k.parent_id == rid]:
        _show(tree, cid, depth + 1)
    if r.level != 1 or r.first_event is None:
        return
    for eid, e in tree.events.items():
        if r.first_event <= eid <= (r.last_event or 0) and eid not in tree.shown:
            tree.shown.add(eid)
            _event_line(pad + "  ", e, zone)


def _event_line(indent: str, e: dict[str, Any], zone: tzinfo) -> None:
    imported = " (imported: not your owner's words)" if e.get("imported") else ""
    out.print(f"{indent}#{e['id']} {when(e['ts'], zone)} {clean(e['kind'])} "
              f"{clean(e['actor'])}{imported}: {one_line(e['body'], 160)}")


def memory_change(change: Any) -> list[str]:
    """What putting a version of MEMORY.md back would change (`memorymd.Difference`), a line
    an entry: `+` comes back, `-` leaves, `~` reads differently under the same id."""
    if change.same:
        return ["no change: MEMORY.md is that version already"]
    if change.unreadable:
        return [f"the whole file is replaced ({change.unreadable})"]
    lines = [f"  + [{e.id or 'new'}] {one_line(e.text, 160)}" for e in change.added]
    lines += [f"  - [{e.id or 'hand-added'}] {one_line(e.text, 160)}" for e in change.removed]
    lines += [f"  ~ [{now.id}] {one_line(now.text, 75)} -> {one_line(then.text, 75)}"
              for now, then in change.changed]
    if change.prose:
        lines.append("  headings or notes that are not entries change too")
    return lines or ["no entry changes (only spacing or the entries' dates and sources)"]


def change_summary(change: Any | None) -> str:
    """One cell for `coworker snapshots`: what restoring that version would change now."""
    if change is None:
        return "? (a file cannot be read)"
    if change.same:
        return "no change"
    if change.unreadable:
        return "replaces the whole file"
    parts = [f"{verb} {', '.join(str(e.id or 'a hand-added one') for e in entries)}"
             for verb, entries in (("adds", change.added), ("removes", change.removed),
                                   ("changes", [now for now, _ in change.changed])) if entries]
    if change.prose:
        parts.append("changes notes")
    return "; ".join(parts) or "spacing only"
