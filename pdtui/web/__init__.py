"""The browser face: the same TUI served by textual-serve, one app process per browser session.

Nothing here imports aiohttp or textual-serve at import time: ``options`` is read
by the command line of every pdtui run, the server only by ``--web``.
"""
