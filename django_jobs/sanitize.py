"""Redaction of secrets from error texts before they are stored or logged.

Error messages and tracebacks routinely carry what a handler had in hand: an HTTP client's
request headers, a DSN with a password, an API key in a query string. Everything that reaches
``Job.last_error``, ``JobEvent.error`` or a log line goes through :func:`sanitize` first.
Redaction is pattern-based and errs on the side of hiding too much.
"""

from __future__ import annotations

import re
import traceback
from collections.abc import Callable

from django_jobs.conf import jobs_settings

REDACTED = "[REDACTED]"

# Names whose values are secrets, as they appear in headers, query strings, JSON, reprs, kwargs.
_SECRET_NAME = (
    r"(?:[\w-]*(?:passw(?:or)?d|passwd|pwd|secret|token|api[_-]?key|apikey|access[_-]?key"
    r"|private[_-]?key|client[_-]?secret|session(?:id)?|csrf|signature|credential|auth)[\w-]*)"
)

# The same names as people write them in sentences.
_PROSE_NAME = r"pass(?:word|phrase|wd)|pwd|secret|token|api[ _-]?key|apikey|access[ _-]?key|credentials?"

_QUOTES = "\"'`"


def _redact_unquoted_value(match: re.Match[str]) -> str:
    """``name=value`` with the value redacted. A value written inside a quoted string
    (``"host=db password=hunter2", code="X"``) runs up to the quote that closes the string:
    that quote is kept, so the rest of the line still reads as it was written. Any other
    quote in the value is part of the secret and is redacted with it."""
    name, separator = match.group(1), match.group(2)
    value = match.group(0)[len(name) + len(separator) :]
    if value[-1] in _QUOTES:
        line_start = match.string.rfind("\n", 0, match.start()) + 1
        # An odd count of that quote before the name: a string is open, the value's last
        # character closes it.
        if match.string.count(value[-1], line_start, match.start()) % 2 == 1:
            return name + separator + REDACTED + value[-1]
    return name + separator + REDACTED


_PATTERNS: tuple[tuple[re.Pattern[str], str | Callable[[re.Match[str]], str]], ...] = (
    # Authorization / Cookie / API key headers, up to the end of the line.
    (
        re.compile(
            r"(?im)^(\s*[\"']?(?:proxy-)?(?:authorization|cookie|set-cookie|x-api-key"
            r"|x-auth-token|x-csrftoken)[\"']?\s*[:=]\s*).+$"
        ),
        r"\1" + REDACTED,
    ),
    # The same headers inside a dict repr or JSON on one line: 'Authorization': 'Bearer x'.
    (
        re.compile(
            r"(?i)([\"'](?:proxy-)?(?:authorization|cookie|set-cookie|x-api-key|x-auth-token)"
            r"[\"']\s*:\s*)([\"']).*?\2"
        ),
        r"\1\2" + REDACTED + r"\2",
    ),
    # Bearer / Basic / Token credentials wherever they appear.
    (re.compile(r"(?i)\b(bearer|basic|token)\s+[A-Za-z0-9._~+/=-]{8,}"), r"\1 " + REDACTED),
    # Credentials in URLs: scheme://user:password@host
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^\s:/@]+):[^\s@/]+@"), r"\1:" + REDACTED + "@"),
    # "password": "…" and 'api_key': '…' (JSON, dict reprs)
    (
        re.compile(r"(?i)([\"']" + _SECRET_NAME + r"[\"']\s*:\s*)([\"']).*?(?<!\\)\2"),
        r"\1\2" + REDACTED + r"\2",
    ),
    # "password": 12345 (unquoted JSON values)
    (
        re.compile(r"(?i)([\"']" + _SECRET_NAME + r"[\"']\s*:\s*)(?![\"'\s])[^,}\]\s]+"),
        r"\1" + REDACTED,
    ),
    # password=…, ?token=…&, api_key: … (kwargs, query strings, log lines, DSNs)
    (
        re.compile(r"(?i)(?<![\w-])(" + _SECRET_NAME + r")(\s*[=:]\s*)(?![\s\"'\[])[^\s&,;)\]}]+"),
        _redact_unquoted_value,
    ),
    (
        re.compile(r"(?i)(?<![\w-])(" + _SECRET_NAME + r")(\s*=\s*)([\"']).*?(?<!\\)\3"),
        r"\1\2\3" + REDACTED + r"\3",
    ),
    # Secrets in prose: "with password 'hunter2'", 'the token was "abc"' (any quoted value)...
    (
        re.compile(r"(?i)\b(" + _PROSE_NAME + r")(\s+(?:is|was|of|=|:)?\s*)([\"'`])(?!\s).{1,200}?(?<!\\)\3"),
        r"\1\2\3" + REDACTED + r"\3",
    ),
    # ...and "the password is hunter2", "using token abc123": an unquoted word right after the
    # name counts only if it has a digit or a symbol in it, so "password reset failed",
    # "token expired" and "the password is incorrect" are left as they are.
    (
        re.compile(
            r"(?i)\b(" + _PROSE_NAME + r")(\s+(?:(?:is|was|of)\s+)?)"
            r"(?=[A-Za-z]*[0-9!@#$%^&*+=~_-])[^\s,;'\"`)\]}]{4,}"
        ),
        r"\1\2" + REDACTED,
    ),
    # Well-known token shapes that need no name around them.
    (re.compile(r"\beyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}"), REDACTED),  # JWT
    (re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), REDACTED),  # AWS access key id
    (re.compile(r"\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{8,}"), REDACTED),  # Stripe-style keys
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}"), REDACTED),  # GitHub tokens
    (re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}"), REDACTED),  # Slack tokens
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.S), REDACTED),
)


