"""The owner's page at `/` (issue 41 item 4) in a real browser: Debian's headless Chromium,
driven by Selenium, against the real server (`ServerThread`, or the server of a real
`coworker run` process where a loop must answer) and a real SQLite home.

Shown here, each read back from the store: signing in with the owner's token (a wrong one
shows the sign-in again and sets no cookie); a message told from the page's form and its reply,
written by a running coworker answering through the real anthropic client, appearing without a
reload (page.js polls /said); an MCP action approved on /queue running exactly once at the next
live tick (the real fault server of tests/mcp_servers); a queued promotion rejected (MEMORY.md
unchanged); a form posted without the cookie or without the CSRF token refused, nothing
changed; `<img onerror>`, `<script>` and a `javascript:` link sent through a hook and through an
MCP tell (the real `coworker mcp` over stdio) shown as text, with nothing run and no script
error in the browser's log.

Every test writes its screenshots to a temporary folder (its path is printed with `-s`). The
README's screenshots under docs/img are refreshed by one command, from the repository:

    COWORKER_SCREENSHOTS=docs/img ./run-tests --slow-only tests/test_page_browser.py -k screenshot

`.ci/run` installs Debian's `chromium` and `chromium-driver` when they are absent; the module
skips, saying why, only where they could not be installed.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from runtime.home import Home
from runtime.loop import Loop
from runtime.memory import gate
from runtime.serve.server import ServerThread
from runtime.store import Event, Store, inputs
from runtime.store import approvals as ap
from runtime.store import events as ev
from runtime.store import promotions as pr

from .conftest import REPO, tell
from .fakeapi import FakeMessagesAPI, text, tool_use
from .test_hands_loop import ticks  # MCP servers started and stopped around the ticks
from .test_serve import SECRET, configure, connects, owner_token, post
from .test_serve import tell as http_tell

pytestmark = pytest.mark.slow

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
    pytest.skip(f"no browser: {CHROMIUM} or {CHROMEDRIVER} is absent (Debian's `chromium` and "
                "`chromium-driver`; .ci/run installs them where apt-get can run)",
                allow_module_level=True)

from selenium import webdriver  # noqa: E402 - only where there is a browser to drive
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException  # noqa: E402,E501
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402
from selenium.webdriver.remote.webelement import WebElement  # noqa: E402

# Read at import: every test's home fixture clears the COWORKER_* variables.
README_SHOTS = os.environ.get("COWORKER_SCREENSHOTS")
FAULTY = str(REPO / "tests" / "mcp_servers" / "faulty.py")
PHONE = (420, 900)
WAIT_S = 30.0  # a deadline for what the browser or the store must come to show
CHROMIUM_FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--no-first-run", "--hide-scrollbars",
                  f"--window-size={PHONE[0]},{PHONE[1]}")
HOSTILE = ('<img src=x onerror="window.__pwned=1"> then <script>window.__pwned=2</script> '
           'and <a href="javascript:window.__pwned=3">open the report</a>')
HOSTILE_PARTS = ('<img src=x onerror="window.__pwned=1">', "<script>window.__pwned=2</script>",
                 '<a href="javascript:window.__pwned=3">open the report</a>')


# --- the browser --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def chromium(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    """One headless Chromium for the module, a phone's width, its own fresh profile."""
    options = webdriver.ChromeOptions()
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    options.binary_location = str(CHROMIUM)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(WAIT_S)
    # the window's size is not the page's (Chromium's frame, its least width): a phone's viewport
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
        "width": PHONE[0], "height": PHONE[1], "deviceScaleFactor": 1, "mobile": True})
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("page-screenshots")
    print(f"\nscreenshots of the page: {where}")
    return where


