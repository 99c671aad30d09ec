"""The Host-header allow-list (`server.allowed_hosts`): a request naming any other host gets 400, so a web page
that rebinds its own DNS name to this machine's address (DNS rebinding) cannot drive a server on loopback or a
private network. Default: the loopback names and the address the server is bound to (for a wildcard bind, this
machine's name and addresses)."""
from __future__ import annotations

import socket

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from orthrus_rag.serving.errors import APIError

LOOPBACK = ("localhost", "127.0.0.1", "::1")
WILDCARD_BINDS = ("0.0.0.0", "::", "")


def default_hosts(bound: str) -> list[str]:
    """The names a client reaching a server bound to `bound` may send: loopback, the bound address, and for a
    wildcard bind this machine's host name, its fully qualified name and the addresses that name resolves to."""
    hosts = [*LOOPBACK, bound]
    if bound in WILDCARD_BINDS:
        name = socket.gethostname()
        hosts += [name, socket.getfqdn()]
        try:
            hosts += [info[4][0] for info in socket.getaddrinfo(name, None)]
        except OSError:  # a name the resolver does not know: the names above only
            pass
    return sorted({h.lower() for h in hosts if h})


def host_name(header: str) -> str:
    """The host of a Host header, without its port (`[::1]:8000` -> `::1`), lower-cased."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def allowed(host: str, hosts: list[str]) -> bool:
    """An entry matches the host exactly, `*.example.com` any name under example.com, `*` any host."""
    return any(h == "*" or h == host or (h.startswith("*.") and host.endswith(h[1:])) for h in hosts)


class HostCheckMiddleware:
    def __init__(self, app: ASGIApp, hosts: list[str]):
        self.app, self.hosts = app, [h.lower() for h in hosts]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or allowed(host_name(Headers(scope=scope).get("host", "")), self.hosts):
            return await self.app(scope, receive, send)
        error = APIError(400, "the request's Host header names a host this server does not answer for; add it to "
                              "server.allowed_hosts if it is this server's", code="host_not_allowed")
        await error.response()(scope, receive, send)
