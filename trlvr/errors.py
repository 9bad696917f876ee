"""The one exception type for a user's mistake (bad file, row, field, key, path or setting).

The CLI prints a `UserError` as one line on stderr and exits 2 (no traceback unless `--debug`);
anything else is a bug and keeps its traceback. Messages name the file/row/field/key and what was
expected. This module imports nothing from trlvr: every layer may raise it.
"""

from __future__ import annotations


class UserError(ValueError):
    """Bad input from the user; the message is the whole story (file, row, field or key, what was wanted)."""


EXIT_BAD_INPUT = 2  # distinct from `trlvr data check`'s 1 ("some rows are bad")