def sanitize(text: str) -> str:
    """Return ``text`` with every secret it appears to contain replaced by ``[REDACTED]``."""
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


_SECRET_KEY = re.compile(_SECRET_NAME, re.IGNORECASE)


def is_secret_name(name: str) -> bool:
    """Whether a key named ``name`` holds a secret (``password``, ``api_key``, ``auth_token``):
    its value is redacted whatever it looks like."""
    return _SECRET_KEY.fullmatch(name) is not None


def truncate(text: str, limit: int) -> str:
    """Keep the head and the tail of a long text: the message and the innermost frames."""
    if len(text) <= limit:
        return text
    marker = "\n… [truncated] …\n"
    head = max(0, (limit - len(marker)) // 3)
    tail = max(0, limit - len(marker) - head)
    return text[:head] + marker + text[len(text) - tail :]


#: Longest error code stored (the column's width).
MAX_CODE_CHARS = 100
_CODE_UNSAFE = re.compile(r"[^\w.:/-]+")


def storable_text(text: object, limit: int) -> str:
    """``text`` as PostgreSQL can store it: a str without NUL characters or lone surrogates
    (which UTF-8 cannot encode), secrets redacted, at most ``limit`` characters."""
    try:
        value = text if isinstance(text, str) else str(text)
    except Exception as exc:  # a __str__ that raises is input too
        value = f"<unprintable {type(text).__name__}: {type(exc).__name__}>"
    # Redaction costs time in proportion to the text (more for long words): cut a huge text to
    # a bounded size first. The cut falls far inside the part that truncate() drops anyway, so
    # what is kept was redacted with all the context it had.
    value = truncate(value, 4 * limit + 1000)
    value = value.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")
    return truncate(sanitize(value), limit)


def error_code(code: object, default: str = "UNKNOWN") -> str:
    """A handler's error ``code`` as a bounded, printable string; ``default`` when unusable.

    Codes are grouped and searched on: anything but letters, digits and ``_ . : / -`` becomes
    ``_`` (``"http 503"`` → ``"http_503"``), and a code longer than the column is cut.
    """
    if code is None or isinstance(code, bool):
        return default
    if isinstance(code, int | str):
        cleaned = _CODE_UNSAFE.sub("_", storable_text(code, MAX_CODE_CHARS * 2)).strip("_")
        return cleaned[:MAX_CODE_CHARS] or default
    return default


def describe(exc: BaseException) -> str:
    """The sanitized, bounded text stored for an error: message first, then the traceback.

    Never raises: an exception whose ``__str__`` or traceback cannot be rendered is described
    by its class name.
    """
    try:
        message = f"{type(exc).__name__}: {exc}"
        trace = "".join(traceback.format_exception(exc))
        text = f"{message}\n\n{trace}"
    except BaseException as inner:  # a __str__ or traceback that raises
        text = f"{type(exc).__name__} (its description raised {type(inner).__name__})"
    return storable_text(text, jobs_settings.MAX_ERROR_CHARS)
