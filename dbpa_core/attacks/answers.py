"""Reading the option a model chose from its free-text answer.

:func:`parse_answer` understands letters in many formats and the option's text
instead of its letter. It never guesses: when the answer names no option, or names
two, it returns ``index=None`` and the battery counts (and shows) it as unparsed.
A wrong letter is worse than an unparsed answer, so every rule below prefers
"unparsed" to a guess.

**Explicit choices** come first. An explicit choice is

* a phrase: "The answer is (B)", "Answer: B", "correct option is C", "final answer: b)",
  "I choose B", "I'd go with (C)", "B is correct", "(B) is the right answer", ``\\boxed{B}``;
* a marker that opens the answer: ``B``, ``B)``, ``B.``, ``(B)``, ``B:``, ``B -``,
  ``**B) False**``, ``B`` alone on the first line — unless the answer lists the options one
  per line (``A) ... / B) ...``), and unless it goes on "is wrong", "would ...".

A choice that **its own clause rejects** is a rejection, not a choice, in every style: "A:
cats is wrong", "A) cats - incorrect", "(A) cats? No.", "A - cats, incorrect", "A) cats is
not right", "A) cats ✗", "Answer:\\nA) cats is not right" (the option's own text after the
letter is skipped, so "B) False" rejects nothing), or that the next sentence only judges
("A) Iron. This is wrong.", "A) Iron. Not correct."). A phrase under **a hedge or a negation**
before it in its sentence is no choice either: "I don't think the answer is A", "many would
say", "you might think it's A", "it is not the case that", "some may argue", "it's tempting
to say", "if the answer is A"; nor one with a condition after it ("the answer is A only if
..."). Their letters count as negated in the rules below.

The **first** explicit choice wins over letters named later in an explanation ("B) False.
Option A would be correct only if ..." is B). Followed by "or C" it is ambiguous. A
self-correction after it — "wait", "actually", "on second thought", "no, it's ..." —
moves the answer to the **last** explicit choice after the correction; after "wait" or
"on second thought" a letter standing alone is one too ("A. On second thought, (B)."). A
retraction with no new choice ("A, wait, no.") is unparsed, and so is an "actually" or
"hmm" followed by other letters. Never the first. Two explicit choices of **different
letters without a correction** conflict: the last one stands only when a conclusion or a
contrast introduces it in its sentence ("A. Sheep fear wolves, so the answer is B.",
"However, the correct answer is B", "but it's B"; also "therefore", "thus", "actually");
otherwise ("The answer is A. The answer is B.") the answer is unparsed.

**Without an explicit choice**, first match wins:

1. options evaluated one by one, each opening a line or a sentence: when at least one is
   rejected ("A) cats - incorrect.") and exactly one is affirmed ("B) wolves - correct.",
   "(B) wolves? Yes.", "B: wolves ✅"), that one;
2. "option B", "choice (B)", "letter B" naming one option;
3. exactly one distinct letter in parentheses: "... so I pick (B) here";
4. the option's text: the whole answer is an option's text, or exactly one option's text
   appears in it as whole words (ignoring case) — unless its letter is rejected or other
   letters stand alone beside it ("... which animal sheep fear. It could be A or B.");
5. exactly one distinct capital letter standing alone ("B is right"), where "A" and "I"
   followed by a lower-case word are read as the article and the pronoun.

Letters that are negated ("not (A)", "A is wrong", "neither A nor B", "wolves (B), not
cats (A)"), rejected or hedged as above, hypothetical ("A would be ...", "if B ..."), used
as a variable ("Let A be the area", "A = 4 x 4") or coordinated with one of those ("A or B
could work": what is said of one is said of all) never count in these rules.

**Option texts that hold a letter** ("Vitamin C", "E. coli", "C. S. Lewis", "C major",
"5 A", "37 °C", "A wolf") are found first, ignoring case; the letters inside them are a
reading of that option's text, never choice letters ("Vitamin C is the answer" is the
option "Vitamin C"; "The answer is B) Vitamin C" is B; "The answer is D) 18" is still D).
An option that is a letter other than its own (blood types O, A, B, AB) makes that letter
mean either: such an answer is unparsed. An option's text under a negation ("not true",
"isn't true", "never true", "untrue") names nothing; on an item whose options are exactly
True and False (possibly with "Unable to determine"), "not true" alone is False and "not
false" True. "It's true (that) the passage ..." is a concession, not a verdict.

A hypothetical ("if the question were about goats, the answer would be B") is no choice
and never a conclusion. A "wait" that only checks ("Wait, let me double-check option C:
...") corrects nothing unless it says the first choice is wrong or a conclusion brings
another letter ("..., so B"). A JSON field ``"answer": "B"`` is an explicit choice, and so
is a letter alone on the last line of a longer answer ("A) cats / B) wolves / C) mice /
B"); text inside ``<think>...</think>`` is not read when an answer follows it. A letter
standing alone beside other options' texts but not its own ("Sheep fear wolves. C is for
cats.") is unparsed. A letter beyond the item's
options (``E`` with three options) is not an answer; an explicit choice of one is
unparsed.

**Citations are no choices.** A letter in parentheses attached to a number, a word or
another parenthesis ("Section 2(c)", "Rule 12(b)(6)", "230 (c)(1)", "§ 703(a)") or after a
word such as section, §, rule, article, ref., row, table, item, clause, para, note or fig
("see ref. (a)", "Table 1, row (c)") labels a part of a text. A lower-case "(b)" is a
choice only in a phrase ("the answer is (b)", "option (b)"), and an option's whole text
opening the answer ("Yes — ...", "No. Under ...") wins over one letter in parentheses.
Letters of dotted abbreviations ("U.S.C.") and labels ("Statement I is correct") are no
letters either.

**An opening marker that only starts examining an option is no choice**: when several
different letters open lines or sentences ("A: Atropine treats bradycardia. B: Adenosine
treats SVT."), when another option's text is affirmed after it ("A. Atropine is for
bradycardia; adenosine is correct." reads the affirmed option, B), or when the option's
text after it trails off ("A) Iron — hmm", "A) Iron -", "A) Iron is"). Options listed
after their letters with no verdict ("Let's look at the options: A) Iron - ...") name
nothing; an option's text inside a question ("Is it iron?") or after words that only
start thinking ("Let me think about iron", "Considering iron:", "First, iron ...", "Could
be iron.") names nothing either. A list that judges each option at the end of its lines
("A) Vitamin A: night blindness — incorrect", "B. Hepatitis B – DNA virus ✅") is read
like one that judges right after the letter. The last two words of an option's text that
end in a letter ("Part D" of "Medicare Part D") name that option, never the letter D.

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
>>> parse_answer("A) cats - incorrect. B) wolves - correct.", ["cats", "wolves"]).letter
'B'
>>> parse_answer("You might think the answer is A, but it's B.", ["cats", "wolves"]).letter
'B'
>>> parse_answer("The answer is A. The answer is B.", ["cats", "wolves"]).how
'conflict'
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


_END = r"(?![\w'’])"  # the letter is a word of its own
_LET = r"[(\[]?\s*([A-Za-z])\s*[)\]]?" + _END
_CAP = r"[(\[]?([A-Z])[)\]]?" + _END
# "answer is B", "the correct option: (C)", "final answer - b)"
_PHRASE = re.compile(
    r"\b(?:answer|option|choice)\s*(?:is|would be|will be|should be|must be|=|:|-|–|—)\s*:?\s*"
    r"(?:option\s*|choice\s*|letter\s*)?" + _LET,
    re.IGNORECASE,
)
# "I choose B", "I'd go with (C)", "I'll pick option A", "going with B"
_CHOOSE = re.compile(
    r"\b(?:I(?:\s+would|\s+will|['’]d|['’]ll)?\s+(?:choose|pick|select|go\s+with|say)|"
    r"(?:going|go)\s+with|my\s+(?:choice|pick)\s+is)\s+(?:option\s*|choice\s*|answer\s*|letter\s*)?" + _LET,
    re.IGNORECASE,
)
# "B is correct", "(C) is the right answer", "option B is the best one"
_IS_RIGHT = re.compile(
    r"(?:\b(?:option|choice|answer)\s*)?(?<![\w'’])"
    + _CAP
    + r"\s+is\s+(?:the\s+)?(?:(?:correct|right|best)\b|answer\b)"
)
_BOXED = re.compile(r"\\boxed\{\s*\(?([A-Za-z])\)?\s*\}")
# a JSON field that holds the answer: {"answer": "B"}, {"final_answer": "(C) 18"}
_JSON = re.compile(
    r'"(?:final[_ ]?answer|answer|correct[_ ]?answer|choice|option|selected[_ ]?option)"'
    r'\s*:\s*"\s*[(\[]?([A-Za-z])(?:[)\].:][^"\n]*)?\s*"',
    re.IGNORECASE,
)
# a letter used as a variable: "Let A be the area", "A = 4 x 4"
_MATH = re.compile(
    r"\blet\s+([A-Za-z])\s+(?:be|denote|represent|stand\s+for)\b|"
    r"(?<![\w'’])([A-Z])\s*(?:[=+×*^<>≤≥÷]|\s[−-]\s*\d)\s*[\w(]",
    re.IGNORECASE,
)
# letters coordinated with each other: "A and B", "A, B or C", "A/B"
_COORD = re.compile(
    r"(?<![\w'’])[A-Z](?:\s*,\s*(?:option\s+)?[A-Z](?![\w'’]))*\s*,?\s*"
    r"(?:and|or|nor|&|/)\s*(?:option\s+)?[A-Z](?![\w'’])"
)
# a lone letter on the last line of a longer answer: "A) cats\nB) wolves\n\nB"
_LAST = re.compile(r"\n[ \t>#\-*]*[(\[]?([A-Z])[)\]]?[ \t.]*$")
# a self-correction cue that only checks: "wait, let me double-check option C"
_CHECK = re.compile(
    r"\W*(?:let\s+me\s+|I['’]ll\s+|I\s+will\s+|just\s+to\s+)?(?:double[- ]?check|"
    r"re-?check|verify|confirm|make\s+sure|check)\b",
    re.IGNORECASE,
)
# a marker that opens the answer: "B)", "(B)", "B.", "B:", "B -", "B" alone on its line
_MARKER = re.compile(
    r"^[\s>#\-]*(?:[(\[]([A-Za-z])[)\]]|([A-Za-z])\)|([A-Z])\s*[.:](?!\w)|"
    r"([A-Z])\s+[-–—]\s|([A-Z])[ \t]*(?:\n|$))"
)
_LINE_MARKER = re.compile(r"^[\s>#\-]*[(\[]?([A-Z])[)\].:]", re.MULTILINE)
_MARKER_NOT = re.compile(
    r"\s*(?:is\s+(?:not|wrong|incorrect|false)|isn['’]t|would|could|might|"
    r"can['’]?not|can['’]t)\b",
    re.IGNORECASE,
)
_ITS = re.compile(r"\b(?:it['’]?s|it\s+is|it\s+must\s+be|make\s+that)\s+(?:option\s+)?" + _CAP)
_OR = re.compile(r"\s*[,/]?\s*(?:or|and|/)\s*(?:option\s*)?[(\[]?[A-Za-z][)\]]?" + _END, re.IGNORECASE)
# self-corrections: a strong one retracts the choice before it even when none follows
_STRONG = (
    r"wait,?\s+no\b|no,?\s+wait\b|actually,?\s+no\b|i\s+was\s+wrong|i\s+made\s+a\s+mistake|"
    r"scratch\s+that|correction\b|let\s+me\s+correct"
)
_CUE = re.compile(
    r"\b(?:" + _STRONG + r"|wait\b|actually\b|on\s+second\s+thought|"
    r"on\s+reflection|i\s+mean\b|let\s+me\s+re-?(?:consider|check|think)|"
    r"hmm+\b|no,\s+(?:it|the|that)\b)",
    re.IGNORECASE,
)
_STRONG_CUE = re.compile(r"\b(?:" + _STRONG + r")", re.IGNORECASE)
_TURN_CUE = re.compile(
    r"\b(?:wait|on\s+second\s+thought|on\s+reflection|i\s+mean|"
    r"let\s+me\s+re-?(?:consider|check|think))\b",
    re.IGNORECASE,
)
_NAMED = re.compile(r"\b(?:option|choice|letter)\s*" + _LET, re.IGNORECASE)
_PAREN = re.compile(r"\(([A-Z])\)")  # a lower-case "(b)" is a choice only in a phrase
# a letter in parentheses that is part of a citation: "2(c)", "12(b)(6)", "230 (c)(1)",
# "§ 703(a)", "see ref. (a)", "Table 1, row (c)"
_CITE = re.compile(r"\(([A-Za-z])\)")
_CITE_AFTER = re.compile(r"\(\w{1,5}\)")
_CITE_BEFORE = re.compile(
    r"(?:\b(?:sec|secs|sections?|subsections?|rules?|articles?|arts?|ref|refs|references?|rows?|"
    r"tables?|items?|clauses?|paras?|paragraphs?|notes?|footnotes?|figs?|figures?|exhibits?|"
    r"appendix|chapters?|groups?|cols?|columns?|eqs?|equations?|panels?|lines?|pp?|cfr|u\.s\.c)\.?|"
    r"§+)[ \t]*(?:[\w.\-–]*\d[\w.\-–]*[ \t]*,?[ \t]*)?$",
    re.IGNORECASE,
)
# (not a letter of a dotted abbreviation: "U.S.C.", "U.S.A.")
_BARE = re.compile(r"(?<![\w'’])(?<!\w\.)([A-Z])(?![\w'’])(?!\.\w)")
_NEGATED = (
    re.compile(
        r"(?:\bnot|n['’]t|\bneither|\bnor|\brule\s+out|\beliminate|\bexclude|\bexcept)"
        r"\s+(?:option\s*|choice\s*)?" + _CAP,
        re.IGNORECASE,
    ),
    re.compile(
        _CAP + r"\s+(?:is|are|seems|looks|would\s+be)\s+(?:(?:also|both|clearly|definitely)\s+)?"
        r"(?:not\b|wrong|incorrect|false|unlikely|impossible)|" + _CAP + r"\s+isn['’]t",
        re.IGNORECASE,
    ),
    # "wolves (B), not cats (A)"
    re.compile(r"\bnot\s+(?!only\b)(?:[a-z][\w'’-]*\s+){1,3}?\(([A-Z])\)", re.IGNORECASE),
)
_HYPOTHETICAL = (
    re.compile(_CAP + r"\s+(?:would|could|might|may)\b"),
    re.compile(r"\b(?:if|whether|unless)\s+(?:option\s*|choice\s*)?" + _CAP, re.IGNORECASE),
    # "if the answer were A, ..."
    re.compile(
        r"\b(?:if|whether|unless)\s+(?:the\s+)?(?:correct\s+)?(?:answer|option|choice)\s+"
        r"(?:were|was|is)\s+" + _CAP,
        re.IGNORECASE,
    ),
)


# the clause right after a choice rejects it: "A: cats is wrong", "A) cats - incorrect",
# "(A) cats? No.", "A) cats is not right", "A - cats, incorrect", "A) cats ✗"
_VERDICT_LEAD = (
    r"[ \t\-–—:,)\]]*(?:\?[ \t]*)?(?:(?:is|are|seems|looks|={})\s+)?"
    r"(?:(?:definitely|clearly|also|simply|obviously|certainly)\s+)?"
)
_REJECT = re.compile(
    _VERDICT_LEAD.format(r"|would\s+be")
    + r"(?:(?P<w>wrong|incorrect|false|untrue|invalid|nope|no(?!\s+(?-i:[a-z])))\b|"
    r"not\s+(?:(?:the\s+)?(?:right|correct|true|valid|accurate|best|answer)\b|it\b|supported\b)|"
    r"not[ \t]*(?=[.,;!?]|$)|isn['’]t\s+(?:right|correct|true|valid|it\b|the\s+answer)|"
    r"ruled\s+out|eliminated|[✗✘❌×])",
    re.IGNORECASE | re.MULTILINE,
)
# a sentence after a choice that judges it: "A) Iron. This is wrong.", "A. Iron. That's not
# right.", "A) Iron. Not correct.", "Option B: Copper. This one is correct."
_NEXT_VERDICT = re.compile(
    r"[ \t]*[.!][ \t]+(?:(?:this|that|it)(?:[ \t]+(?:option|answer|choice|one))?[ \t]*"
    r"(?:is|['’]s)[ \t]+|(?=(?:not[ \t]+(?:correct|right)|incorrect|wrong|correct|right)"
    r"[ \t]*[.!,;]))",
    re.IGNORECASE,
)
_AFFIRM = re.compile(  # "would be correct" is a hypothesis, not a verdict
    _VERDICT_LEAD.format("") + r"(?:(?:correct|right|true|yes|valid)\b|"
    r"the\s+(?:correct\s+|right\s+|best\s+)?(?:answer|one)\b|[✓✔✅])",
    re.IGNORECASE,
)
# an option marker that opens a line or a sentence: "(B) wolves? Yes.", "B) wolves - correct"
_EVAL = re.compile(
    r"(?:^|(?<=[.;!?])[ \t]+)[ \t>#\-*•]*(?P<mark>[✓✔✅✗✘❌][ \t]*)?(?:\d+[.)][ \t]*)?"
    r"(?:(?:[Oo]ption|[Cc]hoice)[ \t]+)?"
    r"(?:[(\[]([A-Z])[)\]]|([A-Z])\)|([A-Z])[.:](?=\s)|([A-Z])[ \t]+[-–—](?=\s))",
    re.MULTILINE,
)
_LINE_VERDICT = re.compile(
    r"(?:[-–—:][ \t]*(?:(?P<yes>correct|right)|incorrect|wrong|not\s+(?:applicable|correct|right))"
    r"(?:[ \t]*[.!]?[ \t]*$|[ \t]*,)|[ \t](?:(?P<yes2>[✓✔✅])|[✗✘❌])[ \t.]*$)",
    re.IGNORECASE,
)
# a hedge or negation that governs "the answer is A" later in its clause: "I don't think",
# "many would say", "you might think", "it is not", "some may argue", "it's tempting to say"
_HEDGE = re.compile(
    r"\b(?:many|some|most|others|people|one|you|they|someone|students|readers)\b"
    r"(?:\s+[\w'’]+){0,2}?\s+(?:say|think|argue|claim|assume|guess|expect|believe|pick|"
    r"choose|select|answer|conclude|suggest|go\s+with)\b|"
    r"\b(?:(?:do|does|did|would|could|should)(?:\s*n['’]?t|\s+not)|don['’]?t|never)\s+"
    r"(?:[\w'’]+\s+)?(?:think|believe|say|agree|feel|suppose|claim|assume)\b|"
    r"\bnot\s+(?:sure|certain|convinced|confident)\b|"
    r"\b(?:it|this|that)(?:(?:\s+is|['’]s)\s+not|\s+isn['’]t)\b(?!\s+(?:hard|difficult|surprising|"
    r"complicated|tricky)\b)|\b(?:not\s+true|false|wrong|unlikely|doubt(?:ful)?)\s+that\b|"
    r"\btempt|\bmisconception|\bmistake|\btrap\b|\bat\s+first\s+(?:glance|sight)\b|"
    r"\binitially\b|\bnaive|\bwrong\s+to\b|\b(?:might|may|could)\s+seem\b|"
    r"\b(?:rather\s+than|instead\s+of)\b",
    re.IGNORECASE,
)
# "if the answer is A", "assuming the correct option is B"
_COND = re.compile(
    r"\b(?:if|whether|unless|suppose|supposing|assuming|assume)\s+(?:that\s+)?"
    r"(?:the\s+)?(?:[\w'’]+\s+)?$",
    re.IGNORECASE,
)
# "the answer is A only if ...", "the answer is A if cats ..." (but not "B, if I had to pick")
_COND_AFTER = re.compile(
    r"[)\]]?[ \t]*,?[ \t]*(?:only\s+(?:if|when)\b|if\b(?!\s+I\b)|unless\b|"
    r"would\b|could\b|might\b)",
    re.IGNORECASE,
)
# words that open a new clause: a hedge before them does not reach a choice after them
_CLAUSE = re.compile(
    r"\b(?:but|however|yet|whereas|so|therefore|thus|hence|actually|"
    r"in\s+fact)\b",
    re.IGNORECASE,
)
# a conclusion or contrast that introduces a later choice: "so the answer is B", "but it's B"
_CONCLUDE = re.compile(
    r"\b(?:so|therefore|thus|hence|however|but|actually|consequently|"
    r"ultimately|in\s+fact|instead|rather|in\s+conclusion|overall)\b",
    re.IGNORECASE,
)
_IF = re.compile(r"\b(?:if|unless|suppose|supposing|assuming|imagine)\b", re.IGNORECASE)
_IF_FORCED = re.compile(r"if\s+(?:I\s+(?:had|have)\s+to|I\s+were\s+you|forced|pressed)\b", re.IGNORECASE)
_BOUNDARY = re.compile(r"[.!?;](?=\s)|\n")


def _in_range(letter: str, n: int) -> int | None:
    i = LETTERS.find(letter.upper())
    return i if 0 <= i < n else None


def _norm(s: str) -> str:
    return re.sub(r"\s+", " ", s).strip().strip(".,;:!?\"'`*").strip().lower()


def _clean(text: str) -> str:
    """Markdown emphasis and code marks out, ``\\boxed{B}`` as "answer is B"."""
    # what a reasoning model thinks before "</think>" is not its answer
    _, sep, tail = text.rpartition("</think>")
    t = tail if sep and tail.strip() else text
    t = _BOXED.sub(lambda m: f" answer is {m.group(1)} ", t)
    # a heading "### Answer" (or "Final answer") over the choice reads as "Answer:"
    t = re.sub(
        r"^[ \t]*#+[ \t]*((?:final[ \t]+|correct[ \t]+)?answer)[ \t]*:?[ \t]*$",
        r"\1:",
        t,
        flags=re.IGNORECASE | re.MULTILINE,
    )
    return re.sub(r"\*\*|__|`|(?<!\w)\*|\*(?!\w)", "", t).strip()


def _article(letter: str, text: str, end: int) -> bool:
    """``a``/``A``/``I`` used as the article or the pronoun ("a mouse", "I think")."""
    return (
        letter in "aAI"
        and re.match(r"\s+[a-z]", text[end:]) is not None
        and not re.match(r"\s+(?:or|and|nor|is|seems|would|could)\b", text[end:])
    )


def _clause_start(t: str, pos: int) -> int:
    """Where the sentence (or line) holding ``pos`` starts."""
    start = 0
    for m in _BOUNDARY.finditer(t, 0, pos):
        start = m.end()
    return start


def _verdict(t: str, pos: int, letter: str, options: Sequence[str]) -> str | None:
    """What the clause right after an option's letter (ending at ``pos``) says of it:
    ``"no"`` ("A: cats is wrong", "(A) cats? No."), ``"yes"`` ("B) wolves - correct") or
    None. The option's own text after the letter is skipped ("B) False" says nothing of B),
    and a verdict word that is an option's text ("False") is no verdict."""
    rest = t[pos:]
    lead = re.match(r"[ \t)\]]*[.:]?[ \t]*(?:[-–—][ \t]*)?", rest)
    rest = rest[lead.end() :] if lead else rest  # (it always matches, maybe nothing)
    masked = re.match(_MASK + "+", rest)  # an option's text with letters in it ("Vitamin C")
    if masked:
        rest = rest[masked.end() :]
    i = _in_range(letter, len(options))
    if i is not None and _norm(options[i]):
        own = re.match(re.escape(_norm(options[i])).replace(r"\ ", r"\s+") + r"(?!\w)", rest, re.IGNORECASE)
        if own:
            rest = rest[own.end() :]
    # or the next sentence, when it only judges it: "A) Iron. This is wrong.", "That's not
    # right.", "Incorrect."
    after = _NEXT_VERDICT.match(rest)
    if after:
        rest = rest[after.end() :]
    texts = {_norm(o) for o in options}
    no = _REJECT.match(rest)
    if no and not (no.group("w") and no.group("w").lower() in texts):
        return "no"
    yes = _AFFIRM.match(rest)
    if yes and _norm(yes.group(0)) not in texts:
        return "yes"
    return None


