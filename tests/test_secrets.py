"""Nobody else speaks as the owner: the model's key lives in state/secrets.toml (or the
environment), never in a file others can read, and no file the coworker writes holds it, not
even when the endpoint echoes it back in an error. Files are private as ssh keeps them."""

from __future__ import annotations

import json
import logging
import os
import stat
import uuid
from pathlib import Path

import pytest

from runtime import doctor, logs, secrecy
from runtime import settings as settings_mod
from runtime.home import Home, private_umask
from runtime.loop import Loop
from runtime.store import Event, Store
from runtime.store import inputs as inputs_store

from .conftest import coworker, run_tick, write_config
from .fakeapi import FakeMessagesAPI, error


def fresh_secret() -> str:
    # Unique per test: the registry lives as long as the process, and a key another test
    # registered must not make this one pass.
    return f"sk-ant-test-{uuid.uuid4().hex}"


def keyless_home(root: Path, api: FakeMessagesAPI) -> Home:
    home = Home.locate(root)
    home.init()
    path = write_config(root, api.url)
    path.write_text(path.read_text(encoding="utf-8").replace('api_key = "test-key"\n', ""),
                    encoding="utf-8")
    return home


def plant(home: Home, secret: str, where: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if where == "secrets.toml":
        home.secrets_path.write_text(f'[model]\napi_key = "{secret}"\n', encoding="utf-8")
        os.chmod(home.secrets_path, 0o600)
    else:
        monkeypatch.setenv("ANTHROPIC_API_KEY", secret)


def files_holding(root: Path, secret: str, allowed: set[Path]) -> list[str]:
    needle = secret.encode()
    found = []
    for path in sorted(root.rglob("*")):
        if path.is_file() and path not in allowed and needle in path.read_bytes():
            found.append(str(path.relative_to(root)))
    return found


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def restore_logging():
    """The root logger as the test found it, after a test that called logs.setup."""
    root = logging.getLogger()
    level = root.level
    yield
    logs.teardown()
    root.setLevel(level)


# the secrets file -----------------------------------------------------------------------------
def test_the_secrets_file_is_merged_over_config_and_the_environment_wins(
        isolated_home: Path, api: FakeMessagesAPI, monkeypatch: pytest.MonkeyPatch):
    home = keyless_home(isolated_home, api)
    secret = fresh_secret()
    plant(home, secret, "secrets.toml", monkeypatch)
    settings = home.settings()
    assert settings.model.api_key == secret
    assert settings.model.base_url == api.url and settings.model.name == "fake-model"  # deep
    assert settings.model_enabled()
    assert secrecy.redact(f"Bearer {secret}!") == "Bearer [redacted]!"
    monkeypatch.setenv("COWORKER_MODEL__API_KEY", "from-the-environment")
    assert home.settings().model.api_key == "from-the-environment"


def test_every_secret_load_sees_is_registered(isolated_home: Path,
                                              monkeypatch: pytest.MonkeyPatch):
    home = Home.locate(isolated_home)
    home.init()
    env_key = fresh_secret()
    monkeypatch.setenv("ANTHROPIC_API_KEY", env_key)
    home.settings()
    assert env_key not in secrecy.redact(f"x {env_key} y")
    # forward compatible: any string under a key named like a secret, at any depth
    data = {"model": {"api_key": "a" * 8, "name": "n"}, "hooks": [
        {"Auth_Header": "b" * 8, "url": "http://x"}, {"github": {"TOKEN": "c" * 8}}],
        "db": {"password": "d" * 8, "max_tokens": 12}}
    assert sorted(secrecy.secret_values(data)) == ["a" * 8, "b" * 8, "c" * 8, "d" * 8]


def test_a_bad_value_in_the_secrets_file_is_named_without_echoing_it(
        isolated_home: Path):
    home = Home.locate(isolated_home)
    home.init()
    home.secrets_path.write_text('[model]\napi_key = 12345678\n', encoding="utf-8")
    with pytest.raises(settings_mod.ConfigError) as exc:
        home.settings()
    assert str(exc.value).startswith("state/secrets.toml: [model] api_key")
    assert "12345678" not in str(exc.value)
    home.secrets_path.write_text('[model\n', encoding="utf-8")
    with pytest.raises(settings_mod.ConfigError, match="state/secrets.toml: not valid TOML"):
        home.settings()


# redaction everywhere written -----------------------------------------------------------------
@pytest.mark.parametrize("status", [400, 401])
@pytest.mark.parametrize("where", ["secrets.toml", "environment"])
def test_a_key_echoed_back_by_the_endpoint_is_written_nowhere(
        isolated_home: Path, api: FakeMessagesAPI, monkeypatch: pytest.MonkeyPatch,
        restore_logging, where: str, status: int):
    home = keyless_home(isolated_home, api)
    secret = fresh_secret()
    plant(home, secret, where, monkeypatch)
    settings = home.settings()
    logs.setup(home, "DEBUG", "text", stderr=False)
    with Store.open(home.db_path) as store:
        inputs_store.add_message(store, Event.owner_message(
            f"my key is {secret}, keep it safe", "tell"))
    api.enqueue(error(status, "authentication_error", msg=f"bad key Bearer {secret}"))
    loop = Loop(home, settings)
    outcome = run_tick(loop)
    assert outcome.kind == "failed"
    headers = {k.lower(): v for k, v in api.requests[0]["headers"].items()}
    sent = headers.get("x-api-key", "") + headers.get("authorization", "")
    assert secret in sent  # it was sent, and the endpoint echoes it back
    logging.getLogger("runtime.test").error("the endpoint said: bad key Bearer %s", secret)
    try:
        raise RuntimeError(f"a traceback that quotes {secret}")
    except RuntimeError:
        logging.getLogger("runtime.test").exception("and a traceback")
    loop.store.close()
    logging.shutdown()
    allowed = {home.secrets_path}
    assert files_holding(home.root, secret, allowed) == []
    assert "[redacted]" in home.log_path.read_text(encoding="utf-8")


def test_json_log_lines_are_redacted_before_json_escapes_them(offline_home: Home,
                                                              restore_logging):
    secret = fresh_secret() + '"pa\\ss'  # JSON would escape it: \"pa\\ss
    secrecy.register_secret(secret)
    logs.setup(offline_home, "INFO", "json", stderr=False)
    try:
        raise ValueError(f"quote {secret}")
    except ValueError:
        logging.getLogger("runtime.test").exception("key %s", secret)
    logging.shutdown()
    text = offline_home.log_path.read_text(encoding="utf-8")
    line = json.loads(text.splitlines()[0])
    assert secret not in line["msg"] and secret not in line["exc"]
    assert line["msg"] == "key [redacted]" and "quote [redacted]" in line["exc"]
    assert secret.split('"')[0] not in text


def test_doctor_output_never_shows_a_key_the_endpoint_echoes(
        isolated_home: Path, api: FakeMessagesAPI, monkeypatch: pytest.MonkeyPatch):
    home = keyless_home(isolated_home, api)
    secret = fresh_secret()
    plant(home, secret, "secrets.toml", monkeypatch)
    api.enqueue(error(400, "invalid_request_error", msg=f"bad key Bearer {secret}"))
    checks = doctor.run_checks(home)
    model = {c.name: c for c in checks}["model"]
    assert not model.ok and secret in model.detail  # the endpoint did echo it ...
    out = doctor.render(checks)
    assert secret not in out and "[redacted]" in out  # ... and doctor never prints it


# permissions ----------------------------------------------------------------------------------
def test_a_new_home_is_private_whatever_the_umask(isolated_home: Path, restore_logging):
    old = os.umask(0o022)
    try:
        home = Home.locate(isolated_home)
        home.init()
        assert mode(home.state) == 0o700
        for d in (home.inbox, home.outbox, home.snapshots):
            assert mode(d) == 0o700
        assert mode(home.memory_md) == 0o600
        assert mode(home.config_path) == 0o600
        logs.setup(home, "INFO", "text", stderr=False)
        logging.getLogger("runtime.test").warning("a line")
        assert mode(home.log_path) == 0o600
        # an older home, made before: state/ and the coworker's files are tightened
        os.chmod(home.state, 0o755)
        os.chmod(home.log_path, 0o644)
        home.ensure_dirs()
        assert mode(home.state) == 0o700 and mode(home.log_path) == 0o600
    finally:
        os.umask(old)


def test_private_umask_makes_the_database_and_everything_after_it_private(
        isolated_home: Path):
    old = private_umask()
    try:
        assert os.umask(0o077) == 0o077
        home = Home.locate(isolated_home)
        home.init()
        with Store.open(home.db_path) as store:
            store.execute("CREATE TABLE t(x)")
            for suffix in ("", "-wal", "-shm"):
                path = Path(f"{home.db_path}{suffix}")
                assert mode(path) == 0o600, path
    finally:
        os.umask(old)


def test_coworker_init_through_the_cli_is_private(isolated_home: Path):
    old = os.umask(0o022)
    try:
        r = coworker("init")
    finally:
        os.umask(old)
    assert r.returncode == 0, r.stderr
    home = Home.locate(isolated_home)
    assert mode(home.state) == 0o700
    assert mode(home.config_path) == 0o600 and mode(home.memory_md) == 0o600
    assert mode(home.db_path) == 0o600
