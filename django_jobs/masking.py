"""Masking of sensitive payload fields for people who may see jobs but not their secrets.

Payloads carry what a handler needs: an e-mail address, a card fragment, a token for a third
party. The stored payload stays as it is (the handler needs it); what the console shows is a
copy in which the value of every sensitive key, at any depth, is replaced by :data:`MASK`.

A key is sensitive when its job type declares it (``@job(..., sensitive=("card",))``, exact
names, case-insensitive) or when it matches one of the project's ``SENSITIVE_PAYLOAD_KEYS``
patterns (regular expressions searched in the key, case-insensitive). Only people with the
``django_jobs.view_sensitive_payload`` permission see the values.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

from django_jobs.conf import jobs_settings
from django_jobs.registry import registry

MASK = "••••••••"
PERMISSION = "django_jobs.view_sensitive_payload"


class Masker:
    """Masks the sensitive keys of one job type's JSON values."""

    def __init__(self, names: Iterable[str], patterns: Iterable[str]) -> None:
        self._names = frozenset(name.casefold() for name in names)
        joined = "|".join(f"(?:{pattern})" for pattern in patterns)
        self._pattern = re.compile(joined, re.IGNORECASE) if joined else None

    def is_sensitive(self, key: str) -> bool:
        if key.casefold() in self._names:
            return True
        return self._pattern is not None and self._pattern.search(key) is not None

    def mask(self, value: Any) -> Any:
        """A copy of ``value`` with the value of every sensitive key replaced by the mask."""
        if isinstance(value, dict):
            return {
                key: MASK if self.is_sensitive(str(key)) else self.mask(item) for key, item in value.items()
            }
        if isinstance(value, list):
            return [self.mask(item) for item in value]
        return value


def masker_for(type_name: str) -> Masker:
    """The masker of a job type: its declared names and the project's patterns."""
    job_type = registry.get(type_name)
    names = job_type.sensitive if job_type is not None else ()
    return _masker(tuple(names), tuple(jobs_settings.SENSITIVE_PAYLOAD_KEYS))


@lru_cache(maxsize=256)
def _masker(names: tuple[str, ...], patterns: tuple[str, ...]) -> Masker:
    return Masker(names, patterns)
