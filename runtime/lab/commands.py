"""`coworker bench` and `coworker eval`: the lab's commands, registered on the CLI by
runtime/cli.py's one hook (`register`).

Owns parsing their arguments and printing their figures; the runs are `lab.bench`,
`lab.bench_long`, `lab.evaluate` and `lab.eval_paraphrase`, imported only when a command runs,
so that registering the commands loads none of them. Errors become exit codes in runtime/cli.py,
as for every other command.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from .. import render
from ..errors import UsageError
from ..render import err, out
from . import CHANNELS, LOCAL_MODELS, PARAPHRASE_HALVES


def _postgres_url(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None and not value.startswith(("postgresql://", "postgres://")):
        raise click.BadParameter("give a PostgreSQL URL, postgresql://USER@HOST/DB")
    return value


@click.command()
@click.option("--events", "n_events", type=click.IntRange(min=100, max=10**8), default=10_000,
              show_default=True, help="Size of the synthetic history.")
@click.option("--queries", "n_queries", type=click.IntRange(min=10, max=10**6), default=200,
              show_default=True, help="Walks and searches to time.")
@click.option("--semantic", is_flag=True,
              help="Also the semantic channel's cost (needs the semantic extra): query "
                   "embedding and hybrid recall p50/p95, over placeholder vectors.")
@click.option("--model", type=click.Choice(LOCAL_MODELS), default="all-minilm",
              show_default=True, help="With --semantic: the packaged local model to time.")
@click.option("--long-text", "long_text", type=click.IntRange(min=1000, max=4 << 20),
              default=None, help="Instead: what one message of this many characters costs on "
                                 "each path that reads it.")
@click.option("--json", "as_json", is_flag=True, help="Print the figures as one JSON object.")
@click.option("--store", "store_url", metavar="URL", default=None, callback=_postgres_url,
              help="Also on this PostgreSQL database (postgresql://USER@HOST/DB), in a schema of "
                   "its own dropped afterwards: SQLite's and PostgreSQL's figures side by side.")
def bench(n_events: int, n_queries: int, semantic: bool, model: str, long_text: int | None,
          as_json: bool, store_url: str | None = None) -> None:
    """Measure a synthetic history in a temporary home: import rate, reflect time and peak
    memory, walk, recall and search latency p50/p95, beside bare FTS5 MATCH on the same
    database; with --semantic, hybrid recall's cost with a local model (--model) embedding
    each query. With --long-text, instead, one long message of made-up words: each path's
    time and the distinct words it stemmed, beside bare FTS5 MATCH.

    Reports figures; never fails on speed. Needs no coworker home.

    \b
    Examples:
      coworker bench --events 100000 --json
      coworker bench --long-text 4000000
      coworker bench --events 100000 --store postgresql://me@db.internal/lab
    """
    from .bench import insert_line
    from .bench import run as run_bench

    if long_text is not None:
        _bench_long(long_text, as_json)
        return
    if store_url is not None:
        _bench_both(n_events, n_queries, store_url, as_json)
        return
    result = run_bench(n_events, n_queries, semantic=semantic, model=model)
    if as_json:
        click.echo(json.dumps(result, sort_keys=True))
        return
    levels = ", ".join(f"L{k} {v}" for k, v in sorted(result["rollups_per_level"].items()))
    out.print(f"{result['events']:,} events: import {result['import_s']} s with its process's "
              f"start ({result['import_rate_per_s']:,}/s); reflect {result['reflect_s']} s, peak "
              f"{result['reflect_peak_rss_mb']} MB; rollups {levels}; db {result['db_mb']} MB")
    for name in ("walk", "recall", "search", "search_next_page",
                 "bare_fts5"):
        r = result.get(name)
        if r is None:  # no query had a second page
            continue
        out.print(f"{name:>9}: p50 {r['p50_ms']} ms, p95 {r['p95_ms']} ms")
    out.print(f"walk: {result['walk_queries_per_walk']} SQL queries per walk, "
              f"{result['walk_refused']}/{result['queries']} refused; walk p95 / bare p95 = "
              f"{result['walk_p95_over_bare_p95']}")
    out.print(insert_line(result), markup=False)
    sem = result.get("semantic")
    if sem:
        out.print(f" semantic: {sem['skipped']}" if "skipped" in sem else
                  f" semantic: query embedding p50 {sem['query_embed']['p50_ms']} ms, p95 "
                  f"{sem['query_embed']['p95_ms']} ms; hybrid recall p50 "
                  f"{sem['recall_hybrid']['p50_ms']} ms, p95 {sem['recall_hybrid']['p95_ms']} ms"
                  f" ({sem['vectors_mb']} MB of vectors, placeholders)", markup=False)


def _bench_both(n_events: int, n_queries: int, store_url: str, as_json: bool) -> None:
    from .bench_pg import lines
    from .bench_pg import run as run_both

    result = run_both(n_events, store_url, n_queries)
    if as_json:
        click.echo(json.dumps(result, sort_keys=True))
        return
    for line in lines(result):
        out.print(line, markup=False)


def _bench_long(chars: int, as_json: bool) -> None:
    from .bench_long import run as run_long

    result = run_long(chars)
    if as_json:
        click.echo(json.dumps(result, sort_keys=True))
        return
    out.print(f"one message of {result['chars']:,} characters, {result['distinct']:,} distinct "
              f"words (found by recall: {result['recall_found']}, by the walk: "
              f"{result['walk_found']}; the gate: {result['gate']})")
    for name, p in result["paths"].items():
        out.print(f"{name:>13}: {p['ms']:>10,.1f} ms  {p['stemmed']:>7,} words stemmed  "
                  f"{p['over_bare_fts5']:>8}x bare FTS5", markup=False)


def _store_option(command: Callable[..., None]) -> Callable[..., None]:
    """`--store URL`: the eval's homes keep their stores on that PostgreSQL database."""
    return click.option(
        "--store", "store_url", metavar="URL", default=None, callback=_postgres_url,
        help="Keep the eval's history on this PostgreSQL database (postgresql://USER@HOST/DB; "
        "a password from PGPASSWORD or ~/.pgpass), in a schema of its own dropped afterwards, "
        "instead of a SQLite file: the same figures for the other backend.")(command)