def _hedged(t: str, start: int, end: int) -> bool:
    """A choice phrase from ``start`` to ``end`` that its own clause puts in doubt: a hedge or
    negation before it ("I don't think the answer is A", "many would say ...", "it is not
    ...", "if the answer is A") or a condition after it ("the answer is A only if ...")."""
    before = t[_clause_start(t, start) : start]
    cuts = [c.end() for c in _CLAUSE.finditer(before)]
    if cuts:
        before = before[cuts[-1] :]
    hedge = any(
        not re.search(r"\b(?:if|when|as|once)\s+$", before[: h.start()], re.IGNORECASE)
        for h in _HEDGE.finditer(before)
    )  # "if you think about it, ..." is no hedge
    # "if the question were about goats, the answer would be B" (not "if I had to pick, B")
    cond = _IF.search(before)
    if (
        cond
        and not _IF_FORCED.match(before, cond.start())
        and re.search(r"\b(?:would|could|might|were)\b", t[cond.start() : end], re.IGNORECASE)
    ):
        hedge = True
    return bool(hedge or _COND.search(before) or _COND_AFTER.match(t, end))


def _own_text_end(t: str, pos: int, letter: str, options: Sequence[str]) -> int:
    """Where the option's own text after its marker (ending at ``pos``) ends, or ``pos``."""
    lead = re.match(r"[ \t)\]]*[.:]?[ \t]*(?:[-–—][ \t]*)?", t[pos:])
    at = pos + (lead.end() if lead else 0)
    masked = re.match(_MASK + "+", t[at:])
    if masked:
        return at + masked.end()
    i = _in_range(letter, len(options))
    if i is not None and _norm(options[i]):
        own = re.match(re.escape(_norm(options[i])).replace(r"\ ", r"\s+") + r"(?!\w)", t[at:], re.IGNORECASE)
        if own:
            return at + own.end()
    return pos


