"""SGLang: its PD servers and the routers in front of them (sglang-router, smg).

- ``launch``: the command a ``launch:`` block runs (server and router flags, backend URLs, Prometheus ports)
"""
