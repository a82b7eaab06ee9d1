"""[[notify]] targets (issue 40 item 3): replies reach the owner where they are, at least once,
never twice by idempotency key, never blocking a tick, and no target's credential written.

Real parts: a local HTTP sink (http.server in a thread on 127.0.0.1) that fails or holds the
first deliveries and then counts what it received by `Idempotency-Key`; a `command` target that
is a small Python script writing its standard input to a file; the real store; the real
`coworker` CLI; and a real `coworker run` process killed between a reply and its delivery.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from tenacity import wait_exponential

from runtime.home import Home
from runtime.notify import Notifier
from runtime.notify.deliver import FAILURE_KINDS, quiet_until
from runtime.notify.presets import PRESETS, Message, marker, plain
from runtime.store import Event, Store
from runtime.store import deliveries as dl
from runtime.store import events as ev

from .conftest import coworker, tell, write_config
from .fakeapi import FakeMessagesAPI, text, tool_use
from .test_process import wait_for

FAST = wait_exponential(multiplier=0.01, max=0.05)  # the product's schedule, in hundredths


# --- the sink -------------------------------------------------------------------------------

class Sink:
    """A webhook receiver: answers `fail` (a status) to the first `failures` requests, holds
    the first `hold` requests until `release()`, then answers 200. It keeps every request and
    counts them by idempotency key, as a receiver that drops a repeat would."""

    def __init__(self, failures: int = 0, fail: int = 503, hold: int = 0,
                 answer: str = "") -> None:
        self.failures, self.fail, self.hold, self.answer = failures, fail, hold, answer
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.released = threading.Event()
        self.held = threading.Event()
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with sink.lock:
                    n = len(sink.requests)
                    sink.requests.append({"path": self.path, "headers": dict(self.headers),
                                          "body": body})
                if n < sink.hold:
                    sink.held.set()
                    sink.released.wait(60)
                status = sink.fail if n < sink.failures else 200
                answer = (sink.answer or "bad").encode() if status != 200 else b"ok"
                try:
                    self.send_response(status)
                    self.send_header("Content-Length", str(len(answer)))
                    self.end_headers()
                    self.wfile.write(answer)
                except OSError:  # the sender was killed while held
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True,
                                       kwargs={"poll_interval": 0.02})

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> Sink:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()

    def keys(self) -> list[str]:
        with self.lock:
            return [r["headers"].get("Idempotency-Key", "") for r in self.requests]

    def accepted(self) -> Counter[str]:
        """Keys the receiver took (the requests after the failures), with how often each came."""
        with self.lock:
            return Counter(r["headers"].get("Idempotency-Key", "")
                           for r in self.requests[self.failures:])

    def figures(self) -> dict[str, int]:
        """Requests, those refused (the injected failures), the keys taken, and the repeats
        of a key already taken (which a receiver that counts keys drops)."""
        taken = self.accepted()
        return {"requests": len(self.keys()), "refused": min(self.failures, len(self.keys())),
                "keys_taken": len(taken), "duplicates_by_key": sum(taken.values()) - len(taken)}


@pytest.fixture
def sink() -> Any:
    made: list[Sink] = []

    def make(**kw: Any) -> Sink:
        made.append(Sink(**kw).start())
        return made[-1]
    yield make
    for s in made:
        s.stop()


def add_notify(home: Home, *targets: str, secrets: str = "") -> None:
    """Append [[notify]] tables (TOML text) to config.toml, and a [secrets] table."""
    path = home.config_path
    path.write_text(path.read_text(encoding="utf-8") + "\n" + "\n".join(targets),
                    encoding="utf-8")
    if secrets:
        (home.state / "secrets.toml").write_text(f"[secrets]\n{secrets}\n", encoding="utf-8")


def webhook(name: str, url: str, **extra: Any) -> str:
    lines = [f'[[notify]]\nname = "{name}"\nkind = "webhook"\nurl = "{url}"']
    lines += [f"{k} = {_toml(v)}" for k, v in extra.items()]
    return "\n".join(lines) + "\n"


def _toml(v: Any) -> str:
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {json.dumps(x)}" for k, x in v.items()) + " }"
    return json.dumps(v)


def reply(store: Store, text_: str, subject: str = "", answers: int | None = None) -> int:
    """A reply to the owner as the contract has it: an `outbox` event of actor coworker."""
    meta: dict[str, Any] = {"subject": subject}
    if answers is not None:
        meta["in_reply_to"] = [answers]
    return ev.append(store, Event(kind="outbox", body=text_, actor="coworker",
                                  author_kind="agent", meta=meta))


def notifier(home: Home, **kw: Any) -> Notifier:
    n = Notifier(home, home.settings, wait=kw.pop("wait", FAST), **kw)
    n._begin(home.settings().notify)  # as start() does, without the thread
    return n


def passes_until(n: Notifier, done: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        n.run_pass()
        if done():
            return
        time.sleep(0.02)
    raise AssertionError(f"not done within {timeout} s")


def rows(home: Home) -> list[dl.Delivery]:
    with Store.open(home.db_path) as store:
        return [r for e in ev.tail(store, 10_000, by_id=True)
                for r in dl.of_event(store, int(e.id or 0))]


# --- delivery through failures ----------------------------------------------------------------

def test_every_reply_is_delivered_once_through_failed_attempts(offline_home: Home, sink: Any,
                                                               capsys: Any):
    """20 replies, the first 7 requests answered 503: every reply arrives, in order, each
    accepted once by its idempotency key; the failures were retried, not given up."""
    s = sink(failures=7)
    add_notify(offline_home, webhook("phone", s.url + "/hook"))
    n = notifier(offline_home)
    with Store.open(offline_home.db_path) as store:
        ids = [reply(store, f"answer {i}", f"re {i}") for i in range(20)]
    passes_until(n, lambda: sum(s.accepted().values()) >= 20)
    n.close()
    accepted = s.accepted()
    assert len(accepted) == 20 and set(accepted.values()) == {1}, accepted
    assert len(s.requests) == 27  # 7 failed + 20 accepted: no request beyond what was owed
    bodies = [json.loads(r["body"]) for r in s.requests[7:]]
    assert [b["event_id"] for b in bodies] == ids  # a target's messages go out in order
    assert bodies[0]["text"] == "answer 0" and bodies[0]["subject"] == "re 0"
    assert {r.status for r in rows(offline_home)} == {"delivered"}
    assert rows(offline_home)[0].attempts == 8  # the head waited through the 7 failures
    figures = {"messages": 20, "failures_injected": 7, "delivered": len(accepted),
               **s.figures()}
    with capsys.disabled():
        print(f"\ndelivery figures (failing sink): {figures}")
    assert figures["duplicates_by_key"] == 0


def test_a_target_gives_up_after_the_bound_with_one_warning_and_goes_on(
        offline_home: Home, sink: Any, caplog: Any):
    s = sink(failures=3, fail=500)
    add_notify(offline_home, webhook("phone", s.url))
    n = notifier(offline_home, max_attempts=3)
    with Store.open(offline_home.db_path) as store:
        first, second = reply(store, "lost"), reply(store, "kept")
    with caplog.at_level(logging.INFO, "runtime.notify"):
        passes_until(n, lambda: sum(s.accepted().values()) >= 1)
    n.close()
    by_event = {r.event_id: r for r in rows(offline_home)}
    assert by_event[first].status == "failed" and by_event[first].attempts == 3
    assert "HTTP 500" in (by_event[first].last_error or "")
    assert by_event[second].status == "delivered"
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "GAVE UP" in warnings[0].getMessage()
    out = coworker("status")
    assert "deliveries: 0 pending (0 retrying), 1 given up in 7 days" in out.stdout
    assert "HTTP 500" in out.stdout


def test_an_answer_a_retry_cannot_change_is_given_up_at_once(offline_home: Home, sink: Any):
    s = sink(failures=1, fail=404)
    add_notify(offline_home, webhook("phone", s.url))
    n = notifier(offline_home)
    with Store.open(offline_home.db_path) as store:
        reply(store, "to a wrong URL")
    n.run_pass()
    n.run_pass()
    n.close()
    [row] = rows(offline_home)
    assert row.status == "failed" and row.attempts == 1 and "HTTP 404" in str(row.last_error)
    assert len(s.requests) == 1


def test_only_the_kinds_a_target_asked_for_and_only_the_coworkers_own(offline_home: Home,
                                                                     sink: Any):
    replies, everything = sink(), sink()
    add_notify(offline_home, webhook("replies", replies.url),
               webhook("all", everything.url, events=["reply", "approval", "failure"]))
    n = notifier(offline_home)
    with Store.open(offline_home.db_path) as store:
        r = reply(store, "an answer")
        a = ev.append(store, Event(kind="action_queued", actor="coworker", author_kind="agent",
                                   body="git__push waits for the owner's approval as action 4",
                                   meta={"approval_id": 4}))
        f = ev.append(store, Event(kind="input_set_aside", actor="coworker",
                                   body="input 9 set aside after 3 failed turns"))
        ev.append(store, Event(kind="note", actor="coworker", body="not sent"))
        ev.append(store, Event(kind="outbox", actor="coworker", body="an imported old reply",
                               meta={"imported": True}))
        ev.append(store, Event(kind="outbox", actor="owner", author_kind="user",
                               body="not the coworker's"))
    passes_until(n, lambda: len(everything.requests) >= 3 and len(replies.requests) >= 1)
    n.run_pass()
    n.close()
    assert [json.loads(x["body"])["event_id"] for x in replies.requests] == [r]
    got = [json.loads(x["body"]) for x in everything.requests]
    assert [(b["event_id"], b["kind"]) for b in got] == [(r, "reply"), (a, "approval"),
                                                         (f, "failure")]
    assert "coworker actions approve 4" in got[1]["text"]
    assert "input_set_aside" in FAILURE_KINDS


def test_a_new_target_is_owed_nothing_from_before_it(offline_home: Home, sink: Any):
    s = sink()
    with Store.open(offline_home.db_path) as store:
        reply(store, "before the target existed")
    add_notify(offline_home, webhook("phone", s.url))
    n = notifier(offline_home)
    with Store.open(offline_home.db_path) as store:
        after = reply(store, "after")
    passes_until(n, lambda: len(s.requests) >= 1)
    n.run_pass()
    n.close()
    assert [json.loads(x["body"])["event_id"] for x in s.requests] == [after]


def test_the_rate_cap_and_quiet_hours_hold_messages(offline_home: Home, sink: Any):
    s = sink()
    add_notify(offline_home, webhook("phone", s.url, max_per_hour=2))
    n = notifier(offline_home)
    with Store.open(offline_home.db_path) as store:
        for i in range(4):
            reply(store, f"r{i}")
    for _ in range(3):
        n.run_pass()
    n.close()
    assert len(s.requests) == 2
    assert [r.status for r in rows(offline_home)] == ["delivered"] * 2 + ["pending"] * 2
    berlin = ZoneInfo("Europe/Berlin")
    night = datetime(2026, 12, 5, 22, 30, tzinfo=berlin)
    assert quiet_until(night, "22:00-07:00", berlin) == datetime(2026, 12, 6, 7, 0,
                                                                  tzinfo=berlin)
    assert quiet_until(night.replace(hour=7, minute=0), "22:00-07:00", berlin) is None
    assert quiet_until(night.replace(hour=12), "12:00-13:00", berlin) is not None
    assert quiet_until(night, None, berlin) is None


def test_quiet_hours_hold_a_target_through_a_pass(offline_home: Home, sink: Any):
    s = sink()
    now = datetime.now(UTC)
    start, end = f"{now.hour:02d}:00", f"{(now.hour + 2) % 24:02d}:00"
    add_notify(offline_home, webhook("phone", s.url, quiet_hours=f"{start}-{end}"))
    n = notifier(offline_home)
    with Store.open(offline_home.db_path) as store:
        reply(store, "at night")
    n.run_pass()
    n.close()
    assert s.requests == [] and [r.status for r in rows(offline_home)] == ["pending"]


# --- a command target -------------------------------------------------------------------------

SCRIPT = """\
import os, sys
out, flaky = sys.argv[1], sys.argv[2]
if not os.path.exists(flaky):  # fails its first run, as a command can
    open(flaky, "w").close()
    print("mail: temporary failure", file=sys.stderr)
    sys.exit(75)