def _doubted(t: str, pos: int, letter: str, options: Sequence[str]) -> bool:
    """An opening marker that only starts thinking about its option ("A) Iron — hmm",
    "A) Iron?", "A) Iron -" cut off)."""
    end = _own_text_end(t, pos, letter, options)
    if end == pos:
        return False
    return re.match(
        r"[ \t]*(?:[-–—:,][ \t]*)?(?:\?|hmm+\b|let['’]?s\s+see\b|maybe\b|perhaps\b|"
        r"(?:is|could|might)[ \t]*$|$)",
        t[end:],
        re.IGNORECASE,
    ) is not None and not re.fullmatch(r"\s*", t[end:])


def _affirmed_other(t: str, pos: int, letter: str, options: Sequence[str]) -> bool:
    """After an opening marker, another option's text is affirmed ("A. Atropine is for
    bradycardia; adenosine is correct."): the marker opened the examination of one option."""
    i = _in_range(letter, len(options))
    for j, spans in _occurrences(t, options).items():
        if j == i:
            continue
        for a, b in spans:
            said = _AFFIRM.match(t, b)
            if (
                a >= pos
                and said
                and not _TEXT_NEG.search(t[max(0, a - 60) : a])
                and _norm(said.group(0)) not in {_norm(o) for o in options}
            ):
                return True
    return False


