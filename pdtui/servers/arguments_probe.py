"""The program a serving engine's own Python runs to tell pdtui what its server takes: its parser, as JSON.

Sent as source to ``python -c`` (standard library only, any Python 3.8 and
up), with one engine's ``parser()`` (servers/sglang/arguments.py, servers/vllm/arguments.py) appended, and run
where the server will run. Its arguments: the engine's distribution names (comma separated, the first installed
one gives the version; none for a stand-in of pdtui's own) and the version pdtui already knows for that Python:
when that is the one installed it prints only ``{"version": ...}``, without importing the engine (a Python's
start, not the engine's seconds of imports). Else it prints ``{"version", "options", "abbrev", "dashes",
"dotted", "env"}``: every option string with its ``nargs`` and, where argparse compares the word as written, its
``choices``.

pdtui's own stand-ins (the sim's workers) are described in pdtui's process by the same :func:`describe`, from
their own ``build_parser()``.
"""

import json
import sys

MARK = "pdtui-arguments: "


def installed_version(names):
    """The version of the first of ``names`` that is installed, else None."""
    import importlib.metadata as metadata
    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def checkable(action):
    """The choices argparse compares the word itself with (no ``type`` that turns it into something else), as
    strings; None when there are none or they are compared after a conversion."""
    if action.choices is None or action.type not in (None, str):
        return None
    choices = list(action.choices)
    return choices if all(isinstance(choice, str) for choice in choices) else None


def describe(parser, version, *, dashes=False, dotted=False, env=None):
    """``parser``'s options as pdtui reads them (the JSON this program prints)."""
    options = {}
    for action in parser._actions:
        nargs = action.nargs if isinstance(action.nargs, (int, str)) or action.nargs is None else "?"
        for flag in action.option_strings:
            options[flag] = {"nargs": nargs, "choices": checkable(action)}
    return {"version": version, "options": options, "abbrev": bool(parser.allow_abbrev), "dashes": dashes,
            "dotted": dotted, "env": sorted(env) if env is not None else None}


def main(argv, parser):
    """Print what the installed engine takes; ``parser()`` builds its server's parser (and says how it reads)."""
    names = [name for name in argv[1].split(",") if name]
    known = set(argv[2].split(",")) if len(argv) > 2 and argv[2] else set()
    version = installed_version(names) if names else ""     # none named: a stand-in, versioned with pdtui
    if version is None:
        tell({"version": None, "missing": names})
    elif version in known:
        tell({"version": version})
    else:
        built, ways = parser()
        tell(describe(built, version, **ways))


def tell(answer):
    """The answer on a line of its own, marked: an engine's imports may print on stdout too."""
    sys.stdout.write(MARK + json.dumps(answer, separators=(",", ":")) + "\n")


def run(parser):
    """Run :func:`main` on this program's arguments."""
    main(sys.argv, parser)