with open(out, "a", encoding="utf-8") as f:
    f.write(os.environ["NOTIFY_IDEMPOTENCY_KEY"] + "\\t" + os.environ["NOTIFY_EVENT_ID"] + "\\t"
            + sys.stdin.read().replace("\\n", "\\\\n") + "\\n")
"""


def test_a_command_target_reads_the_message_on_stdin(offline_home: Home, tmp_path: Path):
    script, out = tmp_path / "deliver.py", tmp_path / "got.txt"
    script.write_text(SCRIPT, encoding="utf-8")
    argv = [sys.executable, str(script), str(out), str(tmp_path / "flaky")]
    add_notify(offline_home, f'[[notify]]\nname = "mail"\nkind = "command"\n'
                             f"command = {json.dumps(argv)}\n")
    n = notifier(offline_home)
    with Store.open(offline_home.db_path) as store:
        ids = [reply(store, "first\nline two", "Subject A"), reply(store, "second")]
    passes_until(n, lambda: out.exists() and len(out.read_text().splitlines()) >= 2)
    n.close()
    lines = [ln.split("\t") for ln in out.read_text(encoding="utf-8").splitlines()]
    assert [int(x[1]) for x in lines] == ids
    assert lines[0][2] == "Subject A\\n\\nfirst\\nline two"
    assert len({x[0] for x in lines}) == 2
    first = next(r for r in rows(offline_home) if r.event_id == ids[0])
    assert first.attempts == 2  # the failed first run was retried
    assert coworker("notify", "--test", "mail").returncode == 0


def test_a_command_that_hangs_is_killed_at_its_timeout(offline_home: Home, tmp_path: Path):
    argv = [sys.executable, "-c", "import time; time.sleep(60)"]
    add_notify(offline_home, f'[[notify]]\nname = "slow"\nkind = "command"\n'
                             f"command = {json.dumps(argv)}\ntimeout_s = 0.5\n")
    started = time.monotonic()
    got = coworker("notify", "--test", "slow")
    assert time.monotonic() - started < 30
    assert got.returncode == 1
    assert got.stderr.strip().count("\n") == 0 and "did not finish within 0.5 s" in got.stderr


# --- presets ----------------------------------------------------------------------------------

def _msg(body: str, subject: str = "Subject", event_id: int | None = 4242) -> Message:
    return Message("reply", subject, body, "k-1", event_id, "2026-12-05T09:00:00.000Z")


@pytest.mark.parametrize("preset,field,limit,in_bytes", [
    ("discord", "content", 2000, False), ("slack", "text", 4000, False),
    ("mattermost", "text", 16000, False), ("generic", "text", 20000, False),
    ("ntfy", None, 4000, True)])
def test_a_long_reply_is_cut_with_a_marker_naming_its_event(preset: str, field: str | None,
                                                            limit: int, in_bytes: bool):
    body = "é<b>&ü " * 5000  # 40,000 characters, multi-byte, with what Slack escapes
    got = PRESETS[preset](_msg(body))
    shown = got.data.decode("utf-8") if field is None else json.loads(got.data)[field]
    assert (len(shown.encode("utf-8")) if in_bytes else len(shown)) <= limit
    assert shown.endswith(marker(_msg(body))) and "event 4242" in shown
    assert len(shown) > limit * 0.4  # cut near the limit, not emptied
    short = PRESETS[preset](_msg("short"))
    assert "cut" not in short.data.decode("utf-8")


def test_presets_shape_their_bodies_for_their_receivers():
    discord = json.loads(PRESETS["discord"](_msg("hi @everyone")).data)
    assert discord == {"content": "**Subject**\nhi @everyone",
                       "allowed_mentions": {"parse": []}}
    slack = json.loads(PRESETS["slack"](_msg("<!channel> a & b")).data)
    assert slack == {"text": "*Subject*\n&lt;!channel&gt; a &amp; b"}
    mm = json.loads(PRESETS["mattermost"](_msg("ping @channel now")).data)["text"]
    assert "@channel" not in mm and "@\u200bchannel" in mm
    ntfy = PRESETS["ntfy"](_msg("text", subject="Grüße\r\nX-Evil: 1"))
    assert ntfy.data == b"text" and "\n" not in ntfy.headers["Title"]
    assert ntfy.headers["Title"].startswith("=?utf-8?")
    generic = json.loads(PRESETS["generic"](_msg("whole")).data)
    assert generic["text"] == "whole" and generic["event_id"] == 4242
    assert plain(_msg("body")) == "Subject\n\nbody"


# --- secrets ----------------------------------------------------------------------------------

TOKEN_PATH = "/services/T0SECRET/B0SECRET/xoxWEBHOOKtoken123"


def test_a_secret_url_is_never_written_nor_printed(offline_home: Home, sink: Any,
                                                   monkeypatch: pytest.MonkeyPatch):
    """The URL named by secret:NAME (its path is the credential) and a header's secret from
    the environment: the sink echoes both back in a 500; they reach no event, no row, no log
    line, no command's output."""
    s = sink(failures=100, fail=500,
             answer=f"no such hook {TOKEN_PATH} for Bearer hook-auth-value-77")
    add_notify(offline_home, webhook("slack", "secret:SLACK_HOOK", preset="slack",
                                     headers={"Authorization": "secret:HOOK_AUTH"}),
               secrets=f'SLACK_HOOK = "{s.url}{TOKEN_PATH}"')
    monkeypatch.setenv("HOOK_AUTH", "Bearer hook-auth-value-77")
    tell(offline_home, "hello")
    notifier(offline_home).close()  # the target is noted: a reply after it is owed
    with Store.open(offline_home.db_path) as store:
        reply(store, "an answer")
    got = coworker("run", "--once")
    assert got.returncode == 0, got.stderr
    assert s.requests and s.requests[0]["path"] == TOKEN_PATH  # it was really sent there
    assert s.requests[0]["headers"]["Authorization"] == "Bearer hook-auth-value-77"
    test = coworker("notify", "--test", "slack")
    doctor = coworker("doctor", "--no-model")
    listing = coworker("notify")
    status = coworker("status")
    assert test.returncode == 1 and "HTTP 500" in test.stderr
    assert f"ok   notify: slack: webhook {s.url} (slack)" in doctor.stdout
    assert "secret:SLACK_HOOK" in listing.stdout
    with Store.open(offline_home.db_path) as store:
        written = "\n".join(store.conn.iterdump())
    logs = offline_home.log_path.read_text(encoding="utf-8")
    assert "HTTP 500" in written and "[redacted]" in written  # the error is kept, hidden
    for where in (written, logs, test.stdout + test.stderr, doctor.stdout, listing.stdout,
                  status.stdout, got.stdout + got.stderr):
        assert "T0SECRET" not in where and "hook-auth-value-77" not in where


