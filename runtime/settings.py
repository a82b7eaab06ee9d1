"""config.toml -> typed settings. Nothing else in the package reads the file.

Owns: the schema of every key (with its default and a one-line description), loading the file
through pydantic-settings (the TOML data, with `COWORKER_SECTION__KEY` environment overrides),
turning any validation failure into one line that names the key and the fix, and rendering the
commented default config.toml that `coworker init` writes. It never writes anything but that
template, and it never reads the database.

Whatever the files and the environment hold, `load` returns Settings or raises ConfigError with
one line, never another exception: every numeric key has a range (its error line and its
comment in the template say which), a file that is not UTF-8 names the byte, a value of the
wrong TOML type is never coerced (true where a number goes, "yes" or 1 where true or false
goes: an error naming the key, the value and the type; environment values are strings and are
read as before), and a COWORKER_* variable that names no section is a WARNING (logger
runtime.settings) with the closest name, not an error. A key that was a setting once
(`REMOVED_KEYS`: internal tuning is a named constant beside the code that uses it) still in
config.toml, state/secrets.toml or a COWORKER_* variable is one WARNING a process naming it,
and is ignored.

Secrets: keys do not belong in a git-tracked config.toml. `state/secrets.toml` (mode 0600, the
same TOML shape) is deep-merged over config.toml; environment overrides still win. Every secret
`load` sees (the resolved model API key, and any string under a key whose name holds the word
KEY, TOKEN, SECRET, PASSWORD or AUTH: `secrecy.is_secret_name`) that can be a secret is
registered with runtime/secrecy.py, which owns redaction: everything the coworker writes
(events, logs, errors, doctor output) passes through `secrecy.redact` first.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import logging
import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from types import NoneType, UnionType
from typing import Any, Literal, Union, get_args, get_origin
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import annotated_types
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from .errors import ConfigError
from .files import NotRegularFile, read_regular
from .secrecy import (
    can_be_secret,
    is_secret_name,
    register_secret,
    secret_items,
    secret_values,
    warn_ordinary_secret,
)
from .settings_mcp import McpSection
from .settings_talk import Hook, NotifyTarget, ServeSection, unique_names

log = logging.getLogger(__name__)

ENV_PREFIX = "COWORKER_"
# COWORKER_* variables that are not settings (the home folder is found before config.toml).
OTHER_ENV = ("COWORKER_HOME",)
SECRETS_FILE = "secrets.toml"  # in state/, beside the database
# Keys that were settings once and are now named constants beside the code that uses them
# (issue 39 item 6): still present in config.toml, state/secrets.toml or a COWORKER_* variable,
# each gets one WARNING naming it (once a process) and is ignored, never an error.
REMOVED_KEYS: dict[str, tuple[str, ...]] = {
    # runtime/loop/turn.py MAX_STEPS_PER_TICK, runtime/loop/perception.py MAX_INPUTS_PER_TURN
    "coworker": ("max_steps_per_tick", "max_inputs_per_turn"),
    "context": ("recent_events", "staircase_chars"),  # runtime/context.py
    "model": ("retry_wait_s", "retry_max_wait_s"),  # runtime/model.py RETRY_WAIT_S, RETRY_MAX_WAIT_S
    # rituals/reflect.py; runtime/memory/walk.py THRESHOLD; runtime/memory/gate.py MEMORY_MD_CHARS;
    # runtime/actions.py PINS_CHARS; offline_keywords: a rule deleted (docs/benchmarks.md)
    "memory": ("ladder_fanout", "summary_calls_per_run", "walk_threshold", "memory_md_max_chars",
               "pins_max_chars", "offline_keywords"),
    # runtime/memory/recall.py SEMANTIC_GATE, runtime/memory/embed.py BATCH_CHARS, WINDOW, TIMEOUT_S
    "semantic": ("gate", "batch_chars", "window_events", "timeout_s"),
    # runtime/memory/recall.py MAX_TERMS and BUDGET
    "recall": ("max_terms", "max_items", "item_chars", "total_chars"),
    # runtime/hands/server.py, runtime/hands/hands.py, runtime/loop/hands.py
    "mcp": ("restart_initial_s", "restart_max_s", "result_chars", "watch_chars", "watch_daily_calls"),
    "logging": ("format",),  # `coworker run --log-format json`
}

DEFAULT_ROLE = (
    "You are a careful coworker. You wake on a tick, read what is new, and act only when it "
    "helps your owner. Deciding not to act is a good outcome. Use `note` to remember, `decide` "
    "for decisions (cite event ids), `reply` to answer the owner, `promise` to follow up later, "
    "and `memory_search` before you claim to know something from the past."
)


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


COWORKER_ID = r"^[a-z0-9][a-z0-9_]{2,47}$"  # a PostgreSQL schema's name, unquoted: cw_<id>


def new_coworker_id(name: str = "coworker") -> str:
    """A fresh, unique `[coworker] id`: the name's letters and digits, then 40 random bits."""
    import secrets

    stem = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")[:24] or "coworker"
    return f"{stem}_{secrets.token_hex(5)}"


