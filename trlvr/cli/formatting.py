"""How `--help` shows an option: its default beside its help, unless the help already says it."""

from __future__ import annotations

import argparse
import copy


def _shows_default(action: argparse.Action) -> bool:
    """Whether a default is worth showing (`is`: a default of 0 is shown, False and None are not)."""
    unset = action.default is None or action.default is False or action.default is argparse.SUPPRESS
    return not (action.required or not action.option_strings or unset or action.default == [])


class DefaultsFormatter(argparse.HelpFormatter):
    """argparse's ArgumentDefaultsHelpFormatter without the noise: no "(default: None)" or "False",
    nothing for required options and positionals, nothing where the help names its default itself,
    and a default shown for an option that has no help text."""

    def _format_action(self, action: argparse.Action) -> str:
        if action.help is None and _shows_default(action):
            action = copy.copy(action)
            action.help = "(default: %(default)s)"
        return super()._format_action(action)

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text or not _shows_default(action):
            return text
        return f"{text} (default: %(default)s)"
