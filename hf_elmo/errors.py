"""The package's error types and the one way a failure becomes a one-line message.

Every error a user can cause is reported as one line that says what is wrong and how to fix it: the converters
raise [`ElmoConversionError`], every `hf-elmo` command (the `embed` pipeline included) [`CommandError`] (with an exit
status), and any other exception that reaches a command is cut to its [`first_line`].
"""


class ElmoConversionError(Exception):
    """A checkpoint, release or model folder that cannot be converted or written; the message says why."""


class CommandError(Exception):
    """
    The failure of an `hf-elmo` command, the base of every error a command reports: one line on stderr, with exit
    status `code`; `quiet` when another process of the command reports it.
    """

    def __init__(self, message: str, code: int = 1, quiet: bool = False):
        super().__init__(message)
        self.code, self.quiet = code, quiet


def first_line(error: BaseException) -> str:
    """The first line of an exception's message (its type's name when it has none), for one-line errors."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
