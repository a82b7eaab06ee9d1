"""config.toml -> Settings: defaults, the rendered template, environment overrides, the role
file, and every kind of broken config reported by the real CLI as one line with exit code 2."""

from __future__ import annotations

import os
import tomllib
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from runtime.errors import ConfigError
from runtime.home import Home
from runtime.settings import DEFAULT_ROLE, Settings, load, render_default_config

from .conftest import REPO, coworker, write_config


def _defaults() -> dict:
    """The defaults as the schema declares them, built without loading any file."""
    return Settings().model_dump()


# defaults and the template ---------------------------------------------------------------


def test_defaults_load_when_config_is_absent(isolated_home: Path) -> None:
    path = isolated_home / "config.toml"
    assert not path.exists()
    # the home variable shares the COWORKER_ prefix; it must not be read as a setting
    assert os.environ["COWORKER_HOME"] == str(isolated_home)

    settings = load(path)

    assert settings.model_dump() == _defaults()
    assert settings.coworker.tick_seconds == 300
    assert settings.coworker.max_tick_seconds == 1800
    assert settings.coworker.timezone == "UTC"
    assert settings.coworker.role == DEFAULT_ROLE
    assert settings.model.provider == "anthropic"
    assert settings.model.max_tokens == 1024
    assert settings.writes.mode == "dry-run"
    assert settings.rituals.custom == []
    assert not path.exists(), "loading must never create config.toml"


def test_rendered_default_config_parses_and_loads_to_exactly_the_defaults(
    isolated_home: Path,
) -> None:
    text = render_default_config()
    parsed = tomllib.loads(text)

    # every section is present (the arrays of tables, [[notify]] and [[hooks]], as commented
    # examples; [secrets] lives in state/secrets.toml), and every key holds its default
    tables = {n: f for n, f in Settings.model_fields.items()
              if isinstance(f.default_factory, type) and issubclass(f.default_factory, BaseModel)}
    assert list(parsed) == list(tables)
    assert "# [[notify]]" in text and "# [[hooks]]" in text
    defaults = _defaults()
    for section, values in parsed.items():
        for key, value in values.items():
            assert value == defaults[section][key], f"[{section}] {key} renders {value!r}"
    # every key that has a plain default is written out (not only commented)
    for section, field in tables.items():
        for key, f in field.default_factory.model_fields.items():
            if f.default_factory is None and f.default is not None:
                assert key in parsed[section], f"[{section}] {key} missing from the template"
            assert f"{key}" in text, f"[{section}] {key} not documented in the template"

    path = isolated_home / "config.toml"
    path.write_text(text, encoding="utf-8")
    assert load(path).model_dump() == defaults


def test_coworker_init_writes_the_rendered_default_with_an_id_of_its_own(
        isolated_home: Path, tmp_path: Path) -> None:
    result = coworker("init")
    assert result.returncode == 0, result.stderr
    written = (isolated_home / "config.toml").read_text(encoding="utf-8")
    given = load(isolated_home / "config.toml").coworker.id
    assert given and given.startswith("coworker_") and len(given) == len("coworker_") + 10
    assert written == render_default_config(given)
    other = tmp_path / "other"
    assert coworker("init", env={**os.environ, "COWORKER_HOME": str(other)}).returncode == 0
    assert load(other / "config.toml").coworker.id not in (None, given)  # never one shared


@pytest.mark.parametrize("bad", ["Bad Id!", "ab", "_starts_with_underscore", "x" * 49, "a-b-c"])
def test_a_coworker_id_that_is_no_id_is_one_line(isolated_home: Path, bad: str) -> None:
    (isolated_home / "config.toml").write_text(f'[coworker]\nid = "{bad}"\n', encoding="utf-8")
    with pytest.raises(ConfigError) as e:
        load(isolated_home / "config.toml")
    assert "is not an id: 3 to 48 lowercase letters" in str(e.value)
    assert "\n" not in str(e.value)


