"""The serving engines pdtui brings up: one package each (SGLang today).

A serving engine's package holds what is its own: how its servers and router
are launched (``launch``). The rest of what is SGLang's (its log wording and
signatures, its start-up phases, its readiness checks, the PD request that
proves a pair) is read by the engine from pdtui/engine for now.
"""
