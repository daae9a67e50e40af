"""`serve --http`: the streamable-HTTP app behind a bearer token and Host/Origin checks.

Anyone who can reach the port can otherwise start `run_training` commands, so every HTTP request
needs `Authorization: Bearer <token>`. The token comes from MLTRIAGE_HTTP_TOKEN or is generated at
start and printed once to stderr. The SDK's bearer middleware checks it; the SDK's `AuthSettings`
route is not used because it is fixed when the server object is built and advertises OAuth
metadata (an issuer) that a static token does not have.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import secrets
import sys
from dataclasses import dataclass

TOKEN_ENV = "MLTRIAGE_HTTP_TOKEN"
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


class HttpConfigError(Exception):
    """A bad --http / --allow-host / token setting: one line for the user, no traceback."""


@dataclass(frozen=True)
class HttpSettings:
    host: str
    port: int
    token: str
    token_generated: bool
    allowed_hosts: list[str]


def parse_address(value: str) -> tuple[str, int]:
    """'HOST:PORT', ':PORT' or '[::1]:PORT' -> (host, port); loopback when the host is left out."""
    host, sep, port = value.rpartition(":")
    if not sep:
        raise HttpConfigError(f"--http {value!r}: expected HOST:PORT, e.g. 127.0.0.1:8765")
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise HttpConfigError(f"--http {value!r}: the port must be a number from 1 to 65535, e.g. 127.0.0.1:8765")
    return host, int(port)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def settings(address: str, allow_hosts: list[str], environ: dict[str, str] | None = None) -> HttpSettings:
    environ = os.environ if environ is None else environ
    host, port = parse_address(address)
    token = environ.get(TOKEN_ENV)
    if token is not None and not token.strip():
        raise HttpConfigError(f"{TOKEN_ENV} is set but empty: set a long random token or unset it")
    if token is None and not is_loopback(host):
        # a generated token printed to a terminal is fine on one machine, not for a listening network port
        raise HttpConfigError(f"--http {address}: binding beyond loopback needs an explicit token in {TOKEN_ENV} "
                              "(and TLS in front, e.g. a reverse proxy)")
    generated = token is None
    if generated:
        token = secrets.token_urlsafe(32)
    hosts = [*LOOPBACK_NAMES, *([] if is_loopback(host) or host in ("0.0.0.0", "::") else [host]), *allow_hosts]
    return HttpSettings(host=host, port=port, token=token.strip(), token_generated=generated,
                        allowed_hosts=list(dict.fromkeys(hosts)))


class StaticTokenVerifier:
    """The SDK's TokenVerifier protocol for one shared secret, compared in constant time."""

    def __init__(self, token: str):
        self._token = token.encode()

    async def verify_token(self, token: str):
        from mcp.server.auth.provider import AccessToken

        if hmac.compare_digest(token.strip().encode(), self._token):
            return AccessToken(token="<redacted>", client_id="mltriage-http", scopes=[])
        return None


def _security(allowed_hosts: list[str]):
    """DNS-rebinding protection (Host and Origin checks) for every bind, not only loopback."""
    from mcp.server.transport_security import TransportSecuritySettings

    def bracket(h: str) -> str:
        return f"[{h}]" if ":" in h else h

    hosts = [bracket(h) for h in allowed_hosts]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[form for h in hosts for form in (h, f"{h}:*")],
        allowed_origins=[form for h in hosts for scheme in ("http", "https") for form in (f"{scheme}://{h}", f"{scheme}://{h}:*")],
    )


def app(server, http: HttpSettings):
    """The server's streamable-HTTP app wrapped in the SDK's bearer-token middleware."""
    from mcp.server.auth.middleware.auth_context import AuthContextMiddleware
    from mcp.server.auth.middleware.bearer_auth import BearerAuthBackend, RequireAuthMiddleware
    from starlette.middleware.authentication import AuthenticationMiddleware

    inner = server.streamable_http_app(host=http.host, transport_security=_security(http.allowed_hosts))
    guarded = AuthenticationMiddleware(AuthContextMiddleware(RequireAuthMiddleware(inner, required_scopes=[])),
                                       backend=BearerAuthBackend(StaticTokenVerifier(http.token)))

    async def asgi(scope, receive, send):
        if scope["type"] == "lifespan":  # start-up/shutdown of the session manager: no request to check
            await inner(scope, receive, send)
        else:
            await guarded(scope, receive, send)

    return asgi


def serve(server, http: HttpSettings) -> None:
    import uvicorn

    if http.token_generated:
        print(f"mltriage: HTTP bearer token (send 'Authorization: Bearer <token>'; set {TOKEN_ENV} to choose it): "
              f"{http.token}", file=sys.stderr, flush=True)
    uvicorn.run(app(server, http), host=http.host, port=http.port, log_level="warning")
