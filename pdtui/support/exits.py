"""pdtui's exit codes, the contract README documents: one home for every face."""

import sys

from pdtui.support.text import inert

EXIT_OK = 0            # everything ready (or the command did what it was asked)
EXIT_FAILED = 1        # a service failed, timed out or was blocked; or bad input
EXIT_USAGE = 2         # the command line was wrong
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT), or quit before the bring-up was decided


def usage_error(message: str) -> int:
    """One line on stderr saying what is wrong with the command line; the usage exit code. Inert: it may quote a
    word of the command line or a file's name."""
    print(f"pdtui: {inert(message)}", file=sys.stderr)
    return EXIT_USAGE
