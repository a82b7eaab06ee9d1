"""The owner's page (runtime/serve/page.py) over HTTP: only the owner acts, outside text is
never code. The real app (`make_app`: the guard, the doors, the page) on a real home and
SQLite store, driven in process by starlette's TestClient; the browser's view of the same is
tests/test_page_browser.py."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from runtime.home import Home
from runtime.memory.memorymd import MemoryFile
from runtime.serve import session
from runtime.serve import token as token_file
from runtime.serve.app import make_app
from runtime.serve.guard import Bucket, Limits
from runtime.store import Event, Store, approvals
from runtime.store import events as ev
from runtime.store import promotions as pr

BASE = "http://127.0.0.1:8765"
COOKIE = session.cookie_name(8765)  # the server's port: [serve] port's default
HOSTILE = ('<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>'
           '<a href="javascript:alert(3)">x</a>')
TEMPLATES = Path(__file__).parent.parent / "runtime" / "serve" / "templates"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def page(offline_home: Home) -> Iterator[tuple[TestClient, Home, str]]:
    token, _ = token_file.ensure(offline_home.secrets_path)
    clock = Clock()
    limits = Limits(Bucket(1000, 100.0, clock), Bucket(3, 1 / 30, clock))
    app = make_app(offline_home, offline_home.settings(), limits)
    with TestClient(app, base_url=BASE, follow_redirects=False) as client:
        yield client, offline_home, token


def signed_in(client: TestClient, token: str) -> str:
    r = client.post("/login", data={"token": token}, headers={"Origin": BASE})
    assert r.status_code == 303, r.text
    cookie = client.cookies.get(COOKIE)
    assert cookie
    return session.csrf(token, cookie)


def events(home: Home, kind: str | None = None) -> list[Event]:
    with Store.open(home.db_path, readonly=True) as store:
        return [e for e in ev.tail(store, 500) if kind is None or e.kind == kind]


def test_nothing_is_shown_before_sign_in_and_a_wrong_token_sets_nothing(
        page: tuple[TestClient, Home, str], caplog: pytest.LogCaptureFixture) -> None:
    client, home, token = page
    with Store.open(home.db_path) as store:
        ev.append(store, Event.owner_message("the vault code is 4417", "tell"))
    for path in ("/", "/queue", "/memory", "/look?q=vault", "/look?q=vault&how=walk"):
        r = client.get(path)
        assert (r.status_code, r.headers["location"]) == (303, "/login"), path
    r = client.get("/said?after=0")
    assert r.status_code == 401 and "4417" not in r.text
    login = client.get("/login")
    assert login.status_code == 200 and "4417" not in login.text and 'name="token"' in login.text

    with caplog.at_level(logging.WARNING, "runtime.serve"):
        r = client.post("/login", data={"token": "not-the-token"}, headers={"Origin": BASE})
    assert r.status_code == 401 and COOKIE not in r.headers.get("set-cookie", "")
    refused = [m for m in caplog.messages if "sign-in" in m]
    assert len(refused) == 1 and "wrong token" in refused[0] and "not-the-token" not in refused[0]
    assert client.get("/").status_code == 303


def test_the_session_cookie_is_httponly_and_strict_and_a_rotated_token_signs_out(
        page: tuple[TestClient, Home, str]) -> None:
    client, home, token = page
    r = client.post("/login", data={"token": token}, headers={"Origin": BASE})
    cookie = r.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie and "path=/" in cookie
    assert client.get("/").status_code == 200
    token_file.rotate(home.secrets_path)
    assert client.get("/").headers.get("location") == "/login"  # the old session is gone


def test_a_sign_in_from_another_sites_page_is_refused(page: tuple[TestClient, Home, str]) -> None:
    client, _, token = page
    for headers in ({"Origin": "https://evil.example"}, {"Origin": "null"},
                    {"Referer": "https://evil.example/x.html"}):
        r = client.post("/login", data={"token": token}, headers=headers)
        assert r.status_code == 403 and "set-cookie" not in r.headers, headers


def test_failed_sign_ins_are_slowed_but_never_lock_the_owner_out(
        page: tuple[TestClient, Home, str]) -> None:
    client, _, token = page
    for _ in range(3):
        assert client.post("/login", data={"token": "guess"}).status_code == 401
    r = client.post("/login", data={"token": "guess"})
    assert r.status_code == 429 and "try again in" in r.text
    assert COOKIE not in client.cookies
    assert client.post("/login", data={"token": token}).status_code == 303  # the right one is
    assert COOKIE in client.cookies  # always heard: a stranger's guesses lock nobody out


def test_telling_needs_the_cookie_the_csrf_token_and_this_servers_origin(
        page: tuple[TestClient, Home, str]) -> None:
    client, home, token = page
    csrf = signed_in(client, token)
    before = len(events(home, "message"))
    refused = [
        ({"text": "no csrf"}, {}),
        ({"text": "wrong csrf", "csrf": "0" * 40}, {}),
        ({"text": "other site", "csrf": csrf}, {"Origin": "https://evil.example"}),
    ]
    for form, headers in refused:
        r = client.post("/do/tell", data=form, headers=headers)
        assert r.status_code == 403 and "Nothing was changed" in r.text, form
        assert 'href="/login"' in r.text  # a way back
    cookie = client.cookies.get(COOKIE)
    client.cookies.clear()
    r = client.post("/do/tell", data={"text": "no cookie", "csrf": csrf})
    assert r.status_code == 403
    assert len(events(home, "message")) == before  # nothing was written by any of them

    client.cookies.set(COOKIE, cookie or "")
    r = client.post("/do/tell", data={"text": "check the build", "csrf": csrf},
                    headers={"Origin": BASE})
    assert r.status_code == 303 and r.headers["location"].startswith("/?note=Told")
    told = events(home, "message")[-1]
    assert (told.body, told.actor, told.author_kind) == ("check the build", "owner", "user")


def test_outside_text_is_escaped_and_every_response_forbids_inline_script(
        page: tuple[TestClient, Home, str]) -> None:
    client, home, token = page
    with Store.open(home.db_path) as store:
        hook = ev.append(store, Event(kind="message", body=HOSTILE, actor="hook:ci",
                                      author_kind="agent", meta={"via": "hook"}))
        ev.append(store, Event(kind="outbox", body=HOSTILE, actor="coworker",
                               author_kind="agent", meta={"in_reply_to": [hook]}))
        pr.add(store, HOSTILE, [hook], 0.5, "queued", HOSTILE, "tool")
    signed_in(client, token)
    for path in ("/", "/queue", f"/look?q={'pwned'}", "/login"):
        r = client.get(path)
        assert "<img src=x" not in r.text and "<script>window" not in r.text, path
        csp = r.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp, path
        assert r.headers["x-content-type-options"] == "nosniff"
    home_page = client.get("/").text
    assert "&lt;img src=x onerror=&#34;window.__pwned=1&#34;&gt;" in home_page
    assert "&lt;script&gt;window.__pwned=2&lt;/script&gt;" in client.get("/queue").text
    said = client.get("/said?after=0").json()["said"]
    assert [s["text"] for s in said] == [HOSTILE, HOSTILE]  # JSON: page.js sets textContent


def test_the_templates_mark_nothing_safe_and_hold_no_inline_script() -> None:
    for path in TEMPLATES.glob("*.html"):
        text = path.read_text(encoding="utf-8")
        assert "|safe" not in text.replace(" ", "") and "Markup" not in text, path.name
        assert "autoescape false" not in text, path.name
        assert not re.search(r"<script(?![^>]*\bsrc=)", text), path.name  # only <script src>
        assert not re.search(r"\son[a-z]+\s*=", text), path.name  # no onclick= and the like
        assert "style=" not in text, path.name  # the CSP allows no inline style either


def test_promotions_and_actions_are_decided_through_the_owners_door(
        page: tuple[TestClient, Home, str]) -> None:
    client, home, token = page
    with Store.open(home.db_path) as store:
        source = ev.append(store, Event.owner_message("we deploy on Tuesdays", "tell"))
        keep = pr.add(store, "Deploys happen on Tuesdays", [source], 0.9, "queued", "gated",
                      "tool")
        drop = pr.add(store, "Deploys happen on Fridays", [source], 0.4, "queued", "gated",
                      "tool")
        waiting = approvals.add(store, tick_id=None, server="git", tool="git_commit",
                                name="git__git_commit", arguments={"message": "fix parser"},
                                reason="the tests pass now", sources=[source],
                                tool_use_id="tu-1", ttl_s=3600)
    csrf = signed_in(client, token)
    queue = client.get("/queue").text
    assert "git__git_commit" in queue and "the tests pass now" in queue
    assert "fix parser" in queue and "we deploy on Tuesdays" in queue  # what led to it

    def do(path: str, **form: object) -> str:
        r = client.post(path, data={"csrf": csrf, **{k: str(v) for k, v in form.items()}})
        assert r.status_code == 303
        return r.headers["location"]

    assert "Rejected" in do("/do/promotion", id=drop.id, verb="reject", why="we never do")
    assert "Approved" in do("/do/promotion", id=keep.id, verb="approve")
    assert "Approved" in do("/do/action", id=waiting.id, verb="approve")
    assert "Not%20done" in do("/do/action", id=waiting.id, verb="approve")  # only once
    assert "Not%20done" in do("/do/promotion", id=999, verb="approve")
    with Store.open(home.db_path, readonly=True) as store:
        assert pr.get(store, drop.id).status == "rejected"
        assert pr.get(store, keep.id).status == "approved"
        assert approvals.get(store, waiting.id).status == "approved"
    texts = [e.text for e in MemoryFile.load(home.memory_md).numbered().entries]
    assert "Deploys happen on Tuesdays" in texts and "Deploys happen on Fridays" not in texts
    decided = events(home, "action_approved")
    assert [(e.actor, e.author_kind) for e in decided] == [("owner", "user")]


def test_strike_restore_pin_and_unpin_from_the_memory_page(
        page: tuple[TestClient, Home, str]) -> None:
    client, home, token = page
    home.memory_md.write_text("# Memory\n\n- [m1] The build runs nightly\n", encoding="utf-8")
    csrf = signed_in(client, token)
    assert "The build runs nightly" in client.get("/memory").text
    r = client.post("/do/strike", data={"csrf": csrf, "entry": "m1"})
    assert "Struck" in r.headers["location"]
    assert "m1" not in MemoryFile.load(home.memory_md).render()
    assert 'id="struck-m1"' in client.get("/memory").text
    r = client.post("/do/unstrike", data={"csrf": csrf, "entry": "m1"})
    assert "Put%20back" in r.headers["location"]
    assert "The build runs nightly" in MemoryFile.load(home.memory_md).render()
    client.post("/do/pin", data={"csrf": csrf, "text": "Standup is at 9:30"})
    memory = client.get("/memory").text
    pin_id = re.search(r'id="pin-(\d+)"', memory)
    assert pin_id and "Standup is at 9:30" in memory
    client.post("/do/unpin", data={"csrf": csrf, "id": pin_id.group(1)})
    assert "Standup is at 9:30" not in client.get("/memory").text


def test_new_replies_are_listed_after_the_last_one_seen(page: tuple[TestClient, Home, str]
                                                        ) -> None:
    client, home, token = page
    signed_in(client, token)
    with Store.open(home.db_path) as store:
        first = ev.append(store, Event.owner_message("is the build green?", "tell"))
        ev.append(store, Event(kind="tick", body="tick", actor="coworker", author_kind="agent"))
        reply = ev.append(store, Event(kind="outbox", body="yes, green since 9:00",
                                       actor="coworker", author_kind="agent",
                                       meta={"in_reply_to": [first]}))
    assert [s["id"] for s in client.get(f"/said?after={first}").json()["said"]] == [reply]
    said = client.get("/said?after=0").json()["said"]
    assert [(s["side"], s["who"]) for s in said] == [("owner", "you"), ("reply", "coworker")]
    assert said[1]["in_reply_to"] == [first]
    assert client.get("/said?after=x").status_code == 400


def test_behind_a_tls_proxy_the_browsers_https_origin_is_this_server(
        offline_home: Home) -> None:
    from .conftest import write_config

    write_config(offline_home.root, serve={"allowed_hosts": ["coworker.example.org"]})
    token, _ = token_file.ensure(offline_home.secrets_path)
    app = make_app(offline_home, offline_home.settings())
    proxy = "https://coworker.example.org"
    with TestClient(app, base_url="http://coworker.example.org", follow_redirects=False) as c:
        for origin in ("https://coworker.example.org.evil.example", "https://evil.example"):
            assert c.post("/login", data={"token": token},
                          headers={"Origin": origin}).status_code == 403
        r = c.post("/login", data={"token": token}, headers={"Origin": proxy})
        assert r.status_code == 303 and "secure" in r.headers["set-cookie"].lower()
        # the cookie is Secure: the test's client (plain http) would not send it back
        c.cookies.set(COOKIE, r.cookies[COOKIE])
        csrf = session.csrf(token, r.cookies[COOKIE])
        r = c.post("/do/tell", data={"csrf": csrf, "text": "from the phone"},
                   headers={"Origin": proxy})
        assert r.status_code == 303
    assert events(offline_home, "message")[-1].body == "from the phone"


def test_a_walk_that_finds_events_is_shown_and_a_refused_one_says_why(
        page: tuple[TestClient, Home, str]) -> None:
    client, home, token = page
    with Store.open(home.db_path) as store:
        ev.append(store, Event.owner_message("we deploy the billing service on Tuesdays", "tell"))
    signed_in(client, token)
    found = client.get("/look?q=deploy billing Tuesdays&how=walk")
    assert found.status_code == 200 and "we deploy the billing service" in found.text
    assert "Trace" in found.text
    refused = client.get("/look?q=zebra quantum&how=walk")
    assert refused.status_code == 200 and "Refused (below_threshold)" in refused.text
    hits = client.get("/look?q=billing")
    assert hits.status_code == 200 and "billing" in hits.text


def test_a_decision_is_never_guessed_from_a_wrong_verb(page: tuple[TestClient, Home, str]
                                                       ) -> None:
    client, home, token = page
    with Store.open(home.db_path) as store:
        keep = pr.add(store, "Deploys happen on Tuesdays", None, 0.9, "queued", "gated", "tool")
    csrf = signed_in(client, token)
    for form in ({"verb": "aprove"}, {}):
        r = client.post("/do/promotion", data={"csrf": csrf, "id": str(keep.id), **form})
        assert r.status_code == 303 and "Not%20done" in r.headers["location"]
    with Store.open(home.db_path, readonly=True) as store:
        assert pr.get(store, keep.id).status == "queued"


def test_only_a_note_this_server_signed_is_shown(page: tuple[TestClient, Home, str]) -> None:
    client, _, token = page
    lure = "Session expired: paste your token at evil.example"
    assert lure not in client.get(f"/login?note={lure}").text
    assert lure not in client.get(f"/login?note={lure}&sig=0123456789abcdef01234567").text
    csrf = signed_in(client, token)
    assert lure not in client.get(f"/?note={lure}").text
    r = client.post("/do/tell", data={"csrf": csrf, "text": "hello"})
    shown = client.get(r.headers["location"])
    assert "Told (#" in shown.text and 'id="note"' in shown.text


def test_signing_out_ends_every_browsers_session(page: tuple[TestClient, Home, str]) -> None:
    client, _, token = page
    signed_in(client, token)
    other = client.cookies[COOKIE]  # a second browser's session
    client.cookies.clear()
    csrf = signed_in(client, token)
    r = client.post("/logout", data={"csrf": csrf})
    assert r.headers["location"].startswith("/login?note=Signed")
    assert client.get("/").headers["location"] == "/login"
    client.cookies.clear()
    client.cookies.set(COOKIE, other)
    assert client.get("/").headers["location"] == "/login"  # the other browser's too
    client.cookies.clear()
    signed_in(client, token)  # and a new sign-in works at once
    assert client.get("/").status_code == 200


def test_odd_requests_get_a_clear_4xx_never_a_crash(page: tuple[TestClient, Home, str]) -> None:
    client, home, token = page
    csrf = signed_in(client, token)
    assert client.get(f"/said?after={'9' * 30}").status_code == 400
    assert client.get("/said?after=-1").status_code == 400
    r = client.post("/do/tell", content=b"\xff\xfe", headers={
        "Content-Type": "application/x-www-form-urlencoded"})
    assert r.status_code == 400
    r = client.post("/do/tell", content=b"&".join(b"f%d=1" % i for i in range(30)))
    assert r.status_code == 400
    r = client.post("/do/tell", content=b"text=" + b"a" * (2 << 20))
    assert r.status_code == 413
    r = client.post("/do/pin", data={"csrf": csrf, "text": ""})
    assert r.status_code == 303 and "Not%20done" in r.headers["location"]
    (home.root / "config.toml").write_text('[coworker]\ntick_seconds = "x"\n', encoding="utf-8")
    r = client.get("/said?after=0")
    assert r.status_code == 503 and "tick_seconds" in r.json()["error"]