def test_a_missing_secret_is_one_line_and_the_messages_wait(offline_home: Home, sink: Any):
    s = sink()
    add_notify(offline_home, webhook("phone", "secret:PHONE_URL"))
    got = coworker("notify", "--test", "phone")
    assert got.returncode == 2 and "secret PHONE_URL is not set" in got.stderr
    assert got.stderr.count("\n") == 1
    assert "FAIL notify: phone: [[notify]] phone url: secret PHONE_URL is not set" in \
        coworker("doctor", "--no-model").stdout
    n = notifier(offline_home)
    with Store.open(offline_home.db_path) as store:
        reply(store, "waits")
    n.run_pass()
    assert [r.status for r in rows(offline_home)] == ["pending"]
    os.environ["PHONE_URL"] = s.url
    try:
        passes_until(n, lambda: len(s.requests) == 1)
    finally:
        del os.environ["PHONE_URL"]
        n.close()


def test_notify_test_exit_codes(offline_home: Home, sink: Any):
    s = sink()
    add_notify(offline_home, webhook("phone", s.url + "/x", preset="ntfy"))
    ok = coworker("notify", "--test", "phone")
    assert ok.returncode == 0 and f"delivered ({s.url})" in ok.stdout
    assert s.requests[0]["headers"]["Idempotency-Key"].startswith("coworker-test-")
    unknown = coworker("notify", "--test", "nope")
    assert unknown.returncode == 2 and "no [[notify]] target named 'nope'" in unknown.stderr
    s.stop()
    down = coworker("notify", "--test", "phone")
    assert down.returncode == 1 and "cannot reach" in down.stderr
    assert down.stderr.count("\n") == 1


