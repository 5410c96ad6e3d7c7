"""Errors a user can act on. Each names the file, line and field at fault and maps to exit code 2.

Anything raised as a UserError is printed as one paragraph, without a traceback, before any model
loads or anything is written to MLflow.
"""

from __future__ import annotations

EXIT_USAGE = 2


class UserError(Exception):
    """Bad input: a config, an eval file, a model folder. Message is for a person, not a log."""

    exit_code = EXIT_USAGE


class ConfigError(UserError):
    def __init__(self, where: str, field: str = "", problem: str = "") -> None:
        self.where, self.field, self.problem = where, field, problem
        at = f" field '{field}'" if field else ""
        super().__init__(f"{where}:{at} {problem}".strip())

    def __reduce__(self):  # type: ignore[no-untyped-def]  # crosses process boundaries (Ray, joblib)
        return (type(self), (self.where, self.field, self.problem))


class EvalsetError(UserError):
    def __init__(self, path: str, line: int | None, field: str | None, problem: str) -> None:
        self.path, self.line, self.field, self.problem = path, line, field, problem
        where = f"{path}:{line}" if line else path
        at = f" field '{field}':" if field else ""
        super().__init__(f"{where}:{at} {problem}")

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (type(self), (self.path, self.line, self.field, self.problem))


class SweepError(Exception):
    """A sweep that started but did not end cleanly (its selection or report broke, or Hydra
    stopped it): the command line's exit code 1, raised by the Python API. Every finished variant's
    record is kept in the sweep folder; `selector select --from` can pick it up from there."""


class UsageExit(BaseException):
    """Carries a UserError out of code whose caller swallows Exceptions (Hydra warns and goes on
    when a callback raises one), so that it still reaches the command line's one handler."""

    def __init__(self, error: UserError) -> None:
        super().__init__(str(error))
        self.error = error


class UnavailableError(Exception):
    """A variant that cannot run on this machine (no CUDA, library missing): recorded as skipped."""
