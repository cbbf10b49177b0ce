"""User-facing errors: printed as one line, exit status 2, no traceback."""


class UserError(Exception):
    """A problem with the user's input (config, catalogue entry, file) and how to fix it."""
