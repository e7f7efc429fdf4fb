"""Which phrases break the model: each attacked word's phrase type, the per-item
frequency vectors and the phrase table of successful attacks.

**Phrase types without a constituency parser.** A Penn-Treebank parse puts every word
in a smallest phrase — ``the`` and ``mat`` in an NP, ``on`` in a PP, ``sat`` in a VP. No
constituency parser installs offline, so the phrase is read off spaCy's dependency parse
(``en_core_web_sm`` 3.8) by the rules of :func:`phrase_label`, which follow the
Treebank's bracketing guidelines:

* a particle (``picked *up*``) is **PRT**; a preposition is **PP** (**WHPP** when its
  object is a wh-word: ``*in* which``); a subordinating conjunction or complementizer
  (``because``, ``if``, ``whether``, ``that`` before a clause) opens an **SBAR**;
* wh-words: ``who``, ``which``, ``whose``, relative ``that`` are **WHNP**, and so is the
  noun they determine (``which *book*``); ``where``, ``when``, ``why``, ``how`` are
  **WHADVP**, or **WHADJP** when ``how`` grades an adjective (``how many``);
* nouns, pronouns, determiners, possessive ``'s``, expletive ``there`` and a lone number
  (``three bones``, ``in 1990``) are **NP**; a number with a quantity modifier forms a
  **QP** (``*about 5 million* dollars``, ``*more than 10*``, ``*between 3 and 4*``);
* verbs, auxiliaries, modals, infinitival ``to`` and a verb's ``not`` are **VP**;
* an adjective before its noun stays in the NP (``the *old* man``) unless it is itself
  modified or coordinated (``the *very big* dog``: **ADJP**); a predicative adjective
  (``is *red*``) is **ADJP**;
* an adverb modifying a verb or clause is **ADVP**; one modifying an adjective, adverb,
  noun or number joins that word's phrase (``*very* important``: ADJP);
* a coordinating conjunction joins the phrase of what it coordinates (``cats *and*
  dogs``: NP); between two clauses, each with its own subject, it is **S**;
  interjections are **INTJ**; anything else (symbols, foreign material) is **X**.

A word of the attacked text (``don't``, ``John's``) may span several spaCy tokens; its
phrase is that of the span's syntactic head (``do``, ``John``). For an inserted word,
the attacked word is the one it was inserted after. The dependency parse is a model's
guess, and so are the phrases read from it: the hand-labelled sentences of
``tests/test_attacks_phrases.py`` measure how often the rules and the parse together
give the Treebank's label.

**Groups.** The analysis uses the groups of the paper's phrase table: NP, VP, PP, ADJP,
ADVP, QP, PRT, WH (every wh-phrase) and ``other`` (SBAR, S, INTJ, X).

**Frequency vector** of one attacked prompt (the paper's per-item attack frequencies):
``v[g] = (words of group g among the attacked words) / (attacked words)``, so the
entries sum to 1 and an item weighs the same whatever its ρ. The phrase table is then
the mean vector of the successful attacks (those that changed the answer) beside the
mean vector of all attacks: the share of attacked words of each group, each attacked
item weighing 1 — and their ratio, the lift (> 1: attacking such words breaks the model
more often than their share says).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..render import partial
from ..sampling import Progress
from .importance import ForestResult, forest_importances
from .patterns import SpacyMissing, word_syntax
from .phrase_labels import GROUP_TEXT, GROUPS, LABELS, group_of, phrase_label
from .text import AttackedText, word_spans

ALL = "all"


def label_words(
    texts: Iterable[str], spans_of: Mapping[str, Sequence[tuple[int, int]]]
) -> dict[str, list[str]]:
    """``text -> [phrase label of each word span]`` for the distinct ``texts``.

    Raises :class:`~dbpa_core.attacks.patterns.SpacyMissing` without spaCy's model.
    """
    return {t: [w.phrase for w in ws] for t, ws in word_syntax(texts, spans_of).items()}


def sentence_labels(text: str) -> list[tuple[str, str]]:
    """``[(word, phrase label)]`` of every word of ``text`` (words as the attacks split
    them): for checking the rules on a sentence of your own."""
    spans = word_spans(text)
    labels = label_words([text], {text: spans})[text]
    return [(text[a:b], lab) for (a, b), lab in zip(spans, labels, strict=True)]


# --------------------------------------------------------------------------- observations
@dataclass(frozen=True)
class AttackedWord:
    word: int  # index in the original text
    text: str  # the word as it was (an inserted word's predecessor)
    op: str
    label: str

    @property
    def group(self) -> str:
        return group_of(self.label)


@dataclass(frozen=True)
class Observation:
    """One attacked prompt: its attacked words with their phrases, and whether the
    answer changed from the clean one."""

    dataset: str
    item: str
    attack: str
    level: str
    rho: float
    n_words: int
    words: tuple[AttackedWord, ...]
    changed: bool

    def counts(self) -> np.ndarray:
        """The number of attacked words in each group (in the order of ``GROUPS``)."""
        v = np.zeros(len(GROUPS), dtype=int)
        for w in self.words:
            v[GROUPS.index(w.group)] += 1
        return v

    def vector(self) -> np.ndarray:
        """The frequency vector: the share of the attacked words in each group."""
        return self.counts() / max(1, len(self.words))

    @property
    def attacked_share(self) -> float:
        """The share of the text's words attacked (how much damage, whatever the kind)."""
        return len(self.words) / self.n_words if self.n_words else 0.0


