"""Seeded attacks on text: character (typos), word (edits) and visual (homoglyphs) level.

Every word is attacked with probability ρ (``rho``): ρ = 0 changes nothing, ρ = 1
attacks every word. A word counts as attacked (a :class:`Change`) only when its text
changed: a visual attack on ``2024`` (digits have no homoglyph) or a replacement by the
same word records nothing. A word is a run of letters or digits, with inner apostrophes or
hyphens (``don't``, ``well-known``); spaces and punctuation between words are kept.

* **character** level (typing and speech-to-text noise), one operation per attacked
  word, drawn uniformly unless ``op`` names one: ``repeat`` a character 1, 2 or 3
  times (probabilities .4/.4/.2), ``delete`` 1, 2 or 3 adjacent characters (likewise;
  never the whole word unless it has one letter), ``insert`` one random letter.
* **word** level: ``insert`` a new word after the attacked one, ``delete`` it, or
  ``replace`` it. A new word is, half the time, a random word of the same text; else a
  WordNet synonym of the attacked word, or a random WordNet word when it has none.
* **visual** level (scanned / OCR'd or spoofed text): a fraction ``letters`` (r) of the
  word's letters is replaced by homoglyphs — characters from Unicode's confusables
  table (via ``confusable-homoglyphs``) whose confusables *skeleton* is the letter's,
  so :func:`skeleton` maps the attacked text back to the original's skeleton.

Randomness: each word gets its own fixed block of uniforms from ``rng`` before any
decision, and a word is attacked iff its first uniform is below ρ. So with the same
seed the words attacked at ρ = 0.1 are also attacked at ρ = 0.2, in the same way —
robustness curves and RTI raise ρ on one nested family of texts.

Examples
--------
>>> r = attack_text("Mary moved to the bathroom.", "char", 1.0, rng=0)
>>> r.text != r.original and len(r.changes) == 5
True
>>> attack_text("Mary moved.", "char", 0.0, rng=0).text
'Mary moved.'
"""

from __future__ import annotations

import functools
import hashlib
import re
import string
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

LEVELS = ("char", "word", "visual")
OPS = {
    "char": ("repeat", "delete", "insert"),
    "word": ("insert", "delete", "replace"),
    "visual": ("homoglyph",),
}
COUNT_P = (0.4, 0.4, 0.2)  # 1, 2 or 3 characters repeated / deleted
_COUNT_CDF = (0.4, 0.8, 1.0)
WORD = re.compile(r"[^\W_]+(?:['’\-][^\W_]+)*")
_U = 6  # uniforms per word: attack, op, count, position, source, index


class Change(NamedTuple):
    """One attacked word (an immutable named tuple: cheap to make by the hundred thousand).

    ``start:end`` is the word's span in the original text (for an inserted word, the
    empty span where it goes), ``new_start:new_end`` the span of its replacement in
    the attacked text (empty when deleted). ``source`` says where a new word came
    from (``passage``, ``synonym`` or ``wordnet``) or how many letters a homoglyph
    attack replaced.
    """

    word: int
    op: str
    before: str
    after: str
    start: int
    end: int
    new_start: int
    new_end: int
    source: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "word": self.word,
            "op": self.op,
            "before": self.before,
            "after": self.after,
            "start": self.start,
            "end": self.end,
            "new_start": self.new_start,
            "new_end": self.new_end,
            "source": self.source,
        }


@dataclass(frozen=True)
class AttackedText:
    """The attacked text and where it changed."""

    original: str
    text: str
    level: str
    rho: float
    changes: tuple[Change, ...] = ()
    n_words: int = 0
    op: str | None = None
    letters: float | None = None
    words: tuple[tuple[int, int], ...] = field(default=(), repr=False)  # original word spans

    @property
    def attacked_words(self) -> tuple[int, ...]:
        """Indices (in the original text) of the attacked words."""
        return tuple(c.word for c in self.changes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "original": self.original,
            "text": self.text,
            "level": self.level,
            "rho": self.rho,
            "op": self.op,
            "letters": self.letters,
            "n_words": self.n_words,
            "changes": [c.to_dict() for c in self.changes],
        }


def derive_seed(*parts: Any) -> int:
    """A 63-bit seed from any printable parts (the battery seeds each item's attack
    by ``(seed, item id, level, op, letters)`` — not by ρ, so ρ levels are nested)."""
    h = hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(h[:8], "big") >> 1


