"""The sim worker's ranks of one server over several nodes, meeting as SGLang's do at rank 0's ``--dist-init-addr``.

Rank 0 listens there; every other rank connects (again and again until it is
up, saying so as torch's c10d client does), says its rank, and all wait until
rank 0 has heard from each. Then each keeps its connection: a peer that goes
away (its process died) is what the others' next collective finds, gloo's
``Connection closed by peer``; rank 0 ending on purpose tells the others first,
as SGLang's rank 0 broadcasts its shutdown.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable

RETRY = 0.25            # seconds between a rank's tries to reach rank 0
FIRST_COMPLAINT = 1.0   # a rank that cannot reach rank 0 says so after this long, then every COMPLAINT_EVERY
COMPLAINT_EVERY = 30.0
TORCH_TIMEOUT_MS = 600000       # c10d's default, as its retry line names it
SHUTDOWN = b"shutdown\n"


def split_address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host.strip("[]"), int(port)


class Group:
    """This process's place in its server's rendezvous: its connections to the other ranks, once met."""

    def __init__(self, rank: int, nnodes: int, address: str, stop: threading.Event,
                 complain: Callable[[str], None]) -> None:
        self.rank = rank
        self.nnodes = nnodes
        self.host, self.port = split_address(address)
        self.stop = stop
        self.complain = complain
        self.peers: list[socket.socket] = []
        self.leaving = False             # this process ends on purpose: a peer's going is no news
        self.told_to_end = threading.Event()    # rank 0's shutdown came (a rank >= 1's)

    def meet(self) -> bool:
        """Until every rank has joined (False: asked to stop first). OSError: rank 0 cannot listen there."""
        return self._host_meeting() if self.rank == 0 else self._join()

    def _host_meeting(self) -> bool:
        with socket.create_server((self.host, self.port)) as server:
            server.settimeout(RETRY)
            while len(self.peers) < self.nnodes - 1:
                if self.stop.is_set():
                    return False
                try:
                    conn, _ = server.accept()
                except TimeoutError:
                    continue
                conn.recv(64)           # "join R"
                self.peers.append(conn)
        for conn in self.peers:
            conn.sendall(b"go\n")
        return True

    def _join(self) -> bool:
        began = time.monotonic()
        complain_at, tries = began + FIRST_COMPLAINT, 0
        while not self.stop.is_set():
            try:
                conn = socket.create_connection((self.host, self.port), timeout=RETRY)
            except OSError:
                tries += 1
                if time.monotonic() >= complain_at:
                    complain_at += COMPLAINT_EVERY
                    self.complain(self._retry_line(tries))
                self.stop.wait(RETRY)
                continue
            conn.sendall(f"join {self.rank}\n".encode())
            conn.settimeout(None)
            if self._until_go(conn):
                self.peers.append(conn)
                return True
            conn.close()
            return False
        return False

    def never_join(self) -> None:
        """A rank that cannot reach rank 0 (a firewall, a wrong address): it retries, saying so, until stopped."""
        tries = 0
        self.stop.wait(FIRST_COMPLAINT)
        while not self.stop.is_set():
            tries += int((FIRST_COMPLAINT if not tries else COMPLAINT_EVERY) / RETRY)
            self.complain(self._retry_line(tries))
            self.stop.wait(COMPLAINT_EVERY)

    def _until_go(self, conn: socket.socket) -> bool:
        conn.settimeout(RETRY)
        while not self.stop.is_set():
            try:
                return conn.recv(64).startswith(b"go")
            except TimeoutError:
                continue
        return False

    def _retry_line(self, tries: int) -> str:
        return (f"[c10d] TCP client failed to connect/validate to host {self.host}:{self.port} - retrying (try={tries}, "
                f"timeout={TORCH_TIMEOUT_MS}ms, delay={int(RETRY * 1000)}ms): The client socket has timed out after "
                f"{int(RETRY * 1000)}ms while trying to connect to ({self.host}, {self.port}).")

    def watch(self, on_lost: Callable[[str], None]) -> None:
        """From now on, ``on_lost(peer)`` (in a thread of its own) when a peer goes away unasked; a rank >= 1 told
        by rank 0 to end sets :attr:`told_to_end` and the stop instead."""
        for conn in self.peers:
            threading.Thread(target=self._watch_one, args=(conn, on_lost), daemon=True).start()

    def _watch_one(self, conn: socket.socket, on_lost: Callable[[str], None]) -> None:
        peer = "{}:{}".format(*conn.getpeername()[:2])
        conn.settimeout(None)
        try:
            said = conn.recv(64)
        except OSError:
            said = b""
        if said.startswith(SHUTDOWN.strip()):
            self.told_to_end.set()
            self.stop.set()
        elif not self.leaving and not self.stop.is_set():
            on_lost(peer)

    def leave(self) -> None:
        """Ending on purpose: rank 0 tells the others to end; every connection closed."""
        self.leaving = True
        for conn in self.peers:
            try:
                if self.rank == 0:
                    conn.sendall(SHUTDOWN)
                conn.close()
            except OSError:
                pass