def _explicit(
    t: str, options: Sequence[str], dropped: set[str] | None = None
) -> list[tuple[int, int, str, str, int]]:
    """Explicit choices ``(start, end, letter, rule, phrase_start)`` in order of appearance;
    an opening marker beyond the options ("D) mice" with three) is none. A choice that its
    own clause rejects ("A) cats - incorrect") or hedges ("I don't think the answer is A")
    is none either; its letter goes into ``dropped``."""
    n = len(options)
    hits: dict[int, tuple[int, int, str, str, int]] = {}
    gone = set() if dropped is None else dropped
    listed = {x.group(1) for x in _LINE_MARKER.finditer(t)}

    def add(m: re.Match, end: int, phrase: bool = True) -> None:
        letter = m.group(1)
        if (phrase and _hedged(t, m.start(), m.end())) or _verdict(t, m.end(1), letter, options) == "no":
            gone.add(letter.upper())
            pos = end
            while (x := _OR.match(t, pos)) is not None:  # "I'm not sure it's A or C"
                gone.add(re.findall(r"[A-Za-z]", x.group(0))[-1].upper())
                pos = x.end()
            return
        if len(listed) >= 2 and any(x.start(1) == m.start(1) for x in _LINE_MARKER.finditer(t)):
            return  # "Answer:\nA) cats\nB) wolves\n...": the first line of a list of options
        hits.setdefault(m.start(1), (m.start(1), end, letter, "explicit", m.start()))

    for rx in (_PHRASE, _CHOOSE):
        for m in rx.finditer(t):
            letter = m.group(1)
            if (letter.islower() or letter == "I") and _article(letter, t, m.end()):
                continue
            add(m, m.end())
    for m in _JSON.finditer(t):  # {"answer": "B"} is a choice whatever the reasoning says
        add(m, m.end(), phrase=False)
    for m in _IS_RIGHT.finditer(t):
        before = t[: m.start()]
        if re.search(
            r"\b(?:if|whether|unless|not|nor|neither|and|or)\s+(?:option\s+)?$", before, re.IGNORECASE
        ):
            continue
        if re.search(
            r"\b(?:statements?|premises?|assertions?|reasons?|claims?|items?|parts?|types?|"
            r"class|schedule|vitamin|hepatitis|title|section|row|column|step)\s+$",
            before,
            re.IGNORECASE,
        ):
            continue  # "Statement I is correct": the letter labels something else
        add(m, m.end(1))
    for m in _ITS.finditer(t):  # "it's B" (not "it's A good one")
        if not _article(m.group(1), t, m.end()):
            add(m, m.end())
    marker = _MARKER.match(t)
    # an answer that lists the options, one per line or one per sentence ("A: Atropine
    # treats bradycardia. B: Adenosine treats SVT."), has no opening choice
    opened = listed | {x for m in _EVAL.finditer(t) for x in m.groups()[1:] if x}
    if marker and len(opened) < 2:
        g = next(i for i, x in enumerate(marker.groups()) if x)
        letter, end = marker.group(g + 1), marker.end(g + 1)
        if _verdict(t, end, letter, options) == "no" or _affirmed_other(t, end, letter, options):
            gone.add(letter.upper())  # "A: cats is wrong. B: ...", "A. cats ...; wolves is right"
        elif not (
            letter == "I"
            or _MARKER_NOT.match(t[end:].lstrip(").:]"))
            or _in_range(letter, n) is None
            or _doubted(t, end, letter, options)
        ):
            hits.setdefault(
                marker.start(g + 1),
                (marker.start(g + 1), marker.end(), letter, "marker", marker.start(g + 1)),
            )
    last = _LAST.search(t)  # "A) cats\nB) wolves\nC) mice\n\nB": the letter alone at the end
    if last and last.group(1) != "I" and _in_range(last.group(1), n) is not None:
        hits.setdefault(last.start(1), (last.start(1), last.end(), last.group(1), "marker", last.start(1)))
    return sorted(hits.values())