def word_spans(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of every word of ``text``."""
    return list(_spans(text))


@functools.lru_cache(maxsize=4096)
def _spans(text: str) -> tuple[tuple[int, int], ...]:
    # a battery attacks each passage at every level and rho: find its words once
    return tuple(m.span() for m in WORD.finditer(text))


# --------------------------------------------------------------------------- validation
def _attack_iv(text: object, level: object, rho: object, op: object, letters: object) -> None:
    if not isinstance(text, str):
        raise TypeError(f"`text` must be a string, got {type(text).__name__}.")
    if level not in LEVELS:
        raise ValueError(f"`level` must be one of {', '.join(LEVELS)}; got {level!r}.")
    if isinstance(rho, bool) or not isinstance(rho, (int, float)) or not 0.0 <= rho <= 1.0:
        raise ValueError(f"`rho` must be a number in [0, 1], got {rho!r}.")
    if op is not None and op not in OPS[level]:
        raise ValueError(
            f"`op` for the {level} level must be one of {', '.join(OPS[level])} "
            f"(or None to draw one per word); got {op!r}."
        )
    if level == "visual":
        if isinstance(letters, bool) or not isinstance(letters, (int, float)) or not 0.0 < letters <= 1.0:
            raise ValueError(
                f"`letters` (the fraction r of a word's letters) must lie in (0, 1], got {letters!r}."
            )


def _seed_of(rng: object) -> int:
    if isinstance(rng, np.random.Generator):
        return int(rng.integers(0, 2**63))
    if rng is None:
        return int(np.random.default_rng().integers(0, 2**63))
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
        return int(rng) & _M64
    raise TypeError(f"`rng` must be an int seed or a numpy Generator, got {type(rng).__name__}.")


_M64 = (1 << 64) - 1
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def _uniforms(seeds: Sequence[int], sizes: Sequence[int]) -> list[float]:
    """For each seed, ``size`` uniforms in [0, 1), all in one flat list: SplitMix64 of
    (seed, counter), computed for every text of a batch in one vectorized pass.

    Counter-based, like the permutation engine's splits: no generator state to set up
    (seeding a numpy Generator per passage costs more than the draws), the same numbers
    on every machine and in any batch; element ``c`` of a seed depends only on the seed
    and ``c``.
    """
    total = int(sum(sizes))
    if not total:
        return []
    sizes_a = np.asarray(sizes, dtype=np.int64)
    starts = np.cumsum(sizes_a) - sizes_a
    keys = np.array(
        [(s * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019) & _M64 for s in seeds], dtype=np.uint64
    )  # spreads nearby seeds apart
    counter = (np.arange(total, dtype=np.int64) - np.repeat(starts, sizes_a) + 1).astype(np.uint64)
    x = counter * _GOLDEN + np.repeat(keys, sizes_a)
    x = (x ^ (x >> np.uint64(30))) * _MIX1
    x = (x ^ (x >> np.uint64(27))) * _MIX2
    x ^= x >> np.uint64(31)
    return ((x >> np.uint64(11)) * (1.0 / 9007199254740992.0)).tolist()


# --------------------------------------------------------------------------- public API
def attack_text(
    text: str,
    level: str,
    rho: float,
    *,
    rng: int | np.random.Generator | None = None,
    op: str | None = None,
    letters: float = 0.5,
) -> AttackedText:
    """Attack each word of ``text`` with probability ``rho``.

    Parameters
    ----------
    text : str
        The passage (or the question when an item has no passage).
    level : {"char", "word", "visual"}
    rho : float in [0, 1]
        Probability that a word is attacked.
    rng : int or numpy Generator
        Seed; the same seed gives the same text. Words attacked at a lower ρ are
        attacked (identically) at every higher ρ with the same seed.
    op : str, optional
        ``char``: repeat | delete | insert; ``word``: insert | delete | replace;
        ``visual``: homoglyph. None draws one per attacked word.
    letters : float in (0, 1]
        Visual level: the fraction r of a word's letters replaced (at least one).

    Returns
    -------
    AttackedText
        ``text`` (attacked), ``changes`` (one :class:`Change` per attacked word).

    Raises
    ------
    WordNetMissing
        Word level without WordNet installed (see :mod:`dbpa_core.attacks.wordnet`).
    """
    _attack_iv(text, level, rho, op, letters)
    return attack_texts([text], level, rho, seeds=[_seed_of(rng)], op=op, letters=letters)[0]


def attack_texts(
    texts: Sequence[str],
    level: str,
    rho: float,
    *,
    seeds: Sequence[int],
    op: str | None = None,
    letters: float = 0.5,
) -> list[AttackedText]:
    """:func:`attack_text` for many texts, ``texts[i]`` seeded by ``seeds[i]``; the same
    result as one by one, faster (the random numbers of all texts are drawn at once).

    Examples
    --------
    >>> a, b = attack_texts(["Mary went home.", "John slept."], "char", 1.0, seeds=[1, 2])
    >>> a == attack_text("Mary went home.", "char", 1.0, rng=1)
    True
    """
    if len(texts) != len(seeds):
        raise ValueError(f"`texts` and `seeds` must have the same length; got {len(texts)} and {len(seeds)}.")
    for t in texts:
        _attack_iv(t, level, rho, op, letters)
    seeds = [_seed_of(s) for s in seeds]
    spans = [_spans(t) for t in texts]
    widths = [
        _U + (2 * _visual_width(t, letters) if level == "visual" and sp else 0)
        for t, sp in zip(texts, spans, strict=True)
    ]
    sizes = [len(sp) * w for sp, w in zip(spans, widths, strict=True)]
    flat = _uniforms(seeds, sizes)
    out = []
    base = 0
    for t, sp, w, size in zip(texts, spans, widths, sizes, strict=True):
        out.append(_attack_one(t, sp, level, float(rho), op, letters, flat, base, w))
        base += size
    return out


def _attack_one(
    text: str,
    spans: tuple[tuple[int, int], ...],
    level: str,
    rho: float,
    op: str | None,
    letters: float,
    flat: list[float],
    base: int,
    width: int,
) -> AttackedText:
    """Attack one text; word ``i``'s uniforms are ``flat[base + i*width:][:width]``."""
    n = len(spans)
    vis = float(letters) if level == "visual" else None
    hit = [i for i in range(n) if flat[base + i * width] < rho]  # the attacked words
    if not hit:
        return AttackedText(text, text, level, rho, (), n, op, vis, spans)
    if level == "word" and op != "delete":
        _ = _wordnet_words()  # fail early (and clearly) when WordNet is missing
    pieces: list[str] = []
    changes: list[Change] = []
    pos = 0  # next unread position in the original
    out_len = 0  # length of the attacked text so far
    words: list[str] | None = None
    lowered: list[str] | None = None
    for i in hit:
        k = base + i * width
        ui = flat[k : k + width]
        a, b = spans[i]
        gap = text[pos:a]  # everything since the last attacked word, unchanged
        w = text[a:b]
        if level == "char":
            kind, new = _char_attack(w, ui, op)
            source = ""
        elif level == "visual":
            kind, new, source = "homoglyph", *_visual_attack(w, ui, letters)
        else:
            if words is None:
                words = [text[x:y] for x, y in spans]
                lowered = [x.lower() for x in words]
            assert lowered is not None  # set together with words
            kind, new, source = _word_attack(w, ui, op, words, lowered)
        if new == w and not (level == "word" and kind == "insert"):
            continue  # a word whose text did not change (digits have no homoglyph) is no change
        if kind == "delete" and new == "":
            # the word goes, with the space before it (or after it, at the start); the
            # change's original span covers that space too
            if gap and gap[-1].isspace():
                gap = gap[:-1]
                a -= 1
            elif not gap and text[b : b + 1].isspace():
                b += 1
            pieces.append(gap)
            out_len += len(gap)
            changes.append(Change(i, kind, w, "", a, b, out_len, out_len, source))
            pos = b
            continue
        pieces.append(gap)
        out_len += len(gap)
        if level == "word" and kind == "insert":
            ins = w + " " + new
            pieces.append(ins)
            changes.append(Change(i, kind, "", new, b, b, out_len + len(w) + 1, out_len + len(ins), source))
            out_len += len(ins)
        else:
            pieces.append(new)
            changes.append(Change(i, kind, w, new, a, b, out_len, out_len + len(new), source))
            out_len += len(new)
        pos = b
    pieces.append(text[pos:])
    return AttackedText(text, "".join(pieces), level, rho, tuple(changes), n, op, vis, spans)


# --------------------------------------------------------------------------- character level
def _count(u: float) -> int:
    return 1 if u < _COUNT_CDF[0] else (2 if u < _COUNT_CDF[1] else 3)


def _char_attack(w: str, u: list[float], op: str | None) -> tuple[str, str]:
    kind = op or OPS["char"][min(2, int(u[1] * 3))]
    if kind == "delete" and len(w) == 1:
        return kind, ""
    if kind == "repeat":
        p = min(len(w) - 1, int(u[3] * len(w)))
        return kind, w[: p + 1] + w[p] * _count(u[2]) + w[p + 1 :]
    if kind == "delete":
        k = min(_count(u[2]), len(w) - 1)
        p = min(len(w) - k, int(u[3] * (len(w) - k + 1)))
        return kind, w[:p] + w[p + k :]
    # insert one random letter (upper case inside an all-capitals word)
    p = min(len(w), int(u[3] * (len(w) + 1)))
    c = string.ascii_lowercase[min(25, int(u[4] * 26))]
    if w.isupper() and len(w) > 1:
        c = c.upper()
    return kind, w[:p] + c + w[p:]


# --------------------------------------------------------------------------- word level
def _word_attack(
    w: str, u: list[float], op: str | None, words: Sequence[str], lowered: Sequence[str]
) -> tuple[str, str, str]:
    kind = op or OPS["word"][min(2, int(u[1] * 3))]
    if kind == "delete":
        return kind, "", ""
    new, source = _new_word(w, u, words, lowered)
    if kind == "replace" and w[:1].isupper() and new[:1].islower():
        new = new[:1].upper() + new[1:]
    return kind, new, source


def _new_word(w: str, u: list[float], words: Sequence[str], lowered: Sequence[str]) -> tuple[str, str]:
    """Half the time a random word of the text; else a synonym, else a random WordNet word.

    The text's word is drawn at a random place; when it is the attacked word itself, the
    next different word (cyclically) is taken."""
    if u[4] < 0.5:
        n = len(words)
        low = w.lower()
        j = min(n - 1, int(u[5] * n))
        for step in range(n):
            x = (j + step) % n
            if lowered[x] != low:
                return words[x], "passage"
    syn = synonyms(w)
    if syn:
        return syn[min(len(syn) - 1, int(u[5] * len(syn)))], "synonym"
    vocab = _wordnet_words()
    return vocab[min(len(vocab) - 1, int(u[5] * len(vocab)))], "wordnet"


@functools.lru_cache(maxsize=200_000)
def synonyms(word: str) -> tuple[str, ...]:
    """WordNet synonyms of ``word``: one-word lemma names of its synsets (any part of
    speech, inflections resolved by WordNet's morphy), other than the word itself and
    its base forms; sorted, so a seed picks the same one on every machine."""
    from .wordnet import wordnet

    wn = wordnet()
    low = word.lower()
    synsets = wn.synsets(low)
    if not synsets:
        return ()
    bases = {low} | {b for pos in "nvar" if (b := wn.morphy(low, pos))}
    out = {
        name
        for s in synsets
        for name in s.lemma_names()
        if "_" not in name and "-" not in name and name.lower() not in bases
    }
    return tuple(sorted(out))


@functools.lru_cache(maxsize=1)
def _wordnet_words() -> tuple[str, ...]:
    """Every alphabetic one-word WordNet lemma of 3 to 12 letters, sorted."""
    from .wordnet import wordnet

    return tuple(
        sorted({w for w in wordnet().all_lemma_names() if w.isalpha() and w.isascii() and 3 <= len(w) <= 12})
    )


# --------------------------------------------------------------------------- visual level
def _homoglyph_rank(h: str) -> int:
    """0: a letter of the basic multilingual plane (Cyrillic, Greek, fullwidth, ...);
    1: a plain sans-serif or monospace mathematical letter (used only for a letter
    with no rank-0 homoglyph: k and t); 2: not used (ASCII, not a letter, the bold,
    italic, script and fraktur letters, rare scripts that fonts lack)."""
    cp = ord(h)
    if cp < 128 or not unicodedata.category(h).startswith("L"):
        return 2
    if cp < 0x10000:
        return 0
    return 1 if (0x1D5A0 <= cp <= 0x1D5D3 or 0x1D670 <= cp <= 0x1D6A3) else 2


@functools.lru_cache(maxsize=1)
def _confusables() -> dict[str, list[str]]:
    from confusable_homoglyphs.confusables import confusables_data

    return {k: [d["c"] for d in v] for k, v in confusables_data.items()}


@functools.lru_cache(maxsize=4096)
def _char_skeleton(ch: str) -> str:
    data = _confusables()
    if ch not in data:
        return ch
    # the table links a character to its prototype and a prototype to all of its
    # confusables: the prototype is the member of the group with the most links
    group = [ch] + [c for c in data[ch] if len(c) == 1]
    return max(group, key=lambda c: (len(data.get(c, ())), -ord(c)))


def skeleton(text: str) -> str:
    """The confusables skeleton of ``text``, character by character: each character is
    mapped to the prototype of its group in Unicode's confusables table (as shipped by
    ``confusable-homoglyphs``), so ``skeleton("Ьаnk") == skeleton("bank")``."""
    return "".join(_char_skeleton(c) for c in text)


@functools.lru_cache(maxsize=1)
def homoglyph_table() -> dict[str, tuple[str, ...]]:
    """ASCII letter -> homoglyphs with the same skeleton (single code points, letters).

    ``m`` has none (its only confusable is the pair ``rn``): it is never replaced.
    """
    data = _confusables()
    table: dict[str, tuple[str, ...]] = {}
    for c in string.ascii_letters:
        sk = _char_skeleton(c)
        cands = set(data.get(c, ())) | set(data.get(sk, ()))
        same = [h for h in cands if len(h) == 1 and _char_skeleton(h) == sk]
        for rank in (0, 1):
            hs = sorted(h for h in same if _homoglyph_rank(h) == rank)
            if hs:
                table[c] = tuple(hs)
                break
    return table


@functools.lru_cache(maxsize=4096)
def _visual_width(text: str, letters: float) -> int:
    """Room in each word's row for the positions and homoglyphs of the longest word."""
    return max(_visual_plan(text[a:b], letters)[1] for a, b in _spans(text))


@functools.lru_cache(maxsize=65536)
def _visual_plan(w: str, letters: float) -> tuple[tuple[int, ...], int]:
    """The positions of ``w``'s letters that have a homoglyph, and how many to replace:
    the share ``letters`` of its letters (at least one), at most all that have one."""
    table = homoglyph_table()
    slots = tuple(i for i, c in enumerate(w) if c in table)
    if not slots:
        return slots, 0
    alpha = sum(1 for c in w if c.isalpha())
    return slots, min(len(slots), max(1, int(letters * alpha + 0.5)))


def _visual_attack(w: str, u: list[float], letters: float) -> tuple[str, str]:
    slots, k = _visual_plan(w, letters)
    if not k:
        return w, "0"
    table = homoglyph_table()
    pick = list(slots)
    m = len(pick)
    chars = list(w)
    for j in range(k):  # a partial Fisher-Yates shuffle of the slots, then a homoglyph each
        r = j + int(u[_U + j] * (m - j))
        at = pick[r]
        pick[r] = pick[j]
        opts = table[w[at]]
        chars[at] = opts[int(u[_U + k + j] * len(opts))]
    return "".join(chars), str(k)


def highlight_segments(attacked: AttackedText) -> list[tuple[str, str]]:
    """The attacked text as ``(piece, kind)`` segments for display: kind ``plain``,
    ``changed`` (a new or altered word) or ``deleted`` (a removed word, at the place it
    was). Callers escape each piece (model and user text are shown as text)."""
    out: list[tuple[str, str]] = []
    pos = 0
    t = attacked.text
    for c in sorted(attacked.changes, key=lambda c: (c.new_start, c.new_end)):
        if c.new_start > pos:
            out.append((t[pos : c.new_start], "plain"))
        if c.new_end == c.new_start:
            out.append((c.before, "deleted"))
        else:
            out.append((t[c.new_start : c.new_end], "changed"))
        pos = max(pos, c.new_end)
    if pos < len(t):
        out.append((t[pos:], "plain"))
    return out


__all__ = [
    "COUNT_P",
    "LEVELS",
    "OPS",
    "AttackedText",
    "Change",
    "attack_text",
    "attack_texts",
    "derive_seed",
    "highlight_segments",
    "homoglyph_table",
    "skeleton",
    "synonyms",
    "word_spans",
]
