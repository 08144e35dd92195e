"""SGLang: its PD servers and the routers in front of them (sglang-router, smg).

- ``launch``: the command a ``launch:`` block runs (server and router flags, backend URLs, Prometheus ports)
- ``signatures``: what each of their log lines means, per generation (docs/signatures.md is made from it)
- ``phases``: the server's start-up phases, recognized from its own lines
- ``metrics``: live figures from ``/metrics`` (Prometheus text) or, without it, the batch lines
- ``pd_request``: the request a prefill and a decode are paired by (a pair proven directly)
- ``bootstrap_check``: its own readiness check, a PD prefill's bootstrap server accepting
- ``engine``: all of it declared as the one :class:`~pdtui.servers.ServingEngine` the engine's runs use
  (pdtui/servers/declared.py)
"""
