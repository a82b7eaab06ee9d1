"""The Hermes memory provider's installation, and doctor's check of it through Hermes' own loader.

Owns `coworker hermes install`: the provider (runtime/hermes_memory/: its `__init__.py`, its
README and Hermes' `plugin.yaml`) copied into `<HERMES_HOME>/plugins/coworker/` with a
`config.json` (0600: the server's URL, the Hermes token, the owner's user ids) written beside
it (the folder is remembered in state/hermes.json for doctor), and the Hermes token kept in
state/secrets.toml as `[serve] hermes_token` (made on the first install, kept after, new with
`rotate`). A folder of that name that holds another plugin is never overwritten.

Also owns doctor's `hermes` lines: said only when the provider is installed (or a Hermes
token is set). Hermes and coworker cannot share one Python environment (Hermes pins
mcp 1.26, coworker needs mcp 2.3 or later), so Hermes' loader (`plugins.memory`) is run in
the Python of the `hermes` command on PATH, as a child process with a timeout. It never
starts Hermes and never writes Hermes' config.yaml (the owner selects the provider there).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from .errors import UsageError
from .files import replace_file
from .home import Home
from .serve import token as token_file

PLUGIN = "coworker"
FILES = ("__init__.py", "README.md", "plugin.yaml")
FIRST_LINE = '"""coworker as a Hermes memory provider'  # how our __init__.py begins
LOADER_S = 60  # Hermes' loader, run in its own Python (it imports much of Hermes)
SELECT = "hermes config set memory.provider coworker"
OWNER_ID = re.compile(r"[a-z][a-z0-9_-]{0,31}:\S{1,200}")  # PLATFORM:ID


def hermes_home(given: Path | None = None) -> Path:
    """Where Hermes lives: `given`, else $HERMES_HOME, else ~/.hermes (Hermes' own order)."""
    if given is not None:
        return given.expanduser()
    env = os.environ.get("HERMES_HOME", "").strip()
    return Path(env).expanduser() if env else Path.home() / ".hermes"


def plugin_dir(home_of_hermes: Path) -> Path:
    return home_of_hermes / "plugins" / PLUGIN


def packaged(name: str) -> bytes:
    return resources.files("runtime.hermes_memory").joinpath(name).read_bytes()


@dataclass(frozen=True)
class Installed:
    folder: Path
    url: str
    token_is_new: bool


def install(home: Home, where: Path | None, url: str, owner_ids: list[str],
            rotate: bool = False) -> Installed:
    """Put the provider where Hermes' loader finds it (see the module); UsageError when the
    URL is not http(s) or the folder holds something else."""
    if not url.startswith(("http://", "https://")):
        raise UsageError(f"--url {url!r} is not an http:// or https:// URL of `coworker serve`")
    for given in owner_ids:
        if OWNER_ID.fullmatch(given) is None:
            raise UsageError(f"--owner-id {given!r} is not PLATFORM:ID (e.g. telegram:123456789, "
                             "the platform as Hermes names it)")
    folder = plugin_dir(hermes_home(where))
    init = folder / "__init__.py"
    if init.exists() and not init.read_bytes().startswith(FIRST_LINE.encode()):
        raise UsageError(f"{folder} holds another plugin named {PLUGIN!r}: move it away, then "
                         "install again")
    if rotate:
        token, new = token_file.rotate(home.secrets_path, token_file.HERMES), True
    else:
        token, new = token_file.ensure(home.secrets_path, token_file.HERMES)
    owner_ids = owner_ids or _kept_owner_ids(folder)  # a reinstall keeps them
    folder.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        replace_file(folder / name, packaged(name), 0o644)
    config = {"url": url.rstrip("/"), "token": token, "owner_ids": owner_ids,
              "coworker": home.settings().coworker.name}
    replace_file(folder / "config.json", (json.dumps(config, indent=2) + "\n").encode())
    replace_file(placed(home), (json.dumps({"folder": str(folder)}) + "\n").encode())
    return Installed(folder, url.rstrip("/"), new)


def placed(home: Home) -> Path:
    """Where the last install put the provider is kept: state/hermes.json."""
    return home.state / "hermes.json"