class CoworkerSection(Section):
    name: str = Field("coworker", description="what the coworker calls itself")
    id: str | None = Field(None, description=(
        "this coworker's own id, written by `coworker init` (lowercase letters, digits and _, "
        "3 to 48): on a shared database its rows are this id's; two homes are one coworker "
        "only when given the same id on purpose"))
    role: str = Field(
        DEFAULT_ROLE,
        description="the role prompt: text, or a path (relative to the home) to a .md/.txt file",
    )
    tick_seconds: int = Field(300, ge=1, le=86400, description="seconds between ticks when active")
    max_tick_seconds: int = Field(
        1800, ge=1, le=604800,
        description="the interval doubles after quiet ticks up to this many seconds")
    timezone: str = Field("UTC", description=(
        "IANA time zone of the owner's days (recall, search, walk), rituals and imported "
        "times without an offset, e.g. Europe/Berlin"))

    @property
    def zone(self) -> ZoneInfo:
        """The owner's time zone: the days memory reads ("on 3 March", "yesterday") are its."""
        return ZoneInfo(self.timezone)

    @field_validator("id")
    @classmethod
    def _an_id(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(COWORKER_ID, v):
            raise ValueError(f"{v[:60]!r} is not an id: 3 to 48 lowercase letters, digits and _, "
                             "beginning with a letter or a digit (`coworker init` writes one)")
        return v

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, v: str) -> str:
        try:
            ZoneInfo(v)
        except (ZoneInfoNotFoundError, ValueError, OSError) as e:  # "Europe" is a folder
            raise ValueError(f"unknown time zone {v!r}; use an IANA name like 'Europe/Berlin'") from e
        return v

    @model_validator(mode="after")
    def _max_not_below_tick(self) -> CoworkerSection:
        if self.max_tick_seconds < self.tick_seconds:
            raise ValueError("max_tick_seconds must be at least tick_seconds")
        return self


def _http_url(v: str | None) -> str | None:
    """An http(s) URL with a host (and a port that parses), or a ValueError that says so: a
    URL that cannot be used is a config error now, not a traceback at the first call."""
    if v is None:
        return v
    from urllib.parse import urlsplit

    problem = "give one like http://127.0.0.1:8080"
    try:
        parts = urlsplit(v.strip())
        parts.port  # noqa: B018 - raises for a port that is not a number or out of range
    except ValueError as e:
        raise ValueError(f"not a URL ({e}); {problem}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL with a host; {problem}")
    return v.strip()


class ModelSection(Section):
    provider: Literal["anthropic", "none"] = Field(
        "anthropic", description='"anthropic" (any Anthropic-compatible endpoint) or "none"'
    )
    name: str = Field("claude-sonnet-5", description="model name sent to the endpoint")
    base_url: str | None = Field(
        None, description="endpoint, e.g. http://127.0.0.1:8080 for a local server (unset: Anthropic)"
    )
    api_key: str | None = Field(
        None, description="API key: better in state/secrets.toml (chmod 600) or the "
        "ANTHROPIC_API_KEY environment variable than here, where git may track it"
    )
    max_tokens: int = Field(
        1024, ge=1, le=1_000_000, description="max output tokens per model call")
    timeout_s: float = Field(
        60.0, gt=0, le=3600, description="seconds before a model call times out")
    max_retries: int = Field(4, ge=0, le=20, description="retries on 429, 529, 5xx, timeouts")
    daily_tokens: int = Field(
        0, ge=0, le=10**12, description="input+output tokens a day (UTC), at most; then no model "
        "calls until tomorrow, inputs wait (0: no cap)")
    daily_calls: int = Field(
        0, ge=0, le=10**9, description="model calls a day (UTC), retries included, at most "
        "(0: no cap)")

    _base_url = field_validator("base_url")(classmethod(lambda cls, v: _http_url(v)))

    def resolved_api_key(self) -> str | None:
        return self.api_key or os.environ.get("ANTHROPIC_API_KEY") or None


class WritesSection(Section):
    mode: Literal["dry-run", "live"] = Field(
        "dry-run",
        description='"dry-run": side-effect tools only record what they would do; "live": they act',
    )


class MemorySection(Section):
    memory_promotions: Literal["gated", "auto", "off"] = Field(
        "gated", description='"gated" queues every promotion for you; "auto" applies confident ones'
    )
    archive_after_days: int = Field(
        30, ge=1, le=36500, description="reflect moves older events to the archive")


class RecallSection(Section):
    mode: Literal["on", "dry-run", "off"] = Field(
        "on", description='"on" injects recall; "dry-run" only logs what it would inject'
    )


class SemanticSection(Section):
    enabled: bool = Field(False, description="the semantic channel: embeddings fused with lexical")
    provider: Literal["http", "local"] = Field(
        "http", description='"http": an Ollama-style server (/api/embed); "local": in process')
    url: str = Field("http://127.0.0.1:11434", description="the embedding server (provider http)")
    model: str = Field("all-minilm", description='embedding model name (http); local: '
                       '"all-minilm", "all-mpnet" or a model folder')

    _url = field_validator("url")(classmethod(lambda cls, v: _http_url(v)))


