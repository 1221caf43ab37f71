"""The one exception type a user can cause: it ends a job with a single line, never a traceback."""


class NogradError(Exception):
    """A problem the user can fix (config, missing model or data, bad reward): says what and where."""