def installed_folder(home: Home) -> Path | None:
    """The folder the last `coworker hermes install` wrote, or None (never installed)."""
    try:
        got = json.loads(placed(home).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return Path(got["folder"]) if isinstance(got, dict) and isinstance(got.get("folder"), str) \
        else None


def _kept_owner_ids(folder: Path) -> list[str]:
    try:
        got = json.loads((folder / "config.json").read_text(encoding="utf-8")).get("owner_ids")
    except (OSError, ValueError, AttributeError):
        return []
    return [str(i) for i in got] if isinstance(got, list) else []


# --- doctor -----------------------------------------------------------------------------------

def hermes_python() -> str | None:
    """The Python of the `hermes` command on PATH, read from its first line (`#!/path/python`
    or `#!/usr/bin/env python3`), or None (no such command, or not a Python script)."""
    command = shutil.which("hermes")
    if command is None:
        return None
    try:
        with open(command, "rb") as f:
            first = f.readline(512).decode("utf-8", "replace")
    except OSError:
        return None
    words = first[2:].split() if first.startswith("#!") else []
    if words and Path(words[0]).name == "env":
        words = words[1:]
        words[:1] = [shutil.which(words[0]) or ""] if words else []
    python = words[0] if words else ""
    if not Path(python).name.startswith("python") or not os.access(python, os.X_OK):
        return None
    return python


_LOADER = """
import importlib.metadata, json, logging, os, sys
logging.disable(logging.CRITICAL)
from plugins.memory import find_provider_dir, load_memory_provider
found = find_provider_dir("coworker")
provider = load_memory_provider("coworker") if found else None
print(json.dumps({"hermes": importlib.metadata.version("hermes-agent"),
                  "dir": str(found) if found else None, "loaded": provider is not None,
                  "available": bool(provider and provider.is_available())}))
"""


def load_with_hermes(python: str, home_of_hermes: Path) -> dict[str, Any]:
    """Hermes' own loader asked for the provider, in `python` with HERMES_HOME set: {hermes
    (its version), dir, loaded, available}. RuntimeError with what went wrong."""
    try:
        done = subprocess.run([python, "-c", _LOADER], capture_output=True, text=True,
                              timeout=LOADER_S, check=False,
                              env={**os.environ, "HERMES_HOME": str(home_of_hermes)})
    except (OSError, subprocess.TimeoutExpired) as e:
        raise RuntimeError(f"{python} could not run Hermes' loader ({type(e).__name__})") from e
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        why = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"Hermes' loader failed in {python}: {why[:200]}")
    got: dict[str, Any] = json.loads(lines[-1])
    return got


def checks(home: Home, token: str | None) -> list[Any]:
    """doctor's `hermes` line: none when the provider was never installed and no Hermes
    token is set; else whether it is in place with this coworker's token, and whether Hermes'
    own loader finds and loads it (when a `hermes` command is on PATH)."""
    from .doctor import Check

    folder = installed_folder(home)
    if folder is None:
        return [] if token is None else [Check("hermes", False, "a Hermes token is set but the "
                                               "provider was never installed: run `coworker "
                                               "hermes install`")]
    wrong = _not_in_place(folder, token)
    if wrong is not None:
        return [Check("hermes", False, f"the provider at {folder} {wrong}: run `coworker hermes "
                                       "install` again")]
    old = (folder / "__init__.py").read_bytes() != packaged("__init__.py")
    stale = "; it is an older copy of the provider: run `coworker hermes install` again"
    python = hermes_python()
    if python is None:
        return [Check("hermes", True, f"provider installed at {folder}; no `hermes` command on "
                                      "PATH, so Hermes' loader was not asked"
                      + (stale if old else ""), warn=old)]
    try:
        got = load_with_hermes(python, folder.parent.parent)
    except (RuntimeError, ValueError) as e:
        return [Check("hermes", False, str(e))]
    hermes = f"Hermes {got.get('hermes')}'s loader"
    if not got.get("loaded"):
        return [Check("hermes", False, f"{hermes} does not load the provider at {folder} (it "
                                       f"found {got.get('dir')}): run `coworker hermes install` "
                                       "again")]
    url = json.loads((folder / "config.json").read_text(encoding="utf-8")).get("url")
    if not got.get("available"):
        return [Check("hermes", True, f"{hermes} loads the provider at {folder}, but `coworker "
                                      f"serve` does not answer at {url}: start it", warn=True)]
    return [Check("hermes", True, f"{hermes} finds and loads the provider at {folder}, and "
                                  f"`coworker serve` answers at {url}" + (stale if old else ""),
                  warn=old)]


def _not_in_place(folder: Path, token: str | None) -> str | None:
    """What is wrong with the installed folder (None: it holds the provider and this
    coworker's Hermes token)."""
    try:
        (folder / "__init__.py").read_bytes()
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        return f"is incomplete ({e})"
    if not isinstance(config, dict) or token is None or config.get("token") != token:
        return "does not hold this coworker's Hermes token"
    return None
