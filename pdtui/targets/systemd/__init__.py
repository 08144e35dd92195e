"""systemd: services as units on hosts.

- ``commands``: how systemctl and journalctl are invoked (argv builders) and what they print, read
- ``journal_json``: ``journalctl -o json`` lines read into log entries
- ``unit_files``: the unit file of a service, from its ``launch:`` block (``pdtui units``)
- ``unit_drift``: an installed unit against the config (port, GPUs, NUMA, flags)
- ``host_session``: one host's commands, shared looks and starts, and its journal tail
- ``shared_commands``: the looks, starts and history reads that a host's units share
- ``journal_tail``: the host's one ``journalctl --follow`` for every unit on it
"""
