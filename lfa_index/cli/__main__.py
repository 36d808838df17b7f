"""``python -m lfa_index.cli``: the same as the ``lfa-index`` command."""

import sys

from . import main

sys.exit(main())
