"""vLLM: its PD servers (a KV connector each, NIXL by default) and vllm-router in front of them.

- ``launch``: the command a ``launch:`` block runs (server and router flags, the KV transfer config, each NIXL
  server's side channel)
- ``signatures``: what each of their log lines means (docs/signatures.md names where each wording comes from)
- ``phases``: the server's start-up phases, recognized from its own lines
- ``metrics``: live figures from ``/metrics`` (Prometheus text) or its periodic stats line, and its KV transfer series
- ``pd_request``: the two legs a prefill and a decode are paired by (a pair proven directly)
- ``pairing``: what a prefill and a decode must share, and what the servers of one host must not
- ``server_info``: what a running server says it serves (``/v1/models``, ``/version``)
- ``engine``: all of it declared as the one :class:`~pdtui.servers.ServingEngine` the engine's runs use
  (pdtui/servers/declared.py)
"""
