"""Reading the option a model chose from its free-text answer.

:func:`parse_answer` understands letters in many formats and the option's text
instead of its letter. It never guesses: when the answer names no option, or names
two, it returns ``index=None`` and the battery counts (and shows) it as unparsed.
A wrong letter is worse than an unparsed answer, so every rule below prefers
"unparsed" to a guess.

**Explicit choices** come first. An explicit choice is

* a phrase: "The answer is (B)", "Answer: B", "correct option is C", "final answer: b)",
  "I choose B", "I'd go with (C)", "B is correct", "(B) is the right answer", ``\\boxed{B}``;
* a marker that opens the answer: ``B``, ``B)``, ``B.``, ``(B)``, ``B:``, ``**B) False**``,
  ``B`` alone on the first line — unless the answer lists the options one per line
  (``A) ... / B) ...``), and unless it goes on "is wrong", "would ...".

The **first** explicit choice wins over letters named later in an explanation ("B) False.
Option A would be correct only if ..." is B). Followed by "or C" it is ambiguous. A
self-correction after it — "wait", "actually", "on second thought", "no, it's ..." —
moves the answer to the **last** explicit choice after the correction; after "wait" or
"on second thought" a letter standing alone is one too ("A. On second thought, (B)."). A
retraction with no new choice ("A, wait, no.") is unparsed, and so is an "actually" or
"hmm" followed by other letters. Never the first.

**Without an explicit choice**, first match wins:

1. "option B", "choice (B)", "letter B" naming one option;
2. exactly one distinct letter in parentheses: "... so I pick (B) here";
3. the option's text: the whole answer is an option's text, or exactly one option's text
   appears in it as whole words (ignoring case);
4. exactly one distinct capital letter standing alone ("B is right"), where "A" and "I"
   followed by a lower-case word are read as the article and the pronoun.

Letters that are negated ("not (A)", "A is wrong", "neither A nor B") or hypothetical
("A would be ...", "if B ...") never count in these rules. A letter beyond the item's
options (``E`` with three options) is not an answer; an explicit choice of one is
unparsed.

Examples
--------
>>> parse_answer("The answer is (B).", ["cats", "wolves", "mice"]).letter
'B'
>>> parse_answer("Wolves, of course.", ["cats", "wolves", "mice"]).letter
'B'
>>> parse_answer("B) wolves. Option A would be right only if cats ate them.",
...              ["cats", "wolves", "mice"]).letter
'B'
>>> parse_answer("I think the answer is A, wait, no, it's B.", ["cats", "wolves"]).letter
'B'
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


_END = r"(?![\w'’])"                       # the letter is a word of its own
_LET = r"[(\[]?\s*([A-Za-z])\s*[)\]]?" + _END
_CAP = r"[(\[]?([A-Z])[)\]]?" + _END
# "answer is B", "the correct option: (C)", "final answer - b)"
_PHRASE = re.compile(
    r"\b(?:answer|option|choice)\s*(?:is|would be|will be|should be|must be|=|:|-|–|—)\s*:?\s*"
    r"(?:option\s*|choice\s*|letter\s*)?" + _LET, re.IGNORECASE)
# "I choose B", "I'd go with (C)", "I'll pick option A", "going with B"
_CHOOSE = re.compile(
    r"\b(?:I(?:\s+would|\s+will|['’]d|['’]ll)?\s+(?:choose|pick|select|go\s+with|say)|"
    r"(?:going|go)\s+with|my\s+(?:choice|pick)\s+is)\s+(?:option\s*|choice\s*|answer\s*|letter\s*)?"
    + _LET, re.IGNORECASE)
# "B is correct", "(C) is the right answer", "option B is the best one"
_IS_RIGHT = re.compile(
    r"(?:\b(?:option|choice|answer)\s*)?" + _CAP +
    r"\s+is\s+(?:the\s+)?(?:(?:correct|right|best)\b|answer\b)")
_BOXED = re.compile(r"\\boxed\{\s*\(?([A-Za-z])\)?\s*\}")
# a marker that opens the answer: "B)", "(B)", "B.", "B:", "B -", "B" alone on its line
_MARKER = re.compile(r"^[\s>#\-]*(?:[(\[]([A-Za-z])[)\]]|([A-Za-z])\)|([A-Z])\s*[.:](?!\w)|"
                     r"([A-Z])\s+[-–—]\s|([A-Z])[ \t]*(?:\n|$))")
_LINE_MARKER = re.compile(r"^[\s>#\-]*[(\[]?([A-Z])[)\].:]", re.MULTILINE)
_MARKER_NOT = re.compile(r"\s*(?:is\s+(?:not|wrong|incorrect|false)|isn['’]t|would|could|might|"
                         r"can['’]?not|can['’]t)\b", re.IGNORECASE)
_ITS = re.compile(r"\b(?:it['’]?s|it\s+is|it\s+must\s+be|make\s+that)\s+(?:option\s+)?" + _CAP)
_OR = re.compile(r"\s*[,/]?\s*(?:or|and|/)\s*(?:option\s*)?[(\[]?[A-Za-z][)\]]?" + _END,
                 re.IGNORECASE)
# self-corrections: a strong one retracts the choice before it even when none follows
_STRONG = (r"wait,?\s+no\b|no,?\s+wait\b|actually,?\s+no\b|i\s+was\s+wrong|i\s+made\s+a\s+mistake|"
           r"scratch\s+that|correction\b|let\s+me\s+correct")
_CUE = re.compile(r"\b(?:" + _STRONG + r"|wait\b|actually\b|on\s+second\s+thought|"
                  r"on\s+reflection|i\s+mean\b|let\s+me\s+re-?(?:consider|check|think)|"
                  r"hmm+\b|no,\s+(?:it|the|that)\b)", re.IGNORECASE)
_STRONG_CUE = re.compile(r"\b(?:" + _STRONG + r")", re.IGNORECASE)
_TURN_CUE = re.compile(r"\b(?:wait|on\s+second\s+thought|on\s+reflection|i\s+mean|"
                       r"let\s+me\s+re-?(?:consider|check|think))\b", re.IGNORECASE)
_NAMED = re.compile(r"\b(?:option|choice|letter)\s*" + _LET, re.IGNORECASE)
_PAREN = re.compile(r"\(([A-Za-z])\)")
_BARE = re.compile(r"(?<![\w'’])([A-Z])(?![\w'’])")
_NEGATED = (
    re.compile(r"(?:\bnot|n['’]t|\bneither|\bnor|\brule\s+out|\beliminate|\bexclude|\bexcept)"
               r"\s+(?:option\s*|choice\s*)?" + _CAP, re.IGNORECASE),
    re.compile(_CAP + r"\s+(?:is|seems|looks|would\s+be)\s+(?:not\b|wrong|incorrect|false|"
               r"unlikely|impossible)|" + _CAP + r"\s+isn['’]t", re.IGNORECASE),
)
_HYPOTHETICAL = (
    re.compile(_CAP + r"\s+(?:would|could|might|may)\b"),
    re.compile(r"\b(?:if|whether|unless)\s+(?:option\s*|choice\s*)?" + _CAP, re.IGNORECASE),
)


def _in_range(letter: str, n: int) -> int | None:
    i = LETTERS.find(letter.upper())
    return i if 0 <= i < n else None


def _norm(s: str) -> str:
    return re.sub(r"\s+", " ", s).strip().strip(".,;:!?\"'`*").strip().lower()


def _clean(text: str) -> str:
    """Markdown emphasis and code marks out, ``\\boxed{B}`` as "answer is B"."""
    t = _BOXED.sub(lambda m: f" answer is {m.group(1)} ", text)
    # a heading "### Answer" (or "Final answer") over the choice reads as "Answer:"
    t = re.sub(r"^[ \t]*#+[ \t]*((?:final[ \t]+|correct[ \t]+)?answer)[ \t]*:?[ \t]*$", r"\1:", t,
               flags=re.IGNORECASE | re.MULTILINE)
    return re.sub(r"\*\*|__|`|(?<!\w)\*|\*(?!\w)", "", t).strip()


def _article(letter: str, text: str, end: int) -> bool:
    """``a``/``A``/``I`` used as the article or the pronoun ("a mouse", "I think")."""
    return letter in "aAI" and re.match(r"\s+[a-z]", text[end:]) is not None \
        and not re.match(r"\s+(?:or|and|nor|is|seems|would|could)\b", text[end:])


def _explicit(t: str, n: int) -> list[tuple[int, int, str, str]]:
    """Explicit choices ``(start, end, letter, rule)`` in order of appearance; an opening
    marker beyond the ``n`` options ("D) mice" with three) is none."""
    hits: dict[int, tuple[int, int, str, str]] = {}
    for rx in (_PHRASE, _CHOOSE):
        for m in rx.finditer(t):
            letter = m.group(1)
            if (letter.islower() or letter == "I") and _article(letter, t, m.end()):
                continue
            hits.setdefault(m.start(1), (m.start(1), m.end(), letter, "explicit"))
    for m in _IS_RIGHT.finditer(t):
        before = t[:m.start()]
        if re.search(r"\b(?:if|whether|unless|not|nor|neither|and|or)\s+(?:option\s+)?$", before,
                     re.IGNORECASE):
            continue
        hits.setdefault(m.start(1), (m.start(1), m.end(1), m.group(1), "explicit"))
    for m in _ITS.finditer(t):  # "it's B" (not "it's A good one")
        if not _article(m.group(1), t, m.end()):
            hits.setdefault(m.start(1), (m.start(1), m.end(), m.group(1), "explicit"))
    marker = _MARKER.match(t)
    listed = {x.group(1) for x in _LINE_MARKER.finditer(t)}
    if marker and len(listed) < 2:  # an answer that lists the options has no opening choice
        g = next(i for i, x in enumerate(marker.groups()) if x)
        letter, end = marker.group(g + 1), marker.end(g + 1)
        if not (letter == "I" or _MARKER_NOT.match(t[end:].lstrip(").:]"))
                or _in_range(letter, n) is None):
            hits.setdefault(marker.start(g + 1), (marker.start(g + 1), marker.end(), letter,
                                                  "marker"))
    return sorted(hits.values())


def _excluded(t: str) -> set[str]:
    """Letters named as wrong or as a hypothesis."""
    out = set()
    for rx in _NEGATED + _HYPOTHETICAL:
        for m in rx.finditer(t):
            out |= {g.upper() for g in m.groups() if g}
    return out


def _after_correction(t: str, first: tuple[int, int, str, str], n: int) -> ParsedAnswer | None:
    """The answer after a self-correction that follows ``first`` (None: none, the first
    choice stands).

    After the cue, the last explicit choice wins. Without one, the letters standing alone
    after it decide: after a retraction ("wait, no", "scratch that") or a turn ("wait",
    "on second thought") one such letter is the new answer, and none or several leave a
    retraction unparsed; after a mere "actually" or "hmm" (common in explanations) the
    first choice stands unless another letter is named, which makes it ambiguous.
    """
    cue = _CUE.search(t, first[1])
    if cue is None:
        return None
    rest = t[cue.end():]
    later = [h[2] for h in _explicit(rest, n)]
    if later:
        i = _in_range(later[-1], n)
        return ParsedAnswer(i, "corrected") if i is not None else ParsedAnswer(None, "out-of-range")
    gone = _excluded(rest)
    named = {m.group(1) for m in _BARE.finditer(rest)
             if not _article(m.group(1), rest, m.end())} - gone
    if _STRONG_CUE.match(t, cue.start()) or _TURN_CUE.match(t, cue.start()):
        if len(named) == 1:  # "A. Wait, no — (B)", "A. On second thought: B."
            i = _in_range(named.pop(), n)
            return ParsedAnswer(i, "corrected") if i is not None else \
                ParsedAnswer(None, "out-of-range")
        if named or _STRONG_CUE.match(t, cue.start()):
            return ParsedAnswer(None, "retracted" if not named else "ambiguous")
        return None
    return ParsedAnswer(None, "ambiguous") if named - {first[2].upper()} else None


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
    t = _clean(text)
    if not t:
        return ParsedAnswer(None, "empty")
    explicit = _explicit(t, n)
    if explicit:
        first = explicit[0]
        if _OR.match(t, first[1]):  # "the answer is A or B"
            return ParsedAnswer(None, "ambiguous")
        corrected = _after_correction(t, first, n)
        if corrected is not None:
            return corrected
        i = _in_range(first[2], n)
        return ParsedAnswer(i, first[3]) if i is not None else ParsedAnswer(None, "out-of-range")
    gone = _excluded(t)
    if re.fullmatch(r"[\W_]*[A-Za-z][\W_]*", t):
        i = _in_range(re.sub(r"[\W_]", "", t), n)  # the one letter
        return ParsedAnswer(i, "letter") if i is not None else ParsedAnswer(None, "out-of-range")
    named = {i for m in _NAMED.finditer(t) if m.group(1).upper() not in gone
             and not _article(m.group(1), t, m.end())
             and (i := _in_range(m.group(1), n)) is not None}
    if len(named) == 1:
        return ParsedAnswer(named.pop(), "named")
    paren = {i for m in _PAREN.finditer(t) if m.group(1).upper() not in gone
             and (i := _in_range(m.group(1), n)) is not None}
    if len(paren) == 1 and not named:
        return ParsedAnswer(paren.pop(), "parenthesized")
    if len(paren) > 1 or len(named) > 1:
        return ParsedAnswer(None, "ambiguous")
    i = _text_match(t, options)
    if i is not None:
        return ParsedAnswer(i, "text")
    bare = set()
    for m in _BARE.finditer(t):
        if _article(m.group(1), t, m.end()) or m.group(1) in gone:
            continue
        i = _in_range(m.group(1), n)
        if i is not None:
            bare.add(i)
    if len(bare) == 1:
        return ParsedAnswer(bare.pop(), "bare-letter")
    return ParsedAnswer(None, "ambiguous" if bare else "none")


__all__ = ["ParsedAnswer", "parse_answer"]
