"""ECS task scale-in protection while the consumer has messages in flight.

A Fargate task that is scaled in while a handler runs loses that attempt: the
message comes back only after its visibility timeout, and a handler with side
effects may have half-done its work. The task protects itself through the ECS
agent endpoint (``PUT ${ECS_AGENT_URI}/task-protection/v1/state``) while it is
busy and drops the protection when it goes idle, so scale-in picks idle tasks.
See https://docs.aws.amazon.com/AmazonECS/latest/developerguide/task-scale-in-protection-endpoint.html

Protection is best effort: every failure (agent unreachable, timeout, HTTP
error, a ``failure`` or ``error`` object in the reply) is logged as
``task_protection_failed`` and never raised. State follows the last successful
call only, so a failed enable is retried by the next :meth:`busy` (or
:meth:`refresh`) and a failed disable by the next :meth:`idle`, :meth:`refresh`
or :meth:`close`. Outside ECS (no ``ECS_AGENT_URI``) every method is a no-op.

Standard library only.
"""

from __future__ import annotations

import http.client
import json
import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

from consumer.limits import ECS_AGENT_TIMEOUT_SECONDS

logger = logging.getLogger(__name__)

STATE_PATH = "/task-protection/v1/state"
MIN_EXPIRES_IN_MINUTES = 1
MAX_EXPIRES_IN_MINUTES = 2880  # the agent's limit: 48 hours
RENEW_WITHIN_SECONDS = 10 * 60  # renew when the protection would expire within this window
_MAX_ERROR_CHARS = 500


class _AgentRejected(Exception):
    """The agent answered, but not with a ``protection`` object."""


