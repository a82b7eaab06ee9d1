"""Where a coworker lives: its folder, config.toml, state/, MEMORY.md, pidfile and logs.

Owns the paths and the creation of a new home (`coworker init`). The home is the folder named
by the COWORKER_HOME environment variable, else the current folder. It never opens the database
and never interprets settings beyond loading them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from . import settings as settings_mod
from .errors import NotInitialised

MEMORY_MD_HEADER = (
    "# MEMORY\n\n"
    "What this coworker always has in mind: one entry a line, `- [mNNN] text (sources: ...; date)`.\n"
    "Edit by hand if you like; `coworker strike` and `coworker restore` keep versions.\n\n"
)


@dataclass(frozen=True)
class Home:
    root: Path

    @classmethod
    def locate(cls, root: str | os.PathLike[str] | None = None) -> Home:
        if root is None:
            root = os.environ.get("COWORKER_HOME") or os.getcwd()
        return cls(Path(root).expanduser().resolve())

    # paths -------------------------------------------------------------------------------
    @property
    def config_path(self) -> Path:
        return self.root / "config.toml"

    @property
    def state(self) -> Path:
        return self.root / "state"

    @property
    def db_path(self) -> Path:
        return self.state / "coworker.db"

    @property
    def memory_md(self) -> Path:
        return self.root / "MEMORY.md"

    @property
    def pidfile(self) -> Path:
        return self.state / "coworker.pid"

    @property
    def runfile(self) -> Path:
        return self.state / "run.json"

    @property
    def log_path(self) -> Path:
        return self.state / "coworker.log"

    @property
    def out_path(self) -> Path:
        return self.state / "coworker.out"

    @property
    def inbox(self) -> Path:
        return self.state / "inbox"

    @property
    def outbox(self) -> Path:
        return self.state / "outbox"

    @property
    def snapshots(self) -> Path:
        return self.state / "snapshots"

    @property
    def memory_map(self) -> Path:
        return self.state / "memory-map.md"

    # life --------------------------------------------------------------------------------
    def is_initialised(self) -> bool:
        return self.config_path.exists()

    def require(self) -> Home:
        if not self.is_initialised():
            raise NotInitialised(
                f"no coworker in {self.root} (no config.toml): run `coworker init` here, "
                "or set COWORKER_HOME to a coworker's folder"
            )
        self.ensure_dirs()
        return self

    def ensure_dirs(self) -> None:
        for d in (self.state, self.inbox, self.inbox / "done", self.outbox, self.snapshots):
            d.mkdir(parents=True, exist_ok=True)
        if not self.memory_md.exists():
            self.memory_md.write_text(MEMORY_MD_HEADER, encoding="utf-8")

    def init(self) -> list[str]:
        """Create config.toml, state/ and MEMORY.md where missing; return what was created."""
        created = []
        self.root.mkdir(parents=True, exist_ok=True)
        if not self.config_path.exists():
            self.config_path.write_text(settings_mod.render_default_config(), encoding="utf-8")
            created.append("config.toml")
        if not self.state.exists():
            created.append("state/")
        if not self.memory_md.exists():
            created.append("MEMORY.md")
        self.ensure_dirs()
        return created

    def settings(self) -> settings_mod.Settings:
        return settings_mod.load(self.config_path)