def _spans(att: AttackedText) -> Sequence[tuple[int, int]]:
    return att.words or word_spans(att.original)


def observations(
    pairs: Sequence[tuple[Any, AttackedText, bool]], labels: Mapping[str, Sequence[str]]
) -> list[Observation]:
    """``(query, attacked text, changed)`` triples -> observations, with the phrase labels
    of each original text (:func:`label_words`). ``query`` gives ``base.dataset``,
    ``base.id``, ``name`` and ``rho``; attacks that changed no word are left out."""
    out = []
    for q, att, changed in pairs:
        if not att.changes:
            continue
        lab, spans = labels[att.original], _spans(att)
        words = tuple(
            AttackedWord(c.word, att.original[slice(*spans[c.word])], c.op, lab[c.word]) for c in att.changes
        )
        out.append(
            Observation(
                q.base.dataset, q.base.id, q.name, att.level, q.rho, att.n_words, words, bool(changed)
            )
        )
    return out


# --------------------------------------------------------------------------- the table
@dataclass(frozen=True)
class PhraseRow:
    """One phrase group for one attack level (or ``all``): the paper's phrase table."""

    level: str
    value: str  # the group (NP, VP, ...)
    words: int  # attacked words of this group, every attack
    words_changed: int  # ... in attacks that changed the answer
    share: float  # mean frequency in attacks that changed the answer
    base_share: float  # mean frequency in every attack
    hit: int  # attacks that attacked at least one word of this group
    hit_changed: int  # ... and changed the answer

    @property
    def lift(self) -> float:
        return self.share / self.base_share if self.base_share > 0 else float("nan")

    @property
    def asr_when_hit(self) -> float:
        """The share of the attacks touching this group that changed the answer."""
        return self.hit_changed / self.hit if self.hit else float("nan")

    def to_dict(self) -> dict[str, Any]:
        return {
            "level": self.level,
            "phrase": self.value,
            "words": self.words,
            "words_changed": self.words_changed,
            "share": self.share,
            "base_share": self.base_share,
            "lift": self.lift,
            "attacks_hit": self.hit,
            "attacks_hit_changed": self.hit_changed,
            "asr_when_hit": self.asr_when_hit,
        }


def phrase_table(obs: Sequence[Observation]) -> list[PhraseRow]:
    """The phrase table per attack level and for all levels (``all`` last)."""
    by: dict[str, list[Observation]] = defaultdict(list)
    for o in obs:
        by[o.level].append(o)
        by[ALL].append(o)
    rows = []
    for level in sorted(by, key=lambda s: (s == ALL, s)):
        group = by[level]
        vecs = np.array([o.vector() for o in group])
        ok = np.array([o.changed for o in group])
        counts = np.array([o.counts() for o in group])
        share = vecs[ok].mean(axis=0) if ok.any() else np.zeros(len(GROUPS))
        base = vecs.mean(axis=0)
        for j, g in enumerate(GROUPS):
            hit = counts[:, j] > 0
            rows.append(
                PhraseRow(
                    level,
                    g,
                    int(counts[:, j].sum()),
                    int(counts[ok, j].sum()),
                    float(share[j]),
                    float(base[j]),
                    int(hit.sum()),
                    int((hit & ok).sum()),
                )
            )
    return rows


# --------------------------------------------------------------------------- the analysis
AMOUNT = "words attacked"  # the forest's extra feature: the share of the text's words attacked
FEATURES = (*GROUPS, AMOUNT)


def feature_matrix(obs: Sequence[Observation]) -> np.ndarray:
    """One row per observation: its frequency vector, then the share of its words attacked."""
    return np.array([[*o.vector(), o.attacked_share] for o in obs]).reshape(len(obs), len(FEATURES))


