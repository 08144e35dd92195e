"""Which deployment config a bare ``pdtui`` uses, and what to say when there is none.

The places, in order: ``$PDTUI_CONFIG``; ``./pdtui.yaml`` and ``./pdtui.yml``;
``$XDG_CONFIG_HOME/pdtui/pdtui.yaml`` (and ``.yml``), ``XDG_CONFIG_HOME``
being ``~/.config`` when unset or not absolute, as the XDG base directory
specification says. A ``$PDTUI_CONFIG`` that names no file ends the search: the
user asked for that file, and quietly running another deployment instead would
be worse than saying so.

Pure but for looking whether files exist: the environment and the current
folder are given, so a test sets both. Whether the config found may be used
unnamed (who owns it, who can write it) is config/trust.py's.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from pdtui.support.text import inert

ENV_VAR = "PDTUI_CONFIG"
NAMES = ("pdtui.yaml", "pdtui.yml")


def find_config(env: Mapping[str, str], cwd: Path) -> tuple[Path | None, list[Path]]:
    """The first config file of the places in order (None if none is a file), and every place looked at."""
    looked = candidates(env, cwd)
    if env.get(ENV_VAR):
        return (looked[0] if looked[0].is_file() else None), looked
    return next((path for path in looked if path.is_file()), None), looked


def candidates(env: Mapping[str, str], cwd: Path) -> list[Path]:
    """The places a config may be, in the order they are tried; ``$PDTUI_CONFIG`` alone when it is set."""
    given = env.get(ENV_VAR)
    if given:
        return [cwd / _expand_home(given, env)]
    places = [cwd / name for name in NAMES]
    if (config_home := _config_home(env)) is not None:
        places += [config_home / "pdtui" / name for name in NAMES]
    return places


def _config_home(env: Mapping[str, str]) -> Path | None:
    """``$XDG_CONFIG_HOME`` if absolute, else ``$HOME/.config``; None without either."""
    xdg = env.get("XDG_CONFIG_HOME", "")
    if xdg and Path(xdg).is_absolute():
        return Path(xdg)
    home = env.get("HOME", "")
    return Path(home) / ".config" if home else None


def _expand_home(path: str, env: Mapping[str, str]) -> Path:
    """A leading ``~/`` as ``$HOME`` (a quoted ``~`` is not expanded by the shell)."""
    home = env.get("HOME", "")
    if home and (path == "~" or path.startswith("~/")):
        return Path(home) / path[2:]
    return Path(path)


def not_found_message(looked: list[Path], env: Mapping[str, str] | None = None) -> str:
    """A few lines for stderr: where no config was found, and the two ways to get going.

    With ``env`` given and ``$PDTUI_CONFIG`` set in it, the first line says that
    this is the file that is missing.
    """
    if env is not None and env.get(ENV_VAR) and len(looked) == 1:
        said = [f"pdtui: ${ENV_VAR} is {inert(env[ENV_VAR])}, but there is no file {inert(str(looked[0]))}."]
    else:
        said = ["pdtui: no deployment config found. Looked for:", *(f"  {inert(str(path))}" for path in looked)]
    return "\n".join([
        *said,
        "Try:",
        "  pdtui demo           a simulated deployment on this machine (no GPU, SSH or systemd needed)",
        "  pdtui init           write a pdtui.yaml for this machine (its GPUs and SGLang units)",
        "  pdtui up CONFIG      bring up the deployment of CONFIG",
    ])
