"""Code that runs inside the target interpreter for ``verify --engine`` (executed as scripts by path)."""
