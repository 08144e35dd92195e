"""The prefill's KV bootstrap server, as SGLang runs it in PD mode: a small HTTP server in a thread.

Decode asks it where the prefill's ranks are (``GET /route``); the prefill's
ranks register with it (``PUT /route``). The sim answers both plainly: what
matters to pdtui is that its port accepts, and what the worker logs when it
cannot bind.
"""

from __future__ import annotations

import threading

from pdtui.sim.httpserve import JsonHandler, Server


class _Handler(JsonHandler):
    def do_GET(self) -> None:
        if self.path.split("?", 1)[0] == "/route":
            self.reply_json(200, {"prefill_parallel_info": {"tp_size": 1, "dp_size": 1, "pp_size": 1}})
        else:
            self.reply_json(404, {"detail": "Not Found"})

    def do_PUT(self) -> None:
        self.read_body()
        self.reply_text(200, "OK")


class BootstrapServer(Server):
    def __init__(self, host: str, port: int) -> None:
        super().__init__((host, port), _Handler)

    def start(self) -> None:
        threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
