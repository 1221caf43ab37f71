"""The one exception type a user can cause: it ends a job with a single line, never a traceback."""


class NogradError(Exception):
    """A problem the user can fix (config, missing model or data, bad reward): says what and where."""


def one_line(error: BaseException) -> str:
    """The exception's type and the first line of its message, short enough for a log line."""
    message = str(error).strip().splitlines()
    text = f"{type(error).__name__}: {message[0]}" if message else type(error).__name__
    return text if len(text) <= 200 else text[:197] + "..."