class Browser:
    """The module's Chromium, for one test: its server's address, what it saw, and waits."""

    def __init__(self, driver: WebDriver, shots: Path, test: str) -> None:
        self.d, self.shots, self.test = driver, shots, test
        self.base = ""
        self.taken: list[Path] = []

    def at(self, port: int) -> Browser:
        self.base = f"http://127.0.0.1:{port}"
        return self

    def get(self, path: str) -> None:
        self.d.get(self.base + path)

    @property
    def path(self) -> str:
        url = self.d.current_url
        return url[len(self.base):] if url.startswith(self.base) else url

    def until(self, check: Callable[[], Any], what: str, timeout: float = WAIT_S) -> Any:
        """Poll `check` (the browser or the store) until it gives something true."""
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(NoSuchElementException, StaleElementReferenceException):
                if got := check():
                    return got
            if time.monotonic() > deadline:
                self.shot("timed-out")
                raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} "
                                     f"(at {self.d.current_url}; page: {self.body()[:600]!r})")
            time.sleep(0.05)

    def find(self, css: str) -> WebElement:
        return self.d.find_element(By.CSS_SELECTOR, css)

    def all(self, css: str) -> list[WebElement]:
        return self.d.find_elements(By.CSS_SELECTOR, css)

    def body(self) -> str:
        try:
            return self.d.find_element(By.TAG_NAME, "body").text
        except NoSuchElementException:
            return ""

    def note(self, starts: str) -> str:
        """Wait for the note a form's action came back with (`?note=`), and return it."""
        return self.until(lambda: (n := self.find("#note").text).startswith(starts) and n,
                          f"the note {starts!r}")

    def submit(self, form: str, **fields: str) -> None:
        """Fill `fields` of the form at `form` (a CSS selector) and click its submit button."""
        for name, value in fields.items():
            box = self.find(f"{form} [name={name}]")
            box.clear()
            box.send_keys(value)
        self.find(f"{form} button[type=submit]").click()

    def sign_in(self, token: str) -> None:
        self.get("/login")
        self.submit("#login", token=token)
        self.until(lambda: self.path.split("?")[0] == "/" and self.all("#tell"),
                   "the conversation after signing in")

    def script(self, js: str) -> Any:
        return self.d.execute_script(js)

    def errors(self, *refused: int) -> list[dict[str, Any]]:
        """What the browser logged at SEVERE since it was last asked (a CSP violation, a
        script error, a failed load), but a page the test was refused on purpose with one of
        the status codes `refused`."""
        expected = tuple(f"the server responded with a status of {code} " for code in refused)
        return [e for e in self.d.get_log("browser") if e.get("level") == "SEVERE" and not (
            e.get("source") == "network" and any(x in e.get("message", "") for x in expected))]

    def shot(self, name: str, full: bool = False) -> Path:
        """A PNG of the window (or of the whole page, `full`) into the test run's folder."""
        path = self.shots / f"{self.test}-{len(self.taken):02d}-{name}.png"
        if full:
            import base64

            size = self.script("return [document.documentElement.scrollWidth, "
                               "document.documentElement.scrollHeight]")
            data = self.d.execute_cdp_cmd("Page.captureScreenshot", {
                "format": "png", "captureBeyondViewport": True,
                "clip": {"x": 0, "y": 0, "width": size[0], "height": size[1], "scale": 1}})
            path.write_bytes(base64.b64decode(data["data"]))
        else:
            self.d.save_screenshot(str(path))
        self.taken.append(path)
        return path


@pytest.fixture
def browser(chromium: WebDriver, shots: Path, request: pytest.FixtureRequest) -> Browser:
    """The module's browser, signed out of everything (cookies are per host, not per port),
    its log emptied, on a blank page."""
    chromium.get("about:blank")
    chromium.execute_cdp_cmd("Network.clearBrowserCookies", {})
    chromium.get_log("browser")
    return Browser(chromium, shots, request.node.name.removeprefix("test_")[:40])


# --- the store, read back -----------------------------------------------------------------------

def said(home: Home) -> list[Event]:
    with Store.open(home.db_path, readonly=True) as store:
        return ev.tail(store, 1000, kind="message") + ev.tail(store, 1000, kind="outbox")


def bodies(home: Home) -> list[str]:
    return [e.body for e in said(home)]


def of_kind(home: Home, kind: str) -> list[Event]:
    with Store.open(home.db_path, readonly=True) as store:
        return [e for e in ev.tail(store, 10_000, by_id=True) if e.kind == kind]


def approval(home: Home, approval_id: int) -> ap.Approval:
    with Store.open(home.db_path, readonly=True) as store:
        got = ap.get(store, approval_id)
    assert got is not None
    return got


@contextlib.contextmanager
def serving(home: Home) -> Iterator[ServerThread]:
    t = ServerThread.start(home, home.settings())
    try:
        yield t
    finally:
        t.stop()


