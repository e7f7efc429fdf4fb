"""Multiple-choice items ``(t, p, q, o, a)``: the JSONL format, loaders, distractors, prompts.

The item format (one JSON object per line)::

    {"id": "q1", "instruction": "Choose the correct option.", "passage": "Mary went home.",
     "question": "Where is Mary?", "options": ["home", "the office", "the park"],
     "answer": "A", "dataset": "my-set"}

* ``answer`` is the letter of the correct option (``"A"``, ``"(B)"``) or its exact text.
* ``passage`` may be empty (the attacks then hit the question); ``instruction`` left out
  gives :data:`DEFAULT_INSTRUCTION` (give ``""`` for none); ``id`` left out gives the line
  number; ``dataset`` groups results ("per data set" tables; default: the file's name).
* ``options`` left out: ``answer`` is then the answer itself and options are made by
  answer type (:func:`make_options`): true/false -> True, False, Unable to determine;
  a number -> 4 of the data set's other answers in its format near it (else 4 numbers in
  its format and as round as it; the answer's rank among them uniform either way); a word
  -> 4 words of the same kind (the data set's other answers, the passage, WordNet; names
  for a name), never an inflection of it nor an offensive word; a text -> texts sharing
  no content word with it and "None of the other options is correct", which is the right
  option in a share :data:`NONE_SHARE` of the items.

:func:`load_items` also reads the published files of the paper's data sets: StrategyQA
(JSON), AQuA, CREAK, GSM8K (JSONL), e-SNLI (CSV, or its ``s1/s2/labels`` files), bAbI (the
tasks' ``.txt``), Sen-Making (the combined CSV, or a subtask's data file with its gold
answers), QED (jsonlines), ECQA (the glued CSV), QASC (JSONL) and NoahQA (JSON). The format
is recognised from the file's name, CSV header or JSON keys, or named; a file that matches
none is refused with the formats tried and what it has. Mistakes raise :class:`ItemsError`
naming the line.

:func:`render_prompt` turns an item into the prompt the model sees (:data:`DEFAULT_TEMPLATE`,
options as lines ``(A) text``); any template with the same placeholders replaces it.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import io
import json
import os
import random
import re
import string
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LETTERS = string.ascii_uppercase
DEFAULT_INSTRUCTION = "Read the passage and choose the correct option. Reply with the option's letter."
DEFAULT_TEMPLATE = """{instruction}

Passage: {passage}

Question: {question}
{options}
Answer:"""
PLACEHOLDERS = ("instruction", "passage", "question", "options")
NONE_OF_THE_OTHERS = "None of the other options is correct"
UNDETERMINED = "Unable to determine"
FORMATS = (
    "jsonl",
    "strategyqa",
    "aqua",
    "creak",
    "gsm8k",
    "esnli",
    "esnli-txt",
    "babi",
    "sen-making",
    "sen-making-a",
    "sen-making-b",
    "qed",
    "ecqa",
    "qasc",
    "noahqa",
)
ANSWER_TYPES = ("boolean", "number", "word", "text")

_TRUE = {"true", "yes", "correct", "t", "y"}
_FALSE = {"false", "no", "incorrect", "f", "n"}
# function words are never distractors (WordNet gives "while" a noun sense, "near" a verb one)
_FUNCTION_WORDS = frozenset(
    """a an the and or but nor so yet if then than while when where whom
