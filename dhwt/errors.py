"""The one exception a user can cause. The CLI prints it as `error: <message>` with exit code 2."""


class DhwtError(Exception):
    """Bad input or an impossible request: a message meant for the user, never a bug."""