@contextlib.contextmanager
def running_coworker(home: Home, port: int, *flags: str) -> Iterator[subprocess.Popen[str]]:
    """A real `coworker run` in the background, its `[serve]` on `port`; stopped with SIGTERM
    after, which must end it cleanly (exit 0, no traceback)."""
    proc = subprocess.Popen([sys.executable, "-m", "runtime.entry", "run", *flags], cwd=home.root,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not connects(port):
            assert proc.poll() is None, f"the coworker stopped: {proc.communicate()[1]}"
            assert time.monotonic() < deadline, "the coworker's server did not come up"
            time.sleep(0.05)
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "Traceback" not in err, err


def queue_action(home: Home, sources: list[int], reason: str,
                 arguments: dict[str, Any] | None = None) -> ap.Approval:
    """A tool call waiting for approval, as the loop's hands queue one (runtime/loop/hands.py)."""
    with Store.open(home.db_path) as store:
        return ap.add(store, tick_id=None, server="git", tool="git_commit",
                      name="git__git_commit", arguments=arguments or {
                          "repo_path": "/home/dana/src/parser",
                          "message": "Fix the parser crash on an empty input"},
                      reason=reason, sources=sources, tool_use_id=None, ttl_s=72 * 3600)


def queue_promotion(home: Home, event_id: int) -> int:
    """The owner's "remember ..." message through the real gate ("gated": it waits)."""
    with Store.open(home.db_path) as store:
        [e] = [x for x in ev.tail(store, 100, kind="message") if x.id == event_id]
        cand = gate.from_message(e)
        assert cand is not None
        verdict = gate.consider(store, home, home.settings(), cand)
    assert verdict.status == "queued" and verdict.promotion_id, verdict
    return int(verdict.promotion_id)


# --- signing in ---------------------------------------------------------------------------------

def test_sign_in_with_the_owners_token_and_a_wrong_one_sets_nothing(
        offline_home: Home, browser: Browser):
    configure(offline_home)
    token = owner_token(offline_home)
    with serving(offline_home) as t:
        b = browser.at(t.port)
        b.get("/")
        b.until(lambda: b.path == "/login" and b.all("#login"), "the sign-in page for /")
        b.shot("signed-out")
        b.submit("#login", token=token[:-2] + "xy")
        b.until(lambda: "not the owner's token" in b.find("#note").text, "the refusal")
        assert b.all("#login #token") and not b.all("#tell")
        assert b.d.get_cookies() == []
        b.shot("wrong-token")
        b.get("/queue")  # still signed out
        b.until(lambda: b.path == "/login", "the sign-in page for /queue")

        b.sign_in(token)
        b.shot("signed-in")
        [cookie] = b.d.get_cookies()
        assert cookie["name"] == f"coworker_session_{t.port}" and cookie["httpOnly"] is True
        assert cookie["sameSite"] == "Strict" and cookie["path"] == "/"
        assert b.script("return document.cookie") == ""  # no script of the page can read it
        assert token not in cookie["value"]
        assert b.find("#running").text == "not running" and b.find("#mode").text.startswith(
            "dry-run")

        b.find("header form[action='/logout'] button").click()
        b.until(lambda: b.path.startswith("/login") and b.all("#login"), "signed out")
        assert "Signed out." in b.find("#note").text and b.d.get_cookies() == []
        b.get("/")
        b.until(lambda: b.path == "/login", "the sign-in page after signing out")
        assert b.errors(401) == []  # the wrong token's answer, and nothing else
    assert of_kind(offline_home, "message") == []  # signing in and out wrote nothing


# --- a message told from the page, its reply from a running coworker -----------------------------

REPLY = "Yes: the nightly build went green at 03:12, after Dana's parser fix (#214)."


def test_a_told_message_gets_its_reply_on_the_page_without_a_reload(
        home: Home, api: FakeMessagesAPI, browser: Browser):
    """A real `coworker run` with `[serve] enabled` serves the page; its loop ticks every 10
    minutes, so only the wake-up of the told message brings the model in within the wait."""
    port = configure(home, api.url, coworker_={"tick_seconds": 600, "max_tick_seconds": 600},
                     enabled=True)
    loaded = threading.Event()  # the model answers once the page is loaded: page.js adds it
    api.responder = lambda request: (loaded.wait(WAIT_S), text(REPLY))[1]
    with running_coworker(home, port) as proc:
        b = browser.at(port)
        b.sign_in(owner_token(home))
        b.until(lambda: b.find("#running").text.startswith("running (pid")
                or b.get("/"), "the status: running")
        assert b.find("#running").text == f"running (pid {proc.pid})"

        b.submit("#tell", text="Is the nightly build green?")
        note = b.note("Told (#")
        assert "No coworker is running" not in note  # it was woken
        told = int(note.split("#")[1].split(")")[0])
        assert b.find(f"#e{told} .text").text == "Is the nightly build green?"
        b.shot("told")
        b.script("window.__same_page = 'not reloaded'")
        assert b.all("#said li.reply") == []
        loaded.set()
        reply = b.until(lambda: [li for li in b.all("#said li.reply") if li.text.endswith(REPLY)],
                        "the reply, added by page.js")[0]
        assert f"(to #{told})" in reply.find_element(By.CSS_SELECTOR, ".meta").text
        assert b.script("return window.__same_page") == "not reloaded"
        b.shot("replied")
        assert b.errors() == []
    [asked] = [r for r in api.requests if "nightly build" in json.dumps(r["json"])]
    assert asked["path"].endswith("/messages")
    outbox = [e for e in said(home) if e.kind == "outbox"]
    assert [(e.body, e.meta.get("in_reply_to")) for e in outbox] == [(REPLY, [told])]
    [message] = [e for e in said(home) if e.id == told]
    assert (message.actor, message.author_kind) == ("owner", "user")


# --- an action approved on /queue runs once, at the next live tick -------------------------------

def test_an_action_approved_on_the_page_runs_once_at_the_next_live_tick(
        home: Home, api: FakeMessagesAPI, browser: Browser):
    configure(home, api.url)
    with home.config_path.open("a", encoding="utf-8") as f:  # `wipe` is destructive: it waits
        f.write(f'\n[[mcp.servers]]\nname = "faulty"\ncommand = {json.dumps(sys.executable)}\n'
                f'args = [{json.dumps(FAULTY)}]\nmode = "live"\ntimeout_s = 20\n')
    lock = home.root / "nightly.lock"
    lock.write_text("held by a build that died\n", encoding="utf-8")
    asked = tell(home, "The nightly build is stuck on a stale lock file; clear it please.")
    api.enqueue(tool_use("faulty__wipe", {"path": str(lock)}, id="toolu_wipe",
                         say="A dead build holds nightly.lock; removing it frees the queue."),
                text("Removing the lock waits for your approval."))
    seen: dict[str, Any] = {}

    def between(i: int) -> None:
        if i == 0:
            [waiting] = [a for a in ap_listing(home) if a.name == "faulty__wipe"]
            seen["id"] = waiting.id
            b = browser
            b.sign_in(owner_token(home))
            b.get("/queue")
            item = b.find(f"#action-{waiting.id}")
            assert "faulty__wipe" in item.find_element(By.CSS_SELECTOR, "h3").text
            assert "A dead build holds nightly.lock" in item.text
            assert json.dumps(str(lock)) in item.find_element(By.CSS_SELECTOR, "pre").text
            item.find_element(By.CSS_SELECTOR, "details.sources summary").click()
            assert f"#{asked}" in item.find_element(By.CSS_SELECTOR, "details.sources").text
            b.shot("waiting")
            item.find_element(By.CSS_SELECTOR, "button.approve").click()
            assert b.note(f"Approved action {waiting.id}").endswith(
                "it runs once at the next live tick.")
            assert not b.all(f"#action-{waiting.id}") and "No action is waiting." in b.body()
            b.shot("approved")
            assert approval(home, waiting.id).status == "approved"
            assert lock.exists(), "approving ran nothing: the tick runs it"
            api.enqueue(text("The stale lock is gone; the nightly build can run."))
        elif i == 1:
            assert not lock.exists(), "the approved action did not run at the next live tick"
            assert approval(home, seen["id"]).status == "done"
            lock.write_text("a new lock: the action must not run again\n", encoding="utf-8")

    with serving(home) as t:
        browser.at(t.port)
        ticks(Loop(home, home.settings(), live=True), 3, between)
        browser.get("/queue")
        assert "No action is waiting." in browser.body()
        assert browser.errors() == []
    assert lock.exists(), "the approved action ran a second time"
    [result] = of_kind(home, "action_result")
    assert result.body.startswith(f"approved action {seen['id']} (faulty__wipe) ran: wiped")
    assert [e.meta["approval_id"] for e in of_kind(home, "action_approved")] == [seen["id"]]
    with Store.open(home.db_path, readonly=True) as store:
        ran = store.query("SELECT status FROM side_effects WHERE key = ?",
                          (f"approval:{seen['id']}",))
    assert [r[0] for r in ran] == ["done"]


def ap_listing(home: Home) -> list[ap.Approval]:
    with Store.open(home.db_path, readonly=True) as store:
        return ap.listing(store)


# --- a promotion rejected on /queue -------------------------------------------------------------

def test_a_promotion_rejected_on_the_page_never_reaches_memory_md(
        offline_home: Home, browser: Browser):
    configure(offline_home, memory={"memory_promotions": "gated"})
    offline_home.memory_md.write_text("- [m1] Deploys happen on Tuesdays (sources: #1; "
                                      "2026-11-30)\n", encoding="utf-8")
    before = offline_home.memory_md.read_bytes()
    told = tell(offline_home, "remember that Bob owns the billing exporter")
    promotion = queue_promotion(offline_home, told)
    with serving(offline_home) as t:
        b = browser.at(t.port)
        b.sign_in(owner_token(offline_home))
        b.get("/queue")
        item = b.find(f"#promotion-{promotion}")
        assert item.find_element(By.CSS_SELECTOR, "p.text").text == "Bob owns the billing exporter"
        assert "gated" in item.text
        b.shot("queued")
        item.find_element(By.CSS_SELECTOR, "input[name=why]").send_keys("Dana owns it since May")
        item.find_element(By.CSS_SELECTOR, "button.reject").click()
        assert b.note(f"Rejected promotion {promotion}.")
        assert not b.all(f"#promotion-{promotion}") and "No promotion is queued." in b.body()
        b.shot("rejected")
        b.get("/memory")
        assert "Deploys happen on Tuesdays" in b.find("#memory-md").text
        assert "billing exporter" not in b.find("#memory-md").text
        assert b.errors() == []
    with Store.open(offline_home.db_path, readonly=True) as store:
        row = pr.get(store, promotion)
    assert row is not None and row.status == "rejected"
    assert row.reason == "rejected by the owner: Dana owns it since May"
    assert offline_home.memory_md.read_bytes() == before


# --- without the cookie, without the CSRF token: refused, nothing changed ------------------------

def test_a_form_without_the_cookie_or_the_csrf_token_changes_nothing(
        offline_home: Home, browser: Browser):
    configure(offline_home)
    token = owner_token(offline_home)
    waiting = queue_action(offline_home, [], "the owner asked for a commit")
    with serving(offline_home) as t:
        b = browser.at(t.port)

        def refused(why: str) -> None:
            """The form was answered; it changed nothing in the store, and said why."""
            b.until(lambda: b.all("#refused, #note, #login"), "an answer")
            assert bodies(offline_home) == [], "a refused form told something"
            assert approval(offline_home, waiting.id).status == "waiting"
            assert of_kind(offline_home, "action_approved") == []
            assert b.all("#refused"), b.body()[:300]
            assert b.find("#refused").text.startswith(f"refused: {why}"), b.body()[:300]

        b.sign_in(token)
        b.find("#text").send_keys("told without the cookie")
        b.d.delete_cookie(f"coworker_session_{t.port}")
        b.find("#tell button[type=submit]").click()
        refused("not signed in")
        b.shot("no-cookie")

        b.sign_in(token)
        b.script("document.querySelector('#tell input[name=csrf]').remove()")
        b.submit("#tell", text="told without the CSRF token")
        refused("no CSRF token")
        b.shot("no-csrf")

        b.get("/")
        b.script("document.querySelector('#tell input[name=csrf]').value = '0'.repeat(40)")
        b.submit("#tell", text="told with a CSRF token of another session")
        refused("no CSRF token, or a wrong one")

        b.get("/queue")
        b.script(f"document.querySelector('#action-{waiting.id} form input[name=csrf]').remove()")
        b.find(f"#action-{waiting.id} button.approve").click()
        refused("no CSRF token")
        b.get("/queue")
        b.d.delete_cookie(f"coworker_session_{t.port}")
        b.find(f"#action-{waiting.id} button.approve").click()
        refused("not signed in")
        b.shot("approve-refused")

        b.sign_in(token)  # the same form with both: it is taken
        b.submit("#tell", text="told with both")
        b.note("Told (#")
        b.get("/queue")
        b.find(f"#action-{waiting.id} button.approve").click()
        b.note(f"Approved action {waiting.id}")
        assert b.errors(403) == []  # the refusals' answers, and nothing else
    assert bodies(offline_home) == ["told with both"]
    assert approval(offline_home, waiting.id).status == "approved"


# --- hostile text from a hook and an MCP tell is text ---------------------------------------------

def mcp_tell(home: Home, words: str) -> int:
    """`tell` over the real `coworker mcp`, through the SDK's stdio client."""
    import anyio
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client
    from mcp.types import Implementation

    params = StdioServerParameters(command=sys.executable, args=["-m", "runtime.cli", "mcp"],
                                   env={**os.environ, "COWORKER_HOME": str(home.root)},
                                   cwd=str(home.root))

    async def go() -> Any:
        with anyio.fail_after(60):
            async with stdio_client(params) as (r, w), ClientSession(
                    r, w, client_info=Implementation(name="build-bot", version="1.0")) as s:
                await s.initialize()
                return await s.call_tool("tell", {"text": words})
    got = anyio.run(go)
    assert not got.is_error, got
    return int(got.structured_content["event_id"])


def shown_as_text(b: Browser, css: str) -> None:
    """Nothing of the hostile parts under `css` ran (no script error or CSP violation in the
    browser's log either), none became an element, and each is on the page as its text."""
    assert b.script("return typeof window.__pwned") == "undefined"
    assert (logged := b.errors()) == [], logged
    assert b.all(f"{css} img, {css} script, {css} a") == []
    shown = b.find(css).text
    for part in HOSTILE_PARTS:
        assert part in shown, (part, shown)


def test_hostile_text_from_a_hook_and_an_mcp_tell_is_shown_as_text_and_never_runs(
        offline_home: Home, browser: Browser):
    configure(offline_home)
    with serving(offline_home) as t:
        b = browser.at(t.port)
        b.sign_in(owner_token(offline_home))
        b.script("window.__same_page = 'not reloaded'")
        code, got = post(t.port, "/hooks/bearer", f"CI says: {HOSTILE}".encode(),
                         {"Authorization": f"Bearer {SECRET}"})
        assert code == 202, got
        hooked = int(got["event_id"])
        told = mcp_tell(offline_home, f"build-bot says: {HOSTILE}")
        # added by page.js's polling (textContent), then as the server renders them
        b.until(lambda: b.all(f"#e{hooked}") and b.all(f"#e{told}"), "both, by polling")
        assert b.script("return window.__same_page") == "not reloaded"
        for rendered in ("polled", "rendered"):
            if rendered == "rendered":
                b.get("/")
            assert b.find(f"#e{hooked} .meta").text.endswith("hook:bearer")
            assert b.find(f"#e{told} .meta").text.endswith("mcp:build-bot")
            shown_as_text(b, f"#e{hooked} .text")
            shown_as_text(b, f"#e{told} .text")
            b.shot(rendered)
        with Store.open(offline_home.db_path) as store:  # and in the queue's "what led to it"
            ap.add(store, tick_id=None, server="ci", tool="rerun", name="ci__rerun",
                   arguments={"note": HOSTILE}, reason=HOSTILE, sources=[hooked],
                   tool_use_id=None, ttl_s=3600)
        b.get("/queue")
        b.find("details.sources summary").click()
        shown_as_text(b, "#actions .item p .text")
        assert all(part.replace('"', '\\"') in b.find("#actions .item pre").text
                   for part in HOSTILE_PARTS)
        assert "<script>window.__pwned=2</script>" in b.find("details.sources .text").text
        assert b.all("#actions img, #actions script, #actions a") == []
        b.shot("queue")
        logged = b.d.get_log("browser")
    assert [e for e in logged if "pwned" in e["message"] or e["level"] == "SEVERE"] == []
    assert [e.actor for e in of_kind(offline_home, "message")] == ["hook:bearer",
                                                                  "mcp:build-bot"]


# --- the README's screenshots ---------------------------------------------------------------------

COMMIT = {"repo_path": "parser", "message": "Fix the parser crash on an empty input"}
CONVERSATION = [  # the owner's words, and what the model answers (a reply, or a call then one)
    ("Is the nightly build green?",
     [text("Not yet: the parser job failed at 03:12 on an empty input (run #884). Dana is on "
           "it.")]),
    ("remember that Dana owns the parser fix",
     [text("Noted; it waits in your queue before it goes into MEMORY.md.")]),
    ("Please commit Dana's patch once the tests pass.",
     [tool_use("git__git_commit", COMMIT, id="toolu_commit",
               say="The tests pass on the patched tree (run #885)."),
      text("The tests pass. The commit waits for your approval in the queue.")]),
]


def test_screenshot_of_a_realistic_page_at_a_phones_width(
        home: Home, api: FakeMessagesAPI, browser: Browser):
    """A running coworker (live, mcp-server-git as its hands) and its page: a few messages and
    their replies, a webhook, a commit waiting for approval and a queued promotion. With
    COWORKER_SCREENSHOTS=DIR (relative to the repository) the two whole pages, at a phone's
    width, go to DIR too: docs/img/page.png and docs/img/queue.png for the README."""
    port = configure(home, api.url, memory={"memory_promotions": "gated"},
                     coworker_={"tick_seconds": 600, "max_tick_seconds": 600}, enabled=True)
    repo = home.root / "parser"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    with home.config_path.open("a", encoding="utf-8") as f:
        f.write(f'\n[[mcp.servers]]\nname = "git"\ncommand = {json.dumps(sys.executable)}\n'
                f'args = ["-m", "mcp_server_git", "--repository", {json.dumps(str(repo))}]\n'
                'mode = "live"\napprove = ["git_commit"]\ntimeout_s = 20\n')
    token = owner_token(home)
    b = browser.at(port)
    with running_coworker(home, port, "--live"):
        b.sign_in(token)
        b.until(lambda: "git: ready" in b.find("#hands").text or b.get("/"), "its hands ready")
        converse(home, api, port, token, b)
        assert [a.arguments for a in ap_listing(home)] == [COMMIT]
        assert [p.status for p in pr_listing(home)] == ["queued"]
        b.get("/")
        assert b.find("#running").text.startswith("running") and b.find("#mode").text.startswith(
            "live")
        pictures = {"page.png": b.shot("conversation", full=True)}
        b.shot("conversation-phone")
        b.get("/queue")
        assert b.all("#actions .item") and b.all("#promotions .item")
        b.find("#actions details.sources summary").click()
        pictures["queue.png"] = b.shot("queue", full=True)
        b.shot("queue-phone")
        assert b.errors() == []
    for path in pictures.values():
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if README_SHOTS:
        target = Path(README_SHOTS) if Path(README_SHOTS).is_absolute() else REPO / README_SHOTS
        target.mkdir(parents=True, exist_ok=True)
        for name, path in pictures.items():
            (target / name).write_bytes(path.read_bytes())
        print(f"\nwrote {', '.join(str(target / n) for n in pictures)}")


def converse(home: Home, api: FakeMessagesAPI, port: int, token: str, b: Browser) -> None:
    """The CONVERSATION told over POST /tell (each waits for its reply), then a webhook."""
    def replied(event_id: int) -> list[Event]:
        return [e for e in said(home)
                if e.kind == "outbox" and event_id in (e.meta.get("in_reply_to") or [])]

    for question, answers in CONVERSATION:
        api.enqueue(*answers)
        code, got = http_tell(port, question, token)
        assert code == 202, got
        b.until(lambda i=got["event_id"]: replied(i), f"the reply to {question!r}")
    api.enqueue(text("The nightly run passed on main after Dana's fix."))
    code, got = post(port, "/hooks/bearer", json.dumps(
        {"workflow": "nightly", "conclusion": "success", "branch": "main", "run": 886}),
        {"Authorization": f"Bearer {SECRET}"})
    assert code == 202, got
    b.until(lambda: input_status(home, got["event_id"]) == "consumed", "the hook's turn")


def input_status(home: Home, event_id: int) -> str | None:
    with Store.open(home.db_path, readonly=True) as store:
        return inputs.status_of(store, event_id)


def pr_listing(home: Home) -> list[pr.Promotion]:
    with Store.open(home.db_path, readonly=True) as store:
        return pr.listing(store)
