"""cpattn.Error raised from Python code, with the .code of the C++ errors."""

from ._cpattn import Error


def error(code, message):
    """A cpattn.Error with .code = `code` (e.g. "invalid_argument", "recompute_diverged")."""
    e = Error(message)
    e.code = code
    return e