def test_repo_config_toml_is_the_rendered_default() -> None:
    path = REPO / "config.toml"
    assert path.exists(), (
        f"{path} is missing: run `coworker init` in the repository root and commit the "
        "config.toml it writes (it must equal settings.render_default_config())"
    )
    assert path.read_text(encoding="utf-8") == render_default_config(), (
        f"{path} has drifted from settings.render_default_config(): delete it, run "
        "`coworker init` in the repository root and commit the result"
    )


# environment overrides --------------------------------------------------------------------


def test_environment_override_wins_over_the_file(
    isolated_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_config(isolated_home, model={"name": "from-file"}, coworker={"tick_seconds": 7,
                                                                          "max_tick_seconds": 70})
    assert load(path).model.name == "from-file"
    assert load(path).coworker.tick_seconds == 7

    monkeypatch.setenv("COWORKER_MODEL__NAME", "x")
    monkeypatch.setenv("COWORKER_COWORKER__TICK_SECONDS", "9")
    settings = load(path)
    assert settings.model.name == "x"
    assert settings.coworker.tick_seconds == 9
    # keys the environment does not name still come from the file
    assert settings.model.provider == "none"
    assert settings.coworker.max_tick_seconds == 70


def test_environment_override_applies_without_a_file(
    isolated_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COWORKER_MODEL__NAME", "x")
    settings = load(isolated_home / "config.toml")
    assert settings.model.name == "x"
    assert settings.model.max_tokens == 1024


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("COWORKER_MODEL__MAX_TOKENS", "abc"),
        ("COWORKER_WRITES__MODE", "yes"),
        ("COWORKER_COWORKER__TIMEZONE", "Mars/Olympus"),
        ("COWORKER_COWORKER__TICK_SECONDS", "0"),
    ],
)
@pytest.mark.parametrize("with_file", [True, False], ids=["file", "nofile"])
def test_bad_environment_value_names_the_variable(
    isolated_home: Path, monkeypatch: pytest.MonkeyPatch, var: str, value: str, with_file: bool
) -> None:
    path = write_config(isolated_home) if with_file else isolated_home / "config.toml"
    monkeypatch.setenv(var, value)
    with pytest.raises(ConfigError) as exc:
        load(path)
    msg = str(exc.value)
    assert var in msg, msg
    assert "unset" in msg, msg
    assert "\n" not in msg


