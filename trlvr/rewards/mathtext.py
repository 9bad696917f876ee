"""One reading of math text: ``normalize_math`` rewrites the Unicode and typographic forms that real
data sets and models write into the ASCII/LaTeX forms math-verify reads, and it is the only place
that does. The reward (gold and answer alike, so training and evaluation), ``trlvr data check``'s gold
check and its "reads differently" flag all call it; nothing else rewrites math text.

The readings, form by form (what math-verify 0.9.0 does with the raw form, probed on its installed
parser through ``math_verify.parse("\\boxed{...}")``, in brackets):

- minus signs U+2212 (minus), U+FE63 (small hyphen-minus), U+FF0D (full-width hyphen-minus) -> ``-``
  everywhere [U+2212 already reads as minus; the other two do not parse];
- dashes U+2012-U+2015 (figure dash, en dash, em dash, horizontal bar) -> ``-`` only where a sign can
  stand: before a digit, ``.``, ``(`` or ``\\``, and not after a letter, digit or closing bracket
  (``–5``, ``x = —3``); between two numbers (``3–5``) a dash is a range and stays [none parse];
- fraction slash U+2044 and division slash U+2215 -> ``/`` [U+2215 already reads as division; U+2044
  does not, and inside ``$...$`` ``3⁄4`` reads as 3];
- full-width forms U+FF01-U+FF5E (digits, letters, ``＋`` ``．`` ...) -> their ASCII letters [full-width
  digits do not parse];
- thousands separators: digit groups ``d{1,3}`` then groups of exactly three digits, separated by one
  kind of space (ASCII, no-break U+00A0, thin U+2009, narrow no-break U+202F, figure U+2007) or the
  LaTeX thin space ``\\,``, not inside a decimal part, are joined: ``1 234 567`` -> ``1234567``
  [math-verify reads ``1\u2009234`` as 234 and ``1 234 567`` as 802]. Commas are left to math-verify,
  which already reads ``1,234`` as 1234. Other Unicode spaces become ASCII spaces;
- middle dot U+00B7 and dot operator U+22C5 -> ``\\cdot`` (multiplication) [U+22C5 already reads as
  multiplication; U+00B7 does not parse, and inside ``$...$`` ``2·5`` reads as 2]. The middle dot is
  *not* read as a decimal point: math-verify's one reading of a centred dot is multiplication, and a
  gold written with the old British decimal point (``2·5`` for 2.5) is flagged by ``trlvr data check``
  because it reads differently raw and normalised;
- ``×`` -> ``\\times``, ``÷`` -> ``\\div`` [both already read this way in LaTeX];
- the degree sign ``°`` (U+00B0) -> ``^{\\circ}``, the LaTeX degree (the grader then drops it as a unit:
  `trlvr.rewards.equivalence`) [math-verify reads ``30°`` as 30 inside ``$...$`` and not at all inside
  ``\\boxed{}``];
- superscripts: a run of ``⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻⁼⁽⁾ⁿⁱ`` -> ``^{...}`` (``x⁻¹`` -> ``x^{-1}``) [none parse];
- vulgar fractions ``½ ⅓ ¾ ...`` -> ``\\frac{p}{q}``, and after digits a mixed number: ``3½`` ->
  ``(3+\\frac{1}{2})`` [none parse; inside ``$...$`` ``3½`` reads as 3].

Pure and linear in its input: one ``str.translate`` and three regex passes whose patterns cannot
backtrack (possessive quantifiers, lookbehinds of one character). ASCII text comes back unchanged
apart from thousands groups separated by spaces.

>>> normalize_math("\u22121\u2009234\u00b7x\u00b2 + \u00bd")
'-1234\\\\cdot x^{2} + \\\\frac{1}{2}'
"""

from __future__ import annotations

import re
import unicodedata

