"""Text taken from a model (tensor, subgraph and metadata names, custom operator codes) made safe to print.

A model is untrusted input: a name holding a newline would split lowtide's one-line errors, and one holding an
escape sequence could rewrite the user's terminal. Every such name goes through `escape` as it is read.
"""

from __future__ import annotations


def escape(text: str) -> str:
    """`text` with every character that is not printable (control characters, escape sequences, DEL, C1 controls,
    invisible format characters such as a right-to-left override) shown as its Python escape: a newline as `\\n`,
    ESC as `\\x1b`."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def model_text(value: bytes | str | None) -> str:
    """A string field of the flatbuffer (bytes, possibly not UTF-8) as printable text."""
    if value is None:
        return ""
    return escape(value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value))
