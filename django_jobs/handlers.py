"""What a job handler is: ``handler(ctx, payload)``, where it is defined, and the check that a
callable ``@job`` decorates can be called so.

Part of the registry (it imports only pure rules and ``conf``): ``@job`` refuses an unfit
handler at import time, and ``Registry.register`` names a handler by where it is defined.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from django_jobs.runtime.context import JobContext

Handler = Callable[["JobContext", dict[str, Any]], Any]


class InvalidHandler(TypeError):
    """A handler that cannot be called as ``handler(ctx, payload)``."""


def qualname(handler: Callable[..., Any]) -> str:
    """Where the handler is defined: ``module.function`` (the wrapped one of a ``partial``, the
    class of a callable instance)."""
    target: Any = handler.func if isinstance(handler, functools.partial) else handler
    if not hasattr(target, "__qualname__"):  # a callable instance: its class names it
        target = type(target)
    return f"{getattr(target, '__module__', '?')}.{target.__qualname__}"


def refuse_unfit_handler(name: str, handler: Any) -> None:
    """Raise ``InvalidHandler`` unless ``handler(ctx, payload)`` is a call it accepts.

    Refused here, at import time, a handler that cannot take ``(ctx, payload)`` would otherwise
    pass every check and then fail each attempt at run time with an opaque ``UNKNOWN``.
    """
    if not callable(handler):
        raise InvalidHandler(f"@job({name!r}) must decorate a function, not {type(handler).__name__}")
    try:
        signature = inspect.signature(handler)
    except (TypeError, ValueError):
        return  # a builtin without introspectable parameters: nothing to hold against it
    try:
        signature.bind(None, None)
    except TypeError as exc:
        raise InvalidHandler(
            f"job handler {qualname(handler)}{signature} for type {name!r} cannot be called as "
            f"handler(ctx, payload): {exc}. Take exactly two positional parameters, "
            "e.g. def handler(ctx, payload)."
        ) from None