def _evaluated(t: str, options: Sequence[str]) -> tuple[set[str], set[str]]:
    """Letters that open a line or a sentence and that their clause rejects ("A) cats -
    incorrect.") or affirms ("B) wolves - correct."): an answer that goes through the
    options one by one."""
    no: set[str] = set()
    yes: set[str] = set()
    for m in _EVAL.finditer(t):
        g = next(i for i, x in enumerate(m.groups()[1:], 1) if x)
        letter = m.group(g + 1)
        if _in_range(letter, len(options)) is None:
            continue
        v = _verdict(t, m.end(g + 1), letter, options)
        line_end = t.find("\n", m.end())
        line = t[m.end(g + 1) : len(t) if line_end < 0 else line_end]
        if v is None and (m.start() == 0 or t[m.start() - 1] == "\n"):
            # a line that judges its option at its end: "A) Vitamin A: night blindness —
            # incorrect", "B. Hepatitis B – DNA virus ✅", "C) Article III - correct, it ..."
            w = _LINE_VERDICT.search(line)
            if w:
                v = "yes" if w.group("yes") or w.group("yes2") else "no"
        if m.group("mark"):
            v = "yes" if m.group("mark").strip() in "✓✔✅" else "no"
        if v == "no":
            no.add(letter)
        elif v == "yes":
            yes.add(letter)
    return no, yes


def _concluded(t: str, hit: tuple[int, int, str, str, int], hits: list) -> bool:
    """A later choice that a conclusion or contrast introduces ("..., so the answer is B",
    "However, the correct answer is B", "but it's B")."""
    start = _clause_start(t, hit[4])
    for h in hits:
        if h[1] <= hit[4]:
            start = max(start, h[1])
    return _CONCLUDE.search(t, start, hit[4]) is not None


def _excluded(t: str) -> set[str]:
    """Letters named as wrong or as a hypothesis."""
    out = set()
    for rx in _NEGATED + _HYPOTHETICAL + (_MATH,):
        for m in rx.finditer(t):
            out |= {g.upper() for g in m.groups() if g}
    for m in _COORD.finditer(t):  # "A or B could work": what is said of one is said of all
        group = set(re.findall(r"(?<![\w'’])[A-Z](?![\w'’])", m.group(0)))
        if group & out:
            out |= group
    return out


