"""A small deterministic YAML writer for the manifests: block mappings and sequences in the order
given, every string double-quoted as JSON (a valid YAML scalar, so "1", "on" or "0755" never turn into
numbers or booleans), integers and booleans plain. No dependency; tests read the output back with
PyYAML and compare it with the objects.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-/]*$")
_RESERVED = frozenset({"y", "n", "yes", "no", "on", "off", "true", "false", "null"})


def _key(key: str) -> str:
    return key if _PLAIN_KEY.fullmatch(key) and key.lower() not in _RESERVED else _quoted(key)


def _quoted(text: str) -> str:
    """A double-quoted scalar: JSON's escapes, but \\UXXXXXXXX past U+FFFF (YAML has no surrogate pairs)."""
    return '"' + "".join(f"\\U{ord(c):08X}" if ord(c) > 0xFFFF else json.dumps(c)[1:-1] for c in text) + '"'


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return _quoted(value)
    raise TypeError(f"yamltext cannot write {type(value).__name__}")


def _lines(value: Any, indent: int) -> Iterable[str]:
    pad = " " * indent
    if isinstance(value, Mapping):
        if not value:
            yield pad + "{}"
        for key, item in value.items():
            if isinstance(item, Mapping | list | tuple) and item:
                yield f"{pad}{_key(key)}:"
                yield from _lines(item, indent + (0 if isinstance(item, list | tuple) else 2))
            else:
                yield f"{pad}{_key(key)}: {_inline(item)}"
    elif isinstance(value, Sequence) and not isinstance(value, str):
        for item in value:
            if isinstance(item, Mapping) and item:
                first, *rest = list(_lines(item, indent + 2))
                yield f"{pad}- {first[indent + 2 :]}"
                yield from rest
            elif isinstance(item, list | tuple) and item:
                yield f"{pad}-"
                yield from _lines(item, indent + 2)
            else:
                yield f"{pad}- {_inline(item)}"
    else:
        yield pad + _scalar(value)


def _inline(value: Any) -> str:
    if isinstance(value, Mapping):
        return "{}"
    if isinstance(value, list | tuple):
        return "[]"
    return _scalar(value)


def dump(document: Mapping[str, Any]) -> str:
    return "\n".join(_lines(document, 0)) + "\n"


def dump_all(documents: Sequence[Mapping[str, Any]], *, comments: Sequence[str] = ()) -> str:
    """Documents separated by `---`, the way kubectl apply -f reads a multi-object file, after a
    comment line for each of `comments` (one line each: a line break would end the comment)."""
    for comment in comments:
        if "\n" in comment or "\r" in comment:
            raise ValueError(f"a comment is one line: {comment!r}")
    head = "".join(f"# {comment}\n" for comment in comments)
    return head + "---\n" + "---\n".join(dump(document) for document in documents)
