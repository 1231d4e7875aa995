"""The errors a user can fix. The CLI prints them as one line and exits with `exit_code`;
anything else is a bug or an environment failure and exits 1 (with a traceback under --debug)."""


class BertctlError(Exception):
    """Bad usage, settings or input data: exit code 2, one line naming what and where."""

    exit_code = 2


class IntegrityError(BertctlError):
    """An artifact's files no longer match its manifest (inspect --verify): exit code 1."""

    exit_code = 1


class Interrupted(BertctlError):
    """Ctrl-C or SIGTERM during a run that keeps something on purpose (training checkpoints,
    so that the rerun resumes): exit code 130, and the message says what is left where."""

    exit_code = 130
