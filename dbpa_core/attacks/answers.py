"""Reading the option a model chose from its free-text answer.

:func:`parse_answer` understands letters in many formats and the option's text
instead of its letter. It never guesses: when the answer names no option, or names
two, it returns ``index=None`` and the battery counts (and shows) it as unparsed.

Rules, first match wins:

1. an explicit phrase: "The answer is (B)", "Answer: B", "correct option is C", "final
   answer: b)" — the last such phrase when there are several;
2. the whole answer is one letter: ``B``, ``(b)``, ``B.``, ``**B**``;
3. the answer starts with a marker: ``(B) Paris``, ``B) Paris``, ``B. Paris``, ``B: Paris``;
4. "option B", "choice (B)", "letter B";
5. exactly one distinct letter in parentheses: "... so I pick (B) here";
6. the option's text: the whole answer is an option's text, or exactly one option's text
   appears in it as whole words (ignoring case);
7. exactly one distinct capital letter standing alone ("B is right"), where "A" and "I"
   followed by a lower-case word are read as the article and the pronoun.

A letter beyond the item's options (``E`` with three options) is not an answer.

Examples
--------
>>> parse_answer("The answer is (B).", ["cats", "wolves", "mice"]).letter
'B'
>>> parse_answer("Wolves, of course.", ["cats", "wolves", "mice"]).letter
'B'
>>> parse_answer("A mouse is afraid of cats.", ["cats", "wolves"]).letter
'A'
>>> parse_answer("(A) or (B)", ["cats", "wolves"]).index is None
True
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from .items import LETTERS


@dataclass(frozen=True)
class ParsedAnswer:
    """``index`` of the chosen option (None: unparsed) and the rule that found it."""

    index: int | None
    how: str

    @property
    def letter(self) -> str | None:
        return None if self.index is None else LETTERS[self.index]

    @property
    def parsed(self) -> bool:
        return self.index is not None


_EXPLICIT = re.compile(
    r"\b(?:answer|option|choice)\b\s*(?:is|would be|will be|should be|=|:|-)?\s*[:\-]?\s*"
    r"(?:option\s*|choice\s*|letter\s*)?(?:\*\*)?\(?\s*([A-Za-z])\s*\)?(?:\*\*)?(?![\w'’])",
    re.IGNORECASE)
_ONLY = re.compile(r"^[\W_]*([A-Za-z])[\W_]*$")
_MARKER = re.compile(r"^[\s*_`>#-]*(?:\(([A-Za-z])\)|\[([A-Za-z])\]|([A-Za-z])\s*[\).:\]])(?=\s|$|\*)")
_NAMED = re.compile(r"\b(?:option|choice|letter)\s*\(?([A-Za-z])\)?(?![\w'’])", re.IGNORECASE)
_PAREN = re.compile(r"\(([A-Za-z])\)")
_BARE = re.compile(r"(?<![\w'’])([A-Z])(?![\w'’])")


def _in_range(letter: str, n: int) -> int | None:
    i = LETTERS.find(letter.upper())
    return i if 0 <= i < n else None


def _norm(s: str) -> str:
    return re.sub(r"\s+", " ", s).strip().strip(".,;:!?\"'`*").strip().lower()


def _text_match(text: str, options: Sequence[str]) -> int | None:
    whole = _norm(text)
    for i, o in enumerate(options):
        if _norm(o) and whole == _norm(o):
            return i
    low = text.lower()
    spans: dict[int, list[tuple[int, int]]] = {}
    for i, o in enumerate(options):
        o_n = _norm(o)
        if not o_n:
            continue
        pat = r"(?<![\w.])" + re.escape(o_n).replace(r"\ ", r"\s+") + r"(?!\w|\.\d)"
        got = [m.span() for m in re.finditer(pat, low)]
        if got:
            spans[i] = got
    # an option found only inside another found option's text ("agree" in "strongly
    # agree") is not named by itself; one found on its own ("agree or disagree") is
    found = [i for i, own in spans.items()
             if not all(any(j != i and a <= s0 and e1 <= b for j, other in spans.items()
                            for a, b in other) for s0, e1 in own)]
    return found[0] if len(found) == 1 else None


def parse_answer(text: str | None, options: Sequence[str]) -> ParsedAnswer:
    """The option chosen in ``text`` (see the module's rules), or ``index=None``.

    Parameters
    ----------
    text : str
        The model's answer.
    options : sequence of str
        The item's options in the order shown (letter A is ``options[0]``).
    """
    n = len(options)
    if not text or not text.strip():
        return ParsedAnswer(None, "empty")
    t = text.strip()
    hits = [i for m in _EXPLICIT.finditer(t) if (i := _in_range(m.group(1), n)) is not None
            and not (m.group(1) in "ai" and re.match(r"\s+[a-z]", t[m.end():]))]
    if hits:
        return ParsedAnswer(hits[-1], "explicit")
    m = _ONLY.match(t)
    if m:
        i = _in_range(m.group(1), n)
        return ParsedAnswer(i, "letter") if i is not None else ParsedAnswer(None, "out-of-range")
    paren = {i for m in _PAREN.finditer(t) if (i := _in_range(m.group(1), n)) is not None}
    m = _MARKER.match(t)
    if m:
        i = _in_range(next(g for g in m.groups() if g), n)
        if i is not None and paren <= {i}:
            return ParsedAnswer(i, "marker")
    named = {i for m in _NAMED.finditer(t) if (i := _in_range(m.group(1), n)) is not None}
    if len(named) == 1:
        return ParsedAnswer(named.pop(), "named")
    if len(paren) == 1:
        return ParsedAnswer(paren.pop(), "parenthesized")
    if len(paren) > 1:
        return ParsedAnswer(None, "ambiguous")
    i = _text_match(t, options)
    if i is not None:
        return ParsedAnswer(i, "text")
    bare = set()
    for m in _BARE.finditer(t):
        if m.group(1) in "AI" and re.match(r"\s+[a-z]", t[m.end():]) \
                and not re.match(r"\s+(?:or|and|nor)\b", t[m.end():]):
            continue  # the article "A", the pronoun "I"
        i = _in_range(m.group(1), n)
        if i is not None:
            bare.add(i)
    if len(bare) == 1:
        return ParsedAnswer(bare.pop(), "bare-letter")
    return ParsedAnswer(None, "ambiguous" if bare else "none")


__all__ = ["ParsedAnswer", "parse_answer"]