def test_bad_environment_section_value_names_the_variable(
    isolated_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A whole section set from the environment to something that is not JSON."""
    path = write_config(isolated_home)
    monkeypatch.setenv("COWORKER_MODEL", "notjson")
    with pytest.raises(ConfigError) as exc:
        load(path)
    msg = str(exc.value)
    assert "COWORKER_MODEL" in msg, msg
    assert "unset" in msg, msg


def test_bad_environment_value_through_the_cli(isolated_home: Path) -> None:
    write_config(isolated_home)
    env = {**os.environ, "COWORKER_MODEL__MAX_TOKENS": "abc"}
    result = coworker("run", "--once", env=env)
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error:")
    assert "COWORKER_MODEL__MAX_TOKENS" in lines[0]
    assert "Traceback" not in result.stdout + result.stderr


# broken config through the real CLI -------------------------------------------------------


def _cfg(**sections: dict):
    return lambda root: write_config(root, **sections)


def _raw(text: str):
    def write(root: Path) -> Path:
        path = root / "config.toml"
        path.write_text(text, encoding="utf-8")
        return path
    return write


BAD_CONFIGS = {
    "wrong-type": (_cfg(model={"max_tokens": "abc"}), ["[model] max_tokens", "'abc'"]),
    "wrong-type-float": (_cfg(model={"timeout_s": "soon"}), ["[model] timeout_s", "'soon'"]),
    "bad-literal": (_cfg(writes={"mode": "yes"}), ["[writes] mode", "'yes'"]),
    "below-minimum": (_cfg(coworker={"tick_seconds": 0}), ["[coworker] tick_seconds"]),
    "above-maximum": (_cfg(model={"max_retries": 1000}), ["[model] max_retries"]),
    "unknown-timezone": (_cfg(coworker={"timezone": "Mars/Olympus"}),
                         ["[coworker] timezone", "Mars/Olympus"]),
    "timezone-a-folder": (_cfg(coworker={"timezone": "Europe"}),  # a folder of the tz database
                          ["[coworker] timezone", "Europe"]),
    "bad-log-level": (_cfg(logging={"level": "LOUD"}), ["[logging] level", "'LOUD'"]),
    "unknown-key": (_cfg(model={"nmae": "x"}), ["[model] nmae", "remove"]),
    "key-in-wrong-section": (_cfg(coworker={"mode": "live"}), ["[coworker] mode", "remove"]),
    "unknown-section": (_cfg(modle={"name": "x"}), ["[modle]", "remove"]),
    "section-as-value": (
        _raw('writes = "live"\n\n[model]\nprovider = "none"\n'), ["[writes]"]),
    "toml-syntax": (
        _raw('[model]\nprovider = "none"\n[coworker\ntick_seconds = 10\n'),
        ["config.toml", "TOML", "line 3"]),
    "toml-duplicate-key": (
        _raw('[model]\nprovider = "none"\nprovider = "none"\n'),
        ["config.toml", "TOML", "line 3"]),
    "max-below-tick": (
        _cfg(coworker={"tick_seconds": 10, "max_tick_seconds": 5}),
        ["[coworker]", "max_tick_seconds", "tick_seconds"]),
}

COMMANDS = {"run-once": ("run", "--once"), "init": ("init",)}


@pytest.mark.parametrize("command", list(COMMANDS.values()), ids=list(COMMANDS))
@pytest.mark.parametrize("case", list(BAD_CONFIGS))
def test_bad_config_is_one_line_exit_2(isolated_home: Path, case: str, command: tuple) -> None:
    Home.locate(isolated_home).init()
    write, fragments = BAD_CONFIGS[case]
    write(isolated_home)

    result = coworker(*command)

    assert "Traceback" not in result.stdout
    assert "Traceback" not in result.stderr
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, f"expected exactly one stderr line, got:\n{result.stderr}"
    line = lines[0]
    assert line.strip(), "the stderr line is empty"
    assert line.startswith("error:"), line
    for fragment in fragments:
        assert fragment in line, f"{fragment!r} not in {line!r}"
    assert "fix" in line.lower() or "remove" in line.lower(), f"no hint in {line!r}"
    assert result.stdout.strip() == "", result.stdout


def test_good_config_runs_once(isolated_home: Path) -> None:
    """Control for the cases above: the same command succeeds when the config is fine."""
    Home.locate(isolated_home).init()
    write_config(isolated_home)
    result = coworker("run", "--once")
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert "Traceback" not in result.stdout + result.stderr


@pytest.mark.parametrize("case", ["wrong-type", "unknown-section", "toml-syntax"])
def test_bad_config_raises_config_error_in_process(isolated_home: Path, case: str) -> None:
    write, fragments = BAD_CONFIGS[case]
    path = write(isolated_home)
    with pytest.raises(ConfigError) as exc:
        load(path)
    assert exc.value.exit_code == 2
    assert "\n" not in str(exc.value)
    for fragment in fragments:
        assert fragment in str(exc.value)


# the role -----------------------------------------------------------------------------------


def test_role_path_reads_the_file_relative_to_the_home(
    isolated_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (isolated_home / "role.md").write_text("# Role\nYou triage parser bugs.\n", encoding="utf-8")
    path = write_config(isolated_home, coworker={"role": "role.md"})
    settings = load(path)
    assert settings.coworker.role == "role.md"

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # relative to the home, not to the current folder
    assert settings.role_text(isolated_home) == "# Role\nYou triage parser bugs.\n"


def test_role_inline_text_is_used_as_is(isolated_home: Path) -> None:
    path = write_config(isolated_home, coworker={"role": "You review pull requests."})
    assert load(path).role_text(isolated_home) == "You review pull requests."


def test_missing_role_file_is_a_config_error(isolated_home: Path) -> None:
    path = write_config(isolated_home, coworker={"role": "missing-role.md"})
    settings = load(path)
    with pytest.raises(ConfigError) as exc:
        settings.role_text(isolated_home)
    msg = str(exc.value)
    assert "[coworker] role" in msg
    assert "missing-role.md" in msg
    assert "create it" in msg
    assert exc.value.exit_code == 2


# the secrets file -------------------------------------------------------------------------


def test_secrets_file_deep_merges_over_config_and_env_wins(isolated_home: Path,
                                                           monkeypatch) -> None:
    path = write_config(isolated_home, model={"max_tokens": 2000})
    (isolated_home / "state").mkdir()
    (isolated_home / "state" / "secrets.toml").write_text(
        '[model]\napi_key = "sk-from-the-secrets-file"\nmax_tokens = 3000\n', encoding="utf-8")
    settings = load(path)
    assert settings.model.api_key == "sk-from-the-secrets-file"
    assert settings.model.max_tokens == 3000       # the secrets file wins over config.toml
    assert settings.model.name == "fake-model"     # and keeps what it does not set
    assert settings.coworker.tick_seconds == 1
    monkeypatch.setenv("COWORKER_MODEL__MAX_TOKENS", "4000")
    assert load(path).model.max_tokens == 4000     # the environment wins over both
    assert load(path).model.api_key == "sk-from-the-secrets-file"


def test_a_broken_secrets_file_is_one_line_exit_2_naming_it(isolated_home: Path) -> None:
    write_config(isolated_home)
    (isolated_home / "state").mkdir()
    (isolated_home / "state" / "secrets.toml").write_text(
        '[model]\napi_key = "sk-0123456789"\nnme = "x"\n', encoding="utf-8")
    result = coworker("run", "--once")
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: state/secrets.toml: "), lines
    assert "unknown key" in lines[0] and "[model] nme" in lines[0], lines
    assert "sk-0123456789" not in result.stdout + result.stderr


# ranges, bytes, stray variables (issue 11) ----------------------------------------------------


def _numeric_fields():
    for section, sfield in Settings.model_fields.items():
        model = sfield.default_factory
        entries = [a for a in typing.get_args(sfield.annotation)
                   if isinstance(a, type) and issubclass(a, BaseModel)]  # [[notify]], [[hooks]]
        for m in [model] if isinstance(model, type) and issubclass(model, BaseModel) else entries:
            for key, f in m.model_fields.items():
                if f.annotation in (int, float):
                    yield section, key, f


def test_every_numeric_setting_has_a_lower_and_an_upper_bound() -> None:
    import annotated_types as at

    fields = list(_numeric_fields())
    assert len(fields) >= 8  # the walk reached the sections (fewer keys since issue 39)
    for section, key, f in fields:
        kinds = {type(m) for m in f.metadata}
        assert kinds & {at.Ge, at.Gt}, f"[{section}] {key} has no lower bound"
        assert kinds & {at.Le, at.Lt}, f"[{section}] {key} has no upper bound"


def test_a_huge_tick_is_refused_with_its_range_not_crashing_the_loop(
        isolated_home: Path) -> None:
    """tick_seconds = max_tick_seconds = 10**12 once passed validation and then crashed the
    loop with "year 33715 is out of range"."""
    path = write_config(isolated_home, coworker={"tick_seconds": 10**12,
                                                 "max_tick_seconds": 10**12})
    with pytest.raises(ConfigError) as exc:
        load(path)
    msg = str(exc.value)
    assert msg.startswith("config.toml: [coworker] tick_seconds: "), msg
    assert "1 and 86400" in msg and "1000000000000" in msg and "default (300)" in msg, msg


@pytest.mark.parametrize(("section", "key", "toml", "words"), [
    ("coworker", "max_tick_seconds", "1_000_000_000", "between 1 and 604800"),
    ("model", "timeout_s", "0", "more than 0 and at most 3600"),
    ("model", "timeout_s", "inf", "more than 0 and at most 3600"),
    ("model", "timeout_s", "nan", "more than 0 and at most 3600"),
    ("model", "max_retries", "21", "between 0 and 20"),
    ("model", "max_tokens", "0", "between 1 and 1000000"),
    ("memory", "archive_after_days", "0", "between 1 and 36500"),
    ("mcp", "daily_live_calls", "1_000_000", "between 0 and 100000"),
])
def test_an_out_of_range_value_names_the_range(isolated_home: Path, section: str, key: str,
                                               toml: str, words: str) -> None:
    path = isolated_home / "config.toml"
    path.write_text(f"[{section}]\n{key} = {toml}\n", encoding="utf-8")
    with pytest.raises(ConfigError) as exc:
        load(path)
    msg = str(exc.value)
    assert msg.startswith(f"config.toml: [{section}] {key}: ") and words in msg, msg
    assert "use the default" in msg and "\n" not in msg


def test_an_out_of_range_environment_value_names_the_range(
        isolated_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COWORKER_COWORKER__TICK_SECONDS", "0")
    with pytest.raises(ConfigError) as exc:
        load(isolated_home / "config.toml")
    msg = str(exc.value)
    assert "COWORKER_COWORKER__TICK_SECONDS" in msg and "1 and 86400" in msg, msg
    assert "(got '0')" in msg and "unset it" in msg, msg


def test_the_template_says_each_range() -> None:
    text = render_default_config()
    lines = text.splitlines()
    above = {lines[i + 1]: lines[i] for i in range(len(lines) - 1)}
    assert above["tick_seconds = 300"].startswith("#"), above["tick_seconds = 300"]
    assert above["tick_seconds = 300"].endswith(" 1 and 86400"), above["tick_seconds = 300"]
    assert above["timeout_s = 60.0"].startswith("#"), above["timeout_s = 60.0"]
    assert above["timeout_s = 60.0"].endswith(" at most 3600"), above["timeout_s = 60.0"]


@pytest.mark.parametrize("where", ["config.toml", "state/secrets.toml"])
def test_a_file_that_is_not_utf8_is_one_line_exit_2(isolated_home: Path, where: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from runtime.cli import main

    Home.locate(isolated_home).init()
    write_config(isolated_home)
    path = isolated_home / where
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(b'[model]\nname = "caf\xe9"\n')
    assert main(["init"]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.startswith(f"error: {where} ") and len(err.splitlines()) == 1, err
    assert "not UTF-8" in err and "0xe9" in err and "line 2" in err, err
    assert err.endswith("as UTF-8"), err
    assert "Traceback" not in captured.out


@pytest.mark.parametrize(("text", "words"), [
    ("[model]\nmax_tokens = " + "9" * 5000 + "\n", "4300 digits"),
    ("[model]\nname = " + "[" * 100_000 + "]" * 100_000 + "\n", "nested too deeply"),
    ('[coworker]\n"tick\\nseconds" = 1\n', "unknown key [coworker] tick seconds"),
    ('[coworker]\n"tick\\u2028seconds" = 1\n', "unknown key [coworker] tick seconds"),
])
def test_hostile_toml_is_one_config_error_line(isolated_home: Path, text: str,
                                               words: str) -> None:
    path = isolated_home / "config.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as exc:
        load(path)
    msg = str(exc.value)
    assert words in msg and len(msg.splitlines()) == 1 and len(msg) < 500, msg


def test_a_role_file_that_is_not_utf8_is_a_config_error(isolated_home: Path) -> None:
    (isolated_home / "role.md").write_bytes(b"You triage \xff bugs.\n")
    settings = load(write_config(isolated_home, coworker={"role": "role.md"}))
    with pytest.raises(ConfigError, match=r"^\[coworker\] role: ") as exc:
        settings.role_text(isolated_home)
    msg = str(exc.value)
    assert "role.md" in msg and "not UTF-8" in msg and "0xff" in msg and "line 1" in msg, msg
    (isolated_home / "config.toml").write_text('[coworker]\nrole = "a\\u0000b.md"\n',
                                               encoding="utf-8")
    with pytest.raises(ConfigError, match=r"^\[coworker\] role: 'a\\x00b.md'") as exc:
        load(isolated_home / "config.toml").role_text(isolated_home)
    assert "embedded null byte" in str(exc.value), exc.value


def test_an_environment_variable_naming_no_setting_is_a_warning_with_the_closest(
        isolated_home: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("COWORKER_MODLE__NAME", "x")
    monkeypatch.setenv("COWORKER_TICKS", "5")
    with caplog.at_level("WARNING", logger="runtime.settings"):
        settings = load(isolated_home / "config.toml")
    assert settings.model.name == "claude-sonnet-5"  # ignored, not an error
    warnings = [r for r in caplog.records if r.name == "runtime.settings"]
    assert [r.levelname for r in warnings] == ["WARNING", "WARNING"]  # once each per load
    first, second = (r.getMessage() for r in warnings)
    assert "COWORKER_MODLE__NAME" in first and "is ignored" in first, first
    assert first.endswith(" COWORKER_MODEL__NAME?"), first
    assert "COWORKER_TICKS" in second and "is ignored" in second, second
    # COWORKER_HOME (set by the fixture) and real settings are not warned about
    caplog.clear()
    monkeypatch.delenv("COWORKER_MODLE__NAME")
    monkeypatch.delenv("COWORKER_TICKS")
    monkeypatch.setenv("COWORKER_MODEL__NAME", "y")
    with caplog.at_level("WARNING", logger="runtime.settings"):
        assert load(isolated_home / "config.toml").model.name == "y"
    assert not [r for r in caplog.records if r.name == "runtime.settings"]


def test_an_unknown_key_in_a_known_section_from_the_environment_is_an_error_with_the_closest(
        isolated_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COWORKER_MODEL__NMAE", "x")
    with pytest.raises(ConfigError) as exc:
        load(isolated_home / "config.toml")
    msg = str(exc.value)
    assert "COWORKER_MODEL__NMAE" in msg and "COWORKER_MODEL__NAME?" in msg, msg
    assert "unset it" in msg, msg


def test_a_bad_value_inside_a_section_set_as_json_names_that_variable(
        isolated_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_config(isolated_home, model={"name": "from-file"})
    monkeypatch.setenv("COWORKER_MODEL", '{"name": 5}')
    with pytest.raises(ConfigError) as exc:
        load(path)
    msg = str(exc.value)
    assert "COWORKER_MODEL:" in msg and "[model] name" in msg and "(got 5)" in msg, msg
    assert "valid string" in msg and "unset it" in msg, msg


def test_the_settings_import_nothing_above_them() -> None:
    """settings.py and what it embeds (the `[mcp]` model, the secret rules) stand on the leaf
    modules alone: no arrow runs up to hands, the store, memory or a door (issue 39)."""
    from .test_house import _imports

    leaves = {"runtime", "runtime.errors", "runtime.files", "runtime.cron", "runtime.secrecy",
              "runtime.settings_mcp", "runtime.settings_talk"}
    for name in ("settings", "settings_mcp", "settings_talk", "secrecy"):
        ours = {i for i in _imports(REPO / "runtime" / f"{name}.py") if i.startswith("runtime")}
        above = sorted(i for i in ours if i not in leaves and i.rpartition(".")[0] not in leaves)
        assert not above, f"runtime/{name}.py imports {above}"


# removed keys (issue 39 item 6) ---------------------------------------------------------


@pytest.mark.parametrize("where", ["config.toml", "secrets.toml", "env"])
def test_a_removed_key_is_one_warning_and_ignored_never_an_error(
        where: str, isolated_home: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """A key that is a named constant now, left in config.toml, state/secrets.toml or a
    COWORKER_* variable: one WARNING naming it (however often one home loads it), and the
    load goes on."""
    from runtime import settings as settings_mod
    from runtime.home import Home

    section, key = next(iter(settings_mod.REMOVED_KEYS.items()))
    key = key[0]
    path = isolated_home / "config.toml"
    if where == "env":
        monkeypatch.setenv(f"COWORKER_{section.upper()}__{key.upper()}", "7")
    else:
        target = path if where == "config.toml" else settings_mod.secrets_path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(f"[{section}]\n{key} = 7\n", encoding="utf-8")
    home = Home(isolated_home)
    with caplog.at_level("WARNING", logger="runtime.settings"):
        home.settings()
        home.settings()
    warnings = [r.getMessage() for r in caplog.records if r.name == "runtime.settings"]
    assert len(warnings) == 1 and key in warnings[0].lower(), warnings
