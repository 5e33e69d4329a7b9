"""The single exception type of :mod:`distlab.data`."""


class DataError(RuntimeError):
    """A data problem a user can meet and fix (missing, corrupt, offline, bad spec).

    The message is always one line that says what is wrong and what to do.
    """


def one_line(exc: BaseException) -> str:
    """``Type: first line of the message`` of ``exc``, for embedding in a DataError."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