# --- a real process killed between a reply and its delivery ------------------------------------

def _db_rows(home: Home) -> list[dl.Delivery]:
    try:
        return rows(home)
    except Exception:  # noqa: BLE001 - a read racing the first writer: ask again
        return []


def _run(home: Home) -> subprocess.Popen[str]:
    # --live: the test is about delivery, not about what a dry run lets a reply do
    return subprocess.Popen([sys.executable, "-m", "runtime.entry", "run", "--live"],
                            cwd=home.root, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _stop(proc: subprocess.Popen[str]) -> str:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    return proc.communicate(timeout=60)[1]


@pytest.mark.slow  # two real `coworker run` processes, one killed
def test_a_reply_killed_before_its_delivery_is_delivered_after_restart_once(
        home: Home, api: FakeMessagesAPI, sink: Any, capsys: Any):
    """The sink holds the first delivery; meanwhile the loop goes on ticking (a second
    question is answered); the process is killed with the first send in flight. After the
    restart both replies arrive: the first once more under the same key (the receiver drops
    the repeat), the second once."""
    s = sink(hold=1)
    write_config(home.root, api.url)
    add_notify(home, webhook("phone", s.url, timeout_s=60))
    api.enqueue(tool_use("reply", {"text": "the first answer", "subject": "one"}, id="tu1"),
                text("done"))
    tell(home, "first question")
    proc = _run(home)
    try:
        assert s.held.wait(60), "the first delivery never reached the sink"
        api.enqueue(tool_use("reply", {"text": "the second answer"}, id="tu2"), text("done"))
        coworker("tell", "second question")
        wait_for(lambda: len(_db_rows(home)) == 2)  # a tick answered while the send was held
        assert [r.status for r in _db_rows(home)] == ["pending", "pending"]
        proc.kill()
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    s.released.set()
    first_key = s.keys()[0]
    proc = _run(home)
    try:
        wait_for(lambda: [r.status for r in _db_rows(home)] == ["delivered", "delivered"])
    finally:
        err = _stop(proc)
    keys = s.keys()
    assert keys.count(first_key) == 2 and len(set(keys)) == 2, keys  # the repeat, same key
    bodies = [json.loads(r["body"]) for r in s.requests]
    assert [b["text"] for b in bodies] == ["the first answer", "the first answer",
                                           "the second answer"]
    assert "Traceback" not in err
    figures = {"messages": 2, "kills": 1, "delivered": len(set(keys)), **s.figures()}
    with capsys.disabled():
        print(f"\ndelivery figures (kill with a send in flight): {figures}")


@pytest.mark.slow  # two real `coworker run` processes, one killed
def test_a_reply_whose_target_was_down_at_the_kill_is_delivered_once_after_restart(
        home: Home, api: FakeMessagesAPI, sink: Any):
    """The target refuses connections (nothing listens) when the reply is written; the
    process is killed with the row pending; after the restart, with the target up, it is
    delivered exactly once."""
    s = sink()
    port = s.server.server_address[1]
    s.stop()  # nothing listens on the port now
    write_config(home.root, api.url)
    add_notify(home, webhook("phone", f"http://127.0.0.1:{port}/hook"))
    api.enqueue(tool_use("reply", {"text": "while you were away"}, id="tu1"), text("done"))
    tell(home, "a question")
    proc = _run(home)
    try:
        wait_for(lambda: any(r.attempts >= 1 for r in _db_rows(home)))
        proc.kill()
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    [row] = _db_rows(home)
    assert row.status == "pending" and "cannot reach" in str(row.last_error)
    up = Sink()
    up.server.server_close()
    up.server = ThreadingHTTPServer(("127.0.0.1", port), up.server.RequestHandlerClass)
    up.thread = threading.Thread(target=up.server.serve_forever, daemon=True,
                                 kwargs={"poll_interval": 0.02})
    up.start()
    proc = _run(home)
    try:
        wait_for(lambda: [r.status for r in _db_rows(home)] == ["delivered"])
        time.sleep(1.5)  # a pass or two more: nothing is sent again
    finally:
        _stop(proc)
        up.stop()
    assert len(up.requests) == 1 and up.keys() == [row.idempotency_key]


def test_a_literal_url_added_by_a_reload_is_hidden_from_the_reload_event(offline_home: Home):
    """A target added to config.toml while the loop runs, its URL written out in the file:
    the config_reload event lists the changed [[notify]] entries, and the URL is already
    hidden there (settings.load registers it), before any delivery pass resolved it."""
    from runtime.loop import Loop

    loop = Loop(offline_home, offline_home.settings())
    try:
        add_notify(offline_home, webhook("chat", "https://chat.example.net/hooks/LITERALtok998877",
                                         headers={"X-Token": "hdr-LITERAL-5544"}))
        loop.reload_config()
        [reload] = [e for e in ev.tail(loop.store, 100) if e.kind == "config_reload"]
    finally:
        loop.store.close()
    shown = json.dumps(reload.meta)
    assert "notify" in shown and "LITERALtok998877" not in shown and "hdr-LITERAL" not in shown


def test_a_notify_header_credential_is_hidden_from_a_config_reload(offline_home: Home) -> None:
    """A `[[notify]]` header written out in config.toml ("Bearer <token>") is redacted from
    the "config.toml reloaded" WARNING and its event before any delivery has resolved it, and
    the loader does not call a strong token behind "Bearer " ordinary."""
    from runtime.loop.lifecycle import _changes
    from runtime.secrecy import redact
    from runtime.store.events import meta_json

    old = offline_home.settings()
    with offline_home.config_path.open("a", encoding="utf-8") as f:
        f.write('\n[[notify]]\nname = "ops"\nkind = "webhook"\nurl = "http://127.0.0.1:9/h"\n'
                'headers = { Authorization = "Bearer sk-header-secret-12345" }\n')
    new = offline_home.settings()
    shown = redact(meta_json({"changed": _changes(old, new)}))
    assert "sk-header-secret-12345" not in shown and "notify" in shown
    assert "sk-header-secret-12345" not in redact("echoed: sk-header-secret-12345")


def test_a_target_removed_while_no_target_ran_is_owed_nothing_from_the_gap(
        offline_home: Home, sink: Any):
    """A loop that runs with no [[notify]] still marks the old target gone, so the target
    added back later starts after the newest event, not at its old cursor."""
    s = sink()
    before = offline_home.config_path.read_text(encoding="utf-8")
    add_notify(offline_home, webhook("phone", s.url))
    n = notifier(offline_home)
    with Store.open(offline_home.db_path) as store:
        reply(store, "while configured")
    passes_until(n, lambda: len(s.requests) == 1)
    n.close()
    offline_home.config_path.write_text(before, encoding="utf-8")  # removed
    gone = notifier(offline_home)
    gone.run_pass()
    gone.close()
    with Store.open(offline_home.db_path) as store:
        reply(store, "in the gap, one")
        reply(store, "in the gap, two")
    add_notify(offline_home, webhook("phone", s.url))  # back
    back = notifier(offline_home)
    back.run_pass()
    with Store.open(offline_home.db_path) as store:
        reply(store, "after it came back")
    passes_until(back, lambda: len(s.requests) == 2)
    back.close()
    sent = [r["body"].decode("utf-8", "replace") for r in s.requests]
    assert len(sent) == 2 and "after it came back" in sent[1]
    assert not any("gap" in x for x in sent), sent


def test_a_command_target_is_not_handed_the_coworkers_secrets(offline_home: Home,
                                                              tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch):
    """A notifying command gets what a notifier needs (PATH, HOME, the session bus, the
    locale) and its NOTIFY_* variables, never the model's API key or other secrets the
    coworker's environment holds."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-never-passed-on-123")
    monkeypatch.setenv("NTFY_URL", "https://ntfy.sh/never-passed-on-topic")
    out = tmp_path / "env.json"
    argv = [sys.executable, "-c",
            f"import json, os, sys; sys.stdin.read(); json.dump(dict(os.environ), "
            f"open({str(out)!r}, 'w'))"]
    add_notify(offline_home, f'[[notify]]\nname = "env"\nkind = "command"\n'
                             f"command = {json.dumps(argv)}\n")
    assert coworker("notify", "--test", "env").returncode == 0
    env = json.loads(out.read_text(encoding="utf-8"))
    assert "ANTHROPIC_API_KEY" not in env and "NTFY_URL" not in env
    assert env["PATH"] and env["NOTIFY_KIND"]