def _valid_cron(v: str) -> str:
    from .cron import checked

    return checked(v)


class CustomRitual(Section):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_-]+$")
    cron: str
    prompt: str = Field(min_length=1)
    recall: bool = True  # false: this ritual's tick gets no recall block (nothing to look up)

    _cron = field_validator("cron")(classmethod(lambda cls, v: _valid_cron(v)))


class RitualsSection(Section):
    reflect: str = Field("0 3 * * sun", description="cron for the weekly reflect ritual")
    custom: list[CustomRitual] = Field(
        default_factory=list,
        description='your own prompt rituals: [[rituals.custom]] name, cron, prompt',
    )

    _cron = field_validator("reflect")(classmethod(lambda cls, v: _valid_cron(v)))

    @model_validator(mode="after")
    def _unique_names(self) -> RitualsSection:
        names = ["reflect"] + [c.name for c in self.custom]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"ritual names must be unique (and not 'reflect'): {', '.join(dupes)}")
        return self


class LoggingSection(Section):
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        "INFO", description="log level of the running loop"
    )


class StoreSection(Section):
    url: str | None = Field(None, description=(
        "where the history lives: absent, the SQLite file state/coworker.db; a PostgreSQL "
        "database for a team as postgresql://USER@HOST/DB (the password never here: "
        "\"secret:NAME\", libpq's PGPASSWORD or ~/.pgpass)"))

    @field_validator("url")
    @classmethod
    def _a_database(cls, v: str | None) -> str | None:
        return _database_url(v)


def _database_url(v: str | None) -> str | None:
    """A postgresql:// URL without a password, or "secret:NAME" naming one (ValueError saying
    what to write otherwise): the password of a shared database never sits in config.toml."""
    from urllib.parse import urlsplit

    from .settings_talk import SECRET_PREFIX

    if v is None or not v.strip():
        return None
    v = v.strip()
    if v.startswith(SECRET_PREFIX):
        return v
    try:
        parts = urlsplit(v)
        parts.port  # noqa: B018 - raises for a port that is not a number or out of range
    except ValueError as e:
        raise ValueError(f"not a URL ({e}); give one like postgresql://coworker@db.internal/team") \
            from None
    if parts.scheme not in ("postgresql", "postgres"):
        raise ValueError("a PostgreSQL URL (postgresql://USER@HOST/DB) or \"secret:NAME\"; "
                         "leave it out for the SQLite file")
    if parts.password or re.search(r"(?:^|[?&])password=[^&]", parts.query):
        raise ValueError("the URL holds a password: keep it out of config.toml; put the whole URL "
                         "in state/secrets.toml as NAME = \"postgresql://...\" and write "
                         "url = \"secret:NAME\", or use libpq's PGPASSWORD or ~/.pgpass")
    return v


