"""HTML building blocks of the report: escaping, number formatting, clipped text, chips."""

from __future__ import annotations

import json
import math
from html import escape
from typing import Any

MAX_TEXT_CHARS = 20_000


def esc(value: Any) -> str:
    """HTML-escaped text of any value (quotes too: safe in attributes)."""
    return escape(str(value))


def fmt(value: Any, *, percent: bool = False) -> str:
    """A value for display: numbers rounded, containers as compact JSON, None as a dash."""
    if value is None:
        return "\u2013"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return "\u2013"
        if percent:
            return f"{100 * value:.1f}%"
        return f"{value:.3f}" if abs(value) < 1000 else f"{value:.0f}"
    if isinstance(value, dict | list):
        return clip(json.dumps(value, ensure_ascii=False, default=str), 400)
    return clip(str(value), 400)


def clip(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    """`text` cut to head + tail with a marker when longer than `limit` characters."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters not shown ...]\n{text[-half:]}"


def text_of(content: Any) -> str:
    """Message content as text (a string, OpenAI content parts, or anything JSON-able)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return json.dumps(content, ensure_ascii=False, default=str)


def pre(text: str, cls: str = "") -> str:
    """A `<pre>` of clipped, escaped text."""
    attr = f' class="{cls}"' if cls else ""
    return f"<pre{attr}>{esc(clip(text))}</pre>"


def chip(label: str, value: Any = None) -> str:
    """A small label (with a bold value) for metadata rows."""
    if value is None:
        return f'<span class="chip">{esc(label)}</span>'
    return f'<span class="chip">{esc(label)} <b>{esc(value)}</b></span>'


def script_json(data: Any) -> str:
    """JSON safe inside a `<script>` element (no `<`, `>` or `&` can end or confuse it)."""
    text = json.dumps(data, ensure_ascii=True)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
