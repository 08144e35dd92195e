"""The subcommands beyond the bring-up itself, each a module: what ``pdtui NAME`` does (cli.py parses)."""