class Settings(BaseSettings):
    """Every key of config.toml. Environment overrides: COWORKER_MODEL__NAME=... and so on."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_nested_delimiter="__", extra="forbid", validate_default=True
    )

    coworker: CoworkerSection = Field(default_factory=CoworkerSection)
    model: ModelSection = Field(default_factory=ModelSection)
    writes: WritesSection = Field(default_factory=WritesSection)
    memory: MemorySection = Field(default_factory=MemorySection)
    recall: RecallSection = Field(default_factory=RecallSection)
    semantic: SemanticSection = Field(default_factory=SemanticSection)
    rituals: RitualsSection = Field(default_factory=RitualsSection)
    logging: LoggingSection = Field(default_factory=LoggingSection)
    mcp: McpSection = Field(default_factory=McpSection)
    serve: ServeSection = Field(default_factory=ServeSection)
    store: StoreSection = Field(default_factory=StoreSection)
    notify: list[NotifyTarget] = Field(default_factory=list)
    hooks: list[Hook] = Field(default_factory=list)
    # state/secrets.toml's [secrets] table: NAME = "value", read where config says "secret:NAME"
    secrets: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _unique_names(self) -> Settings:
        unique_names(self.notify, "[[notify]]")
        unique_names(self.hooks, "[[hooks]]")
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        toml_file = settings_cls.model_config.get("toml_file")
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if toml_file:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=toml_file))
        return tuple(sources)

    # the role text a turn works with, read once by the loop (see `with_role_text`)
    _role_text: str | None = PrivateAttr(default=None)

    def model_enabled(self) -> bool:
        return self.model.provider != "none" and bool(self.model.resolved_api_key())

    def with_role_text(self, text: str) -> Settings:
        """A copy whose `role_text` is `text`, whatever the role file holds now: the loop
        reads the role once per turn (or keeps the last good text when the file went bad)."""
        copy = self.model_copy()
        copy._role_text = text
        return copy

    def role_text(self, home: Path) -> str:
        """The role prompt: the text of [coworker] role, or the file it names (relative to
        the home), or ConfigError with one line naming the file and the fix."""
        if self._role_text is not None:
            return self._role_text
        role = self.coworker.role
        if role.endswith((".md", ".txt")) and "\n" not in role:
            path = (home / role).expanduser()
            try:
                return path.read_text(encoding="utf-8")
            except OSError as e:
                raise ConfigError(
                    f"[coworker] role: cannot read role file {path} ({e.strerror}); "
                    "create it or put the role text in config.toml"
                ) from e
            except UnicodeDecodeError as e:
                raise ConfigError(_single_line(
                    f"[coworker] role: role file {path} is not UTF-8 text ({_bad_byte(e)}); "
                    "save it as UTF-8")) from None
            except ValueError as e:  # a path no file can have (a NUL byte in it)
                raise ConfigError(f"[coworker] role: {_shown(role)} is not a usable path ({e}); "
                                  "fix it in config.toml") from None
        return role

    def flat(self) -> dict[str, Any]:
        """Every key as "section.key" -> value, for diffing two configs."""
        out: dict[str, Any] = {}
        for section, value in self.model_dump(mode="json").items():
            if not isinstance(value, dict) or section == "secrets":
                out[section] = value  # a list of tables ([[notify]], [[hooks]]) is one value
                continue
            for key, v in value.items():
                out[f"{section}.{key}"] = v
        return out


def file_hash(path: Path) -> str | None:
    try:
        return hashlib.sha256(read_regular(path)).hexdigest()[:16]
    except FileNotFoundError:
        return None
    except OSError:  # not a regular file, or unreadable: reading it says why (`read_toml`)
        return "unreadable"


def secrets_path(config_path: Path) -> Path:
    """Where the secrets file of the home whose config.toml is `config_path` lives."""
    return config_path.parent / "state" / SECRETS_FILE


def _bad_byte(e: UnicodeDecodeError) -> str:
    """Where a decode failed: "byte 0xe9 at offset 19, line 2"."""
    data = bytes(e.object)
    line = data.count(b"\n", 0, e.start) + 1
    return f"byte 0x{data[e.start]:02x} at offset {e.start}, line {line}"


def read_toml(path: Path, label: str | None = None) -> dict[str, Any]:
    """A TOML file as a dict ({} when absent), or ConfigError naming the file and the fix:
    never another exception, whatever the bytes (not UTF-8, nested too deep, huge numbers)."""
    label = label or path.name
    try:
        data = read_regular(path)
        # a byte-order mark (Windows Notepad saves one) is not TOML, but it is not a mistake
        return tomllib.loads(data.removeprefix(b"\xef\xbb\xbf").decode("utf-8"))
    except FileNotFoundError:
        return {}
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(_single_line(f"{label}: not valid TOML ({e}); fix that line")) from e
    except UnicodeDecodeError as e:
        raise ConfigError(f"{label} is not UTF-8 text ({_bad_byte(e)}); save it as UTF-8") \
            from None
    except RecursionError:
        raise ConfigError(f"{label}: not valid TOML here (arrays or tables nested too deeply); "
                          "fix the file") from None
    except ValueError as e:  # e.g. an integer of more than 4300 digits
        raise ConfigError(_single_line(f"{label}: a value cannot be read ({e}); fix the "
                                       "file")) from None
    except NotRegularFile:
        raise ConfigError(f"{path} is not a regular file (a pipe, device or folder); put a "
                          "TOML file there") from None
    except OSError as e:
        raise ConfigError(_single_line(f"{path}: cannot read ({e.strerror}); check its "
                                       "permissions")) from e


class _WrongType:
    """A TOML value of the wrong type for its key (true where a number goes, "yes" or 1 where
    true or false goes), which pydantic would coerce. It takes the value's place before
    validation, where no validator accepts it, so it fails as that key's error: one line
    naming the file, the key, the value and the type. Only the files' values are marked: an
    environment variable is always a string, and "5" or "true" there is how it is written."""

    __slots__ = ("message", "value")

    def __init__(self, value: Any, message: str) -> None:
        self.value = value
        self.message = message

    def __repr__(self) -> str:  # the value as the file spells it: true, "yes"
        return _toml_value(self.value)


def _scalar_kind(annotation: Any) -> type | None:
    """bool, int or float for a field of that type (or that type or None), else None."""
    if get_origin(annotation) in (Union, UnionType):
        args = [a for a in get_args(annotation) if a is not NoneType]
        annotation = args[0] if len(args) == 1 else None
    return annotation if annotation in (bool, int, float) else None


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds: itself (a section) or its items (list[CustomRitual])."""
    if get_origin(annotation) is list:
        (annotation,) = get_args(annotation) or (None,)
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) \
        else None


def _wrong_type(field: FieldInfo, value: Any) -> _WrongType | None:
    kind = _scalar_kind(field.annotation)
    if kind is bool and isinstance(value, str | int | float) and not isinstance(value, bool):
        return _WrongType(value, "must be true or false" + (", without quotes"
                                                             if isinstance(value, str) else ""))
    if kind in (int, float) and isinstance(value, bool):
        bounds = range_text(field)
        number = "a whole number" if kind is int else "a number"
        return _WrongType(value, f"must be {number}" + (f" {bounds}" if bounds else "")
                          + ", not true or false")
    return None


