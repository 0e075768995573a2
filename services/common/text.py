"""Text from jobs and tokens as it is shown to a person: the status page and the ``reelrl`` console.

A job's name, reason or message is whatever a client sent or an exception said. Bidirectional-text
controls in it (U+202A-E embeddings and overrides, U+2066-9 isolates, the marks) would reverse the
text around them, so they are shown as their code points; on the console, Rich markup in it (``[/x]``)
would be read as markup and crash the command, so it is escaped.
"""

from __future__ import annotations

from typing import Any

_BIDI = frozenset([*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x200E, 0x200F, 0x061C])


def visible(text: str) -> str:
    """``text`` with every bidi control written as ``<U+202E>``."""
    return "".join(f"<U+{ord(c):04X}>" if ord(c) in _BIDI else c for c in text)


def plain(value: Any) -> str:
    """Any value as console text for Rich: bidi controls visible, markup escaped (printed literally)."""
    from rich.markup import escape

    return escape(visible(str(value)))
