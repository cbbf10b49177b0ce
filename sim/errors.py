"""User-facing errors: printed as one line, exit status 2, no traceback."""


class UserError(Exception):
    """A problem with the user's input (config, catalogue entry, file) and how to fix it."""


def shown(value, width: int = 40, text: bool = False) -> str:
    """A value for a one-line message, cut short: its repr (numpy scalars as Python's, so a
    newline cannot split the line), or with `text` a string as written (a path)."""
    if hasattr(value, "item") and not hasattr(value, "__len__"):  # a numpy scalar
        value = value.item()
    out = value if text and isinstance(value, str) else repr(value)
    return out if len(out) <= width else out[: width - 3] + "..."


def key_name(key) -> str:
    """A key for a one-line message: as written when it is plain text, else shown()."""
    return key if isinstance(key, str) and key.isprintable() and len(key) <= 40 else shown(key)