@dataclass(frozen=True)
class PhraseAnalysis:
    """The phrase table, the attacked words with their phrases, and the forest."""

    observations: tuple[Observation, ...]
    table: tuple[PhraseRow, ...]
    forest: ForestResult | None
    note: str = ""

    def rows(self, level: str = ALL) -> list[PhraseRow]:
        return [r for r in self.table if r.level == level]

    def words(self) -> list[dict[str, Any]]:
        """Every attacked word with its phrase label and group (phrase_words.csv)."""
        return [
            {
                "dataset": o.dataset,
                "item": o.item,
                "attack": o.attack,
                "level": o.level,
                "rho": o.rho,
                "word": w.word,
                "text": w.text,
                "op": w.op,
                "phrase": w.label,
                "group": w.group,
                "changed": o.changed,
            }
            for o in self.observations
            for w in o.words
        ]

    def to_dict(self) -> dict[str, Any]:
        return {
            "groups": list(GROUPS),
            "attacks": len(self.observations),
            "table": [r.to_dict() for r in self.table],
            "forest": self.forest.to_dict() if self.forest is not None else None,
            "note": self.note or None,
        }

    def csv_rows(self) -> dict[str, list[dict[str, Any]]]:
        """``phrases.csv`` (the table), ``phrase_words.csv`` and ``importances.csv``."""
        out = {"phrases.csv": [r.to_dict() for r in self.table], "phrase_words.csv": self.words()}
        if self.forest is not None and self.forest.fitted:
            f = self.forest
            out["importances.csv"] = [
                {
                    **i.to_dict(),
                    "accuracy": f.accuracy,
                    "baseline": f.baseline,
                    "rows": f.rows,
                    "items": f.items,
                    "folds": f.folds,
                }
                for i in f.ranked()
            ]
        return {k: v for k, v in out.items() if v}

    def html(self) -> str:
        """The report's section: the phrase table, the forest's summary and its importances
        as bars (plain HTML: the command line's report has no chart library)."""
        f = self.forest
        top = max((i.mean for i in f.importances), default=0.0) if f is not None else 0.0
        importances = [
            (i, 0.0 if top <= 0 else max(0.0, i.mean) / top * 100)
            for i in (f.ranked() if f is not None and f.fitted else [])
        ]
        return partial(
            "battery_phrases.html.j2",
            phrases=self,
            importances=importances,
            phrase_rows=[r.to_dict() for r in self.rows()],
        )


def analyse_battery(
    records: Sequence[Any],
    clean: Mapping[tuple[str, str], Any],
    *,
    seed: int = 0,
    progress: Callable[[Progress], None] | None = None,
) -> PhraseAnalysis | None:
    """The phrase analysis of a battery's answers (None when no attack changed a word).

    ``records`` are the battery's answer records, ``clean`` maps ``(dataset, item id)`` to
    the clean record; an attack's answer *changed* when the option read differs from the
    clean one (as for ASR's count of changed answers)."""
    att = [r for r in records if r.query.kind == "attack" and r.query.attack.changes]
    if not att:
        return None
    pairs = [
        (
            r.query,
            r.query.attack,
            r.parsed.index != clean[(r.query.base.dataset, r.query.base.id)].parsed.index,
        )
        for r in att
    ]
    say = progress or (lambda p: None)
    say(Progress("phrases", 0, 2, "phrase types"))
    texts = {a.original: _spans(a) for _, a, _ in pairs}
    try:
        labels = label_words(list(texts), texts)
    except SpacyMissing as exc:
        say(Progress("phrases", 2, 2))
        return PhraseAnalysis((), (), None, f"{exc} No phrase types.")
    obs = observations(pairs, labels)
    say(Progress("phrases", 1, 2, "random forest"))
    forest = forest_importances(
        feature_matrix(obs), [o.changed for o in obs], [(o.dataset, o.item) for o in obs], FEATURES, seed=seed
    )
    say(Progress("phrases", 2, 2))
    return PhraseAnalysis(tuple(obs), tuple(phrase_table(obs)), forest)


__all__ = [
    "ALL",
    "AMOUNT",
    "FEATURES",
    "GROUPS",
    "GROUP_TEXT",
    "LABELS",
    "AttackedWord",
    "Observation",
    "PhraseAnalysis",
    "PhraseRow",
    "SpacyMissing",
    "analyse_battery",
    "feature_matrix",
    "group_of",
    "label_words",
    "observations",
    "phrase_label",
    "phrase_table",
    "sentence_labels",
]
