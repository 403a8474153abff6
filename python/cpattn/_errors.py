"""cpattn.Error raised from Python code, with the .code of the C++ errors; and which exceptions
the ranks of a group learnt of together (context_parallel announces the others)."""

import contextlib
import functools

from ._cpattn import Error

_KNOWN = "_cpattn_known_to_the_group"


def error(code, message):
    """A cpattn.Error with .code = `code` (e.g. "invalid_argument", "recompute_diverged")."""
    e = Error(message)
    e.code = code
    return e


def mark_known_to_the_group(exception):
    """Marks `exception` as one every rank of its group has learnt of: raised by an exchange over
    the group (a grouped call's token count, call agreement or data, which fail every rank that
    takes part, or a refusal the agreement carried to every rank), or announced by
    context_parallel already."""
    try:
        setattr(exception, _KNOWN, True)
    except AttributeError:  # an exception type without attributes: it is announced again
        pass


def known_to_the_group(exception):
    """Whether `exception`, or one it was raised from or while handling (its __cause__ or
    __context__ chain: `raise RuntimeError("step failed") from e`), is marked by
    mark_known_to_the_group."""
    seen = set()
    while exception is not None and id(exception) not in seen:
        if getattr(exception, _KNOWN, False):
            return True
        seen.add(id(exception))
        exception = exception.__cause__ or exception.__context__
    return False


@contextlib.contextmanager
def exchange_over(group):
    """Marks whatever the block raises as known to the group (mark_known_to_the_group) when
    `group` is not None or "": the block is a call over that group."""
    try:
        yield
    except BaseException as e:
        if group:
            mark_known_to_the_group(e)
        raise


def over_the_group(fn):
    """Decorates a function that always exchanges over a group (a token count, an agreement, a
    refusal): what it raises is marked known to the group."""
    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        with exchange_over(True):
            return fn(*args, **kwargs)
    return wrapped
