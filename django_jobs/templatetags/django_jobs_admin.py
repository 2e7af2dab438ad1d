"""Filters for the console's templates."""

from __future__ import annotations

import json
from typing import Any

from django import template

register = template.Library()


@register.filter
def seconds(value: float | None) -> str:
    """A duration in seconds, in the unit a person reads it in: 850 ms, 42 s, 11 min, 3 h, 30 d."""
    if value is None:
        return "—"
    value = float(value)
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 120:
        return f"{value:.1f} s" if value < 10 else f"{value:.0f} s"
    if value < 7200:
        return f"{value / 60:.0f} min"
    if value < 172800:
        return f"{value / 3600:.0f} h"
    return f"{value / 86400:.0f} d"


@register.filter
def as_json(value: Any) -> str:
    """A JSON value as compact JSON text (not a Python repr)."""
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


@register.filter
def capped(value: int | None, cap: int) -> str:
    """A count read up to ``cap`` rows: "10,000+" at the cap (there are at least that many),
    else the count, with thousands separated."""
    if value is None:
        return "—"
    return f"{cap:,}+" if value >= cap else f"{value:,}"


@register.filter
def count(value: int | None) -> str:
    """A count, with thousands separated."""
    return "—" if value is None else f"{value:,}"