def _mark_wrong_types(model: type[BaseModel], data: Any) -> Any:
    """`data` (TOML, for `model`) with each value of the wrong type for its key replaced by a
    _WrongType; everything else, unknown keys included, as it was (the validator's to judge)."""
    if not isinstance(data, Mapping):
        return data
    out = dict(data)
    for key, value in data.items():
        field = model.model_fields.get(str(key))
        if field is None:
            continue
        if (wrong := _wrong_type(field, value)) is not None:
            out[key] = wrong
        elif (inner := _model_in(field.annotation)) is not None:
            out[key] = ([_mark_wrong_types(inner, x) for x in value] if isinstance(value, list)
                        else _mark_wrong_types(inner, value))
    return out


def _deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = v
    return out


def _one_spelling(data: Mapping[str, Any], where: str) -> None:
    """A table spelled in another case (`[COWORKER]`) is refused: the settings would match it
    regardless of case and silently keep one of two tables."""
    for name in data:
        if name not in Settings.model_fields and str(name).lower() in Settings.model_fields:
            raise ConfigError(f"{where}: [{name}]: table names are lowercase; write "
                              f"[{str(name).lower()}] (one table, with all its keys)")


def load(path: Path, said: set[str] | None = None) -> Settings:
    """Read config.toml (absent: defaults), state/secrets.toml over it, plus COWORKER_*
    overrides, or raise ConfigError. Registers every secret it sees for `redact`. A removed
    key is a WARNING once per `said` (the caller's record of what it has said: a home's, so a
    loop that reloads says it once), each load without one."""
    secrets_file = secrets_path(path)
    warn_unknown_env()
    told: set[str] = set() if said is None else said
    secret_data = _drop_removed(read_toml(secrets_file, f"state/{SECRETS_FILE}"),
                                f"state/{SECRETS_FILE}", told)
    file_data = _drop_removed(read_toml(path), path.name, told)
    for where, table in ((path.name, file_data), (f"state/{SECRETS_FILE}", secret_data)):
        _one_spelling(table, where)
    data = _deep_merge(file_data, secret_data)
    checked = _mark_wrong_types(Settings, data)

    class FileSettings(Settings):
        @classmethod
        def settings_customise_sources(
            cls,
            settings_cls: type[BaseSettings],
            init_settings: PydanticBaseSettingsSource,
            env_settings: PydanticBaseSettingsSource,
            dotenv_settings: PydanticBaseSettingsSource,
            file_secret_settings: PydanticBaseSettingsSource,
        ) -> tuple[PydanticBaseSettingsSource, ...]:
            if isinstance(env_settings, EnvSettingsSource):
                removed = {n.lower() for n in _removed_env_names()}
                for name in sorted(removed):
                    _warn_removed("environment variable", name.upper(), told)
                env_settings.env_vars = {k: v for k, v in env_settings.env_vars.items()
                                         if k.lower() not in removed}
            return (init_settings, env_settings, InitSettingsSource(settings_cls, checked))

    try:
        settings = FileSettings()
    except ValidationError as e:
        raise ConfigError(_single_line(_one_line(e, path, secret_data))) from e
    except ValueError as e:  # a whole section set from the environment that is not JSON
        culprits = [k for k in sorted(os.environ) if k.upper().startswith(ENV_PREFIX)
                    and k[len(ENV_PREFIX):].lower() in Settings.model_fields]
        if culprits:
            name = culprits[0]
            section = name[len(ENV_PREFIX):].lower()
            raise ConfigError(
                f"environment variable {name}: not valid JSON for section [{section}]; fix it "
                f"(or set single keys as {name}__KEY) or unset it") from e
        raise ConfigError(_single_line(
            f"settings: {e}; fix the value or unset the COWORKER_* variable")) from e
    _register_secrets(settings, data)
    return settings


def _register_secrets(settings: Settings, data: dict[str, Any]) -> None:
    """Every secret the files and the environment hold, registered for `redact`; a value
    under a secret's name too ordinary to hide is one WARNING."""
    register_secret(settings.model.resolved_api_key())
    for name, value in secret_items(data):
        register_secret(value)
        for word in value.split():  # "Bearer <token>": the token alone is hidden too
            register_secret(word)
        if not any(can_be_secret(w) for w in (value, *value.split())):
            warn_ordinary_secret(f"config {name}")
    for where in settings.mcp.ordinary_secrets():
        warn_ordinary_secret(f"config {where}")
    for value in secret_values(settings.model_dump()):
        register_secret(value)
    for value in settings.mcp.secret_values():  # secret_env and bare bearer credentials too
        register_secret(value)
    for value in _notify_values(settings):  # a webhook URL is a credential, written out or not
        register_secret(value)


def _notify_values(settings: Settings) -> list[str]:
    """The [[notify]] URLs and header values written out in the files (not "secret:NAME"),
    and each word of a header value ("Bearer <token>": the token alone may be echoed)."""
    values = [v for t in settings.notify for v in (t.url, *t.headers.values())
              if v and not v.startswith("secret:")]
    return values + [w for t in settings.notify for v in t.headers.values()
                     if not v.startswith("secret:") for w in v.split()]