def _after_correction(
    t: str, first: tuple[int, int, str, str, int], options: Sequence[str]
) -> ParsedAnswer | None:
    """The answer after a self-correction that follows ``first`` (None: none, the first
    choice stands).

    After the cue, the last explicit choice wins. Without one, the letters standing alone
    after it decide: after a retraction ("wait, no", "scratch that") or a turn ("wait",
    "on second thought") one such letter is the new answer, and none or several leave a
    retraction unparsed; after a mere "actually" or "hmm" (common in explanations) the
    first choice stands unless another letter is named, which makes it ambiguous. A "wait"
    that only checks ("wait, let me double-check option C: ...") keeps the first choice
    unless it says the first was wrong or a conclusion brings another letter ("..., so B").
    """
    n = len(options)
    cue = _CUE.search(t, first[1])
    if cue is None:
        return None
    rest = t[cue.end() :]
    later = [h[2] for h in _explicit(rest, options)]
    if later:
        i = _in_range(later[-1], n)
        return ParsedAnswer(i, "corrected") if i is not None else ParsedAnswer(None, "out-of-range")
    gone = _excluded(rest)
    named = {m.group(1) for m in _BARE.finditer(rest) if not _article(m.group(1), rest, m.end())} - gone
    check = re.match(r"let\s+me\s+re-?check", cue.group(0), re.IGNORECASE) or (
        _TURN_CUE.match(t, cue.start()) and _CHECK.match(t, cue.end())
    )
    if first[2].upper() in gone and not named - {first[2].upper()}:
        return ParsedAnswer(None, "retracted")  # "Answer: A. Wait, let me check: A is wrong."
    if check and first[2].upper() not in gone:
        # a check names other options without choosing them; only a conclusion does
        concluded = {
            m.group(1)
            for m in _BARE.finditer(rest)
            if not _article(m.group(1), rest, m.end())
            and _CONCLUDE.search(rest, _clause_start(rest, m.start()), m.start())
        }
        concluded -= gone | {first[2].upper()}
        if len(concluded) == 1:
            i = _in_range(concluded.pop(), n)
            return ParsedAnswer(i, "corrected") if i is not None else ParsedAnswer(None, "out-of-range")
        return ParsedAnswer(None, "ambiguous") if concluded else None
    if _STRONG_CUE.match(t, cue.start()) or _TURN_CUE.match(t, cue.start()):
        if len(named) == 1:  # "A. Wait, no — (B)", "A. On second thought: B."
            i = _in_range(named.pop(), n)
            return ParsedAnswer(i, "corrected") if i is not None else ParsedAnswer(None, "out-of-range")
        if named or _STRONG_CUE.match(t, cue.start()):
            return ParsedAnswer(None, "retracted" if not named else "ambiguous")
        return None
    return ParsedAnswer(None, "ambiguous") if named - {first[2].upper()} else None


_MASK = "_"  # what stands for an option's text that holds letters ("Vitamin C", "E. coli")
_LETTERISH = re.compile(r"(?<![\w'’])[a-z](?![\w'’])", re.IGNORECASE)
# "not true", "isn't really false", "neither true nor false"
_TEXT_NEG = re.compile(
    r"(?:\bnot|n['’]t|\bnever|\bneither|\bnor|\bno)\s+(?:(?:really|quite|entirely|"
    r"necessarily|exactly|completely|at\s+all|even|actually|so|be|been|being|is|"
    r"are|was|were|a|an|the|say|call\s+it|think\s+it(?:['’]s|\s+is)|"
    r"consider\s+it)\s+){0,2}$",
    re.IGNORECASE,
)
# "it's true (that) the passage ...": a concession, not a verdict
_CONCEDE_BEFORE = re.compile(
    r"\b(?:it|this|that)(?:['’]s|\s+is|\s+was)\s+"
    r"(?:(?:certainly|indeed|of\s+course|quite)\s+)?$",
    re.IGNORECASE,
)
_CONCEDE_AFTER = re.compile(
    r"\s+(?:that|the|this|these|those|there|he|she|they|we|it|its|a|an)\b", re.IGNORECASE
)
_UNDETERMINED = re.compile(
    r"unable\s+to\s+determine|cannot\s+be\s+determined|undetermined|unknown|"
    r"not\s+enough\s+information|cannot\s+determine|can['’]?t\s+(?:tell|determine)|"
    r"uncertain|not\s+given"
)


def _single_letter(o: str) -> bool:
    return re.fullmatch(r"[a-z]", _norm(o)) is not None


def _occurrences(t: str, options: Sequence[str]) -> dict[int, list[tuple[int, int]]]:
    """Where each option's text appears in ``t`` as whole words, ignoring case (an option
    that is a single letter is not found in the article "a" or the pronoun "I")."""
    spans: dict[int, list[tuple[int, int]]] = {}
    for i, o in enumerate(options):
        o_n = _norm(o)
        if not o_n:
            continue
        pat = r"(?<![\w.])" + re.escape(o_n).replace(r"\ ", r"\s+") + r"(?!\w|\.\d)"
        got = [
            m.span()
            for m in re.finditer(pat, t, re.IGNORECASE)
            if not (_single_letter(o) and _article(m.group(0), t, m.end()))
        ]
        if got:
            spans[i] = got
    # "Part D" of "Medicare Part D": the end of an option's text that holds its letter names
    # that option (every option that ends so, when several do)
    for i, o in enumerate(options):
        tail = _tail(o)
        if tail is None:
            continue
        pat = r"(?<![\w.])" + re.escape(tail).replace(r"\ ", r"\s+") + r"(?![\w'’]|\.\w)"
        for m in re.finditer(pat, t, re.IGNORECASE):
            if m.span() not in spans.get(i, []) and not any(
                a <= m.start() and m.end() <= b for a, b in spans.get(i, [])
            ):
                spans.setdefault(i, []).append(m.span())
    return {i: sorted(sp) for i, sp in spans.items()}


_TAIL_STOP = {
    "and",
    "or",
    "nor",
    "of",
    "the",
    "an",
    "is",
    "are",
    "both",
    "either",
    "neither",
    "not",
    "only",
    "to",
    "in",
    "on",
    "at",
    "by",
    "with",
    "than",
    "but",
    "for",
    "from",
    "option",
    "options",
    "choice",
    "choices",
    "letter",
    "answer",
    "as",
    "if",
    "so",
}


def _tail(option: str) -> str | None:
    """The last two words of an option of three words or more that ends in a letter ("Part
    D" of "Medicare Part D"), or None."""
    words = _norm(option).split()
    if (
        len(words) < 3
        or not re.fullmatch(r"[a-z]", words[-1])
        or not re.fullmatch(r"[a-z]{2,}", words[-2])
        or words[-2] in _TAIL_STOP
    ):
        return None
    return " ".join(words[-2:])


