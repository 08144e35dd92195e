"""A simulated PD deployment on this machine, for ``pdtui demo`` and the tests.

It stands in for what a GPU box has: systemd (``systemctl``, ``journalctl`` and
a journal in the real JSON shape), SGLang prefill/decode workers and, when
neither ``smg`` nor ``sglang-router`` is installed (or when asked to), the
router.  Everything lives under one sandbox directory; nothing here touches the
machine's own systemd.
"""
