"""Python client of the dlock lock service (`dlock serve`, its /v1 HTTP API).

Standard library only. See README.md and docs/http.md of the dlock repository.
"""

from ._client import DEFAULT_URL, Client, ForceReleased, HeldLock, Holder, Lease, new_token
from ._errors import (
    BadRequestError,
    DlockError,
    ForbiddenError,
    LeaseLostError,
    LockedError,
    RateLimitedError,
    TransportError,
    UnauthorizedError,
    UnavailableError,
    UpgradeError,
)

__all__ = [
    "DEFAULT_URL",
    "BadRequestError",
    "Client",
    "DlockError",
    "ForbiddenError",
    "ForceReleased",
    "HeldLock",
    "Holder",
    "Lease",
    "LeaseLostError",
    "LockedError",
    "RateLimitedError",
    "TransportError",
    "UnauthorizedError",
    "UnavailableError",
    "UpgradeError",
    "new_token",
]

__version__ = "0.1.0"