def _mask(t: str, options: Sequence[str]) -> str:
    """``t`` with each occurrence of an option's text that holds a letter of its own ("Vitamin
    C", "E. coli", "C. S. Lewis", "5 A", "37 °C", "A wolf") blanked out: the letters inside it
    are a reading of that option's text, never choice letters. Options that are a single
    letter are left alone (see :func:`_collision`)."""
    chars = list(t)
    for i, spans in _occurrences(t, options).items():
        if _single_letter(options[i]) or not _LETTERISH.search(_norm(options[i])):
            continue
        for a, b in spans:
            chars[a:b] = [c if c == "\n" else _MASK for c in t[a:b]]
    return "".join(chars)


def _boolean_pair(options: Sequence[str]) -> dict[str, int] | None:
    """``{"true": i, "false": j}`` when the options are exactly True and False, possibly with
    "Unable to determine" as a third."""
    norm = [_norm(o) for o in options]
    if "true" not in norm or "false" not in norm:
        return None
    others = [x for x in norm if x not in ("true", "false")]
    if len(norm) == 2 or (len(norm) == 3 and len(others) == 1 and _UNDETERMINED.fullmatch(others[0])):
        return {"true": norm.index("true"), "false": norm.index("false")}
    return None


# an option's text that the answer only starts to think about: "Let me think about iron",
# "Considering iron:", "First, iron ...", "Could be iron."
_PONDER = re.compile(
    r"\b(?:think(?:ing)?\s+(?:about|of)|consider(?:ing)?|let['’]?s\s+(?:look|start|consider|"
    r"examine|analy[sz]e|evaluate|check|see)|look(?:ing)?\s+at|start(?:ing)?\s+with|"
    r"(?:could|might|may)\s+(?:it\s+|this\s+)?be|maybe|perhaps|possibly|what\s+about|"
    r"how\s+about)\b|^[\W_]*(?:first(?:ly)?|to\s+begin(?:\s+with)?)\s*,",
    re.IGNORECASE,
)


def _pondered(t: str, a: int, b: int) -> bool:
    """The option's text from ``a`` to ``b`` sits in a question ("Is it iron?") or after
    words that only start to think about it (:data:`_PONDER`): no choice."""
    start = _clause_start(t, a)
    if _PONDER.search(t[start:a]):
        return True
    end = re.compile(r"[.!?](?=\s|$)|\n").search(t, b)
    return end is not None and end.group(0) == "?"


def _text_match(
    t: str, options: Sequence[str], ignore: Sequence[tuple[int, int]] = ()
) -> tuple[int | None, set[int]]:
    """The option whose text the answer names (None: none or several), and every option
    whose text it names without a negation. Occurrences within ``ignore`` (options listed
    after their letters: "A) Iron") or only pondered (:func:`_pondered`) name nothing."""
    whole = _norm(t)
    for i, o in enumerate(options):
        if _norm(o) and whole == _norm(o):
            return i, {i}
    spans = _occurrences(t, options)
    # an option found only inside another found option's text ("agree" in "strongly
    # agree") is not named by itself; one found on its own ("agree or disagree") is
    own = {
        i: [
            (a, b)
            for a, b in sp
            if not any(j != i and c <= a and b <= d for j, other in spans.items() for c, d in other)
        ]
        for i, sp in spans.items()
    }
    hits = sorted((a, b, i) for i, sp in own.items() for a, b in sp)
    if "true" in [_norm(o) for o in options]:  # "untrue" is "not true"
        hits = sorted(hits + [(m.start(), m.end(), -1) for m in re.finditer(r"\buntrue\b", t, re.I)])
    positive: set[int] = set()
    negated: set[int] = set()
    prev_neg_end = None
    for a, b, i in hits:
        if any(c <= a and b <= d for c, d in ignore) or _pondered(t, a, b):
            prev_neg_end = None
            continue
        o_n = "true" if i < 0 else _norm(options[i])
        neg = (
            i < 0
            or _TEXT_NEG.search(t[max(0, a - 60) : a]) is not None
            or (
                prev_neg_end is not None  # "not true or false": the negation covers both
                and re.fullmatch(r"\s*,?\s*(?:or|nor|and|/)?\s*", t[prev_neg_end:a]) is not None
            )
        )
        prev_neg_end = b if neg else None
        if (
            o_n in ("true", "false")
            and _CONCEDE_BEFORE.search(t[max(0, a - 40) : a])
            and _CONCEDE_AFTER.match(t, b)
        ):
            continue  # "It's true the passage mentions a dog, but ..."
        if neg:
            negated.add(i if i >= 0 else [_norm(o) for o in options].index("true"))
        else:
            positive.add(i)
    if len(positive) == 1:
        return next(iter(positive)), positive
    if positive:
        return None, positive
    pair = _boolean_pair(options)
    # "Not true." on a True/False item is False; anything else negated names nothing
    if pair and len(negated) == 1 and len(spans) <= 1 and (x := _norm(options[next(iter(negated))])) in pair:
        return pair["false" if x == "true" else "true"], set()
    return None, set()


def _collision(t: str, options: Sequence[str], index: int) -> bool:
    """An option that is itself a letter other than its own ("A" as option B, blood types O,
    A, B, AB) makes that letter in the answer mean either: unparsed, when the answer reads
    one of the two."""
    n = len(options)
    for j, o in enumerate(options):
        if not _single_letter(o):
            continue
        x = _norm(o).upper()
        k = _in_range(x, n)
        if k is None or k == j or index not in (j, k):
            continue
        if any(
            not _article(m.group(0), t, m.end())
            for m in re.finditer(r"(?<![\w'’])" + x + r"(?![\w'’])", t, re.IGNORECASE)
        ):
            return True
    return False


def _cite_mask(t: str) -> str:
    """``t`` with the letters of citations blanked out: a letter in parentheses attached to
    a number, a word or another parenthesis ("2(c)", "Rule 12(b)(6)", "230 (c)(1)") or after
    a word such as section, rule, ref., row or table ("see ref. (a)", "row (c)") labels a
    part of a text, never a choice."""
    chars = list(t)
    for m in _CITE.finditer(t):
        a = m.start()
        if (
            (a > 0 and (t[a - 1].isalnum() or t[a - 1] in ")]"))
            or _CITE_AFTER.match(t, m.end())
            or _CITE_BEFORE.search(t, max(0, a - 40), a)
        ):
            chars[m.start(1)] = _MASK
    return "".join(chars)


