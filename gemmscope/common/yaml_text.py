"""YAML text for the configuration files gemmscope writes for other programs to load: every string
double-quoted, every character outside printable ASCII escaped, so that a name taken from a trace
(which may hold quotes, newlines, `#`, `: ` or any Unicode) loads back as exactly itself and
never as YAML syntax, a number or a boolean (PyYAML's SafeLoader, which those programs use)."""

from __future__ import annotations


def quoted(text: str) -> str:
    """`text` as a double-quoted YAML scalar: printable ASCII as is (but `"` and `\\`), everything
    else by its code point (\\x, \\u, \\U escapes, as YAML 1.1 reads them: JSON's surrogate pairs
    would load as two characters)."""
    out = []
    for char in text:
        code = ord(char)
        if char in '"\\':
            out.append("\\" + char)
        elif 0x20 <= code < 0x7F:
            out.append(char)
        elif code < 0x100:
            out.append(f"\\x{code:02x}")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    return '"' + "".join(out) + '"'


def yaml_text(mapping: dict, indent: int = 0) -> str:
    """`mapping` (nested dicts, strings, booleans) as a YAML block mapping, keys and strings quoted
    (module docstring); an empty dict is `{}`."""
    lines = []
    pad = "  " * indent
    for key, value in mapping.items():
        if isinstance(value, dict) and value:
            lines.append(f"{pad}{quoted(key)}:\n{yaml_text(value, indent + 1)}")
        elif isinstance(value, dict):
            lines.append(f"{pad}{quoted(key)}: {{}}\n")
        elif isinstance(value, bool):
            lines.append(f"{pad}{quoted(key)}: {'true' if value else 'false'}\n")
        elif isinstance(value, str):
            lines.append(f"{pad}{quoted(key)}: {quoted(value)}\n")
        else:
            raise TypeError(f"yaml_text writes dicts, strings and booleans, not {type(value).__name__}")
    return "".join(lines)