who whose which what that this these those there here of to in on at by for from with into onto
over under near after before because as is are was were be been being has have had do does did
it its he she they them his her their our your my me we you not no yes""".split()
)
# a number with an optional sign, currency sign and unit: -$1,250.50, 12 %, 3.5 kg, 40 apples
_NUMBER = re.compile(
    r"^\s*(?P<sign>[-−+]?\s*)(?P<pre>[$€£¥]?\s*)"
    r"(?P<num>[-−+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|[-−+]?\.\d+)"
    r"(?P<suf>\s*(?:%|[^\W\d_][^\W\d_°/²³.\-]*(?:[ /][^\W\d_][^\W\d_°/²³.]*){0,2}"
    r"|°[CF]?)?)\s*$"
)
# the share of text answers whose right option is "None of the other options is correct"
NONE_SHARE = 0.2


class ItemsWarning(UserWarning):
    """Items of a data set were left out (no options could be made for their answers)."""


class ItemsError(ValueError):
    """A mistake in an items file; the message names the file and line."""


class NoOptionsError(ItemsError):
    """No options could be made for an item's answer (too few distractors): the loaders
    leave such an item out and say so (:class:`ItemsWarning`)."""


def _left_out(name: str, ids: Sequence[str], total: int) -> None:
    if ids:
        shown = ", ".join(ids[:5]) + (", ..." if len(ids) > 5 else "")
        warnings.warn(
            f"{name}: {len(ids)} of {total} items left out: no options could be made "
            f"for their answers (ids {shown}); give them their own 'options'",
            ItemsWarning,
            stacklevel=4,
        )


@dataclass(frozen=True)
class Item:
    """A multiple-choice item: instruction t, passage p, question q, options o, answer a.

    ``answer`` is the index of the correct option.
    """

    id: str
    question: str
    options: tuple[str, ...]
    answer: int
    passage: str = ""
    instruction: str = DEFAULT_INSTRUCTION
    dataset: str = ""
    answer_type: str = ""

    def __post_init__(self) -> None:
        if len(self.options) < 2:
            raise ValueError(f"item {self.id!r}: needs at least 2 options, got {len(self.options)}")
        if len(self.options) > len(LETTERS):
            raise ValueError(f"item {self.id!r}: at most {len(LETTERS)} options")
        if not 0 <= self.answer < len(self.options):
            raise ValueError(f"item {self.id!r}: answer index {self.answer} is not an option")

    @property
    def answer_letter(self) -> str:
        return LETTERS[self.answer]

    @property
    def answer_text(self) -> str:
        return self.options[self.answer]

    @property
    def attack_field(self) -> str:
        """``"passage"`` when the item has one, else ``"question"`` (what attacks hit)."""
        return "passage" if self.passage.strip() else "question"

    @property
    def target_text(self) -> str:
        return getattr(self, self.attack_field)

    def replace(self, **changes: Any) -> Item:
        return dataclasses.replace(self, **changes)

    def with_target(self, text: str) -> Item:
        """The item with its attacked field (passage, else question) set to ``text``."""
        return self.replace(**{self.attack_field: text})

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "instruction": self.instruction,
            "passage": self.passage,
            "question": self.question,
            "options": list(self.options),
            "answer": self.answer_letter,
            "dataset": self.dataset,
        }


# --------------------------------------------------------------------------- prompts
def render_options(options: Sequence[str]) -> str:
    """``(A) first`` / ``(B) second`` ..., one per line."""
    return "\n".join(f"({LETTERS[i]}) {o}" for i, o in enumerate(options))


def check_template(template: str) -> None:
    """Raise ValueError when ``template`` lacks ``{question}``/``{options}`` or uses an
    unknown placeholder."""
    try:
        names = {f for _, f, _, _ in string.Formatter().parse(template) if f is not None}
    except ValueError as exc:
        raise ValueError(
            f"the template is not a valid format string ({exc}); write literal braces as {{{{ and }}}}"
        ) from None
    unknown = names - set(PLACEHOLDERS)
    if unknown:
        raise ValueError(
            f"unknown placeholder(s) {', '.join('{' + n + '}' for n in sorted(unknown))}"
            f" in the template; allowed: {', '.join('{' + p + '}' for p in PLACEHOLDERS)}"
        )
    for need in ("question", "options"):
        if need not in names:
            raise ValueError(f"the template needs {{{need}}}")


def render_prompt(item: Item, template: str = DEFAULT_TEMPLATE) -> str:
    """The prompt for ``item``. A template line whose ``{instruction}`` or ``{passage}``
    is empty is left out, so an item without passage has no empty "Passage:" line."""
    values = {
        "instruction": item.instruction.strip(),
        "passage": item.passage.strip(),
        "question": item.question.strip(),
        "options": render_options(item.options),
    }
    lines = []
    for line in template.split("\n"):
        if any("{" + k + "}" in line and not values[k] for k in ("instruction", "passage")):
            continue
        lines.append(line.format(**values))
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


# a two-turn prompt in one text: the first user turn, the assistant's reply, the second turn
TWO_TURN_REPLY = "I have read it. What is the question?"
TURN_BREAK = f"\n\n[assistant] {TWO_TURN_REPLY}\n\n[user] "


def render_turns(item: Item, template: str = DEFAULT_TEMPLATE) -> tuple[str, str]:
    """The prompt in two user turns, as the paper sends it to chat models: the template
    up to the line with ``{question}`` (instruction and passage), then the rest (question
    and options). The first is empty when the item has neither instruction nor passage."""
    lines = template.split("\n")
    cut = next(i for i, line in enumerate(lines) if "{question}" in line)
    first = render_prompt(item, "\n".join(lines[:cut])) if cut else ""
    return first, render_prompt(item, "\n".join(lines[cut:]))


def render_asked(item: Item, template: str = DEFAULT_TEMPLATE, turns: int = 1) -> str:
    """The prompt as one text: :func:`render_prompt`, or for ``turns=2`` both turns joined
    by :data:`TURN_BREAK` (what the battery caches, shows and reports;
    :func:`split_turns` gives the chat turns back)."""
    if turns == 1:
        return render_prompt(item, template)
    first, second = render_turns(item, template)
    return f"{first}{TURN_BREAK}{second}" if first else second


def split_turns(text: str) -> tuple[tuple[tuple[str, str], ...], str]:
    """``(history, last user turn)`` of a prompt made by :func:`render_asked`."""
    if TURN_BREAK not in text:
        return (), text
    first, second = text.split(TURN_BREAK, 1)
    return (("user", first), ("assistant", TWO_TURN_REPLY)), second


# --------------------------------------------------------------------------- distractors
def number_parts(s: str) -> tuple[str, str, float, int, bool, str] | None:
    """``(prefix, core, value, decimals, thousands_commas, suffix)`` of a number with an
    optional currency sign before it and a unit after it (``$1,250.50``, ``-3``, ``12 %``,
    ``3.5 kg``, ``40 apples``), or None."""
    m = _NUMBER.match(s)
    if m is None:
        return None
    if (
        m.group("suf").lower() in _ORDINAL_SUFFIXES
        and re.fullmatch(r"\d+", m.group("num"))
        and m.group("suf").lower() != _ordinal(int(m.group("num")))
    ):
        return None  # '21th' is no ordinal
    core = m.group("num").replace("−", "-")
    sign = -1.0 if (m.group("sign") or "").strip() in ("-", "−") or core.startswith("-") else 1.0
    digits = core.lstrip("+-")
    value = sign * float(digits.replace(",", ""))
    decimals = len(digits.split(".")[1]) if "." in digits else 0
    return m.group("pre"), digits, value, decimals, "," in digits, m.group("suf")


def infer_answer_type(answer: Any) -> str:
    """``boolean``, ``number`` (with an optional currency sign or unit; an ordinal with its
    right suffix; a clock time, a fraction, a range ``10-12``), ``word`` (one word) or
    ``text``."""
    if isinstance(answer, bool):
        return "boolean"
    if isinstance(answer, (int, float)):
        return "number"
    s = str(answer).strip()
    if s.lower() in _TRUE | _FALSE | {"maybe"}:
        return "boolean"
    if number_parts(s) is not None or _special_number(s) is not None:
        return "number"  # also a clock time, a fraction or a range of whole numbers
    if re.fullmatch(r"[^\W\d_]+(?:['’\-][^\W\d_]+)*", s):
        return "word"
    return "text"


def _bool_options(answer: Any) -> tuple[list[str], int]:
    s = str(answer).strip().lower()
    yes_no = s in {"yes", "no", "maybe", "y", "n"}
    opts = ["Yes", "No", UNDETERMINED] if yes_no else ["True", "False", UNDETERMINED]
    if isinstance(answer, bool):
        return opts, 0 if answer else 1
    return opts, 0 if s in _TRUE else (1 if s in _FALSE else 2)


def roundness(n: int) -> int:
    """The roundness of a whole number of units: the largest of 1, 5, 10, 50, 100, 500...
    that divides it (0, divided by all, is rounder than any: returned as 0)."""
    n = abs(n)
    if n == 0:
        return 0
    g = 1
    while True:
        nxt = _rounder(g)
        if n % nxt:
            return g
        g = nxt


def _rounder(g: int) -> int:
    """The roundness level above ``g`` (1 -> 5 -> 10 -> 50 -> 100)."""
    return g * 5 if str(g)[0] == "1" else g * 2


def _nice(limit: float) -> list[int]:
    """The steps 1, 2, 5, 10, 20, 50... up to ``limit`` (at least 1)."""
    out, k = [1], 0
    while True:
        for m in (2, 5, 10):
            v = m * 10**k
            if v > limit:
                return out
            out.append(v)
        k += 1


# the latest year a year-like answer's distractors reach (unless the answer is later): a
# constant, not today's year, so that an item gets the same options in any year (its
# prompts, hence the cache and the results, would otherwise change on New Year's Day)
LATEST_YEAR = 2026


# a clock time (3:45, 07:30, 11:05 pm), a fraction (3/4), a range of whole numbers (10-12 kg)
_TIME = re.compile(r"^(?P<h>\d{1,2}):(?P<m>\d\d)(?P<ampm>\s*(?:[aApP]\.?[mM]\.?))?$")
_FRACTION = re.compile(r"^(?P<a>\d+)\s*/\s*(?P<b>\d+)$")
_RANGE = re.compile(r"^(?P<a>\d+)(?P<sep>\s*(?:-|–|to)\s*)(?P<b>\d+)(?P<suf>\s*[^\W\d_]+)?$")
_ORDINAL_SUFFIXES = ("st", "nd", "rd", "th")


def _special_number(s: str) -> str | None:
    """``time``, ``fraction`` or ``range`` for a well-formed one of these, else None."""
    m = _TIME.match(s)
    if (
        m
        and (int(m["h"]) <= (12 if m["ampm"] else 23))
        and int(m["m"]) < 60
        and not (m["ampm"] and int(m["h"]) == 0)
    ):
        return "time"
    m = _FRACTION.match(s)
    if m and int(m["b"]) > 0 and int(m["a"]) > 0:
        return "fraction"
    m = _RANGE.match(s)
    if m and int(m["a"]) < int(m["b"]):
        return "range"
    return None


def _ordinal(n: int) -> str:
    return "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")


def _progression(
    n: int,
    rnd: random.Random,
    tiers: Sequence[Sequence[int]],
    lo: int | None = None,
    hi: int | None = None,
    size: float = 1.0,
    zero: str = "yes",
) -> list[int]:
    """Five consecutive values ``n + (i - rank) * step``: the rank uniform among those
    that some step of ``tiers`` allows within ``[lo, hi]`` (``zero``: whether 0 may be a
    distractor, ``"yes"``, ``"no"`` or ``"below"`` the answer when it is not the largest);
    the step, of the first tier that has one fitting the rank, one that
    leaves an option as round as ``n`` besides it if there is one, the one nearest
    ``size``."""

    def fits(r: int, d: int) -> bool:
        return bool(
            (lo is None or n - r * d >= lo)
            and (hi is None or n + (4 - r) * d <= hi)
            and (zero == "yes" or not n or n % d or not -4 <= n // d - r <= 0 or (zero == "below" and r < 4))
        )

    def alone(r: int, d: int) -> bool:  # n is the roundest option, alone
        others = [n + (i - r) * d for i in range(5) if i != r]
        return n != 0 and all(v and roundness(v) < roundness(n) for v in others)

    ranks = [r for r in range(5) if any(fits(r, d) for tier in tiers for d in tier)]
    if not ranks:
        raise ValueError("no room for 5 options")
    r = rnd.choice(ranks)
    tier = next(t for t in tiers if any(fits(r, d) for d in t))
    d = min((d for d in tier if fits(r, d)), key=lambda d: (alone(r, d), max(d / size, size / d), d))
    return [n + (i - r) * d for i in range(5)]


def _steps(n: int, rnd: random.Random, level: int) -> tuple[list[list[int]], float]:
    """The steps for ``n`` by preference, and a size drawn at random relative to ``|n|``
    (3 % to 25 %): multiples of the level above its own (every value ``n + k * step`` is
    then exactly as round as ``n``) up to twice the size or half ``|n|``; multiples of its
    own level (no option is less round); finer ones, 0 allowed but not below the largest
    ``n`` (10 at rank 2: 0 5 10 15 20)."""
    up, size = _rounder(level), max(1.0, abs(n) * 10 ** rnd.uniform(-1.5, -0.6))
    cap = max(2 * size, abs(n) / 2)
    tiers = [
        [up * k for k in _nice(cap / up)] if up <= cap else [],
        [level * k for k in _nice(max(abs(n), 1) / level)],
        _nice(max(abs(n), 1)),
    ]
    return tiers, size


def _time_options(s: str, rnd: random.Random) -> tuple[list[str], int]:
    m = _TIME.match(s)
    assert m is not None  # the caller matched _TIME already
    h, mm, ampm = int(m["h"]), int(m["m"]), m["ampm"] or ""
    twelve = bool(ampm) or (1 <= h <= 12 and not m["h"].startswith("0"))
    pad = len(m["h"]) == 2 and m["h"].startswith("0")
    t = h * 60 + mm
    if ampm:
        t = (h % 12) * 60 + mm + (720 if ampm.strip().lower().startswith("p") else 0)
    cycle = 1440 if (ampm or not twelve) else 720
    # steps that keep the minutes' roundness (:45 -> :15, :45, :15...; :00 -> whole hours),
    # 4 steps short of the clock's cycle (no option twice)
    ml = 60 if mm == 0 else 30 if mm == 30 else 15 if mm % 15 == 0 else 5 if mm % 5 == 0 else 1
    steps = {60: [60, 120], 30: [60, 120], 15: [30, 90], 5: [15, 45], 1: [5, 10, 25]}[ml]
    d = rnd.choice(steps)
    r = rnd.randrange(5)

    def fmt(v: int) -> str:
        v %= cycle
        hh, mi = divmod(v, 60)
        suf = ""
        if ampm:
            word = "pm" if hh >= 12 else "am"
            core = ampm.strip()
            word = word.upper() if core[:1].isupper() else word
            if "." in core:
                word = f"{word[0]}.{word[1]}."
            suf = ampm[: len(ampm) - len(ampm.lstrip())] + word
        if twelve:
            hh = hh % 12 or 12
        return f"{hh:02d}:{mi:02d}{suf}" if pad else f"{hh}:{mi:02d}{suf}"

    opts = [fmt(t + (i - r) * d) for i in range(5)]
    opts[r] = s
    rnd.shuffle(opts)
    return opts, opts.index(s)


def _fraction_options(s: str, rnd: random.Random) -> tuple[list[str], int]:
    from fractions import Fraction
    from math import gcd

    m = _FRACTION.match(s)
    assert m is not None  # the caller matched _FRACTION already
    a, b = int(m["a"]), int(m["b"])
    slash = s[len(m["a"]) : len(s) - len(m["b"])]
    value, lowest = Fraction(a, b), gcd(a, b) == 1
    top = 2 * value + 1 if value >= 1 else Fraction(1)
    seen: set[Fraction] = {value}
    below: list[str] = []  # the fractions written as the answer is, below and above it
    above: list[str] = []
    for q in range(max(2, b - 3), b + 40):  # denominators near the answer's, more if needed
        if q >= b + 4 and len(below) >= 4 and len(above) >= 4:
            break
        near = int(value * q)
        for p in range(max(1, near - 6), min(int(top * q), near + 7) + 1):
            v = Fraction(p, q)
            if (gcd(p, q) == 1) != lowest or v in seen or (value != 1 and (value < 1) != (v < 1)):
                continue
            seen.add(v)
            (below if v < value else above).append(f"{p}{slash}{q}")
    ranks = [r for r in range(5) if r <= len(below) and 4 - r <= len(above)]
    if not ranks:
        raise ValueError(f"no room for fraction options around {s!r}")
    r = rnd.choice(ranks)
    below.sort(key=lambda o: -Fraction(*map(int, o.split(slash))))
    above.sort(key=lambda o: Fraction(*map(int, o.split(slash))))
    opts = rnd.sample(below[: max(r, 6)], r) + rnd.sample(above[: max(4 - r, 6)], 4 - r) + [s]
    rnd.shuffle(opts)
    return opts, opts.index(s)


def _range_options(s: str, rnd: random.Random) -> tuple[list[str], int]:
    m = _RANGE.match(s)
    assert m is not None  # the caller matched _RANGE already
    a, b, sep, suf = int(m["a"]), int(m["b"]), m["sep"], m["suf"] or ""
    width = b - a
    steps = [d for d in _nice(max(a, b)) if d >= width and d >= b / 20][:3] or [width]
    starts = _progression(
        a, rnd, [steps, [d for d in _nice(a) if d >= width] or [width]], lo=0, size=rnd.choice(steps)
    )
    opts = [f"{x}{sep}{x + width}{suf}" for x in starts]
    opts[starts.index(a)] = s
    rnd.shuffle(opts)
    return opts, opts.index(s)


def _number_options(answer: Any, rnd: random.Random) -> tuple[list[str], int]:
    """The answer and 4 other numbers written as it is: its minus sign ('-' or '−'), a
    leading '+', zero padding ('007'), thousands commas, decimals, currency sign and unit.

    * Progression: the 5 options are consecutive multiples of one step (37 -> 27 32 37 42
      47), so that spacing, density and the middle of the range say nothing; the answer's
      rank among them is drawn uniformly from the ranks the range allows: a non-negative
      answer gets no negative option (a count of 2 has at most 2 options below it: 0 1 2
      3 4), an ordinal none below 1st, a percentage in [0, 100] none outside it, a year
      (1000-2100, no unit) and a decade ('1990s') none after the current one unless the
      answer is (so those ranks are limited); a negative answer (or '-0') may have any
      rank.
    * Step: near a size drawn at random from 3 %-25 % of the answer; by preference a
      multiple of the roundness level above the answer's, so that every option is exactly
      as round as the answer (37 -> step 5 or 10: 27 32 37 42 47; 350 -> 100); where none
      fits the drawn rank (40 at rank 3), a multiple of the answer's own level (10 20 30
      40 50: no option less round than it); else (10 at rank 3, a year, 100 %) a finer
      step of 1, 2, 5, 10..., one that leaves another option as round as the answer
      where there is one (0 5 10 15 20): only then can the answer be the roundest.
    * 0: a distractor only below an answer that is not the largest (never with the answer
      on top, which would give it away), except for counts under 10 (4 -> 0 1 2 3 4);
      never for a negative answer.
    * Own formats: an ordinal keeps the right suffix ('21st' -> 16th, 26th); a time is a
      valid clock time in the answer's notation (12 h, 24 h, am/pm), minutes as round;
      a fraction gets fractions near it, positive, in lowest terms exactly when the answer
      is, never equal in value to it; a range ('10-12') gets ranges of its width.
    """
    s = str(answer).strip()
    special = _special_number(s)
    if special == "time":
        return _time_options(s, rnd)
    if special == "fraction":
        return _fraction_options(s, rnd)
    if special == "range":
        return _range_options(s, rnd)
    m = _NUMBER.match(s)
    if m is None:
        raise ValueError(f"not a number answer: {s!r}")
    sign_g, pre, num, suf = m.group("sign") or "", m.group("pre"), m.group("num"), m.group("suf")
    sign_first = bool(sign_g.strip()) or num[:1] not in "+-−"
    sign = sign_g.strip() or (num[:1] if num[:1] in "+-−" else "")
    gap = sign_g[1:] if sign_g.strip() else ""
    minus = sign if sign in ("-", "−") else "-"
    digits = num.lstrip("+-−")
    int_part, _, frac = digits.partition(".")
    decimals, commas = len(frac), "," in int_part
    width = len(int_part) if len(int_part) > 1 and int_part.startswith("0") else 0
    negative = sign in ("-", "−")
    n = int((int_part.replace(",", "") or "0") + frac) * (-1 if negative else 1)
    whole = not decimals and not commas and not width and not sign
    ordinal = whole and suf.lower() in _ORDINAL_SUFFIXES
    if ordinal and suf.lower() != _ordinal(n):
        raise ValueError(f"not an ordinal: {s!r}")

    def fmt(v: int) -> str:
        ip, fp = divmod(abs(v), 10**decimals)
        body = f"{ip:,}" if commas else str(ip)
        body = body.zfill(width) if width else ("" if not int_part and ip == 0 else body)
        body += f".{fp:0{decimals}d}" if decimals else ""
        sg = minus if v < 0 else ("+" if sign == "+" else "")
        tail = suf
        if ordinal:
            tail = _ordinal(v).upper() if suf.isupper() else _ordinal(v)
        return (sg + (gap if sg else "") + pre + body if sign_first else pre + sg + body) + tail

    lo = None if negative else (1 if ordinal else 0)
    hi = None
    level = roundness(n) or 1
    decade = whole and n >= 10 and n % 10 == 0 and suf.strip().lower() in ("s", "'s", "’s")
    size, zero = 10.0, "yes"
    if decade:
        hi = max(n, LATEST_YEAR // 10 * 10)
        tiers = [[10, 20, 50] if n % 50 == 0 and n % 100 else [10, 20]]
    elif whole and not pre and not suf and 1000 <= n <= 2100:  # a year
        hi = max(n, LATEST_YEAR)
        tiers = [[5, 10] if level == 1 else [10, 20] if level == 5 else [10, 20, 50], _nice(20)]
        size = rnd.choice(tiers[0])
    else:
        if suf.strip() == "%" and 0 <= n <= 100 * 10**decimals:
            hi = 100 * 10**decimals
        tiers, size = _steps(n, rnd, level)
        # 0: never for a negative answer, nor below the largest unless it is tiny (2 -> 0 1
        # 2 3 4), where 0 with the answer on top would give it away
        zero = "no" if negative else "yes" if abs(n) < 10 else "below"
    values = _progression(n, rnd, tiers, lo, hi, size, zero)
    opts = [s if v == n else fmt(v) for v in values]
    rnd.shuffle(opts)
    return opts, opts.index(s)


# a data set's number answers of one shape, K consecutive in value, are a number's
# distractors (see _pool_options)
POOL_WINDOW = 48
POOL_MIN = 8


@functools.lru_cache(maxsize=65536)
def _pool_key(s: str) -> tuple[tuple, float] | None:
    """``(shape, value)`` of a plain number answer (no time, fraction or range): the shape
    is how it is written (currency sign, unit, decimals, sign, zero padding; a year, an
    ordinal) and holds whether it has thousands commas only from 1,000 on."""
    s = s.strip()
    m = _NUMBER.match(s)
    if m is None or _special_number(s):
        return None
    sign = (m["sign"] or "").strip() or (m["num"][:1] if m["num"][:1] in "+-−" else "")
    digits = m["num"].lstrip("+-−")
    int_part, _, frac = digits.partition(".")
    suf = m["suf"].strip().lower()
    negative = sign in ("-", "−")
    value = float(digits.replace(",", "") or 0) * (-1 if negative else 1)
    if suf in _ORDINAL_SUFFIXES and not frac:
        suf = "#ordinal"
    year = (
        not frac
        and not m["pre"].strip()
        and not suf
        and not sign
        and "," not in digits
        and 1000 <= value <= 2100
    )
    commas = ("," in int_part) if abs(value) >= 1000 else None
    return (
        (
            m["pre"].strip(),
            suf,
            len(frac),
            negative,
            year,
            len(int_part) > 1 and int_part.startswith("0"),
            sign == "+",
            commas,
        ),
        value,
    )


def _same_shape(a: tuple, b: tuple) -> bool:
    """Whether two :func:`_pool_key` shapes are written alike (below 1,000 a number has
    no thousands commas either way)."""
    return a[:-1] == b[:-1] and (a[-1] is None or b[-1] is None or a[-1] == b[-1])


def _inclusion(weights: Sequence[float], size: int) -> list[float]:
    """Inclusion probabilities proportional to ``weights`` that sum to ``size``, none above
    1 (a value too common for its share is always in, the rest share what is left)."""
    pi = [0.0] * len(weights)
    free = list(range(len(weights)))
    left = float(size)
    while free:
        total = sum(weights[i] for i in free)
        over = [i for i in free if weights[i] * left / total >= 1.0]
        if not over:
            for i in free:
                pi[i] = weights[i] * left / total
            break
        for i in over:
            pi[i] = 1.0
        left -= len(over)
        free = [i for i in free if i not in over]
    return pi


def _pool_options(answer: str, rnd: random.Random, vocabulary: Sequence[str]) -> tuple[list[str], int] | None:
    """Four other answers of the data set as distractors, or None where it has fewer than
    :data:`POOL_MIN` different ones written as ``answer`` is.

    The data set's answers of the answer's shape, sorted by value, are cut into a window
    of :data:`POOL_WINDOW` consecutive values that holds the answer at a uniformly random
    place. Within it, five values are drawn so that each is in the five with probability
    five times its share of the window's answers (a value three items share is three times
    as likely; systematic sampling in a random order, conditioned on holding the answer):
    over the data set, a value is then offered five times as often as it is right, so
    whichever of the five were right, this set was as likely to be drawn. No rule that
    ignores the question — the roundest, the middle, the value most common among the data
    set's answers or among the options offered — beats chance, and the answer's rank is
    uniform; only a value that is more than a fifth of the answers near it, offered every
    time, is right more often than a fifth of the time it is offered."""
    key = _pool_key(answer)
    if key is None:
        return None
    shape, x = key
    texts: dict[float, list[str]] = {}
    for v in vocabulary:
        k = _pool_key(v)
        if k is not None and _same_shape(k[0], shape):
            texts.setdefault(k[1], []).append(v.strip())
    count = {v: len(t) for v, t in texts.items()}
    count[x] = max(count.get(x, 0), 1)  # the answer is one of the data set's answers
    values = sorted(count)
    if len(values) < POOL_MIN:
        return None
    r = values.index(x)
    for _ in range(20):
        j = r - rnd.randrange(POOL_WINDOW)
        window = values[max(0, j) : j + POOL_WINDOW]
        if len(window) >= 5:
            break
    else:
        return None
    rnd.shuffle(window)
    pi = _inclusion([count[v] for v in window], 5)
    starts, at = [], 0.0
    for p in pi:
        starts.append(at)
        at += p
    at_x = window.index(x)
    u = (starts[at_x] + rnd.random() * pi[at_x]) % 1.0
    drawn = []
    for point in (u + i for i in range(5)):
        i = next((i for i in range(len(window)) if starts[i] <= point < starts[i] + pi[i]), len(window) - 1)
        drawn.append(window[i])
    if x not in drawn or len(set(drawn)) < 5:  # only by rounding at an edge
        return None
    opts = [answer if d == x else texts[d][0] for d in drawn]
    rnd.shuffle(opts)
    return opts, opts.index(answer)


# usage domains and glosses of words that are never options (slurs, insults, obscenities)
_OFFENSIVE_DOMAINS = frozenset(
    {"ethnic_slur", "disparagement", "obscenity", "vulgarism", "slang", "derogation", "profanity", "insult"}
)
_OFFENSIVE_GLOSS = re.compile(
    r"\b(?:offensive|derogatory|slur|disparag\w*|obscen\w*|vulgar\w*"
    r"|contemptuous\w*|insult\w*|abusive)\b",
    re.I,
)
# markers of informal use: a word WordNet offers (not the data's own) must have none
_INFORMAL_GLOSS = re.compile(
    r"\b(?:informal\w*|slang|colloquial\w*|uncomplimentary|jocular\w*"
    r"|pejorative\w*|crude|rude|taboo|epithet|term of abuse)\b",
    re.I,
)
# a second net: slurs, insults and ethnic or religious labels WordNet does not mark
_BLOCKED = frozenset(
    """nigger nigga negro negroes negress negroid blackamoor coon darky darkie