def _warn_removed(where: str, name: str, said: set[str]) -> None:
    """One WARNING for removed key `name` found in `where`, unless `said` holds it."""
    if f"{where} {name}" not in said:
        said.add(f"{where} {name}")
        log.warning("%s: %s is no longer a setting and is ignored; remove it", where, name)


def _drop_removed(data: dict[str, Any], where: str, said: set[str]) -> dict[str, Any]:
    """`data` less every key of REMOVED_KEYS (and a section left empty), each with a WARNING."""
    for section, keys in REMOVED_KEYS.items():
        table = data.get(section)
        if not isinstance(table, dict):
            continue
        for key in [k for k in table if k in keys]:
            _warn_removed(where, f"[{section}] {key}", said)
            del table[key]
        if not table and section not in Settings.model_fields:
            del data[section]
    return data


def _removed_env_names() -> list[str]:
    """The COWORKER_* variables set now that name a removed key."""
    removed = {f"{ENV_PREFIX}{section}__{key}".upper()
               for section, keys in REMOVED_KEYS.items() for key in keys}
    return [name for name in sorted(os.environ) if name.upper() in removed]


def section_fields(section: FieldInfo) -> dict[str, FieldInfo]:
    """The keys of one section of Settings (its model's fields), typed."""
    model = section.default_factory
    return model.model_fields if isinstance(model, type) and issubclass(model, BaseModel) else {}


def env_names() -> list[str]:
    """Every COWORKER_* variable that names a setting (or a whole section)."""
    names = []
    for section, field in Settings.model_fields.items():
        names.append(f"{ENV_PREFIX}{section.upper()}")
        names += [f"{ENV_PREFIX}{section.upper()}__{key.upper()}"
                  for key in section_fields(field)]
    return names


def _names_a_section(name: str) -> bool:
    """Whether COWORKER_... variable `name` reaches a section. (A key the section does not
    have is then the validator's to refuse, as an error naming the variable.)"""
    section = name.upper()[len(ENV_PREFIX):].split("__")[0]
    return section.lower() in Settings.model_fields


def _closest_env(name: str) -> str | None:
    close = difflib.get_close_matches(name.upper(), [*env_names(), *OTHER_ENV], n=1,
                                      cutoff=0.6)
    return close[0] if close else None


def warn_unknown_env() -> list[str]:
    """A WARNING (logger runtime.settings) for each COWORKER_* variable that names no
    setting, with the closest one; it is ignored, never an error. Returns the warnings."""
    out = []
    removed = {n.upper() for n in _removed_env_names()}
    for name in sorted(os.environ):
        upper = name.upper()
        if (not upper.startswith(ENV_PREFIX) or upper in OTHER_ENV or _names_a_section(name)
                or upper in removed):
            continue
        close = _closest_env(name)
        hint = (f"did you mean {close}?" if close else
                f"settings are {ENV_PREFIX}<SECTION>__<KEY>, e.g. {ENV_PREFIX}MODEL__NAME")
        shown = name if name.isprintable() else _shown(name)
        out.append(f"environment variable {shown} names no setting and is ignored; {hint}")
        log.warning("%s", out[-1])
    return out


def _single_line(text: str) -> str:
    """`text` on one line: any line break in it (from a value echoed back) becomes a space."""
    return " ".join(text.splitlines())


def _shown(value: Any, limit: int = 80) -> str:
    """repr(value), cut to `limit` characters (a value echoed in an error line stays short)."""
    try:
        text = repr(value)
    except ValueError:  # an int too long to print
        return "<an integer of more than 4300 digits>"
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _number(x: Any) -> str:
    return str(int(x)) if isinstance(x, int | float) and float(x).is_integer() else str(x)


def range_text(field: FieldInfo) -> str | None:
    """The bounds a numeric field's validator enforces, in words ("between 1 and 86400")."""
    lo: Any = None
    hi: Any = None
    lo_open = hi_open = False
    for m in field.metadata:
        if isinstance(m, annotated_types.Ge):
            lo = m.ge
        elif isinstance(m, annotated_types.Gt):
            lo, lo_open = m.gt, True
        elif isinstance(m, annotated_types.Le):
            hi = m.le
        elif isinstance(m, annotated_types.Lt):
            hi, hi_open = m.lt, True
    if lo is not None and hi is not None and not (lo_open or hi_open):
        return f"between {_number(lo)} and {_number(hi)}"
    parts = []
    if lo is not None:
        parts.append(f"{'more than' if lo_open else 'at least'} {_number(lo)}")
    if hi is not None:
        parts.append(f"{'less than' if hi_open else 'at most'} {_number(hi)}")
    return " and ".join(parts) or None


# pydantic error types a value out of its field's range gives
_RANGE_ERRORS = {"greater_than", "greater_than_equal", "less_than", "less_than_equal",
                 "finite_number", "int_parsing_size"}


def _field_of(loc: tuple[Any, ...]) -> FieldInfo | None:
    if len(loc) != 2 or loc[0] not in Settings.model_fields:
        return None
    section_type = Settings.model_fields[str(loc[0])].default_factory
    return getattr(section_type, "model_fields", {}).get(str(loc[1]))


