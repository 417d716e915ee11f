"""Errors of the dlock client: one class per answer of docs/http.md."""

from __future__ import annotations

from typing import Any, Mapping, Optional


class DlockError(Exception):
    """An error answer of the server, or a failure to reach it.

    ``status`` is the HTTP status (0 when no answer came), ``error`` the
    short stable code of the body (branch on it or on the class), ``message``
    the sentence for people, ``field`` the rejected input of a 400, and
    ``body`` the whole JSON body.
    """

    def __init__(
        self,
        status: int,
        error: str,
        message: str,
        *,
        field: Optional[str] = None,
        body: Optional[Mapping[str, Any]] = None,
    ) -> None:
        super().__init__(f"dlock: {status} {error}: {message}" if status else f"dlock: {error}: {message}")
        self.status = status
        self.error = error
        self.message = message
        self.field = field
        self.body: Mapping[str, Any] = body if body is not None else {}


class BadRequestError(DlockError):
    """400 (bad input; ``field`` names it) or 413 (body too large).

    Also raised without a request for input that cannot be sent, such as an
    empty lock name.
    """


class UnauthorizedError(DlockError):
    """401: the server requires a bearer token and this one is missing or wrong."""


class LockedError(DlockError):
    """409 ``locked``: the lock is held (also when a wait ran out).

    ``retry_after`` is the holder's remaining lease time in seconds
    (``retry_after_ms`` in milliseconds, from the body's ``retryAfterMs``,
    else from the ``Retry-After`` header); ``held_mode`` is the mode holding
    the name: ``mutex``, ``reentrant``, ``read``, ``write``, ``fair`` or
    ``semaphore`` (empty when the server did not say).
    """

    def __init__(
        self,
        status: int,
        error: str,
        message: str,
        *,
        retry_after_ms: int,
        held_mode: str,
        field: Optional[str] = None,
        body: Optional[Mapping[str, Any]] = None,
    ) -> None:
        super().__init__(status, error, message, field=field, body=body)
        self.retry_after_ms = retry_after_ms
        self.held_mode = held_mode

    @property
    def retry_after(self) -> float:
        """The holder's remaining lease time, in seconds."""
        return self.retry_after_ms / 1000.0


class ForbiddenError(DlockError):
    """403: a scoped token (``dlock serve --auth-file``) may not do this.

    ``error`` is ``out of scope`` (the lock is outside the token's name
    prefixes; ``field`` names the input; ``lock_name`` is the name of a
    multi-lock's ``names`` found outside, else None), ``read only`` (a
    read-only token asked to write) or ``forbidden`` (the endpoint is not
    open to scoped tokens). Sending it again does not help.
    """

    @property
    def lock_name(self) -> Optional[str]:
        """The name outside the token's scope, when the server named it."""
        n = self.body.get("name")
        return n if isinstance(n, str) else None


class RateLimitedError(DlockError):
    """429: a scoped token over its limit: ``rate limited`` (over its
    acquires per second) or ``too many holds`` (it holds its ``maxHolds``).

    ``retry_after`` is when to try again, in seconds (``retry_after_ms`` in
    milliseconds, from the body's ``retryAfterMs``, else from the
    ``Retry-After`` header). The client does not retry on its own.
    """

    def __init__(
        self,
        status: int,
        error: str,
        message: str,
        *,
        retry_after_ms: int,
        field: Optional[str] = None,
        body: Optional[Mapping[str, Any]] = None,
    ) -> None:
        super().__init__(status, error, message, field=field, body=body)
        self.retry_after_ms = retry_after_ms

    @property
    def retry_after(self) -> float:
        """When to try again, in seconds."""
        return self.retry_after_ms / 1000.0


class UpgradeError(DlockError):
    """409 ``upgrade``: a read holder asked for the write lock of the same name."""


class LeaseLostError(DlockError):
    """410 ``lease lost``: the token does not hold the lock (released, expired,
    lost, or never its).

    Also raised by the client itself when renewal could not be confirmed
    before the lease ran out (``status`` 0, ``error`` ``"lease lost"``). From
    then on the lock must be presumed held by someone else; the fence is what
    protects the resource.
    """


class UnavailableError(DlockError):
    """503: store unreachable (``store unavailable``), no quorum (``no quorum``),
    server shutting down (``shutting down``) or too many event streams.

    ``retry_after`` is the server's ``Retry-After`` in seconds, or None.
    """

    def __init__(
        self,
        status: int,
        error: str,
        message: str,
        *,
        retry_after: Optional[float],
        field: Optional[str] = None,
        body: Optional[Mapping[str, Any]] = None,
    ) -> None:
        super().__init__(status, error, message, field=field, body=body)
        self.retry_after = retry_after


class TransportError(DlockError):
    """No answer: connection refused or reset, timeout, or a reply that is
    not the server's JSON (``status`` is then the HTTP status, else 0).

    ``token`` is set when an acquire's outcome is unknown: the lock may be
    held with that token. Acquire again with ``token=`` to get the lease
    (idempotent), or release it.
    """

    def __init__(self, status: int, message: str, *, token: Optional[str] = None) -> None:
        super().__init__(status, "transport", message)
        self.token = token
