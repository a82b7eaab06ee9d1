"""config.toml -> Settings: defaults, the rendered template, environment overrides, the role
file, and every kind of broken config reported by the real CLI as one line with exit code 2."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

import pytest

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

    # every section is present, and every key it sets holds the schema's default
    assert list(parsed) == list(Settings.model_fields)
    defaults = _defaults()
    for section, values in parsed.items():
        for key, value in values.items():
            assert value == defaults[section][key], f"[{section}] {key} renders {value!r}"
    # every key that has a plain default is written out (not only commented)
    for section, field in Settings.model_fields.items():
        for key, f in field.default_factory.model_fields.items():
            if f.default_factory is None and f.default is not None:
                assert key in parsed[section], f"[{section}] {key} missing from the template"
            assert f"{key}" in text, f"[{section}] {key} not documented in the template"

    path = isolated_home / "config.toml"
    path.write_text(text, encoding="utf-8")
    assert load(path).model_dump() == defaults


def test_coworker_init_writes_the_rendered_default(isolated_home: Path) -> None:
    result = coworker("init")
    assert result.returncode == 0, result.stderr
    assert (isolated_home / "config.toml").read_text(encoding="utf-8") == render_default_config()


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
    "above-maximum": (_cfg(coworker={"max_steps_per_tick": 1000}),
                      ["[coworker] max_steps_per_tick"]),
    "unknown-timezone": (_cfg(coworker={"timezone": "Mars/Olympus"}),
                         ["[coworker] timezone", "Mars/Olympus"]),
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
    assert lines[0].startswith("error: state/secrets.toml: unknown key [model] nme")
    assert "sk-0123456789" not in result.stdout + result.stderr
