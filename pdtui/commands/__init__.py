"""The subcommands' work, each a module: what ``pdtui NAME`` does once cli.py has parsed it and read its config.

bring_up (the run every deployment command shares), verbs (up, status, restart, down), probe (check, and what
the router's probe sends), units_command, init, history (and report), targets (how ``[CONFIG] SERVICE...`` is
read), completion (TAB completion of the command line, and ``pdtui completion``'s script). The demo's own is the
sim's (sim/demo_command.py): nothing here loads the stand-ins.
"""