jigaboo sambo pickaninny kike yid hymie heeb jew jews jewess hebrew israelite hasid hasidim
chassid ashkenazi sephardi goy gentile chink gook jap nip slant slope spic spick wetback beaner
greaser wop dago guinea kraut hun boche paki raghead towelhead sandnigger redskin squaw injun
gringo honky honkie cracker whitey mulatto quadroon octoroon halfbreed half-breed mongoloid
faggot fag fagot dyke tranny queer homo retard cripple spastic whore slut bitch cunt twat tart
bastard prick dick cock pussy wanker tosser abo abos aborigine boong lubra hottentot bushman
eskimo gypsy gyp gippo pikey clit clitoris bum butt arse ass asshole arsehole pimp skivvy dope
dimwit stupid idiot moron imbecile cretin dummy dumbass dunce halfwit nitwit fool lunatic maniac
psycho nutcase spaz midget dwarf fatso slave servant serf hooker prostitute harlot strumpet wench
hussy slattern trollop bimbo chick pansy fairy poof poofter nancy sissy hag crone shit fuck
piss crap bugger bollocks tits boob boobs knockers jugs hooters junkie druggie wog""".split()
)
# religions, and nationalities and peoples: an answer of one gets only others of it
_RELIGIONS = tuple(
    """Christian Muslim Buddhist Hindu Jewish Sikh Catholic Protestant Orthodox
Mormon Jain Taoist Shinto Anglican Lutheran Baptist Methodist Quaker Zoroastrian Bahai""".split()
)
_PEOPLES = tuple(
    """German French Chinese Japanese Indian Mexican Irish Italian Spanish Russian
British English Scottish Welsh American Canadian Brazilian Egyptian Greek Turkish Polish Dutch
Swedish Korean Vietnamese Thai Nigerian Kenyan Australian Argentine Portuguese Norwegian Danish
Finnish Swiss Austrian Belgian Hungarian Czech Peruvian Chilean Cuban Iranian Iraqi Israeli
Pakistani Indonesian Filipino Moroccan Ethiopian Ghanaian African Asian European Arab Arabic
Latin Hispanic Persian Kurdish Roman Scandinavian""".split()
)
_GROUPS = (frozenset(w.lower() for w in _RELIGIONS), frozenset(w.lower() for w in _PEOPLES))


# common given names: a person's name gets other names as options
_GIVEN_NAMES = tuple(
    """Mary John Sandra Daniel Fred Bill Jeff Julie Emily Jessica Lily Bernhard