MINUS_SIGNS = "\u2212\ufe63\uff0d"
SIGN_DASHES = "\u2012\u2013\u2014\u2015"
SLASHES = "\u2044\u2215"
NUMBER_SPACES = "\u00a0\u2009\u202f\u2007"
OTHER_SPACES = "\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2008\u200a\u205f\u3000"
SUPERSCRIPTS = "⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻⁼⁽⁾ⁿⁱ"
VULGAR = "½⅓⅔¼¾⅕⅖⅗⅘⅙⅚⅐⅛⅜⅝⅞⅑⅒↉"

_CHARS = {ord(c): "-" for c in MINUS_SIGNS}
_CHARS.update({ord(c): "/" for c in SLASHES})
_CHARS.update({c: chr(c - 0xFEE0) for c in range(0xFF01, 0xFF5F)})  # full-width ASCII
_CHARS.update(
    {0x00B7: "\\cdot ", 0x22C5: "\\cdot ", 0x00D7: "\\times ", 0x00F7: "\\div ", 0x00B0: "^{\\circ}"}
)
_SUPER = str.maketrans(SUPERSCRIPTS, "0123456789+-=()ni")
_SPACES = str.maketrans(dict.fromkeys(NUMBER_SPACES + OTHER_SPACES, " "))
_FRACTIONS = {
    c: unicodedata.normalize("NFKC", c).replace("\u2044", "/").split("/") for c in VULGAR
}  # "½" -> ["1", "2"]

# A sign dash: not after a letter, digit or closer; before a digit, '.', '(' or a LaTeX command.
_SIGN_DASH = re.compile(rf"(?<![\w)\]}}])[{SIGN_DASHES}](?=[\d.(\\])")
# A maximal run of digit groups with spaces (or \,) between them; possessive: no backtracking.
_GROUPS = re.compile(rf"(?<![\d.])\d++(?:(?:[ {NUMBER_SPACES}]|\\,)\d++)*+")
_SEP = re.compile(rf"[ {NUMBER_SPACES}]|\\,")
_SUPER_RUN = re.compile(f"[{SUPERSCRIPTS}]++")
_VULGAR_RUN = re.compile(rf"(?<![\d.])(\d*+)([{VULGAR}])")


def _join_thousands(m: re.Match) -> str:
    run = m.group()
    seps = _SEP.findall(run)
    if not seps:
        return run
    groups = _SEP.split(run)
    if len(set(seps)) == 1 and len(groups[0]) <= 3 and all(len(g) == 3 for g in groups[1:]):
        return "".join(groups)
    return run  # not a thousands pattern (e.g. "2 3"): spaces stay


def _vulgar(m: re.Match) -> str:
    whole, (num, den) = m.group(1), _FRACTIONS[m.group(2)]
    frac = f"\\frac{{{num}}}{{{den}}}"
    return f"({whole}+{frac})" if whole else frac


def normalize_math(text: str) -> str:
    """``text`` with every Unicode/typographic form of the module's table in its one reading.

    >>> (normalize_math("\u2013\uff13\u2044\uff14"), normalize_math("3\u20135"),
    ...     normalize_math("2\u00d73\u00f76"))
    ('-3/4', '3\u20135', '2\\\\times 3\\\\div 6')
    >>> normalize_math("1 234 567.5"), normalize_math("2 3"), normalize_math("0.123 456")
    ('1234567.5', '2 3', '0.123 456')
    >>> normalize_math("x\u207b\u00b9"), normalize_math("3\u00bd")
    ('x^{-1}', '(3+\\\\frac{1}{2})')
    """
    if text.isascii() and " " not in text and "\\," not in text:
        return text
    text = _SIGN_DASH.sub("-", text.translate(_CHARS))
    text = _GROUPS.sub(_join_thousands, text).translate(_SPACES)
    if not text.isascii():
        text = _SUPER_RUN.sub(lambda m: "^{" + m.group().translate(_SUPER) + "}", text)
        text = _VULGAR_RUN.sub(_vulgar, text)
    return text