def _message(err: Any, loc: tuple[Any, ...]) -> str:
    """pydantic's message for one error, or "must be between A and B" when out of range."""
    if isinstance(err.get("input"), _WrongType):
        return err["input"].message
    field = _field_of(loc)
    bounds = range_text(field) if field is not None else None
    if err["type"] in _RANGE_ERRORS and bounds:
        return f"must be {bounds}"
    return str(err["msg"]).removeprefix("Value error, ")


def _key_name(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc]
    if not parts:
        return "(top level)"
    if len(parts) == 1:
        return f"[{parts[0]}]" if parts[0] in Settings.model_fields else parts[0]
    return f"[{parts[0]}] " + ".".join(parts[1:])


def _default_of(loc: tuple[Any, ...]) -> Any:
    field = _field_of(loc)
    if field is None or field.default_factory is not None:
        return None
    return field.default


def _holds(data: Mapping[str, Any], loc: tuple[Any, ...]) -> bool:
    node: Any = data
    for part in loc:
        if isinstance(node, list) and str(part).isdigit() and int(part) < len(node):
            node = node[int(part)]
        elif isinstance(node, Mapping) and str(part) in node:
            node = node[str(part)]
        else:
            return False
    return True


def _env_setting(loc: tuple[Any, ...]) -> str | None:
    """The COWORKER_* variable (other than the one named exactly by `loc`) that sets the value
    at `loc`: one naming a part of the path whose JSON holds the rest, or one naming a path
    below it."""
    want = [str(p).lower() for p in loc]
    for name in sorted(os.environ):
        if not name.upper().startswith(ENV_PREFIX):
            continue
        parts = name[len(ENV_PREFIX):].lower().split("__")
        if len(parts) > len(want) and parts[:len(want)] == want:
            return name
        if len(parts) < len(want) and want[:len(parts)] == parts:
            try:
                value = json.loads(os.environ[name])
            except (ValueError, RecursionError):
                return name
            if _holds({"": value}, ("", *want[len(parts):])):
                return name
    return None


def _one_line(e: ValidationError, path: Path,
              secret_data: Mapping[str, Any] | None = None) -> str:
    """The first of a validation error's problems as one line that says what to fix, naming the
    environment variable, the secrets file or config.toml it came from; never a secret's value."""
    err = e.errors()[0]
    loc = tuple(err["loc"])
    more = f" (and {e.error_count() - 1} more)" if e.error_count() > 1 else ""
    # Never echo a value that may be a secret back into an error line.
    # (max_tokens is a number, not a secret, whatever its name says.)
    secret = (any(is_secret_name(str(p)) for p in loc)
              and not isinstance(_default_of(loc), int | float | bool)) \
        or loc[:2] == ("store", "url")  # a database URL may carry its password
    from_env = _env_problem(err, loc, secret)
    if from_env is not None:
        return from_env + more
    file_name = path.name
    if secret_data and len(loc) >= 1 and _holds(secret_data, loc[:2]):
        file_name, secret = f"state/{SECRETS_FILE}", True
    if err["type"] == "extra_forbidden":
        return _unknown_key(file_name, loc) + more
    return _bad_value(err, loc, file_name, secret) + more


def _got(value: Any, secret: bool) -> str:
    """" (got ...)" for a plain value that is not a secret, else nothing."""
    if secret or value is None or isinstance(value, dict | list):
        return ""
    return f" (got {_shown(value)})"


def _env_problem(err: Any, loc: tuple[Any, ...], secret: bool) -> str | None:
    """The line for a problem that an environment variable caused, or None when none did."""
    env_name = ENV_PREFIX + "__".join(str(p).upper() for p in loc)
    env_value = next((v for k, v in os.environ.items() if k.upper() == env_name), None)
    if env_value is not None:
        if err["type"] == "extra_forbidden":
            close = _closest_env(env_name)
            hint = f"did you mean {close}? " if close else ""
            return f"environment variable {env_name}: names no setting; {hint}fix it or unset it"
        return (f"environment variable {env_name}: {_message(err, loc)}"
                f"{_got(env_value, secret)}; fix it or unset it")
    # a variable that sets a whole section as JSON (COWORKER_MODEL='{"name": 5}') or a key
    # below a setting (COWORKER_MODEL__NMAE__X)
    var = _env_setting(loc)
    if var is None:
        return None
    msg = "no such setting" if err["type"] == "extra_forbidden" else _message(err, loc)
    return (f"environment variable {var}: {_key_name(loc)}: {msg}{_got(err.get('input'), secret)}; "
            f"fix it or unset it")


def _unknown_key(file_name: str, loc: tuple[Any, ...]) -> str:
    """The line for a section or key config.toml (or the secrets file) has and Settings has not."""
    if len(loc) == 1:
        return (f"{file_name}: unknown section [{loc[0]}]: remove it or fix its spelling "
                f"(known sections: {', '.join(Settings.model_fields)})")
    section = Settings.model_fields.get(str(loc[0]))
    known = ", ".join(section_fields(section) if section is not None else Settings.model_fields)
    return (f"{file_name}: unknown key {_key_name(loc)}: remove it or fix its spelling "
            f"(known here: {known})")


