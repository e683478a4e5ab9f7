"""The one exception the CLI turns into a one-line message and exit status 1."""


class ToolError(Exception):
    """A refusal or failure the user can act on; the message names the file and the reason."""
