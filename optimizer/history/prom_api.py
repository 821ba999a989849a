"""Prometheus's HTTP API, as far as the history reader needs it, and the times it takes.

Plain ``urllib`` GETs of ``/api/v1/...`` returning the ``data`` of the JSON envelope; each way a
request can fail (nothing listening, no answer in time, not a Prometheus, a query it rejects)
becomes one :class:`HistoryError` line naming the server and what was asked.
"""

from __future__ import annotations

import json
import re
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime, timezone
from typing import Any

from optimizer.foundation.errors import HistoryError

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")


def parse_duration(text: str, what: str) -> float:
    """Seconds in ``15s``, ``1m30s``, ``2h``, ``500ms`` or a bare number of seconds."""
    text = text.strip()
    try:
        seconds = float(text)
    except ValueError:
        parts = _DURATION.findall(text)
        if not parts or "".join(n + u for n, u in parts) != text:
            raise HistoryError(f"{what}: {text!r} is not a duration (15s, 1m30s, 2h, or seconds)"
                               ) from None
        seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if seconds <= 0:
        raise HistoryError(f"{what}: {text!r} is not a positive duration")
    return seconds


def parse_time(text: str, what: str, now: float | None = None) -> float:
    """Unix seconds from ``now``, ``now-6h``, Unix seconds, or an RFC 3339 time
    (``2024-05-01T12:00:00Z``; one without a zone is UTC)."""
    now = time.time() if now is None else now
    text = text.strip()
    if text == "now":
        return now
    if text.startswith("now-"):
        return now - parse_duration(text[4:], what)
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise HistoryError(f"{what}: {text!r} is not a time (now, now-6h, Unix seconds or "
                           f"RFC 3339 such as 2024-05-01T12:00:00Z)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()


def promql_duration(seconds: float) -> str:
    """A PromQL range (``[...]``) of ``seconds``, in whole milliseconds."""
    return f"{max(1, round(seconds * 1000))}ms"


def iso(seconds: float) -> str:
    """A Unix time as UTC RFC 3339, for messages."""
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class PrometheusAPI:
    """GETs against one Prometheus server's ``/api/v1``."""

    def __init__(self, base_url: str, timeout_s: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        split = urllib.parse.urlsplit(self.base_url)
        self.where = split.netloc or self.base_url

    def get(self, path: str, params: dict[str, Any] | list[tuple[str, Any]]) -> Any:
        """The ``data`` of ``GET {base}/api/v1/{path}?{params}``."""
        url = f"{self.base_url}/api/v1/{path}?{urllib.parse.urlencode(params, doseq=True)}"
        try:
            with urllib.request.urlopen(url, timeout=self.timeout_s) as answer:
                body = answer.read()
        except urllib.error.HTTPError as e:
            body = e.read()
            message = _error_of(body) or f"HTTP {e.code} {e.reason}"
            raise HistoryError(f"Prometheus at {self.where} rejected /api/v1/{path} "
                               f"{_shown(params)}: {message}") from None
        except urllib.error.URLError as e:
            raise HistoryError(f"Prometheus at {self.where}: {_reason(e.reason)} "
                               f"(asked /api/v1/{path})") from None
        except TimeoutError:
            raise HistoryError(f"Prometheus at {self.where}: no answer within "
                               f"{self.timeout_s:g} s (asked /api/v1/{path})") from None
        try:
            envelope = json.loads(body)
            if envelope.get("status") != "success":
                raise ValueError(envelope.get("error", "no success status"))
            return envelope["data"]
        except (ValueError, AttributeError, KeyError) as e:
            raise HistoryError(f"{self.base_url} answered /api/v1/{path} with no Prometheus "
                               f"result ({str(e)[:120]}); is it a Prometheus server?") from None

    def label_values(self, label: str, match: str, start: float | None = None,
                     end: float | None = None) -> list[str]:
        params: list[tuple[str, Any]] = [("match[]", match)]
        if start is not None and end is not None:
            params += [("start", start), ("end", end)]
        return sorted(self.get(f"label/{label}/values", params))


def _error_of(body: bytes) -> str | None:
    try:
        return str(json.loads(body)["error"])
    except (ValueError, KeyError, TypeError):
        return None


def _reason(reason: object) -> str:
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused (is Prometheus running there?)"
    if isinstance(reason, socket.gaierror):
        return f"host not found ({reason.strerror})"
    if isinstance(reason, TimeoutError):
        return "no answer in time"
    return str(reason)


def _shown(params: dict[str, Any] | list[tuple[str, Any]]) -> str:
    pairs = params.items() if isinstance(params, dict) else params
    query = [str(v) for k, v in pairs if k in ("query", "match[]")]
    return f"for {query[0]!r}" if query else ""
