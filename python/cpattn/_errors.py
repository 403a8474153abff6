"""cpattn.Error raised from Python code, with the .code of the C++ errors; and which exceptions
the ranks of a group learnt of together (context_parallel announces the others)."""

import contextlib
import functools
import inspect

from ._cpattn import Error

_KNOWN = "_cpattn_known_to_the_group"


def error(code, message):
    """A cpattn.Error with .code = `code` (e.g. "invalid_argument", "recompute_diverged")."""
    e = Error(message)
    e.code = code
    return e


def mark_known_to_the_group(exception, group_name):
    """Marks `exception` as one every rank of the group named `group_name` has learnt of: raised
    by an exchange over that group (a grouped call's token count, call agreement or data, which
    fail every rank that takes part, or a refusal the agreement carried to every rank), or
    announced over it by context_parallel already."""
    try:
        setattr(exception, _KNOWN, getattr(exception, _KNOWN, frozenset()) | {group_name})
    except AttributeError:  # an exception type without attributes: it is announced again
        pass


def known_to_the_group(exception, group_name):
    """Whether `exception`, or one it was raised from or while handling (its __cause__, or its
    __context__ unless `raise ... from None` suppressed it: `raise RuntimeError("step failed")
    from e` re-raises what the group knows), is marked known to the group named `group_name`."""
    seen = set()
    while exception is not None and id(exception) not in seen:
        if group_name in getattr(exception, _KNOWN, ()):
            return True
        seen.add(id(exception))
        if exception.__cause__ is not None:
            exception = exception.__cause__
        elif not exception.__suppress_context__:
            exception = exception.__context__
        else:
            exception = None
    return False


@contextlib.contextmanager
def exchange_over(group_name):
    """Marks whatever the block raises as known to the group named `group_name`
    (mark_known_to_the_group), unless the name is "" (one rank): the block is a call over that
    group."""
    try:
        yield
    except BaseException as e:
        if group_name:
            mark_known_to_the_group(e, group_name)
        raise


def over_the_group(fn):
    """Decorates a function that always exchanges over its argument `group` (a ProcessGroup: a
    token count, an agreement, a refusal): what it raises is marked known to that group."""
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        group = signature.bind(*args, **kwargs).arguments["group"]
        with exchange_over(group.group_name):
            return fn(*args, **kwargs)
    return wrapped