def _bad_value(err: Any, loc: tuple[Any, ...], file_name: str, secret: bool) -> str:
    """The line for a value of the wrong type or out of bounds, with the default to fall back on."""
    default = _default_of(loc)
    fix = (f"; fix it or delete the line to use the default "
           f"({_toml_value(default) if isinstance(default, bool) else repr(default)})"
           if default is not None else f"; fix it in {file_name}")
    return f"{file_name}: {_key_name(loc)}: {_message(err, loc)}{_got(err.get('input'), secret)}{fix}"


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        if "\n" in v:
            return '"""\n' + v.replace("\\", "\\\\") + '"""'
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(f"no TOML rendering for {type(v)}")


# What `[[mcp.servers]]` and `[[mcp.watch]]` look like (README: "Giving it hands").
_MCP_EXAMPLE = [
    "# [[mcp.servers]]",
    '# name = "git"                      # its tools reach the model as git__<tool>',
    '# command = "/path/to/clone/.venv/bin/python"',
    '# args = ["-m", "mcp_server_git", "--repository", "/home/me/project"]',
    '# mode = "dry-run"                  # "live": its side effects act when the coworker is live',
    '# approve = ["git_commit"]          # always wait for `coworker actions approve N`',
    "# [[mcp.watch]]",
    '# server = "git"',
    '# tool = "git_log"',
    '# arguments = { repo_path = "/home/me/project", max_count = 10 }',
    "# interval_s = 300",
]


_PLAIN_LISTS = {("serve", "allowed_hosts")}  # a list of strings, written out (no example)
# keys kept in state/secrets.toml, never in config.toml
_IN_SECRETS = {("serve", "token"), ("serve", "hermes_token")}
_LISTS = {
    "notify": [
        "# Where replies reach you (at least once, each with an idempotency key). kind webhook:",
        "# preset generic | slack | discord | mattermost | ntfy; a URL or header value may name",
        '# a secret kept in state/secrets.toml\'s [secrets] table: "secret:NAME".',
        "# [[notify]]",
        '# name = "phone"',
        '# kind = "webhook"                  # or "command" with command = ["notify-send", "coworker"]',
        '# url = "secret:NTFY_URL"',
        '# preset = "ntfy"',
        '# events = ["reply"]                # also "approval", "failure"',
    ],
    "hooks": [
        "# Signed webhooks from other systems (`coworker serve`, POST /hooks/NAME): each is an",
        "# input told as hook:NAME, never with your authority.",
        "# [[hooks]]",
        '# name = "github"',
        '# scheme = "github"                 # github | hmac-sha256 | bearer',
        '# secret = "GITHUB_HOOK_SECRET"     # the NAME of a secret in state/secrets.toml [secrets]',
        '# events = ["workflow_run"]         # the event types taken; empty: all',
    ],
    "secrets": [],  # state/secrets.toml only
}


def _key_lines(section_name: str, key: str, field: Any, given: str | None) -> list[str]:
    """One key of the default config.toml: its comment, then its default (or `given`)."""
    if (section_name, key) in _IN_SECRETS:
        return [f"# {key}: {field.description}"]
    lines = []
    if field.description:
        bounds = range_text(field)
        lines.append(f"# {field.description}" + (f"; {bounds}" if bounds else ""))
    if field.default_factory is not None and (section_name, key) not in _PLAIN_LISTS:
        return [*lines, f"# {key}: none by default, see the example below"]
    if field.default_factory is not None:
        return [*lines, f"{key} = []"]
    if given is not None:
        return [*lines, f"{key} = {_toml_value(given)}"]
    if field.default is None:
        return [*lines, f'# {key} = ""']
    return [*lines, f"{key} = {_toml_value(field.default)}"]


def render_default_config(coworker_id: str | None = None, store_url: str | None = None) -> str:
    """The commented config.toml that `coworker init` writes: every key with its default,
    and the new home's `[coworker] id` (and `[store] url`) when given."""
    lines = [
        "# coworker settings. Every key is shown with its default; edit and save, and a running",
        "# coworker applies the change at its next tick (`coworker status` says whether it has).",
        "# Environment overrides: COWORKER_<SECTION>__<KEY>, e.g. COWORKER_MODEL__NAME.",
        "",
    ]
    for section_name, section_field in Settings.model_fields.items():
        if section_name in _LISTS:  # arrays of tables, none by default: an example
            lines += [*_LISTS[section_name], ""]
            continue
        lines.append(f"[{section_name}]")
        given = {("coworker", "id"): coworker_id, ("store", "url"): store_url}
        for key, field in section_fields(section_field).items():
            lines += _key_lines(section_name, key, field, given.get((section_name, key)))
        if section_name == "rituals":
            lines += [
                "# [[rituals.custom]]",
                '# name = "standup"',
                '# cron = "0 9 * * mon-fri"',
                '# prompt = "Write me a three-line standup from yesterday\'s events."',
            ]
        if section_name == "mcp":
            lines += _MCP_EXAMPLE
        lines.append("")
    return "\n".join(lines)