Greg Brian Jason Gertrude Winona James Robert Michael William David Richard Joseph Thomas
Charles Christopher Matthew Anthony Mark Steven Andrew Kevin George Edward Henry Frank Paul
Anna Emma Olivia Sarah Laura Linda Susan Karen Lisa Nancy Betty Helen Alice Sophie Clara Grace
Rachel Hannah Rose Kate Ruth Martha Lucy Jane Oliver Harry Jack Samuel Adam Simon Victor Tom""".split()
)
_GIVEN = frozenset(n.lower() for n in _GIVEN_NAMES)


@functools.lru_cache(maxsize=65536)
def _offensive(word: str, strict: bool = False) -> bool:
    """Whether ``word`` is a slur, an insult or an obscenity in any of its WordNet senses
    (usage domain ``ethnic_slur``, ``disparagement``, ``obscenity``, ``vulgarism``,
    ``slang``... or a gloss that says "offensive", "derogatory", "disparaging"...), or in
    the block list :data:`_BLOCKED`. ``strict`` (words WordNet offers, not the
    passage or the data set's own answers) also refuses a word any of whose senses has any usage
    domain at all (colloquialism, slang...) or a gloss marking informal use ("dimwit",
    "dope", "bum")."""
    w = word.lower().replace(" ", "_")
    if (
        w in _BLOCKED
        or w.replace("_", " ") in _BLOCKED
        or any(x in _BLOCKED or x.replace("_", " ") in _BLOCKED for x in _lemmas(w))
    ):
        return True
    try:
        from .wordnet import WordNetMissing, wordnet

        wn = wordnet()
    except WordNetMissing:
        return False
    for syn in wn.synsets(w):
        domains = {d.name().split(".")[0] for d in syn.usage_domains()}
        if domains & _OFFENSIVE_DOMAINS or _OFFENSIVE_GLOSS.search(syn.definition()):
            return True
        if strict and (domains or _INFORMAL_GLOSS.search(syn.definition())):
            return True
    return False


@functools.lru_cache(maxsize=4096)
def _family(word: str) -> frozenset[str]:
    """Words that would also be right where ``word`` is: the lemmas of every sense of it
    (synonyms: bus / omnibus, father / papa), of their hypernyms up to 3 levels (broader
    words: iron / metal, king / monarch) and of their hyponyms up to 2 levels (narrower
    words: ship / iceboat), lower case with spaces."""
    try:
        from .wordnet import WordNetMissing, wordnet

        wn = wordnet()
    except WordNetMissing:
        return frozenset()
    senses = set()
    for w in _lemmas(word) | {word.lower()}:
        senses.update(wn.synsets(w.replace(" ", "_")))
    found = set(senses)
    for s in senses:
        found.update(s.closure(lambda z: z.hypernyms() + z.instance_hypernyms(), depth=3))
        found.update(s.closure(lambda z: z.hyponyms() + z.instance_hyponyms(), depth=2))
    return frozenset(lem.name().lower().replace("_", " ") for s in found for lem in s.lemmas())


def _related(answer: str, word: str) -> bool:
    """Whether ``word`` is a synonym, a broader or a narrower word of ``answer`` (see
    :func:`_family`), in any of their forms."""
    fam = _family(answer)
    return any(x.replace("_", " ") in fam for x in _lemmas(word) | {word.lower()})


def _group(word: str) -> frozenset[str] | None:
    """The religions or the nationalities and peoples, when ``word`` names one."""
    w = word.lower()
    return next((g for g in _GROUPS if w in g or any(x in g for x in _lemmas(w))), None)


@functools.lru_cache(maxsize=65536)
def _lemmas(word: str) -> frozenset[str]:
    """The word and its lemmas (WordNet's, and plain English endings): two words that
    share one are inflections of each other (wolf / wolves, mouse / mice, go / going)."""
    w = word.lower()
    out = {w}
    for suffix, repl in (
        ("ies", "y"),
        ("ves", "f"),
        ("ves", "fe"),
        ("es", ""),
        ("s", ""),
        ("ed", ""),
        ("ed", "e"),
        ("ing", ""),
        ("ing", "e"),
    ):
        if w.endswith(suffix) and len(w) > len(suffix) + 2:
            out.add(w[: -len(suffix)] + repl)
    try:
        from .wordnet import WordNetMissing, wordnet

        wn = wordnet()
    except WordNetMissing:
        return frozenset(out)
    for pos in ("n", "v", "a"):
        lemma = wn.morphy(w, pos)
        if lemma:
            out.add(lemma.lower())
    return frozenset(out)


@functools.lru_cache(maxsize=65536)
def _senses(word: str) -> tuple:
    """WordNet's first noun senses of ``word`` (adjective senses when it has none)."""
    try:
        from .wordnet import WordNetMissing, wordnet

        wn = wordnet()
    except WordNetMissing:
        return ()
    return tuple(wn.synsets(word.lower(), "n")[:3] or wn.synsets(word.lower(), "a")[:2])


def _kind(answer: str, vocabulary: Sequence[str]) -> tuple[str | None, Any]:
    """The answer's kind (a WordNet lexicographer file: ``noun.animal``,
    ``noun.attribute`` for colours, ``noun.location``...) and its sense of that kind: the
    sense most of the data set's other answers share (``white`` among colours is the
    colour, not the person), else the first."""
    senses = _senses(answer)
    if not senses:
        return None, None
    others = [set(x.lexname() for x in _senses(v)) for v in vocabulary[:200]]
    best = max(senses, key=lambda x: (sum(x.lexname() in o for o in others), -senses.index(x)))
    return best.lexname(), best


def _of_kind(word: str, kind: str | None) -> bool:
    if kind == "name":
        return word.lower() in _GIVEN or (word[:1].isupper() and not _senses(word))
    if kind == "proper":
        return word[:1].isupper()
    return kind is None or any(x.lexname() == kind for x in _senses(word))


def _co_hyponyms(sense: Any, names: bool = False) -> list[str]:
    """Words of the same kind from WordNet: the sense's siblings, then its cousins (red,
    blue... for a colour; fox, dog... for the wolf; Paris, Rome... for London when
    ``names``), the most frequent first; never a slur, insult or obscenity
    (:func:`_offensive`). Kept per sense: a data set's answers repeat (bAbI's thousand
    items have a handful), and WordNet's frequency counts are read from disk."""
    return list(_co_hyponyms_of(sense, names))


@functools.lru_cache(maxsize=4096)
def _co_hyponyms_of(sense: Any, names: bool) -> tuple[str, ...]:
    # sorted: WordNet lists a synset's relations in an order that changes with Python's
    # string hashing, so the first few hyponyms (and the options) changed from run to run
    def up(x: Any) -> list[Any]:  # London is an instance of a capital, not a kind of one
        return sorted(x.hypernyms() + x.instance_hypernyms(), key=lambda z: z.name())

    def down(x: Any) -> list[Any]:
        return sorted(x.hyponyms() + x.instance_hyponyms(), key=lambda z: z.name())

    def marked(x: Any) -> bool:
        return bool(
            {d.name().split(".")[0] for d in x.usage_domains()} & _OFFENSIVE_DOMAINS
            or _OFFENSIVE_GLOSS.search(x.definition())
        )

    found: dict[str, int] = {}
    for h in up(sense):
        for level in (h, *up(h)):
            for sib in down(level):
                if sib == sense:
                    continue
                for x in (sib, *down(sib)[:6]):
                    if marked(x):
                        continue
                    for lem in x.lemmas():
                        name = lem.name()
                        if (
                            name.isalpha()
                            and (name.islower() or (names and name.istitle()))
                            and not _offensive(name, True)
                        ):
                            found[name] = max(found.get(name, 0), lem.count())
    return tuple(sorted(found, key=lambda w: (-found[w], w)))


def _capitalised(passage: str, alone: bool = False) -> list[str]:
    """The passage's capitalised words that are not only capitalised as a sentence's
    first word (names: Obama, Microsoft, Paris); ``alone``: only those that are a name by
    themselves, not a piece of a longer one ("Ulm", not "Pablo" of "Pablo Picasso")."""
    from .text import WORD

    out = []
    for sent in re.split(r"(?<=[.!?])\s+", passage):
        words = WORD.findall(sent)
        caps = [w[:1].isupper() and w.lower() not in _FUNCTION_WORDS for w in words] + [False]
        keep = [not alone or not ((i and caps[i - 1]) or caps[i + 1]) for i in range(len(words))]
        out += [
            w
            for i, w in enumerate(words[1:], 1)
            if w[:1].isupper() and w.isalpha() and len(w) > 1 and w.lower() not in _FUNCTION_WORDS and keep[i]
        ]
        if (
            words
            and words[0][:1].isupper()
            and words[0].lower() not in _FUNCTION_WORDS
            and (not _senses(words[0]) or words[0].lower() in _GIVEN)
            and words[0].isalpha()
            and keep[0]
        ):  # "John went..." (john: a toilet)
            out.append(words[0])
    return sorted(set(out))


@functools.lru_cache(maxsize=65536)  # asked of every word of every passage
def _singular(word: str) -> str:
    try:
        from .wordnet import WordNetMissing, wordnet

        lemma = wordnet().morphy(word.lower(), "n")
    except WordNetMissing:
        return word
    return lemma if lemma and lemma.isalpha() else word


# how many: bAbI's counts ("none", "two") get other counts, not words WordNet files with
# them ("none": a canonical hour)
_COUNTS = (
    "none",
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
    "twenty",
)
_WH = frozenset("what which who whom whose where when why how".split())
# a question form with at most this many different answers has a closed set of them (bAbI's
# "what did X give to Y?": football, milk, apple): they are each other's distractors
CLOSED_FORM = 12


def question_form(question: str) -> str:
    """How a question asks, lower case: its question word and the word after it ("how
    many", "what color", "who gave", "where is"), else its first two words. The answers
    to questions asked the same way are of one kind (:func:`siblings_by_form`)."""
    from .text import WORD

    words = [w.lower() for w in WORD.findall(question)]
    at = next((i for i, w in enumerate(words[:4]) if w in _WH), 0)
    return " ".join(words[at : at + 2])


def siblings_by_form(pairs: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    """``question form -> the data set's answers to questions of that form`` (each
    once, in order) from ``(question, answer)`` pairs."""
    out: dict[str, dict[str, None]] = {}
    for q, a in pairs:
        out.setdefault(question_form(q), {})[str(a).strip()] = None
    return {k: list(v) for k, v in out.items()}


def _count_options(
    answer: str, rnd: random.Random, siblings: Sequence[str], passage: str = ""
) -> tuple[list[str], int]:
    """A count in words gets other counts: the passage's when it writes the answer, the
    data set's answers to the same question, then the counts nearest it, in the answer's
    case."""
    from .text import WORD

    low = answer.lower()
    text = [w.lower() for w in WORD.findall(passage)]
    said = [w for w in dict.fromkeys(text) if w in _COUNTS and w != low] if low in text else []
    rnd.shuffle(said)
    mine = [w.lower() for w in siblings if w.lower() in _COUNTS and w.lower() != low]
    rnd.shuffle(mine)
    mine = said + mine
    at = _COUNTS.index(low) if low != "zero" else 0
    near = sorted(
        (w for w in _COUNTS if w not in (low, "zero", "none")),
        key=lambda w: (abs(_COUNTS.index(w) - at), rnd.random()),
    )
    if low in ("none", "zero"):
        near = [w for w in near if w != ("zero" if low == "none" else "none")]
    picked = list(dict.fromkeys(mine + near))[:4]
    if answer[:1].isupper():
        picked = [w.capitalize() for w in picked]
    opts = picked + [answer]
    rnd.shuffle(opts)
    return opts, opts.index(answer)


def _word_options(
    answer: str, rnd: random.Random, vocabulary: Sequence[str], passage: str, siblings: Sequence[str] = ()
) -> tuple[list[str], int]:
    """Four words of the answer's kind: first the passage's (other places, animals,
    colours it mentions, in the answer's number: the right answer is often in the
    passage, so its distractors must be too), then the data set's answers to questions
    asked the same way (``siblings``, see :func:`question_form`; of any kind when they
    are a closed set of at most :data:`CLOSED_FORM`: bAbI's "what did Fred give to
    Bill?" gets milk and apple for the football), then its other answers, then
    WordNet's words of the same kind. A count in words ("none", "two") gets other
    counts. None is an inflection, a synonym, a broader or a
    narrower word of the answer (:func:`_related`: not "omnibus" for "bus" nor "metal"
    for "iron"), a function word, or a slur, insult or obscenity (:func:`_offensive`;
    words WordNet gives, not the passage or the data set's answers, must not even be
    informal: "dogs" and "cats" of a passage stay options). A person's
    given name ("Mary", "Tom") gets other given names (the passage's, the data set's,
    then :data:`_GIVEN_NAMES`); another capitalised word WordNet does not know ("Obama",
    "Microsoft") gets the passage's and the data set's capitalised words; a religion
    gets other religions and a nationality or people other nationalities
    (:data:`_RELIGIONS`, :data:`_PEOPLES`), never a word for a kind of person. With
    fewer than 3 such words the data set's other one-word answers of any kind are
    added; still fewer raises :class:`ItemsError`: give such an item its own
    ``options``."""
    from .text import WORD

    if answer.lower() in _COUNTS:
        return _count_options(answer, rnd, siblings, passage)
    vocab = [v for v in dict.fromkeys(v.strip() for v in vocabulary) if infer_answer_type(v) == "word"]
    kin = [
        v
        for v in dict.fromkeys(v.strip() for v in siblings)
        if infer_answer_type(v) == "word"
        and v.lower() != answer.lower()
        and v[:1].isupper() == answer[:1].isupper()
    ]
    closed = 0 < len(kin) < CLOSED_FORM
    others = [v for v in vocab if v.lower() != answer.lower()]
    group = _group(answer)
    kind: str | None
    if group is not None:
        kind, sense = "group", None
    elif answer[:1].isupper() and answer.lower() in _GIVEN:
        kind, sense = "name", None
    elif answer[:1].isupper() and not _senses(answer):
        kind, sense = "proper", None
    else:
        kind, sense = _kind(answer, others)
    picked: list[str] = []
    taken = [_lemmas(answer)]

    def take(pool: list[str], need_kind: bool, strict: bool, answers: bool = False) -> None:
        """``answers``: the pool is the data set's own answers to this question, each a
        different answer there even where WordNet calls two of them near-synonyms (bAbI's
        "bored" and "tired")."""
        pool = list(dict.fromkeys(pool))
        rnd.shuffle(pool)
        for w in pool:
            if len(picked) >= 4:
                return
            if (
                w.lower() in _FUNCTION_WORDS
                or any(_lemmas(w) & t for t in taken)
                or _offensive(w, strict)
                or (not answers and (_related(answer, w) or any(_related(p, w) for p in picked)))
            ):
                continue  # not chrome and chromium
            if group is not None and _group(w) is not group:
                continue
            if need_kind and kind != "group" and not _of_kind(w, kind):
                continue
            picked.append(w)
            taken.append(_lemmas(w))

    words = []
    for sent in re.split(r"(?<=[.!?])\s+", passage):  # "Lions are afraid of..." has lions
        found = WORD.findall(sent)
        if found and found[0][:1].isupper() and found[0].lower() not in _GIVEN and _senses(found[0].lower()):
            found[0] = found[0].lower()
        words += [
            w
            for w in found
            if w.isalpha()
            and len(w) > 2  # not "was" made "wa"
            and w.lower() not in _FUNCTION_WORDS
        ]
    if answer[:1].islower():  # a common noun gets none of the passage's names
        words = [w for w in words if w[:1].islower()]
    # in the answer's number: "swans" gets plurals; "sheep" (both) those of the other answers
    plural = _singular(answer).lower() != answer.lower()
    if not plural and others:
        plural = 2 * sum(_singular(v).lower() != v.lower() for v in others) > len(others)
    if not plural:
        words = [_singular(w) if w[:1].islower() and len(_singular(w)) > 2 else w for w in words]
    else:  # "Sara is a frog. Frogs are afraid of...": frogs, not frog
        plurals = {_singular(w).lower() for w in words if _singular(w).lower() != w.lower()}
        words = [w for w in words if w.lower() not in plurals]
    if group is not None:
        take(words, True, False)
        take(kin, True, False)
        take(vocab, True, False)
        take([w.lower() for w in sorted(group)], True, True)
    elif kind in ("name", "proper"):
        # pieces of longer names ("Pablo" of "Pablo Picasso") only for an answer that is one
        # ("Obama" of "Barack Obama" gets "Merkel", "Putin")
        piece = _in_text(answer, passage) and answer not in _capitalised(passage, alone=True)
        take(_capitalised(passage, alone=not piece), True, False)
        take(sorted(kin), True, False)
        take(sorted(vocab), True, False)
        if kind == "name":
            take(list(_GIVEN_NAMES), True, True)
    elif closed and len(kin) >= 2:
        # a closed set of answers to this question (bAbI's rooms, colours, animals): they
        # are the options, those the passage names first when it names the answer; no
        # word of another kind the passage has ("football" for "Where is the football?")
        # and no word WordNet adds that neither passage nor data set ever gives ("pink"
        # beside bAbI's four colours): 3 or 4 options where the set is that small
        if _in_text(answer.lower(), passage.lower()):
            take(sorted(w for w in kin if _in_text(w.lower(), passage.lower())), False, False, answers=True)
        take(sorted(kin), False, False, answers=True)
    else:
        inside = _in_text(answer.lower(), passage.lower())
        if kind is not None and inside:
            take(words, True, False)
        take(sorted(kin), kind is not None, False)
        if kind is not None and not inside:  # the passage's words after the answers
            take(words, True, False)
        take(sorted(vocab), kind is not None, False)
        if len(picked) < 4 and sense is not None:  # Tuesday... for monday too
            titled = answer.istitle() or sense.lemmas()[0].name().istitle()
            pool = _co_hyponyms(sense, names=titled)
            if answer[:1].isupper():  # a county gets counties, not "side" or "midst"
                pool = [w for w in pool if w[:1].isupper()]
            take(pool[:24], True, True)
        for other in _senses(answer) if len(picked) < 3 and sense is not None else ():
            if len(picked) < 3 and other != sense:  # gold the metal, not only the coins
                take(_co_hyponyms(other, names=answer.istitle())[:24], False, True)
    if len(picked) < 3 and not (closed and len(picked) >= 2):  # too few of its kind: the
        take(sorted(vocab), False, False)  # data set's other answers
    if len(picked) < (2 if closed else 3):
        raise NoOptionsError(
            f"no distractors for the answer {answer!r}: fewer than 3 words of its "
            "kind in the passage, the data set's answers and WordNet; give the "
            "item its own 'options'"
        )
    if answer[:1].isupper():
        picked = [w[:1].upper() + w[1:] for w in picked]
    opts = picked + [answer]
    rnd.shuffle(opts)
    return opts, opts.index(answer)


def _content(t: str) -> list[str]:
    from .text import WORD

    return [w.lower() for w in WORD.findall(t) if w.lower() not in _FUNCTION_WORDS]


def _text_shape(t: str) -> tuple[bool, bool, int]:
    """What a reader sees of a text answer at a glance: whether it has a number, whether
    every content word is capitalised (a name, a title), and its length in words (1, 2, 3,
    4 or more)."""
    from .text import WORD

    words = WORD.findall(t)
    content = [w for w in words if w.lower() not in _FUNCTION_WORDS and not w.isdigit()]
    return (
        any(c.isdigit() for c in t),
        bool(content) and all(w[:1].isupper() for w in content),
        min(len(words), 4),
    )


_MONTH = (
    r"(?:January|February|March|April|May|June|July|August|September|October|November"
    r"|December)"
)
_SPANS = re.compile(
    rf"\b(?:{_MONTH}\s+\d{{1,2}},?\s+\d{{3,4}}|\d{{1,2}}\s+{_MONTH}(?:\s+\d{{3,4}})?"
    rf"|{_MONTH}\s+\d{{1,2}}|{_MONTH}\s+\d{{4}}|(?:the\s+)?\d{{2,4}}s\b"
    r"|\d{1,2}(?:st|nd|rd|th)\s+century"
    r"|[$€£]?\d[\d,.]*(?:\s*[-–]\s*\d[\d,.]*)?(?:\s+(?:million|billion|thousand|hundred))?"
    r"(?:\s+[a-z]+)?"
    r"|(?:[Tt]he|an?|An?|[Hh]is|[Hh]er|[Tt]heir|[Ii]ts)\s+(?:[a-z][\w\-]*\s+){0,2}[a-z][\w\-]*"
    r"|(?:(?:the|The|a|an)\s+)?[A-Z][\w'’\-]*(?:(?:\s+(?:of|the|and|de|da|von|van|du|la))*"
    r"\s+[A-Z][\w'’\-]*)*)"
)
_DATE = re.compile(rf"{_MONTH}|\b1\d{{3}}\b|\b20\d\d\b|\d0s\b|\bcentury\b")


def _span_kind(t: str) -> str:
    """A date, a number, a name (every content word capitalised) or a phrase."""
    if _DATE.search(t):
        return "date"
    if re.search(r"\d", t):
        return "number"
    return "name" if _text_shape(t)[1] else "phrase"


def _passage_spans(passage: str) -> list[str]:
    """Spans of the passage that could be answers: dates, numbers with their unit, names
    and titles (capitalised words, with an article before them), noun phrases (an article
    and up to 3 words), each also without its article."""
    out = []
    capitalised = set(_capitalised(passage))
    for m in _SPANS.finditer(passage):
        t = m.group(0).strip().rstrip(".,;:")
        if not t or t.lower() in _FUNCTION_WORDS:
            continue
        head, *rest = t.split(" ")
        if (
            head.lower() in ("the", "a", "an", "his", "her", "their", "its")
            and rest
            and rest[0][:1].islower()
        ):  # an article and words up to the last noun
            while rest and not (
                _senses(rest[-1]) and all(_senses(w) and w.lower() not in _FUNCTION_WORDS for w in rest)
            ):
                rest.pop()
            if not rest:
                continue
            t = " ".join([head.lower(), *rest])  # "The first mention" at a sentence's start
        elif " " not in t and t not in capitalised:
            continue  # a sentence's first word ("According")
        out.append(t)
        bare = re.sub(r"^(?:[Tt]he|an?|An?|[Hh]is|[Hh]er|[Tt]heir|[Ii]ts)\s+", "", t)
        if bare != t:
            out.append(bare)
    return list(dict.fromkeys(out))


def _text_options(
    answer: str,
    rnd: random.Random,
    item_id: str,
    none_right: bool,
    passage: str = "",
    vocabulary: Sequence[str] = (),
    siblings: Sequence[str] = (),
) -> tuple[list[str], int]:
    """Other texts of the answer's shape and "None of the other options is correct", at a
    random position. The distractors come first from the passage (its other names,
    dates, numbers with units, noun phrases of the answer's shape, then of its kind,
    :func:`_passage_spans`, :func:`_span_kind`: the right answer is often in the passage,
    so they must be too), then the data set's answers to questions asked the same way
    (``siblings``: bAbI's paths "n and e" get other paths, not the rooms the passage
    names), then of the same kind, then its
    other answers of the same shape (a name for a name, a text with a number for one
    with a number, about as many words), then copies of the answer with its one
    replaceable word changed (a number by another number, a word by a common word of its
    kind, a name by another name: "by bus" for "by train"; an answer of several
    words all names gets names), then the data set's other answers of any shape, then the
    passage's other spans, and last copies with every word replaced. No distractor shares
    a content word (or its lemma) with the answer, so none is a part, a superset or a
    re-ordering of it, nor says it in other words. When ``none_right``, the answer
    itself is left out and "None of the other options is correct" is the right option;
    with too few distractors for that (fewer than 3) the answer stays. Never fewer than
    4 options: fewer than 2 distractors raise :class:`ItemsError` (but for an answer
    without a word, "?!", which keeps itself and "None of the other options is
    correct")."""
    from .text import WORD

    need = 4 if none_right else 3
    mine = set().union(*(_lemmas(w) for w in _content(answer))) if _content(answer) else set()
    names = [w for w in _capitalised(passage) if w.lower() not in mine] + [
        n for n in _GIVEN_NAMES if n.lower() not in mine and not _offensive(n)
    ]
    passage_words = sorted(
        {w for w in WORD.findall(passage) if w.isalpha() and len(w) > 2 and w.lower() not in _FUNCTION_WORDS}
    )
    toks = [t for t in re.split(r"([^\W_]+(?:['’\-][^\W_]+)*)", answer)]
    words = [
        t
        for t in toks
        if t and WORD.fullmatch(t) and t.lower() not in _FUNCTION_WORDS and not re.search(r"\d", t)
    ]
    all_names = bool(words) and all(
        w[:1].isupper() and (w.lower() in _GIVEN or not _senses(w)) for w in words
    )

    def swap(w: str, common: bool) -> str | None:
        if w.lower() in _FUNCTION_WORDS:
            return w
        if re.search(r"\d", w):  # 40, 10-12, 3rd: each number changed

            def num(m: re.Match[str]) -> str:
                nums, at = _number_options(m.group(0), rnd)
                return rnd.choice(nums[:at] + nums[at + 1 :])

            return re.sub(r"\d+(?:\.\d+)?", num, w)
        if w[:1].isupper() and (w.lower() in _GIVEN or not _senses(w)):
            pool = names
        else:
            senses = _senses(w)
            pool = _co_hyponyms(senses[0])[:24] if senses else []
            if common and senses:
                pool = [p for p in pool if _frequent(p)][:12]
            pool = pool or ([] if common else [p for p in passage_words if _of_kind(p, None)])
        pool = [p for p in pool if not (_lemmas(p) & mine) and not _offensive(p, True) and not _related(w, p)]
        if not pool:
            return None
        new = rnd.choice(pool).replace("_", " ")
        return new[:1].upper() + new[1:] if w[:1].isupper() else new

    def swapped(common: bool) -> str | None:
        pieces = []
        for tok in toks:
            if tok and WORD.fullmatch(tok):
                new = swap(tok, common)
                if new is None:
                    return None
                pieces.append(new)
            else:
                pieces.append(tok)
        return "".join(pieces)

    def fresh(t: str, shared: bool = False) -> bool:
        """Whether ``t`` may be a distractor; ``shared``: it may share words with the
        answer (another real answer to the same question: the path "n and w" for "n and
        e"), as long as neither holds all of the other's ("apple and milk" for "milk and
        apple", "milk" for "milk and apple")."""
        words = _content(t)
        if shared:  # counted: "w and w" is not all of "e and w"

            def holds(a: Counter, b: Counter) -> bool:
                return a <= b or b <= a

            stems = Counter(min(_lemmas(w)) for w in words)
            if any(holds(stems, Counter(min(_lemmas(w)) for w in _content(o))) for o in (answer, *out)):
                return False
        elif any(set(words) <= set(_content(o)) or set(_content(o)) <= set(words) for o in out):
            return False  # "1960s" beside "the 1960s"
        apart = shared or not any(_lemmas(w) & mine for w in words)
        return (
            bool(words)
            and apart
            and t not in seen
            and t.lower() != answer.lower()
            and not _offensive(t)
            and not any(_offensive(w) for w in words)
        )

    out: list[str] = []
    seen = {answer}

    def add(pool: Iterable[str], same: bool | str, shared: bool = False) -> None:
        for v in pool:
            if len(out) >= need:
                return
            if (not same or (_text_shape(v) == shape if same is True else _span_kind(v) == same)) and fresh(
                v, shared
            ):
                seen.add(v)
                out.append(v)

    def add_swaps(common: bool) -> None:
        for _ in range(30):
            if len(out) >= need:
                return
            t = swapped(common)
            if t is None:
                return
            if fresh(t):
                seen.add(t)
                out.append(t)

    others = [v for v in dict.fromkeys(v.strip() for v in vocabulary) if v]
    rnd.shuffle(others)
    spans = _passage_spans(passage)
    rnd.shuffle(spans)
    shape = _text_shape(answer)
    kin = [v for v in dict.fromkeys(v.strip() for v in siblings) if v]
    rnd.shuffle(kin)
    if _in_text(answer.lower(), passage.lower()):
        add(spans, True)  # the passage's spans of the same shape first
        add(spans, _span_kind(answer))  # then of the same kind (a date for a date)
    add(kin, True, True)  # answers to questions asked the same way
    add(spans, True)  # (the passage's after them when it lacks the
    add(spans, _span_kind(answer))  # answer: "n and e" is no span of it)
    add(others, True)  # then real answers of the same shape
    if len(words) <= 1 or all_names:  # one replaceable word, or names: sensible swaps
        add_swaps(True)
    add(others, False)
    add(spans, False)
    add_swaps(True)  # every word changed, by common words
    add_swaps(False)
    if len(out) < 2 and _content(answer):
        raise NoOptionsError(
            f"no distractors for the answer {answer!r}: the passage and the data "
            "set's answers have too few other texts; give the item its own "
            "'options'"
        )
    if none_right and len(out) < 3:  # too few distractors to leave the answer out
        none_right = False
    opts = out[: need if none_right else 3] + [NONE_OF_THE_OTHERS] + ([] if none_right else [answer])
    rnd.shuffle(opts)
    return opts, opts.index(NONE_OF_THE_OTHERS if none_right else answer)


@functools.lru_cache(maxsize=65536)
def _frequent(word: str) -> bool:
    """Whether WordNet's sense-tagged corpus has ``word`` at all (a swap by "pycnodysostosis"
    reads as nonsense)."""
    try:
        from .wordnet import WordNetMissing, wordnet

        wn = wordnet()
    except WordNetMissing:
        return True
    w = word.lower().replace(" ", "_")
    return sum(lem.count() for s in wn.synsets(w) for lem in s.lemmas() if lem.name().lower() == w) > 0


def _in_text(s: str, text: str) -> bool:
    """Whether ``s`` is written in ``text`` as a whole (not inside a longer number)."""
    return re.search(rf"(?<![\w.,]){re.escape(s)}(?![\w]|[.,]\d)", text) is not None


def _passage_numbers(
    answer: str, opts: list[str], idx: int, passage: str, rnd: random.Random
) -> tuple[list[str], int]:
    """When the passage writes the number answer (QED's "1962", bAbI's counts: the
    answer is read off the passage), its other numbers written the same way (the shape
    of :func:`_pool_key`: currency sign, unit, decimals, thousands commas; years with
    years) replace as many of the made-up distractors: a number no passage has would be
    no distractor beside one it has. Else the options as they are."""
    key, parts = _pool_key(answer), number_parts(answer)
    if key is None or parts is None or not _in_text(answer, passage):
        return opts, idx
    pre, suf = parts[0].strip(), parts[5].strip()
    unit = r"\s?" + re.escape(suf) if suf else ""
    found = []
    for m in re.finditer(
        rf"(?<![\w.,]){re.escape(pre)}\s?\d[\d,]*(?:\.\d+)?"
        rf"{unit}(?![\w]|[.,]\d)",
        passage,
    ):
        other = _pool_key(m.group(0))
        if other is not None and _same_shape(other[0], key[0]) and other[1] != key[1]:
            found.append(m.group(0).strip())
    found = list(dict.fromkeys(found))
    if not found:
        return opts, idx
    picked = rnd.sample(found, min(4, len(found)))
    values = {number_parts(o)[2] for o in picked}  # type: ignore[index]
    made = [o for i, o in enumerate(opts) if i != idx and number_parts(o)[2] not in values]  # type: ignore[index]
    new = picked + made[: 4 - len(picked)] + [answer]
    rnd.shuffle(new)
    return new, new.index(answer)


def make_options(
    answer: Any,
    *,
    kind: str | None = None,
    seed: Any = 0,
    vocabulary: Sequence[str] = (),
    passage: str = "",
    item_id: str = "",
    siblings: Sequence[str] = (),
) -> tuple[tuple[str, ...], int, str]:
    """Options and the answer's index for an item that has none.

    * boolean: True, False, Unable to determine (Yes, No, ... for yes/no answers);
    * number: the answer and 4 other answers of the data set written as it is, near it
      in value (:func:`_pool_options`, where ``vocabulary`` has enough of them), else 4
      numbers written as it is and as round as it is, the answer's rank among them uniform
      (see :func:`_number_options`); when the passage
      writes the answer, its other numbers written the same way first
      (:func:`_passage_numbers`);
    * word: 4 words of the answer's kind, never one of its inflections nor an offensive
      word; names get names (see :func:`_word_options`, which raises :class:`ItemsError`
      when it finds no distractor at all);
    * text: 3 other texts sharing no content word with the answer (see
      :func:`_text_options`) and "None of the other options is correct" at a random
      position; in a share :data:`NONE_SHARE` of the items (seeded) the answer is left
      out, a fourth text added, and "None of the other options is correct" is the right
      option.

    ``vocabulary``: the data set's answers; ``siblings``: its answers to questions asked
    the same way as this one (:func:`siblings_by_form`), tried first.

    Returns ``(options, answer_index, answer_type)``. Seeded by ``seed`` and
    ``item_id``: the same item always gets the same options in the same order.
    """
    kind = kind or infer_answer_type(answer)
    if kind not in ANSWER_TYPES:
        raise ValueError(f"`kind` must be one of {', '.join(ANSWER_TYPES)}; got {kind!r}.")
    rnd = random.Random(f"{seed}\x1f{item_id}\x1f{answer}")
    if kind == "number" and number_parts(str(answer).strip()) is None:
        kind = infer_answer_type(answer)  # "number" asked of a text that is none
    if kind == "boolean":
        opts, idx = _bool_options(answer)
    elif kind == "number":
        pooled = _pool_options(str(answer).strip(), rnd, vocabulary) if vocabulary else None
        opts, idx = pooled or _number_options(answer, rnd)
        if passage:
            opts, idx = _passage_numbers(str(answer).strip(), opts, idx, passage, rnd)
    elif kind == "word":
        opts, idx = _word_options(str(answer).strip(), rnd, vocabulary, passage, siblings)
    else:
        none_right = random.Random(f"none\x1f{seed}\x1f{item_id}\x1f{answer}").random() < NONE_SHARE
        opts, idx = _text_options(
            str(answer).strip(), rnd, item_id or str(seed), none_right, passage, vocabulary, siblings
        )
    return tuple(opts), idx, kind


# --------------------------------------------------------------------------- loading
def _letter_or_text(answer: Any, options: Sequence[str]) -> int | None:
    """The index named by ``answer``: a capital letter (``B``, ``(B)``) in range, else the
    exact text of an option (then the same text ignoring case)."""
    s = str(answer).strip()
    m = re.fullmatch(r"\(?([A-Z])\)?", s)
    if m and LETTERS.index(m.group(1)) < len(options):
        return LETTERS.index(m.group(1))
    for i, o in enumerate(options):
        if o.strip() == s:
            return i
    for i, o in enumerate(options):
        if o.strip().lower() == s.lower():
            return i
    return None


def parse_item(
    obj: Any,
    *,
    where: str,
    default_id: str,
    dataset: str,
    seed: Any = 0,
    vocabulary: Sequence[str] = (),
    siblings: Sequence[str] = (),
) -> Item:
    """One object of the JSONL format -> :class:`Item` (errors say ``where``; an answer no
    options can be made for raises :class:`NoOptionsError`)."""
    if not isinstance(obj, dict):
        raise ItemsError(f"{where}: each line must be a JSON object")
    allowed = {"id", "instruction", "passage", "question", "options", "answer", "dataset", "answer_type"}
    unknown = sorted(set(obj) - allowed)
    if unknown:
        raise ItemsError(
            f"{where}: unknown field(s) {', '.join(unknown)} (allowed: {', '.join(sorted(allowed))})"
        )
    q = obj.get("question")
    if "question" not in obj:
        raise ItemsError(f"{where}: missing 'question' (the question the options answer); add it")
    if not isinstance(q, str) or not q.strip():
        raise ItemsError(f"{where}: 'question' must be non-empty text")
    for key in ("instruction", "passage", "dataset"):
        if key in obj and obj[key] is not None and not isinstance(obj[key], str):
            raise ItemsError(f"{where}: '{key}' must be text")
    for key in ("instruction", "passage", "question"):
        size = len(obj.get(key) or "")
        if size > MAX_FIELD_CHARS:
            raise ItemsError(
                f"{where}: '{key}' has {size:_} characters, over the limit of {MAX_FIELD_CHARS:_} "
                "(about 25,000 tokens: more than most models read, and every attack rewrites "
                "it word by word); shorten it or leave the item out"
            )
    if "answer" not in obj or obj["answer"] is None or str(obj["answer"]).strip() == "":
        raise ItemsError(f"{where}: missing 'answer' (a letter or the exact text of the right option)")
    item_id = str(obj.get("id") if obj.get("id") is not None else default_id)
    passage = obj.get("passage") or ""
    instruction = obj["instruction"] if obj.get("instruction") is not None else DEFAULT_INSTRUCTION
    options = obj.get("options")
    kind = ""
    if options is None:
        if obj.get("answer_type") is not None and obj["answer_type"] not in ANSWER_TYPES:
            raise ItemsError(f"{where}: 'answer_type' must be one of {', '.join(ANSWER_TYPES)}")
        try:
            opts, idx, kind = make_options(
                obj["answer"],
                kind=obj.get("answer_type"),
                seed=seed,
                vocabulary=vocabulary,
                passage=passage,
                item_id=item_id,
                siblings=siblings,
            )
        except NoOptionsError as exc:
            raise NoOptionsError(f"{where}: {exc}") from None
    else:
        if (
            not isinstance(options, list)
            or len(options) < 2
            or not all(isinstance(o, (str, int, float)) and not isinstance(o, bool) for o in options)
        ):
            raise ItemsError(f"{where}: 'options' must be a list of at least 2 texts")
        if len(options) > len(LETTERS):
            raise ItemsError(f"{where}: at most {len(LETTERS)} options")
        opts = tuple(str(o) for o in options)
        empty = next((i for i, o in enumerate(opts) if not o.strip()), None)
        if empty is not None:
            raise ItemsError(f"{where}: option {LETTERS[empty]} is empty: every option needs a text")
        if len({o.strip() for o in opts}) < len(opts):
            raise ItemsError(f"{where}: two options have the same text")
        found = _letter_or_text(obj["answer"], opts)
        if found is None:
            raise ItemsError(
                f"{where}: answer {obj['answer']!r} is neither an option's letter "
                f"(A-{LETTERS[len(opts) - 1]}) nor the exact text of an option"
            )
        idx = found
    return Item(item_id, q, tuple(opts), idx, passage, instruction, str(obj.get("dataset") or dataset), kind)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ItemsError(f"{path}: not UTF-8 text") from None


def _jsonl_objects(text: str, source: str) -> list[tuple[int, Any]]:
    out = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        out.append((lineno, _json(line, source, lineno)))
    return out


def _json(text: str, source: str, lineno: int | None = None) -> Any:
    """``json.loads`` with one-line errors: not JSON, or nested too deeply to read (a
    RecursionError otherwise)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        line = lineno if lineno is not None else exc.lineno
        raise ItemsError(f"{source}, line {line}: not valid JSON ({exc.msg})") from None
    except RecursionError:
        where = f"{source}, line {lineno}" if lineno is not None else source
        raise ItemsError(f"{where}: JSON nested too deeply to read") from None


def _json_file(text: str, source: str, kind: type, message: str) -> Any:
    """A whole-file JSON document that must be a ``kind`` (list or dict), else ``message``."""
    data = _json(text, source)
    if not isinstance(data, kind):
        raise ItemsError(f"{source}: {message}")
    return data


MAX_FIELD_CHARS = 100_000  # an item's passage, question or instruction
_ITEM_KEYS = {"id", "instruction", "passage", "question", "options", "answer", "dataset", "answer_type"}
_SIBLINGS = re.compile(r"^(s1|s2|labels)\.(\w+)$")
# fields of other question-answering data sets (SQuAD-like, NQ, TriviaQA...): a file with
# them beside "question" and "answer" is not ours with a misspelt field
_OTHER_DATA_KEYS = {
    "context",
    "contexts",
    "paragraph",
    "document",
    "title",
    "label",
    "choices",
    "answers",
    "evidence",
    "support",
    "facts",
    "rationale",
}


def _csv_header(text: str) -> list[str]:
    try:
        return [h.strip() for h in next(csv.reader(io.StringIO(text.lstrip("\ufeff"))), [])]
    except csv.Error:
        return []


def _cannot_place(source: str, found: str) -> ItemsError:
    return ItemsError(
        f"{source}: cannot tell which data set this file is (tried "
        f"{', '.join(FORMATS)}); found {found}. Name the format with 'format:' "
        "if it is one of these, or convert it to the JSONL item format."
    )


def _describe(keys: Iterable[str]) -> str:
    keys = sorted(keys)
    shown = ", ".join(str(k) for k in keys[:12]) + (" ..." if len(keys) > 12 else "")
    return shown or "no fields"


def _esnli_name(p: Path) -> bool:
    """Whether ``p`` is named as one of e-SNLI's s1/s2/labels files: ``s1.<split>`` whose
    two siblings are beside it, or whose split is no data file's extension (``s1.dev``
    with its siblings missing is refused as e-SNLI, naming the missing one; a
    ``labels.jsonl`` is another data set)."""
    m = _SIBLINGS.match(p.name)
    if m is None:
        return False
    if m.group(2).lower() not in ("json", "jsonl", "jsonlines", "csv", "tsv", "txt"):
        return True
    return all((p.parent / f"{k}.{m.group(2)}").is_file() for k in ("s1", "s2", "labels"))


def detect_format(path: str | os.PathLike, text: str | None = None) -> str:
    """The file's format, recognised from its name and its first record (CSV header,
    JSON keys). A file that matches none says which formats were tried and what it has:
    it is never read as a format it is not."""
    p = Path(path)
    source = str(path)
    if _esnli_name(p):
        return "esnli-txt"
    text = _read(p) if text is None else text
    head = text.lstrip("\ufeff \t\r\n")[:20000]
    if not head:
        raise ItemsError(f"{source}: the file is empty")
    if (
        re.match(r"1 [^\t\n]+\n", head)
        and p.suffix.lower() in (".txt", "")
        and re.search(r"^\d+ [^\t\n]+\t[^\t\n]+", head, re.MULTILINE)
    ):
        return "babi"  # numbered lines, and a question with its answer after a tab
    if head[0] in "[{":
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, RecursionError):
            data = None
        if isinstance(data, list):
            first = data[0] if data else None
            if (
                isinstance(first, dict)
                and "question" in first
                and ("facts" in first or "qid" in first or isinstance(first.get("answer"), bool))
            ):
                return "strategyqa"
            raise _cannot_place(
                source,
                "a JSON list whose first entry has "
                + (_describe(first) if isinstance(first, dict) else f"a {type(first).__name__}"),
            )
        first = next(iter(data.values()), None) if isinstance(data, dict) else None
        if isinstance(first, dict) and "qa_pairs" in first and "passage" in first:
            return "noahqa"
        if (
            isinstance(data, dict)
            and "\n" in text.strip()
            and not ({"question", "question_text", "sentence"} & set(data))
        ):
            raise _cannot_place(
                source,
                "a JSON object whose first entry has "
                + (_describe(first) if isinstance(first, dict) else f"a {type(first).__name__}"),
            )
        # the whole first line (a long passage may run past ``head``)
        first_line = text.lstrip("\ufeff \t\r\n").split("\n", 1)[0]
        try:
            obj = json.loads(first_line)
        except (json.JSONDecodeError, RecursionError):
            raise _cannot_place(
                source, "text that starts like JSON but whose first line is not a JSON object"
            ) from None
        if not isinstance(obj, dict):
            raise _cannot_place(source, f"a first line that is a JSON {type(obj).__name__}")
        keys = set(obj)
        if "correct" in keys and "options" in keys:
            return "aqua"
        if "sentence" in keys and "label" in keys:
            if str(obj["label"]).strip().lower() in ("true", "false"):
                return "creak"
            raise _cannot_place(
                source,
                f"JSON lines with the fields {_describe(keys)} whose "
                f"label is {obj['label']!r} (CREAK's is true or false)",
            )
        if "question" in keys and isinstance(obj.get("answer"), str) and "####" in obj["answer"]:
            return "gsm8k"
        if {"question_text", "paragraph_text"} <= keys:
            return "qed"
        if isinstance(obj.get("question"), dict) and {"stem", "choices"} <= set(obj["question"]):
            return "qasc"
        if {"positives", "negatives", "explanation"} <= keys:
            raise ItemsError(
                f"{source}: this is ECQA's annotation file (ecqa.jsonl), which has "
                "no questions: glue it to CommonsenseQA with the authors' "
                "generate_data.py and load the cqa_data_test.csv it writes"
            )
        if (
            "question" in keys
            and isinstance(obj["question"], str)
            and (
                "options" in keys
                or keys <= _ITEM_KEYS
                or (
                    "answer" in keys
                    and len(keys - _ITEM_KEYS) == 1
                    and not keys - _ITEM_KEYS & _OTHER_DATA_KEYS
                )
            )
        ):
            return "jsonl"  # ours (a missing or misspelt field is named by the item check)
        if keys <= _ITEM_KEYS and {"options", "answer"} & keys:
            return "jsonl"  # ours without its question: the item check names what is missing
        raise _cannot_place(source, f"JSON lines with the fields {_describe(keys)}")
    header = _csv_header(head.split("\n", 1)[0])
    cols = {h.lower() for h in header}
    if {"sentence1", "sentence2", "gold_label"} <= cols:
        return "esnli"
    if {"correct statement", "incorrect statement"} <= cols:
        return "sen-making"
    if {"sent0", "sent1"} <= cols:
        return "sen-making-a"
    if {"falsesent", "optiona", "optionb"} <= cols:
        return "sen-making-b"
    if {"q_text", "q_op1", "q_ans"} <= cols:
        return "ecqa"
    if re.fullmatch(r"[^,\n]+,\s*(?:[01]|[A-C])\s*", head.split("\n", 1)[0]):
        raise ItemsError(
            f"{source}: this looks like a Sen-Making gold-answer file (id,answer "
            "lines): load the subtask's data file beside it (subtaskA_..._data.csv "
            "or subtaskB_..._data.csv), which reads this one for its answers"
        )
    if len(header) > 1:
        raise _cannot_place(source, f"a table with the columns {_describe(header)}")
    raise _cannot_place(source, "text that is neither JSON, a CSV table nor a bAbI task")


def load_items(
    path: str | os.PathLike,
    *,
    format: str = "auto",
    limit: int | None = None,
    dataset: str | None = None,
    seed: Any = 0,
    instruction: str | None = None,
    answers: str | os.PathLike | None = None,
) -> list[Item]:
    """Items from a file the user has.

    Parameters
    ----------
    path : path
        The file: our JSONL format, or StrategyQA (``strategyqa_train.json``), AQuA
        (``train.json``, JSONL), CREAK (``train.json``, JSONL), GSM8K (``train.jsonl``),
        e-SNLI (``esnli_dev.csv``) or a bAbI task (``qa15_basic-deduction_test.txt``).
    format : str
        ``auto`` (recognised from the file) or one of :data:`FORMATS`.
    limit : int, optional
        Keep the first ``limit`` items.
    dataset : str, optional
        Name for the "per data set" tables (default: the format, or the file's stem).
    seed : any
        Seeds generated distractors.
    instruction : str, optional
        Instruction for formats that carry none (default :data:`DEFAULT_INSTRUCTION`).
    answers : path, optional
        The gold-answer file of a Sen-Making subtask data file (default: the one beside
        it, ``subtaskA_gold_answers.csv`` / ``subtaskA_answers_all.csv``).

    Notes
    -----
    The e-SNLI ``s1/s2/labels`` layout is given as any one of its three files
    (``s1.test``); the other two are read from the same folder.
    """
    p = Path(path)
    if p.is_dir():
        raise ItemsError(f"{path}: is a folder; give a data file")
    if not p.is_file():
        raise ItemsError(f"{path}: no such file")
    text = "" if _esnli_name(p) and format in ("auto", "esnli-txt") else _read(p)
    return parse_items_text(
        text,
        source=str(path),
        format=format,
        limit=limit,
        dataset=dataset,
        seed=seed,
        instruction=instruction,
        answers=answers,
    )


def parse_items_text(
    text: str,
    *,
    source: str,
    format: str = "auto",
    limit: int | None = None,
    dataset: str | None = None,
    seed: Any = 0,
    instruction: str | None = None,
    answers: str | os.PathLike | None = None,
) -> list[Item]:
    """:func:`load_items` on a file's text (e.g. uploaded in the dashboard); ``source`` is
    the file's name, used to recognise the format and in error messages. Formats made of
    several files (a Sen-Making subtask and its gold answers, e-SNLI's s1/s2/labels) read
    the others next to ``source``."""
    p = Path(source)
    if format != "auto" and format not in FORMATS:
        raise ItemsError(f"format must be auto or one of {', '.join(FORMATS)}; got {format!r}")
    fmt = detect_format(p, text) if format == "auto" else format
    name = dataset or (p.stem if fmt == "jsonl" else _DATASET_NAMES.get(fmt, fmt))
    if (
        not dataset
        and fmt == "qasc"
        and format == "auto"
        and not re.search(r'"(?:fact1|fact2|combinedfact)"\s*:', text[:20000])
    ):
        name = p.stem  # the layout without QASC's facts: CommonsenseQA, ARC, OpenBookQA
    instr = DEFAULT_INSTRUCTION if instruction is None else instruction
    try:
        items = _LOADERS[fmt](text, source, name, seed, instr, limit, answers=answers)
    except RecursionError:
        raise ItemsError(f"{source}: nested too deeply to read") from None
    if not items:
        raise ItemsError(f"{source}: no items found (read as {fmt})")
    for item in items:  # every format's items (ours are checked line by line already)
        for key in ("passage", "question", "instruction"):
            size = len(getattr(item, key))
            if size > MAX_FIELD_CHARS:
                raise ItemsError(
                    f"{source}: item {item.id}'s {key} has {size:_} characters, over the limit of "
                    f"{MAX_FIELD_CHARS:_} (about 25,000 tokens); shorten it or leave the item out"
                )
    ids = [(it.dataset, it.id) for it in items]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise ItemsError(f"{source}: the id {dup[1]!r} is used twice")
    return items[:limit] if limit else items


def _load_jsonl(
    text: str, source: str, name: str, seed: Any, instr: str, limit: int | None, **_: object
) -> list[Item]:
    objs = _jsonl_objects(text, source)
    vocab_by_set: dict[str, list[str]] = {}
    asked: dict[str, list[tuple[str, str]]] = {}
    for _, o in objs:  # word answers of a data set are each other's distractors
        if isinstance(o, dict) and o.get("options") is None and o.get("answer") is not None:
            ds = str(o.get("dataset") or name)
            vocab_by_set.setdefault(ds, []).append(str(o["answer"]))
            asked.setdefault(ds, []).append((str(o.get("question") or ""), str(o["answer"])))
    kin = {ds: siblings_by_form(pairs) for ds, pairs in asked.items()}
    out, skipped = [], []
    todo = objs[:limit] if limit else objs
    for lineno, obj in todo:
        if isinstance(obj, dict) and "instruction" not in obj and instr != DEFAULT_INSTRUCTION:
            obj = {**obj, "instruction": instr}
        ds = str(obj.get("dataset") or name) if isinstance(obj, dict) else name
        try:
            form = question_form(str(obj.get("question") or "")) if isinstance(obj, dict) else ""
            out.append(
                parse_item(
                    obj,
                    where=f"{source}, line {lineno}",
                    default_id=str(lineno),
                    dataset=name,
                    seed=seed,
                    vocabulary=vocab_by_set.get(ds, ()),
                    siblings=kin.get(ds, {}).get(form, ()),
                )
            )
        except NoOptionsError:  # left out, and said so
            skipped.append(str(obj.get("id") if obj.get("id") is not None else lineno))
    _left_out(source, skipped, len(todo))
    return out


def _need(obj: Any, keys: Iterable[str], where: str) -> dict:
    if not isinstance(obj, dict):
        raise ItemsError(f"{where}: expected a JSON object")
    missing = [k for k in keys if k not in obj]
    if missing:
        raise ItemsError(f"{where}: missing field(s) {', '.join(missing)}")
    return obj


def _load_strategyqa(
    text: str, source: str, name: str, seed: Any, instr: str, limit: int | None, **_: object
) -> list[Item]:
    data = _json_file(text, source, list, "a StrategyQA file is a JSON list of questions")
    out = []
    for i, obj in enumerate(data):
        where = f"{source}, question {i + 1}"
        _need(obj, ("question",), where)
        if "answer" not in obj:  # the test split has no answers
            continue
        qid = str(obj.get("qid", i + 1))
        passage = " ".join(obj.get("facts") or [])
        opts, idx, kind = make_options(bool(obj["answer"]), kind="boolean")
        out.append(Item(qid, obj["question"], opts, idx, passage, instr, name, kind))
        if limit and len(out) >= limit:
            break
    return out


def _load_aqua(
    text: str, source: str, name: str, seed: Any, instr: str, limit: int | None, **_: object
) -> list[Item]:
    out = []
    for lineno, obj in _jsonl_objects(text, source):
        where = f"{source}, line {lineno}"
        _need(obj, ("question", "options", "correct"), where)
        opts = tuple(re.sub(r"^\s*\(?[A-Ea-e]\s*\)\s*", "", str(o)).strip() for o in obj["options"])
        idx = LETTERS.find(str(obj["correct"]).strip().upper()[:1])
        if not 0 <= idx < len(opts):
            raise ItemsError(f"{where}: 'correct' must be an option letter, got {obj['correct']!r}")
        out.append(Item(str(lineno), obj["question"], opts, idx, "", instr, name, "number"))
        if limit and len(out) >= limit:
            break
    return out


def _load_creak(
    text: str, source: str, name: str, seed: Any, instr: str, limit: int | None, **_: object
) -> list[Item]:
    out = []
    for lineno, obj in _jsonl_objects(text, source):
        where = f"{source}, line {lineno}"
        _need(obj, ("sentence", "label"), where)
        if str(obj["label"]).strip().lower() not in ("true", "false"):
            raise ItemsError(f"{where}: a CREAK label is true or false, got {obj['label']!r}")
        opts, idx, kind = make_options(str(obj["label"]), kind="boolean")
        out.append(
            Item(
                str(obj.get("ex_id", lineno)),
                "Is this claim true or false?",
                opts,
                idx,
                obj["sentence"],
                instr,
                name,
                kind,
            )
        )
        if limit and len(out) >= limit:
            break
    return out


def _split_last_sentence(text: str) -> tuple[str, str]:
    parts = re.split(r"(?<=[.!?])\s+", text.strip())
    if len(parts) < 2:
        return "", text.strip()
    return " ".join(parts[:-1]), parts[-1]


def _load_gsm8k(
    text: str, source: str, name: str, seed: Any, instr: str, limit: int | None, **_: object
) -> list[Item]:
    """GSM8K (``test.jsonl``): the question's last sentence is the question, the rest the
    passage; the number after ``####`` the answer, whose distractors are the file's other
    answers near it (:func:`_pool_options`)."""
    raw = []
    for lineno, obj in _jsonl_objects(text, source):
        where = f"{source}, line {lineno}"
        _need(obj, ("question", "answer"), where)
        m = re.search(r"####\s*(.+?)\s*$", str(obj["answer"]))
        if not m:
            raise ItemsError(f"{where}: the answer has no final '#### number'")
        raw.append((str(lineno), *_split_last_sentence(obj["question"]), m.group(1).replace(",", "")))
    answers = [a for *_, a in raw]
    out = []
    for iid, passage, question, answer in raw[:limit] if limit else raw:
        opts, idx, kind = make_options(answer, kind="number", seed=seed, item_id=iid, vocabulary=answers)
        out.append(Item(iid, question, opts, idx, passage, instr, name, kind))
    return out


ESNLI_OPTIONS = ("entailment", "neutral", "contradiction")


def _load_esnli(
    text: str, source: str, name: str, seed: Any, instr: str, limit: int | None, **_: object
) -> list[Item]:
    reader = csv.DictReader(io.StringIO(text))
    fields = {f.lower(): f for f in reader.fieldnames or []}
    for need in ("sentence1", "sentence2", "gold_label"):
        if need not in fields:
            raise ItemsError(
                f"{source}, line 1: an e-SNLI file needs the columns Sentence1, Sentence2 and gold_label"
            )
    out = []
    for lineno, row in enumerate(reader, 2):
        label = (row.get(fields["gold_label"]) or "").strip().lower()
        if label not in ESNLI_OPTIONS:
            continue  # "-": no gold label
        iid = (row.get(fields.get("pairid", "")) or str(lineno)).strip()
        hyp = (row.get(fields["sentence2"]) or "").strip()
        out.append(_nli_item(iid, (row.get(fields["sentence1"]) or "").strip(), hyp, label, instr, name))
        if limit and len(out) >= limit:
            break
    return out


def _nli_item(iid: str, premise: str, hypothesis: str, label: str, instr: str, name: str) -> Item:
    q = (
        f'Hypothesis: "{hypothesis}" Does the passage entail the hypothesis (entailment), '
        "contradict it (contradiction), or neither (neutral)?"
    )
    return Item(iid, q, ESNLI_OPTIONS, ESNLI_OPTIONS.index(label), premise, instr, name, "word")


def _read_sibling(path: Path, source: str, what: str) -> str:
    if not path.is_file():
        raise ItemsError(
            f"{source}: {what} {path.name} is not beside it (looked in {path.parent}); it is read from there"
        )
    return _read(path)


def _load_esnli_txt(
    text: str, source: str, name: str, seed: Any, instr: str, limit: int | None, **_: object
) -> list[Item]:
    """e-SNLI as InferSent's preprocessing leaves it: ``s1.<split>`` (premises),
    ``s2.<split>`` (hypotheses) and ``labels.<split>``, one sentence per line."""
    p = Path(source)
    m = _SIBLINGS.match(p.name)
    if not m:
        raise ItemsError(
            f"{source}: an e-SNLI s1/s2/labels file is named s1.<split>, "
            "s2.<split> or labels.<split> (e.g. s1.test)"
        )
    split = m.group(2)
    lines = {
        k: _read_sibling(p.parent / f"{k}.{split}", source, "the e-SNLI file").splitlines()
        for k in ("s1", "s2", "labels")
    }
    n = {k: len(v) for k, v in lines.items()}
    if len(set(n.values())) != 1:
        raise ItemsError(
            f"{source}: s1.{split}, s2.{split} and labels.{split} must have one "
            f"line per pair; they have {n['s1']}, {n['s2']} and {n['labels']}"
        )
    out = []
    for i, (s1, s2, label) in enumerate(zip(lines["s1"], lines["s2"], lines["labels"], strict=True), 1):
        label = label.strip().lower()
        if label not in ESNLI_OPTIONS:
            if label in ("", "-"):
                continue  # no gold label
            raise ItemsError(
                f"{p.parent / ('labels.' + split)}, line {i}: the label must be "
                f"entailment, neutral or contradiction, got {label!r}"
            )
        out.append(_nli_item(str(i), s1.strip(), s2.strip(), label, instr, name))
        if limit and len(out) >= limit:
            break
    return out


def _csv_rows(text: str, source: str, need: Sequence[str], what: str) -> list[tuple[int, dict]]:
    """The rows of a CSV table as ``(line, {column: value})`` (columns matched ignoring
    case and spaces around them); ItemsError when a needed column is missing."""
    reader = csv.reader(io.StringIO(text.lstrip("\ufeff")))
    try:
        header = [h.strip() for h in next(reader)]
        rows = list(reader)
    except StopIteration:
        raise ItemsError(f"{source}: the file is empty") from None
    except csv.Error as exc:
        raise ItemsError(f"{source}: not a readable CSV table ({exc})") from None
    lower = [h.lower() for h in header]
    missing = [c for c in need if c.lower() not in lower]
    if missing:
        raise ItemsError(
            f"{source}, line 1: {what} needs the column(s) {', '.join(missing)}; found {_describe(header)}"
        )
    out = []
    line = 1
    for row in rows:
        line += 1
        if not any(c.strip() for c in row):
            continue
        out.append((line, {lower[i]: v.strip() for i, v in enumerate(row) if i < len(lower)}))
    return out


SEN_MAKING_A = "Which statement is against common sense?"
SEN_MAKING_B = "Why is this statement against common sense?"


def _load_sen_making(
    text: str, source: str, name: str, seed: Any, instr: str, limit: int | None, **_: object
) -> list[Item]:
    """The combined Sen-Making CSV (``ALL data/test.csv``): per row a subtask A item
    (which of the two statements is against common sense; their order is drawn, seeded)
    and a subtask B item (why: the right reason among it and the two confusing ones)."""
    need = (
        "Correct Statement",
        "Incorrect Statement",
        "Right Reason1",
        "Confusing Reason1",
        "Confusing Reason2",
    )
    out = []
    for line, row in _csv_rows(text, source, need, "a Sen-Making file"):
        right, wrong = row["correct statement"], row["incorrect statement"]
        if not right or not wrong or right == wrong:
            raise ItemsError(f"{source}, line {line}: needs two different statements")
        rnd = random.Random(f"{seed}\x1f{name}\x1f{line}")
        first_wrong = rnd.random() < 0.5
        pair = (wrong, right) if first_wrong else (right, wrong)
        out.append(
            Item(
                f"{line}-A",
                SEN_MAKING_A,
                ("Statement 1", "Statement 2"),
                0 if first_wrong else 1,
                f"Statement 1: {pair[0]}\nStatement 2: {pair[1]}",
                instr,
                name,
                "text",
            )
        )
        reason = row["right reason1"]
        others = [
            r
            for r in dict.fromkeys((row["confusing reason1"], row["confusing reason2"]))
            if r and r != reason
        ]
        if reason and others:  # a row whose reasons coincide has no subtask B item
            opts = [reason, *others]
            rnd.shuffle(opts)
            out.append(
                Item(f"{line}-B", SEN_MAKING_B, tuple(opts), opts.index(reason), wrong, instr, name, "text")
            )
        if limit and len(out) >= limit:
            break
    return out[:limit] if limit else out


def _gold_file(source: str, subtask: str, answers: str | os.PathLike | None) -> Path:
    """The gold-answer file of a Sen-Making subtask data file: ``answers`` when given,
    else the one file beside it whose name has ``subtask<X>`` (or ``task<X>``) and
    ``answer`` or ``gold``."""
    if answers is not None:
        p = Path(answers)
        if not p.is_file():
            raise ItemsError(f"{answers}: no such gold-answer file")
        return p
    here = Path(source)
    found = sorted(
        f
        for f in here.parent.glob("*.csv")
        if f != here
        and re.search(rf"(?:sub)?task{subtask}", f.name, re.IGNORECASE)
        and re.search(r"answer|gold", f.name, re.IGNORECASE)
    )
    if len(found) != 1:
        why = "none is" if not found else f"{len(found)} are ({', '.join(f.name for f in found)})"
        raise ItemsError(
            f"{source}: a Sen-Making subtask {subtask} data file has no answers; its "
            f"gold-answer file (subtask{subtask}_gold_answers.csv, or "
            f"subtask{subtask}_answers_all.csv for the training data) must lie beside "
            f"it, and {why}: name it with 'answers:'"
        )
    return found[0]


def _gold(path: Path, valid: str) -> dict[str, str]:
    out = {}
    for line, row in enumerate(csv.reader(io.StringIO(_read(path).lstrip("\ufeff"))), 1):
        if not row or not any(c.strip() for c in row):
            continue
        if len(row) < 2 or row[1].strip() not in valid:
            if line == 1:
                continue  # a header
            raise ItemsError(
                f"{path}, line {line}: expected 'id,answer' with an answer from {', '.join(valid)}"
            )
        out[row[0].strip()] = row[1].strip()
    return out


def _load_sen_making_sub(subtask: str) -> Callable[..., list[Item]]:
    def load(
        text: str,
        source: str,
        name: str,
        seed: Any,
        instr: str,
        limit: int | None,
        answers: str | os.PathLike | None = None,
        **_: object,
    ) -> list[Item]:
        gold_path = _gold_file(source, subtask, answers)
        if subtask == "A":
            need, valid = ("id", "sent0", "sent1"), "01"
        else:
            need, valid = ("id", "FalseSent", "OptionA", "OptionB", "OptionC"), "ABC"
        gold = _gold(gold_path, valid)
        out = []
        for line, row in _csv_rows(text, source, need, f"a Sen-Making subtask {subtask} file"):
            iid = row["id"]
            if iid not in gold:
                raise ItemsError(f"{source}, line {line}: the id {iid!r} has no answer in {gold_path}")
            if subtask == "A":
                out.append(
                    Item(
                        iid,
                        SEN_MAKING_A,
                        ("Statement 1", "Statement 2"),
                        int(gold[iid]),
                        f"Statement 1: {row['sent0']}\nStatement 2: {row['sent1']}",
                        instr,
                        name,
                        "text",
                    )
                )
            else:
                opts = tuple(row[k] for k in ("optiona", "optionb", "optionc"))
                if len(set(opts)) < 3 or not all(opts):
                    raise ItemsError(f"{source}, line {line}: the three reasons must be different texts")
                out.append(
                    Item(
                        iid, SEN_MAKING_B, opts, "ABC".index(gold[iid]), row["falsesent"], instr, name, "text"
                    )
                )
            if limit and len(out) >= limit:
                break
        return out

    return load


def _answer_items(
    raw: Sequence[tuple[str, str, str, str]], seed: Any, instr: str, name: str, limit: int | None
) -> list[Item]:
    """Items from ``(id, question, passage, answer)``, their options made by answer type;
    the data set's answers are each other's distractors (a one-word answer's the other
    one-word answers, a text's the other texts of its shape; answers to questions asked
    the same way first). An item no options can be
    made for is left out, with an :class:`ItemsWarning` that counts them and names the
    first ids."""
    vocab = sorted(a for *_, a in raw)  # with repeats: how often each is an answer
    kin = siblings_by_form((q, a) for _, q, _, a in raw)
    out, skipped = [], []
    todo = raw[:limit] if limit else raw
    for iid, q, passage, ans in todo:
        try:
            opts, idx, kind = make_options(
                ans, seed=seed, vocabulary=vocab, passage=passage, item_id=iid, siblings=kin[question_form(q)]
            )
        except NoOptionsError:
            skipped.append(iid)
            continue
        out.append(Item(iid, q, opts, idx, passage, instr, name, kind))
    _left_out(name, skipped, len(todo))
    return out


def _load_qed(
    text: str, source: str, name: str, seed: Any, instr: str, limit: int | None, **_: object
) -> list[Item]:
    """QED (``qed-dev.jsonlines``): the Natural Questions question, its Wikipedia
    paragraph as the passage, the annotated short answer (else NQ's first short answer)
    as the answer; options are made by answer type. Examples without an answer, and those
    whose annotators found no sentence of the passage that explains it (``explanation_type:
    none``: the passage does not give the answer), are left out."""
    raw = []
    for lineno, obj in _jsonl_objects(text, source):
        where = f"{source}, line {lineno}"
        _need(obj, ("question_text", "paragraph_text"), where)
        annotation = obj.get("annotation") or {}
        if isinstance(annotation, dict) and annotation.get("explanation_type") == "none":
            continue  # the annotators found no sentence of the passage that gives NQ's answer
        ans = None
        for a in (annotation if isinstance(annotation, dict) else {}).get("answer") or []:
            ref = a.get("paragraph_reference") if isinstance(a, dict) else None
            if isinstance(ref, dict) and str(ref.get("string") or "").strip():
                ans = str(ref["string"]).strip()
                break
        if ans is None:
            for group in obj.get("original_nq_answers") or []:
                for a in group if isinstance(group, list) else [group]:
                    if isinstance(a, dict) and str(a.get("string") or "").strip():
                        ans = str(a["string"]).strip()
                        break
                if ans is not None:
                    break
        if ans is None:
            continue
        q = str(obj["question_text"]).strip()
        q = q[:1].upper() + q[1:] + ("" if q.endswith("?") else "?")
        raw.append((str(obj.get("example_id", lineno)), q, str(obj["paragraph_text"]).strip(), ans))
    return _answer_items(raw, seed, instr, name, limit)


def _load_qasc(
    text: str, source: str, name: str, seed: Any, instr: str, limit: int | None, **_: object
) -> list[Item]:
    """QASC (``train.jsonl``, ``dev.jsonl``): ``question.stem``, ``question.choices``
    (label, text: 8 options), ``answerKey``; its two facts are the passage. The same
    layout without facts (CommonsenseQA, OpenBookQA) has no passage. The test split has
    no answers and is left out."""
    out = []
    for lineno, obj in _jsonl_objects(text, source):
        where = f"{source}, line {lineno}"
        _need(obj, ("question",), where)
        qobj = obj["question"]
        if not isinstance(qobj, dict) or "stem" not in qobj or not isinstance(qobj.get("choices"), list):
            raise ItemsError(f"{where}: 'question' must have a 'stem' and a list of 'choices'")
        if not obj.get("answerKey"):
            continue
        choices = sorted(
            (str(c.get("label", "")), str(c.get("text", "")).strip())
            for c in qobj["choices"]
            if isinstance(c, dict)
        )
        labels = [c[0] for c in choices]
        if str(obj["answerKey"]) not in labels:
            raise ItemsError(
                f"{where}: answerKey {obj['answerKey']!r} is not a choice's label ({', '.join(labels)})"
            )
        opts = tuple(c[1] for c in choices)
        if len(opts) < 2 or len(set(opts)) < len(opts) or not all(opts):
            raise ItemsError(f"{where}: the choices must be at least 2 different texts")
        facts = " ".join(str(obj[k]).strip() for k in ("fact1", "fact2") if obj.get(k))
        out.append(
            Item(
                str(obj.get("id", lineno)),
                str(qobj["stem"]).strip(),
                opts,
                labels.index(str(obj["answerKey"])),
                facts,
                instr,
                name,
                "",
            )
        )
        if limit and len(out) >= limit:
            break
    return out


def _load_ecqa(
    text: str, source: str, name: str, seed: Any, instr: str, limit: int | None, **_: object
) -> list[Item]:
    """ECQA as the authors' ``generate_data.py`` writes it (``cqa_data_test.csv``): the
    CommonsenseQA question ``q_text``, options ``q_op1``..``q_op5``, the answer's text
    ``q_ans``. The explanations are not shown (they give the answer away): the attacks
    hit the question."""
    need = ("q_no", "q_text", "q_op1", "q_op2", "q_ans")
    out = []
    for line, row in _csv_rows(text, source, need, "an ECQA file"):
        opts = tuple(row[k] for k in ("q_op1", "q_op2", "q_op3", "q_op4", "q_op5") if row.get(k))
        if row["q_ans"] not in opts:
            raise ItemsError(
                f"{source}, line {line}: the answer {row['q_ans']!r} is not one of the options q_op1..q_op5"
            )
        if len(set(opts)) < len(opts):
            raise ItemsError(f"{source}, line {line}: two options have the same text")
        out.append(
            Item(row["q_no"] or str(line), row["q_text"], opts, opts.index(row["q_ans"]), "", instr, name, "")
        )
        if limit and len(out) >= limit:
            break
    return out


def _noah_passage(raw: Any) -> str:
    if isinstance(raw, str):
        return raw.strip()
    parts = []
    for tok in raw or []:
        if isinstance(tok, str):
            parts.append(tok)
        elif isinstance(tok, (list, tuple)) and len(tok) > 1 and tok[1]:
            parts.append(str(tok[1]))
        elif isinstance(tok, dict) and tok.get("text"):
            parts.append(str(tok["text"]))
    return " ".join(p.strip() for p in parts if p.strip())


def _load_noahqa(
    text: str, source: str, name: str, seed: Any, instr: str, limit: int | None, **_: object
) -> list[Item]:
    """NoahQA (the English ``train.json``/``dev.json``/``test.json``): a JSON object of
    passages, each ``{"passage": [[n, sentence], ...], "qa_pairs": [{"query_id",
    "question", "answer", "answer_type", "ans"?}, ...]}``. An arithmetic answer (answer
    type 3) is its value ``ans`` when given; unanswerable questions (answer type [6, 1])
    are left out; options are made by answer type."""
    data = _json_file(text, source, dict, "a NoahQA file is a JSON object of passages")
    raw: list[tuple[str, str, str, str]] = []
    for pid, info in data.items():
        where = f"{source}, passage {pid}"
        _need(info, ("passage", "qa_pairs"), where)
        passage = _noah_passage(info["passage"])
        for qa in info["qa_pairs"] or []:
            _need(qa, ("question", "answer"), where)
            kind = qa.get("answer_type") or []
            if list(kind)[:2] == [6, 1]:
                continue  # unanswerable
            ans = qa.get("ans") if list(kind)[:1] == [3] and qa.get("ans") not in (None, "") else qa["answer"]
            if isinstance(ans, float) and ans.is_integer():
                ans = int(ans)
            ans = str(ans).strip()
            if not ans:
                continue
            raw.append(
                (
                    str(qa.get("query_id") or f"{pid}-{len(raw) + 1}"),
                    str(qa["question"]).strip(),
                    passage,
                    ans,
                )
            )
    return _answer_items(raw, seed, instr, name, limit)


def _load_babi(
    text: str, source: str, name: str, seed: Any, instr: str, limit: int | None, **_: object
) -> list[Item]:
    raw: list[tuple[str, str, str, str]] = []  # (line, question, passage, answer)
    story: list[str] = []
    last_id = 0
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        m = re.match(r"^(\d+) (.*)$", line)
        if not m:
            raise ItemsError(f"{source}, line {lineno}: a bAbI line starts with its number")
        n, body = int(m.group(1)), m.group(2)
        if n <= last_id:
            story = []
        last_id = n
        if "\t" in body:  # a list answer ("milk,apple") as the options write it
            parts = body.split("\t")
            raw.append(
                (str(lineno), parts[0].strip(), " ".join(story), parts[1].strip().replace(",", " and "))
            )
        else:
            story.append(body.strip())
    return _answer_items(raw, seed, instr, name, limit)


_LOADERS: dict[str, Callable[..., list[Item]]] = {
    "jsonl": _load_jsonl,
    "strategyqa": _load_strategyqa,
    "aqua": _load_aqua,
    "creak": _load_creak,
    "gsm8k": _load_gsm8k,
    "esnli": _load_esnli,
    "esnli-txt": _load_esnli_txt,
    "babi": _load_babi,
    "sen-making": _load_sen_making,
    "sen-making-a": _load_sen_making_sub("A"),
    "sen-making-b": _load_sen_making_sub("B"),
    "qed": _load_qed,
    "ecqa": _load_ecqa,
    "qasc": _load_qasc,
    "noahqa": _load_noahqa,
}
# the "per data set" name of each format (the two subtasks of Sen-Making are one data set)
_DATASET_NAMES = {"esnli-txt": "esnli", "sen-making-a": "sen-making", "sen-making-b": "sen-making"}


def items_jsonl(items: Iterable[Item]) -> str:
    """Items in the JSONL format (answers as letters)."""
    return "".join(json.dumps(it.to_dict(), ensure_ascii=False) + "\n" for it in items)


__all__ = [
    "ANSWER_TYPES",
    "DEFAULT_INSTRUCTION",
    "DEFAULT_TEMPLATE",
    "FORMATS",
    "LETTERS",
    "NONE_OF_THE_OTHERS",
    "NONE_SHARE",
    "UNDETERMINED",
    "Item",
    "ItemsError",
    "check_template",
    "detect_format",
    "infer_answer_type",
    "items_jsonl",
    "load_items",
    "make_options",
    "parse_item",
    "parse_items_text",
    "question_form",
    "render_asked",
    "render_options",
    "render_prompt",
    "render_turns",
    "siblings_by_form",
    "split_turns",
]