def parse_answer(text: str | None, options: Sequence[str]) -> ParsedAnswer:
    """The option chosen in ``text`` (see the module's rules), or ``index=None``.

    Parameters
    ----------
    text : str
        The model's answer.
    options : sequence of str
        The item's options in the order shown (letter A is ``options[0]``).
    """
    if not text or not text.strip():
        return ParsedAnswer(None, "empty")
    raw = _clean(text)
    if not raw:
        return ParsedAnswer(None, "empty")
    got = _parse(raw, _cite_mask(_mask(raw, options)), options)
    if got.index is not None and _collision(raw, options, got.index):
        return ParsedAnswer(None, "ambiguous")
    return got


# a letter that opens an entry of a list of options: "A) Iron", "(B) Zinc", "C: Copper"
_ENTRY = re.compile(r"(?<![\w'’])[(\[]?([A-Z])[)\].:]")


def _lead(t: str, options: Sequence[str]) -> int | None:
    """The option whose whole text opens the answer as a sentence of its own ("Yes — ...",
    "No. Under ...", "Nitrogen (Table 1 ...)"), or None."""
    for i, o in enumerate(options):
        o_n = _norm(o)
        if o_n and re.match(
            re.escape(o_n).replace(r"\ ", r"\s+") + r"[ \t]*(?:[.,;:!()\[\]]|[-–—]|$)", t, re.IGNORECASE
        ):
            return i
    return None


def _one_affirmed(t: str, options: Sequence[str], texts: set[int], rejected: set[str]) -> int | None:
    """Among the options whose texts the answer names, the one it affirms ("Atropine is for
    bradycardia; adenosine is correct.") when only one is, or the one left when all others
    have their letters rejected ("A) Atropine — no. The answer is adenosine.")."""
    left = {i for i in texts if LETTERS[i] not in rejected}
    if len(left) == 1 and left != texts:
        return left.pop()
    texts_n = {_norm(o) for o in options}
    affirmed = set()
    for j, spans in _occurrences(t, options).items():
        for a, b in spans:
            m = _AFFIRM.match(t, b)
            if (
                j in texts
                and m
                and _norm(m.group(0)) not in texts_n
                and not _TEXT_NEG.search(t[max(0, a - 60) : a])
            ):
                affirmed.add(j)
    return affirmed.pop() if len(affirmed) == 1 and LETTERS[min(affirmed)] not in rejected else None


def _parse(raw: str, t: str, options: Sequence[str]) -> ParsedAnswer:
    """:func:`parse_answer` on the cleaned answer ``raw``; ``t`` is ``raw`` with the option
    texts that hold letters blanked out (:func:`_mask`), where letters are read."""
    n = len(options)
    dropped: set[str] = set()
    explicit = _explicit(t, options, dropped)
    if explicit:
        first = explicit[0]
        if _OR.match(t, first[1]):  # "the answer is A or B"
            return ParsedAnswer(None, "ambiguous")
        corrected = _after_correction(t, first, options)
        if corrected is not None:
            return corrected
        if any(h[2].upper() != first[2].upper() for h in explicit):
            # two choices and no correction: a later one stands only where a conclusion or
            # contrast introduces it ("A. Sheep fear wolves, so the answer is B.")
            last = explicit[-1]
            if not _concluded(t, last, explicit):
                return ParsedAnswer(None, "conflict")
            i = _in_range(last[2], n)
            return ParsedAnswer(i, "concluded") if i is not None else ParsedAnswer(None, "out-of-range")
        i = _in_range(first[2], n)
        return ParsedAnswer(i, first[3]) if i is not None else ParsedAnswer(None, "out-of-range")
    no, yes = _evaluated(t, options)
    gone = _excluded(t) | dropped | no
    if no and len(yes) == 1 and not yes & gone:  # "A) cats - wrong. B) wolves - right."
        i = _in_range(yes.pop(), n)
        if i is not None:
            return ParsedAnswer(i, "evaluated")
    if re.fullmatch(r"[\W_]*[A-Za-z][\W_]*", raw):
        i = _in_range(re.sub(r"[\W_]", "", raw), n)  # the one letter
        if i is not None:
            return ParsedAnswer(i, "letter")
        i = _text_match(raw, options)[0]  # "O" among blood types
        return ParsedAnswer(i, "text") if i is not None else ParsedAnswer(None, "out-of-range")
    # options listed after their letters with no verdict ("Let's look at the options: A)
    # Iron - ", "A) Iron — hmm", "Between (A) cats and (B) wolves, ..."): the letters and the
    # texts of such a list choose nothing
    found = [
        (m.start(1), _own_text_end(t, m.end(1), m.group(1), options), m.group(1), m.end(1))
        for m in _ENTRY.finditer(t)
    ]
    found = [e for e in found if e[1] > e[0] + 2]
    judged = any(_verdict(t, e[3], e[2], options) for e in found)
    entries = [
        (a, b)
        for a, b, x, end in found
        if _doubted(t, end, x, options) or (not judged and len({e[2] for e in found}) >= 2)
    ]
    listed = {a for a, _ in entries}
    named = {
        i
        for m in _NAMED.finditer(t)
        if m.group(1).upper() not in gone
        and not _article(m.group(1), t, m.end())
        and (i := _in_range(m.group(1), n)) is not None
    }
    if len(named) == 1:
        return ParsedAnswer(named.pop(), "named")
    paren = {
        i
        for m in _PAREN.finditer(t)
        if m.group(1).upper() not in gone
        and m.start(1) not in listed
        and (i := _in_range(m.group(1), n)) is not None
    }
    if len(paren) == 1 and not named:
        lead = _lead(raw, options)  # "Yes — under Rule (B) ...": the plain answer first wins
        return ParsedAnswer(lead, "text") if lead is not None else ParsedAnswer(paren.pop(), "parenthesized")
    if len(paren) > 1 or len(named) > 1:
        return ParsedAnswer(None, "ambiguous")
    bare = set()
    for m in _BARE.finditer(t):
        if _article(m.group(1), t, m.end()) or m.group(1) in gone or m.start(1) in listed:
            continue
        i = _in_range(m.group(1), n)
        if i is not None:
            bare.add(i)
    i, texts = _text_match(raw, options, entries)
    if i is None and len(texts) > 1:
        i = _one_affirmed(raw, options, texts, no | dropped)
    # an option's text whose letter is rejected ("A: cats is wrong.") or beside other letters
    # ("... sheep fear. It could be A or B.") is no choice
    if i is not None and (LETTERS[i] in gone or bare - {i}):
        return ParsedAnswer(None, "ambiguous")
    if i is not None:
        return ParsedAnswer(i, "text")
    # a letter beside other options' texts but not its own ("Sheep fear wolves. C is for
    # cats.") is no choice either
    if len(bare) == 1 and not {j for j in texts - bare if LETTERS[j] not in gone}:
        return ParsedAnswer(bare.pop(), "bare-letter")
    return ParsedAnswer(None, "ambiguous" if bare else "none")


__all__ = ["ParsedAnswer", "parse_answer"]