class ScaleInProtection:
    """Holds ECS task scale-in protection while the consumer has messages in flight.

    Two pieces of state, both guarded by one lock:

    * *wanted*: the runtime's view, set by :meth:`busy` and cleared by
      :meth:`idle` / :meth:`close`;
    * *protected* (with its expiry on ``clock``): what the agent last
      confirmed. Only a successful call changes it.

    The lock is held across the HTTP call (at most ``timeout_seconds``), so
    calls from several threads reach the agent in the order they were made and
    the last one wins, never an older one overtaking it.
    """

    def __init__(
        self,
        agent_uri: str | None,
        *,
        expires_in_minutes: int = 60,
        timeout_seconds: float = ECS_AGENT_TIMEOUT_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        lock: threading.Lock | None = None,
        opener: urllib.request.OpenerDirector | None = None,
    ) -> None:
        if not MIN_EXPIRES_IN_MINUTES <= expires_in_minutes <= MAX_EXPIRES_IN_MINUTES:
            raise ValueError(
                f'"expires_in_minutes" must be within {MIN_EXPIRES_IN_MINUTES}..{MAX_EXPIRES_IN_MINUTES}'
                f" (the ECS agent's limits): {expires_in_minutes!r}"
            )
        if timeout_seconds <= 0:
            raise ValueError(f'"timeout_seconds" must be positive: {timeout_seconds!r}')
        self._url = f"{agent_uri.rstrip('/')}{STATE_PATH}" if agent_uri else None
        self._expires_in_minutes = expires_in_minutes
        self._timeout_seconds = timeout_seconds
        self._clock = clock
        # Held across the agent's call (see the class docstring): a lock of the consumer's clock (clock.py).
        self._lock = lock or threading.Lock()
        self._wanted = False
        self._protected = False
        self._expires_at = 0.0
        # The agent is link-local: never route it through HTTP(S)_PROXY.
        if opener is None and self._url:
            opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        self._opener = opener

    @classmethod
    def from_env(cls, environ: Mapping[str, str], **kwargs: Any) -> ScaleInProtection:
        """Read ``ECS_AGENT_URI`` (set by ECS only); without it protection is a no-op."""
        return cls(environ.get("ECS_AGENT_URI"), **kwargs)

    @property
    def enabled(self) -> bool:
        """False when not running on ECS (no agent URI): every method is then a no-op."""
        return self._url is not None

    def busy(self) -> None:
        """In-flight count went from 0 to more: enable protection unless it is held and not due for renewal."""
        if not self.enabled:
            return
        with self._lock:
            self._wanted = True
            now = self._clock()
            if not self._is_protected(now):
                self._enable("enable")
            elif self._renewal_due(now):
                self._enable("renew")

    def idle(self) -> None:
        """In-flight count went to 0: disable protection if it is held."""
        if not self.enabled:
            return
        with self._lock:
            self._wanted = False
            if self._is_protected(self._clock()):
                self._disable()

    def refresh(self) -> None:
        """Periodic (heartbeat): renew protection due to expire within 10 minutes; retry a failed change.

        While busy, protection that is held and expires within
        ``RENEW_WITHIN_SECONDS`` is renewed, and protection whose enable failed
        is requested again. While idle, protection whose disable failed is
        dropped again. Otherwise nothing is sent.
        """
        if not self.enabled:
            return
        with self._lock:
            now = self._clock()
            protected = self._is_protected(now)
            if self._wanted and not protected:
                self._enable("enable")
            elif self._wanted and self._renewal_due(now):
                self._enable("renew")
            elif not self._wanted and protected:
                self._disable()

    def close(self) -> None:
        """Shutdown: disable protection if it is held."""
        self.idle()

    # -- internals (called with the lock held) --------------------------------

    def _is_protected(self, now: float) -> bool:
        return self._protected and now < self._expires_at

    def _renewal_due(self, now: float) -> bool:
        return self._expires_at - now <= RENEW_WITHIN_SECONDS

    def _enable(self, action: str) -> None:
        started = self._clock()
        body = {"ProtectionEnabled": True, "ExpiresInMinutes": self._expires_in_minutes}
        if self._put(action, body):
            self._protected = True
            # Counted from before the request: never later than the agent's own expiry.
            self._expires_at = started + self._expires_in_minutes * 60

    def _disable(self) -> None:
        if self._put("disable", {"ProtectionEnabled": False}):
            self._protected = False
            self._expires_at = 0.0

    def _put(self, action: str, body: dict[str, Any]) -> bool:
        """PUT ``body``; True on a ``protection`` reply, else log ``task_protection_failed`` and return False."""
        assert self._url is not None and self._opener is not None
        try:
            request = urllib.request.Request(
                self._url,
                data=json.dumps(body).encode(),
                method="PUT",
                headers={"Content-Type": "application/json", "Accept": "application/json"},
            )
            with self._opener.open(request, timeout=self._timeout_seconds) as response:
                reply = json.loads(response.read() or b"null")
            if not isinstance(reply, dict) or not isinstance(reply.get("protection"), dict):
                raise _AgentRejected(_describe_reply(reply))
        except urllib.error.HTTPError as exc:
            error = f"HTTP {exc.code}: {_read_error_body(exc)}"
        except urllib.error.URLError as exc:
            error = f"{type(exc.reason).__name__}: {exc.reason}"
        except _AgentRejected as exc:
            error = str(exc)
        except (OSError, ValueError, http.client.HTTPException) as exc:
            # OSError: timeout or reset while reading the reply; ValueError: a bad URL or a reply that is not JSON.
            error = f"{type(exc).__name__}: {exc}"
        else:
            logger.debug("task_protection_updated", extra={"action": action, "protection": reply["protection"]})
            return True
        logger.warning("task_protection_failed", extra={"action": action, "error": error[:_MAX_ERROR_CHARS]})
        return False


def _describe_reply(reply: Any) -> str:
    """The agent's own words for a reply without ``protection``: its failure or error object if any."""
    if isinstance(reply, dict):
        for key in ("failure", "error"):
            if key in reply:
                return f"{key}: {json.dumps(reply[key], sort_keys=True)}"
    return f"unexpected reply: {json.dumps(reply)[:_MAX_ERROR_CHARS]}"


def _read_error_body(exc: urllib.error.HTTPError) -> str:
    """The failure/error object of an HTTP error reply, or its raw text."""
    try:
        raw = exc.read()
    except (OSError, http.client.HTTPException):
        raw = b""
    finally:
        exc.close()
    try:
        return _describe_reply(json.loads(raw))
    except ValueError:
        return raw.decode("utf-8", "replace").strip() or str(exc.reason)