@click.group(name="eval")
def eval_group() -> None:
    """Evaluate memory on public benchmarks.

    \b
    Example:
      coworker eval locomo locomo10.json
    """


@eval_group.command(name="locomo")
@click.argument("file", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--k", "k", type=click.IntRange(min=1, max=100), default=10, show_default=True)
@click.option("--channels", type=click.Choice(CHANNELS),
              default="lexical", show_default=True,
              help="lexical: the loop's recall path; hybrid: fused with the semantic channel "
              "([semantic] of this home, else all-MiniLM in process); bm25: plain FTS5 bm25 "
              "over the turns (the baseline).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--out", "out_path", type=click.Path(path_type=Path, dir_okay=False),
              help="Write one JSON line a question: sample_id, qa_index, ranked dia_ids.")
@click.option("--model", type=click.Choice(LOCAL_MODELS), default=None,
              help="With --channels hybrid: embed in process with this packaged local model "
              "(all-mpnet: the semantic-large extra), whatever this home's [semantic] says.")
@_store_option
def eval_locomo(file: Path, k: int, channels: str, as_json: bool, out_path: Path | None,
                model: str | None, store_url: str | None) -> None:
    """The LoCoMo evidence-retrieval task through the same recall path the loop uses.

    Each conversation gets its own fresh home (turns imported with their session dates, then
    reflect), every question of categories 1-4 is asked, and the top-k turns are scored: turn
    recall@k, hit@k, MRR@10, session recall@k, per category, with explicit denominators;
    beside them, how often the block the loop would inject was injected and how often it held
    none of the evidence (noise), with category-5 questions asked for those two figures only.

    FILE is LoCoMo's data/locomo10.json from github.com/snap-research/LoCoMo (CC BY-NC 4.0; not
    shipped here); docs/benchmarks.md says where to get it and how to cut our development set.

    \b
    Example:
      coworker eval locomo locomo10.json --json
      coworker eval locomo locomo10.json --channels hybrid --model all-mpnet
      coworker eval locomo locomo10.json --store postgresql://me@db.internal/lab
    """
    from .evaluate import run as run_eval

    report = run_eval(file, k, channels, out_path,
                      progress=lambda sid: err.print(f"  {sid} ..."), model=model,
                      store_url=store_url)
    data = report.as_dict()
    if as_json:
        click.echo(json.dumps(data, sort_keys=True))
        return
    adv = report.adversarial
    out.print(f"LoCoMo, channels {channels}, k={k}: {report.conversations} conversations, "
              f"{report.questions_valid} questions scored ({report.questions_invalid} without "
              f"valid evidence left out, of {report.questions_total})"
              + (f"; {adv['n']} category-5 questions asked for the noise figures only "
                 f"({adv['questions_invalid']} without valid evidence left out)" if adv else ""))
    headers, rows = report.table()
    out.print(render.table(headers, rows))
    for line in report.notes():
        out.print(line)
    out.print(f"recall latency: p50 {report.latency_ms.get('p50')} ms, "
              f"p95 {report.latency_ms.get('p95')} ms")


def _set_options(command: Callable[..., None]) -> Callable[..., None]:
    """The options of a work-shaped set's command (`eval paraphrase`, `eval work`)."""
    options = [
        click.option("--channels", type=click.Choice(CHANNELS), default="lexical",
                     show_default=True,
                     help="lexical: search, the loop's recall and the walk; hybrid: recall fused "
                     "with the semantic channel (the packaged offline MiniLM unless this home's "
                     "[semantic] names one); bm25: plain FTS5 bm25 over the events for search "
                     "and recall (the baseline)."),
        click.option("--half", type=click.Choice(PARAPHRASE_HALVES), default="held",
                     show_default=True, help="tuning: the questions tuning may look at; held: "
                     "the half kept apart; all."),
        click.option("--json", "as_json", is_flag=True, help="Print the report, every question "
                     "included, as JSON."),
        click.option("--calibrate", is_flag=True, help="With --channels hybrid --half all: "
                     "refit the semantic entry's confidence on the tuning half and report how "
                     "it holds on the held half (the coefficients to put in "
                     "runtime/memory/nearest.py)."),
        click.option("--model", type=click.Choice(LOCAL_MODELS), default=None,
                     help="With --channels hybrid: embed in process with this packaged local "
                     "model (all-mpnet: the semantic-large extra), whatever this home's "
                     "[semantic] says.")]
    for option in reversed(options):
        command = option(command)
    return command


@eval_group.command(name="paraphrase")
@_set_options
@_store_option
def eval_paraphrase(channels: str, half: str, as_json: bool, calibrate: bool,
                    model: str | None, store_url: str | None) -> None:
    """The hand-written paraphrase set: facts asked in the history's words and in other words.

    A fresh temporary home holds a synthetic six-week coworker history (lab/data),
    reflected offline. Every question of the half is asked: search top 5, recall top 5, the
    recall block, and the walk (found, refused, answered wrongly); questions nothing answers
    measure the walk's refusals and the recall block's noise.

    \b
    Example:
      coworker eval paraphrase --half held --channels lexical
      coworker eval paraphrase --half held --channels hybrid --model all-mpnet
      coworker eval paraphrase --half all --store postgresql://me@db.internal/lab
    """
    from .eval_paraphrase import run_paraphrase

    _set_run(run_paraphrase, "paraphrase set", channels, half, as_json, calibrate, model,
             store_url)


def _set_run(run: Callable[..., Any], title: str, channels: str, half: str, as_json: bool,
             calibrate: bool, model: str | None, store_url: str | None = None) -> None:
    """Run a work-shaped set (`eval paraphrase`, `eval work`) and print its figures; on a
    PostgreSQL database when `store_url` is given."""
    if calibrate and (channels != "hybrid" or half != "all"):
        raise UsageError("--calibrate needs --channels hybrid --half all")
    on = {"store_url": store_url} if store_url is not None else {}
    report = run(channels, half, progress=lambda s: err.print(f"  {s} ..."), model=model, **on)
    if calibrate:
        from .eval_paraphrase import refit

        report.calibration = {"in_use": report.calibration, "refit": refit(report.questions)}
    if as_json:
        click.echo(json.dumps(report.as_dict(), sort_keys=True))
        return
    out.print(f"{title}, channels {channels}, half {half}: {report.events} events, "
              f"{report.facts} facts")
    out.print(render.table(
        ["questions", "measure", "count", "rate"],
        [(kind, measure, f"{v['hits']}/{v['of']}", "-" if v["rate"] is None else
          f"{v['rate']:.3f}")
         for kind, agg in report.kinds.items() for measure, v in agg.items()
         if isinstance(v, dict)]))
    out.print("latency: " + ", ".join(f"{what} p50 {ms.get('p50')} ms, p95 {ms.get('p95')} ms"
                                      for what, ms in report.latency_ms.items()))
    if report.calibration:
        out.print("semantic entry calibration: " + json.dumps(report.calibration))


@eval_group.command(name="work")
@_set_options
def eval_work(channels: str, half: str, as_json: bool, calibrate: bool,
              model: str | None) -> None:
    """The work set: a payments team's six weeks, asked about decisions, owners, dates, reasons.

    A fresh temporary home holds the history of runtime/lab/data/work.json (the owner, the
    coworker's own turns, imported chat, tickets, commits, CI), reflected offline. Every
    question of the half is asked in the history's words and in other words: search top 5,
    recall top 5, the recall block, and the walk (found, refused, answered wrongly); questions
    nothing answers measure the walk's refusals and the recall block's noise.

    \b
    Example:
      coworker eval work --half held
      coworker eval work --half all --channels hybrid --calibrate
    """
    from .eval_work import run_work

    _set_run(run_work, "work set", channels, half, as_json, calibrate, model)


@eval_group.command(name="ablate")
@click.option("--channels", type=click.Choice(CHANNELS[:2]), default="lexical",
              show_default=True, help="lexical; hybrid adds the rules that act only with the "
              "semantic channel (and measures LoCoMo hybrid too).")
@click.option("--locomo", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="LoCoMo's development set, measured with and without each rule (about "
              "25 s a run lexical; hybrid embeds its turns once, about 10 minutes, then "
              "about 40 s a run); left out when not given.")
@click.option("--rule", "keys", multiple=True, help="Only this rule (repeat for more); "
              "all when not given.")
@click.option("--model", type=click.Choice(LOCAL_MODELS), default=None,
              help="With --channels hybrid: embed in process with this packaged local model.")
@click.option("--json", "as_json", is_flag=True, help="Print every figure as JSON.")
def eval_ablate(channels: str, locomo: Path | None, keys: tuple[str, ...], model: str | None,
                as_json: bool) -> None:
    """Every ranking rule measured with and without it, and issue 39's verdict.

    The work set and the paraphrase set (halves apart) and, with --locomo, LoCoMo's turn
    recall@10 and MRR@10, each asked as shipped and with one rule switched at a time (patched
    in the lab while it runs, restored after). A rule STAYS only if it improves a work-shaped
    set, or adds 0.01 of LoCoMo turn recall@10 without lowering either; else DELETE. Prints a
    Markdown table.

    \b
    Example:
      coworker eval ablate --locomo locomo-dev.json
      coworker eval ablate --channels hybrid --rule person --rule embed-window
    """
    from .ablation import markdown, run

    result = run(channels, locomo, keys, model, progress=lambda s: err.print(f"  {s} ..."))
    if as_json:
        click.echo(json.dumps(result.as_dict(), sort_keys=True))
        return
    click.echo(markdown(result))


def register(group: click.Group) -> None:
    """Add the lab's commands (bench, eval) to the `coworker` group."""
    group.add_command(bench)
    group.add_command(eval_group)
