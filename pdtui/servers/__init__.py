"""The serving engines pdtui brings up: one package each (SGLang today).

A serving engine's package holds what is its own: how its servers and router
are launched (``launch``), what their log lines mean (``signatures``, read by
the engine's judge through the types of engine/signatures.py), their start-up
phases and their live figures. The checks that speak SGLang's HTTP (the
prefill's bootstrap server, a generation judged by its tokens, the KV transfer
series) are in engine/checks/, one module each, reading SGLang's names from here.
"""
