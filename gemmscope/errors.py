"""The one error type user-facing code raises for bad input: the CLI prints it as one line, exit 2."""


class InputError(Exception):
    """Bad input or usage: a missing or unreadable file, a trace that is not an nsys export, an
    unknown preset. The message is one line that says what is wrong and, where it helps, what to do."""
