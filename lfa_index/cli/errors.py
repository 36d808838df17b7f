"""The error every command raises for an unusable command-line input (defined in :mod:`lfa_index.errors`)."""

from lfa_index.errors import CLIError

__all__ = ["CLIError"]
