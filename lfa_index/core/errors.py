"""The errors of the core, re-exported from :mod:`lfa_index.errors` (where every error of the package lives).

New code imports :mod:`lfa_index.errors`.
"""

from ..errors import *  # noqa: F401,F403
