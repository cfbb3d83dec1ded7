"""The one error type a user can cause: it names the field at fault and how to fix it."""

from __future__ import annotations


class MoesimError(Exception):
    """A user-caused problem (bad flag, bad file, impossible configuration).

    The CLI prints it as one line and exits non-zero; it never shows a traceback.
    """

    def __init__(self, field: str, problem: str, fix: str = "") -> None:
        self.field = field
        self.problem = problem
        self.fix = fix
        message = f"{field}: {problem}"
        if fix:
            message += f" ({fix})"
        super().__init__(message)

    def __reduce__(self) -> tuple[type[MoesimError], tuple[str, str, str]]:
        """Pickled with its three parts, so an error raised in a worker process reaches the CLI whole."""
        return (type(self), (self.field, self.problem, self.fix))


class DoesNotFit(MoesimError):
    """The model of a scenario does not fit the layout asked for (or any layout searched): its memory, or its
    shape (attention heads or experts the layout cannot split). A sweep skips such a point and lists it;
    every other `MoesimError` is the input's and stops the run."""
