"""The words the engine and the packages under it share: the plain types and small protocols both sides of an
import would otherwise need from each other.

- ``checks``: what a readiness check is, what it is given and what it returns (and the TCP one both sides run)
- ``signatures``: what a kind of log line is to the judge
- ``figures``: a server's live figures and its KV transfer series' totals

The serving engines (servers/) write them, the engine (engine/) reads them, the targets and the faces pass them
on; this package imports only config/ and hosts/, so every arrow to it points down (docs/architecture.md,
tests/unit/test_layers.py).
"""
