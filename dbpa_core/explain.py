"""How the answers changed: distinguishing terms, typical and atypical answers, duplicates.

A DBPA verdict says *that* the perturbed answers differ from the base answers;
this module says *how*:

* :func:`log_odds` — the words and phrases that moved, by the weighted log-odds
  ratio with an informative Dirichlet prior of Monroe, Colaresi & Quinn (2008,
  "Fightin' Words", section 3.5), z-scored;
* :func:`representatives` — per group, the answer nearest the group's centroid
  (typical) and the one farthest from it (atypical), by embedding;
* :func:`find_duplicates` — identical (and, optionally, near-identical) answers,
  shown once with their count;
* :func:`highlight` — an answer cut into segments, the words absent from another
  answer (or among the distinguishing terms) marked, for side-by-side reading;
* :func:`summarize_difference` — optional: the chosen model describes the
  difference (prompted with samples of both groups), through the cache.

Everything here is plain Python and numpy: no plotting, no Streamlit.

Examples
--------
>>> ex = explain(["take statins daily", "take statins and walk"],
...              ["tell a joke about statins", "a joke a day"])
>>> [t.term for t in ex.terms_for("perturbed")][:1]
['joke']
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import TYPE_CHECKING, Any

import numpy as np

from .types import jsonable

if TYPE_CHECKING:
    from .sampling import Sampler

# A compact English stop-word list: function words only. "not", "no" and "never" are
# left out on purpose: they turn a recommendation around and must stay visible.
STOP_WORDS: frozenset[str] = frozenset(
    """
a about above after again against all also am an and any are as at be because been before
being below between both but by can could did do does doing down during each either else
etc even ever every few for from further had has have having he her here hers herself him
himself his how however i if in into is it its itself just let like may me might more most
much must my myself nor of off often on once only or other others otherwise our ours
ourselves out over own per perhaps quite rather really same shall she should so some such
than that the their theirs them themselves then there these they this those though through
thus to too under until up upon us very via was we were what whatever when where whether
which while who whom whose why will with within without would yet you your yours yourself
yourselves s t d ll m re ve e g i.e e.g eg ie i'm i've i'd i'll you're you've you'll you'd
we're we've we'll they're they've they'll he'd she'd it'd
""".split()
)

_WORD = re.compile(r"[A-Za-z0-9]+(?:[-'’.][A-Za-z0-9]+)*")
_CLAUSE_BREAK = re.compile(r"[.!?;:,()\[\]{}\n\"“”]+(?:\s|$)|\n|[()\[\]{}\"“”]")
_SEGMENT = re.compile(r"[A-Za-z0-9]+(?:[-'’.][A-Za-z0-9]+)*|[^A-Za-z0-9]+")


# --------------------------------------------------------------------------- tokens
def _norm(word: str) -> str:
    w = word.lower().replace("’", "'")
    if w.endswith("'s"):
        w = w[:-2]
    return w.strip("'.-")


def _keep(token: str, stop_words: frozenset[str]) -> bool:
    if not token or token in stop_words:
        return False
    return len(token) > 1 or token.isdigit()


def tokenize(text: str, *, bigrams: bool = True, stop_words: Iterable[str] = STOP_WORDS) -> list[str]:
    """Lower-cased terms of ``text``: words that are not stop words, and (with
    ``bigrams``) pairs of adjacent kept words within one clause ("blood pressure").

    Punctuation ends a clause, so no phrase spans a full stop or a comma; a stop
    word between two words breaks the pair ("take *the* statin" gives no
    "take statin").

    Examples
    --------
    >>> tokenize("Lower your blood pressure, and stop smoking.")
    ['lower', 'blood', 'pressure', 'stop', 'smoking', 'blood pressure', 'stop smoking']
    """
    stops = stop_words if isinstance(stop_words, frozenset) else frozenset(stop_words)
    unigrams: list[str] = []
    pairs: list[str] = []
    for clause in _CLAUSE_BREAK.split(text):
        words = [_norm(w) for w in _WORD.findall(clause)]
        kept = [w if _keep(w, stops) else None for w in words]
        unigrams.extend(w for w in kept if w)
        if bigrams:
            pairs.extend(f"{a} {b}" for a, b in pairwise(kept) if a and b)
    return unigrams + pairs


# --------------------------------------------------------------------------- log-odds
@dataclass(frozen=True)
class Term:
    """One term's weighted log-odds ratio, perturbed vs base.

    ``delta`` > 0 (and ``z`` > 0) means the term is more typical of the perturbed
    answers, < 0 of the base answers. ``|z| > 1.96`` is the usual "clearly
    distinguishing" mark (not a multiplicity-corrected test).
    """

    term: str
    delta: float
    variance: float
    z: float
    count_base: int
    count_perturbed: int
    prior: float

    @property
    def side(self) -> str:
        return "perturbed" if self.z > 0 else "base"

    def to_dict(self) -> dict[str, Any]:
        return {
            "term": self.term,
            "delta": self.delta,
            "variance": self.variance,
            "z": self.z,
            "count_base": self.count_base,
            "count_perturbed": self.count_perturbed,
            "prior": self.prior,
        }


def _log_odds_iv(prior: object, prior_scale: object, min_count: object) -> None:
    if isinstance(prior, str):
        if prior != "pooled":
            raise ValueError(
                f"`prior` must be 'pooled', a positive number or a mapping of term -> count; got {prior!r}."
            )
    elif isinstance(prior, (int, float)) and not isinstance(prior, bool):
        if not prior > 0:
            raise ValueError(f"`prior` as a number must be > 0, got {prior!r}.")
    elif not isinstance(prior, Mapping):
        raise TypeError("`prior` must be 'pooled', a positive number or a mapping of term -> count.")
    if not (isinstance(prior_scale, (int, float)) and prior_scale > 0):
        raise ValueError(f"`prior_scale` must be > 0, got {prior_scale!r}.")
    if not (isinstance(min_count, int) and min_count >= 1):
        raise ValueError(f"`min_count` must be a whole number >= 1, got {min_count!r}.")


def log_odds(
    base_counts: Mapping[str, int],
    perturbed_counts: Mapping[str, int],
    *,
    prior: str | float | Mapping[str, float] = "pooled",
    prior_scale: float = 1.0,
    min_count: int = 1,
) -> list[Term]:
    """Weighted log-odds ratios with an informative Dirichlet prior (Monroe et al. 2008).

    With ``y_w^P`` and ``y_w^B`` the counts of term ``w`` in the perturbed and base
    answers, ``n^P`` and ``n^B`` their totals, a Dirichlet prior ``α_w`` with
    ``α_0 = Σ_w α_w``::

        δ_w   = log[(y_w^P + α_w) / (n^P + α_0 − y_w^P − α_w)]
              − log[(y_w^B + α_w) / (n^B + α_0 − y_w^B − α_w)]
        σ²_w ≈ 1 / (y_w^P + α_w) + 1 / (y_w^B + α_w)
        z_w   = δ_w / σ_w

    (the paper's estimate of the log-odds ratio, its approximate variance and
    the z-score). The prior shrinks the log-odds of rare terms towards 0, so a
    word said once is not ranked above a word said in every answer.

    Parameters
    ----------
    base_counts, perturbed_counts : mapping term -> count
        E.g. ``Counter(tokenize(...))`` over each group's answers.
    prior : "pooled", float or mapping, default "pooled"
        ``"pooled"``: the informative prior estimated from both groups together
        (``α_w = prior_scale · (y_w^B + y_w^P)``: empirical Bayes, the corpus as its
        own background); a number: the same ``α_w`` for every term (uninformative);
        a mapping: counts from a background corpus (``α_w = prior_scale · count +
        0.01``, so that unseen terms still have a prior).
    prior_scale : float, default 1
        Multiplies the prior counts (its strength relative to the data).
    min_count : int, default 1
        Terms said fewer times in both groups together are left out of the
        result (they still count in the totals ``n``).

    Returns
    -------
    list of Term
        Sorted by ``z``, most typical of the perturbed answers first.

    Examples
    --------
    >>> terms = log_odds({"statin": 4, "diet": 2}, {"statin": 1, "joke": 5})
    >>> [(t.term, round(t.z, 3)) for t in terms]
    [('joke', 2.152), ('diet', -0.955), ('statin', -1.315)]
    """
    _log_odds_iv(prior, prior_scale, min_count)
    vocab = sorted(set(base_counts) | set(perturbed_counts))
    yb = np.array([float(base_counts.get(w, 0)) for w in vocab])
    yp = np.array([float(perturbed_counts.get(w, 0)) for w in vocab])
    if np.any(yb < 0) or np.any(yp < 0):
        raise ValueError("Term counts must be >= 0.")
    if not vocab:
        return []
    if isinstance(prior, str):
        alpha = prior_scale * (yb + yp)
    elif isinstance(prior, Mapping):
        alpha = prior_scale * np.array([float(prior.get(w, 0.0)) for w in vocab]) + 0.01
    else:
        alpha = np.full(len(vocab), float(prior) * prior_scale)
    a0 = alpha.sum()
    nb, np_ = yb.sum(), yp.sum()
    with np.errstate(divide="ignore", invalid="ignore"):
        delta = np.log((yp + alpha) / (np_ + a0 - yp - alpha)) - np.log((yb + alpha) / (nb + a0 - yb - alpha))
        var = 1.0 / (yp + alpha) + 1.0 / (yb + alpha)
        z = delta / np.sqrt(var)
    keep = (yb + yp) >= min_count
    out = [
        Term(w, float(d), float(v), float(zz), int(b), int(p), float(a))
        for w, d, v, zz, b, p, a, k in zip(vocab, delta, var, z, yb, yp, alpha, keep, strict=True)
        if k and np.isfinite(zz)
    ]
    out.sort(key=lambda t: (-t.z, t.term))
    return out


def count_terms(
    texts: Sequence[str], *, bigrams: bool = True, stop_words: Iterable[str] = STOP_WORDS
) -> Counter:
    """Term counts over all ``texts`` (see :func:`tokenize`)."""
    stops = frozenset(stop_words)
    c: Counter = Counter()
    for t in texts:
        c.update(tokenize(t, bigrams=bigrams, stop_words=stops))
    return c


# --------------------------------------------------------------------------- duplicates
@dataclass(frozen=True)
class DuplicateGroup:
    """Answers that are identical (``exact``) or near-identical to ``text`` (the first
    of them), by their indices in the group."""

    text: str
    indices: tuple[int, ...]
    exact: bool

    @property
    def count(self) -> int:
        return len(self.indices)


@dataclass(frozen=True)
class Duplicates:
    """Duplicate answers of one group: ``groups`` holds every text said more than once."""

    n_answers: int
    n_distinct: int
    groups: tuple[DuplicateGroup, ...]
    near: float | None

    @property
    def n_repeated(self) -> int:
        """Answers that repeat an earlier one (``n_answers - n_distinct``)."""
        return self.n_answers - self.n_distinct

    def to_dict(self) -> dict[str, Any]:
        return {
            "n_answers": self.n_answers,
            "n_distinct": self.n_distinct,
            "near": self.near,
            "groups": [
                {"text": g.text, "count": g.count, "indices": list(g.indices), "exact": g.exact}
                for g in self.groups
            ],
        }


def _shingles(text: str) -> frozenset[str]:
    words = [w.lower() for w in _WORD.findall(text)]
    if len(words) < 2:
        return frozenset(words)
    return frozenset(f"{a} {b}" for a, b in pairwise(words))


def find_duplicates(texts: Sequence[str], *, near: float | None = None) -> Duplicates:
    """Identical answers (same text after trimming whitespace), and with ``near``
    near-identical ones (Jaccard similarity of their word pairs >= ``near``).

    Answers are grouped greedily in order: each joins the first earlier group
    whose first answer it matches. Identical answers are distinct *draws* (every
    sample has its own seed and cache entry) that came out the same: a model
    that repeats itself. They are never copies of one cached draw.

    Examples
    --------
    >>> d = find_duplicates(["Take statins.", "Take statins. ", "Walk daily."])
    >>> d.n_distinct, d.groups[0].count
    (2, 2)
    """
    if near is not None and not (isinstance(near, (int, float)) and 0.0 < near <= 1.0):
        raise ValueError(f"`near` must lie in (0, 1], got {near!r}.")
    reps: list[tuple[str, frozenset[str] | None]] = []
    members: list[list[int]] = []
    exact: list[bool] = []
    index_of: dict[str, int] = {}
    for i, t in enumerate(texts):
        key = t.strip()
        g = index_of.get(key)
        if g is None and near is not None:
            sh = _shingles(key)
            for j, (_rep, rsh) in enumerate(reps):
                assert rsh is not None  # shingled whenever ``near`` is set
                union = len(sh | rsh)
                if union and len(sh & rsh) / union >= near:
                    g = j
                    exact[j] = False
                    break
        if g is None:
            g = len(reps)
            reps.append((key, _shingles(key) if near is not None else None))
            members.append([])
            exact.append(True)
        index_of.setdefault(key, g)
        members[g].append(i)
    groups = tuple(
        DuplicateGroup(texts[m[0]], tuple(m), exact[g]) for g, m in enumerate(members) if len(m) > 1
    )
    groups = tuple(sorted(groups, key=lambda d: (-d.count, d.indices[0])))
    return Duplicates(len(texts), len(members), groups, near)


# --------------------------------------------------------------------------- representatives
@dataclass(frozen=True)
class Representative:
    """An answer of one group picked by its cosine similarity to the group's centroid."""

    index: int
    text: str
    similarity: float


def _bow(texts: Sequence[str]) -> np.ndarray:
    counts = [Counter(tokenize(t, bigrams=False)) for t in texts]
    vocab = sorted(set().union(*counts)) if counts else []
    pos = {w: i for i, w in enumerate(vocab)}
    x = np.zeros((len(texts), max(1, len(vocab))))
    for r, c in enumerate(counts):
        for w, n in c.items():
            x[r, pos[w]] = n
    return x


def representatives(
    texts: Sequence[str], embeddings: np.ndarray | None = None
) -> tuple[Representative, Representative]:
    """The typical answer (nearest the centroid) and the most atypical one (farthest).

    The centroid is the mean of the unit-normalized embeddings; without
    embeddings (BLEU / ROUGE audits) bag-of-words count vectors stand in.

    Returns
    -------
    (typical, atypical) : Representative
    """
    if len(texts) == 0:
        raise ValueError("`texts` is empty: no answers to choose from.")
    x = np.asarray(embeddings, dtype=float) if embeddings is not None else _bow(texts)
    if x.ndim != 2 or x.shape[0] != len(texts):
        raise ValueError(f"`embeddings` must have one row per text ({len(texts)}), got shape {x.shape}.")
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    xn = np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)
    centroid = xn.mean(axis=0)
    c = np.linalg.norm(centroid)
    sims = xn @ (centroid / c) if c > 0 else np.zeros(len(texts))
    i, j = int(np.argmax(sims)), int(np.argmin(sims))
    return (Representative(i, texts[i], float(sims[i])), Representative(j, texts[j], float(sims[j])))


# --------------------------------------------------------------------------- highlighting
def highlight(
    text: str,
    other: str | Sequence[str],
    *,
    terms: Iterable[str] = (),
    stop_words: Iterable[str] = STOP_WORDS,
) -> list[tuple[str, str]]:
    """``text`` cut into ``(segment, kind)`` pieces whose concatenation is ``text``.

    ``kind`` is ``"term"`` for a word that belongs to one of ``terms`` (unigrams or
    bigrams, e.g. the distinguishing terms of this side), ``"only"`` for a word
    (not a stop word) that occurs nowhere in ``other`` (one answer, or all the
    answers of the other group), else ``""``. The segments are raw text: escape
    them before putting them in HTML.

    Examples
    --------
    >>> highlight("Take statins daily.", "Take aspirin daily.")
    [('Take', ''), (' ', ''), ('statins', 'only'), (' ', ''), ('daily', ''), ('.', '')]
    """
    stops = frozenset(stop_words)
    others = [other] if isinstance(other, str) else list(other)
    other_words = {_norm(w) for o in others for w in _WORD.findall(o)}
    term_set = {t.lower() for t in terms}
    pieces = _SEGMENT.findall(text)
    kinds = [""] * len(pieces)
    words = [(i, _norm(p)) for i, p in enumerate(pieces) if _WORD.fullmatch(p)]
    for i, w in words:
        if _keep(w, stops):
            kinds[i] = "term" if w in term_set else ("only" if w not in other_words else "")
    for (i, w), (j, w2) in pairwise(words):
        if f"{w} {w2}" in term_set and "".join(pieces[i + 1 : j]).strip() == "":
            kinds[i] = kinds[j] = "term"
    return list(zip(pieces, kinds, strict=True))


# --------------------------------------------------------------------------- explanation
@dataclass(frozen=True)
class Explanation:
    """How the perturbed answers differ from the base answers.

    ``terms`` holds every term's log-odds (see :func:`log_odds`), sorted by z
    (perturbed-typical first); ``typical`` / ``atypical`` map ``"base"`` and
    ``"perturbed"`` to a :class:`Representative`; ``duplicates`` to a
    :class:`Duplicates`.
    """

    terms: tuple[Term, ...]
    typical: dict[str, Representative]
    atypical: dict[str, Representative]
    duplicates: dict[str, Duplicates]
    n_base: int
    n_perturbed: int
    settings: dict[str, Any] = field(default_factory=dict)

    def terms_for(self, side: str, n: int | None = None, *, dedupe: bool = True) -> list[Term]:
        """The ``n`` terms most typical of ``side`` ("base" or "perturbed"), strongest first.

        With ``dedupe`` a word is left out when a phrase containing it accounts for
        most (>= 80 %) of its uses on that side and ranks about as high ("blood"
        under "blood pressure").
        """
        if side not in ("base", "perturbed"):
            raise ValueError(f"`side` must be 'base' or 'perturbed', got {side!r}.")
        sign = 1.0 if side == "perturbed" else -1.0
        ordered = sorted((t for t in self.terms if sign * t.z > 0), key=lambda t: (-abs(t.z), t.term))

        def uses(t: Term) -> int:
            return t.count_perturbed if side == "perturbed" else t.count_base

        phrases = [t for t in ordered if " " in t.term]
        out: list[Term] = []
        for t in ordered:
            if n is not None and len(out) >= n:
                break
            if (
                dedupe
                and " " not in t.term
                and any(
                    t.term in o.term.split(" ") and uses(o) >= 0.8 * uses(t) and abs(o.z) >= 0.8 * abs(t.z)
                    for o in phrases
                )
            ):
                continue
            out.append(t)
        return out

    def to_dict(self, n: int = 20) -> dict[str, Any]:
        return jsonable(
            {
                "terms": {
                    "perturbed": [t.to_dict() for t in self.terms_for("perturbed", n)],
                    "base": [t.to_dict() for t in self.terms_for("base", n)],
                },
                "typical": {k: vars(v) for k, v in self.typical.items()},
                "atypical": {k: vars(v) for k, v in self.atypical.items()},
                "duplicates": {k: v.to_dict() for k, v in self.duplicates.items()},
                "n_base": self.n_base,
                "n_perturbed": self.n_perturbed,
                "settings": self.settings,
            }
        )


def explain(
    base_texts: Sequence[str],
    perturbed_texts: Sequence[str],
    *,
    base_embeddings: np.ndarray | None = None,
    perturbed_embeddings: np.ndarray | None = None,
    bigrams: bool = True,
    prior: str | float | Mapping[str, float] = "pooled",
    prior_scale: float = 1.0,
    min_count: int = 2,
    near: float | None = None,
    stop_words: Iterable[str] = STOP_WORDS,
) -> Explanation:
    """Everything the "Why" view shows for one perturbation.

    Parameters
    ----------
    base_texts, perturbed_texts : list of str
        The k and m answers.
    base_embeddings, perturbed_embeddings : array_like, optional
        Their embeddings (rows), to pick typical and atypical answers; without
        them bag-of-words vectors are used.
    bigrams : bool, default True
        Count two-word phrases besides words.
    prior, prior_scale, min_count
        See :func:`log_odds`. ``min_count`` defaults to 2 here: a term said once
        in 2k answers says little.
    near : float, optional
        Group near-identical answers too (see :func:`find_duplicates`).
    """
    for name, t in (("base_texts", base_texts), ("perturbed_texts", perturbed_texts)):
        if isinstance(t, str) or not isinstance(t, Sequence) or len(t) == 0:
            raise ValueError(f"`{name}` must be a non-empty list of answers.")
    stops = frozenset(stop_words)
    cb = count_terms(base_texts, bigrams=bigrams, stop_words=stops)
    cp = count_terms(perturbed_texts, bigrams=bigrams, stop_words=stops)
    terms = log_odds(cb, cp, prior=prior, prior_scale=prior_scale, min_count=min_count)
    tb, ab = representatives(base_texts, base_embeddings)
    tp, ap = representatives(perturbed_texts, perturbed_embeddings)
    return Explanation(
        tuple(terms),
        {"base": tb, "perturbed": tp},
        {"base": ab, "perturbed": ap},
        {
            "base": find_duplicates(base_texts, near=near),
            "perturbed": find_duplicates(perturbed_texts, near=near),
        },
        len(base_texts),
        len(perturbed_texts),
        {
            "bigrams": bigrams,
            "prior": prior if isinstance(prior, (str, int, float)) else "mapping",
            "prior_scale": prior_scale,
            "min_count": min_count,
            "near": near,
        },
    )


def explain_result(result: Any, name: str, **kwargs: Any) -> Explanation:
    """:func:`explain` for perturbation (or model) ``name`` of an
    :class:`~dbpa_core.audit.AuditResult` (its own embeddings when it has them)."""
    arm = next((a for a in result.arms if a.arm.name == name), None)
    if arm is None:
        raise KeyError(f"No perturbation called {name!r} in this result.")
    return explain(
        result.base.texts,
        arm.texts,
        base_embeddings=result.base.embeddings,
        perturbed_embeddings=arm.embeddings,
        **kwargs,
    )


# --------------------------------------------------------------------------- model-written
SUMMARY_INSTRUCTIONS = (
    "Below are answers a language model gave to two versions of a prompt: group A to the "
    "original prompt, group B to a changed one ({name}). In 3 to 5 short bullet points, "
    "describe how the answers in group B differ from those in group A: content, "
    "recommendations, facts and tone. Name only differences that several answers show, "
    "and say so when the groups hardly differ. Do not judge which group is better."
)


@dataclass(frozen=True)
class ModelSummary:
    """A model-written description of the difference (may be wrong: label it so)."""

    text: str
    model: str
    prompt: str
    cached: bool


def _examples(texts: Sequence[str], n: int, max_chars: int) -> list[str]:
    out: list[str] = []
    for t in dict.fromkeys(x.strip() for x in texts):
        if len(out) >= n:
            break
        out.append(t if len(t) <= max_chars else t[:max_chars].rsplit(" ", 1)[0] + " …")
    return out


def summary_prompt(
    base_texts: Sequence[str],
    perturbed_texts: Sequence[str],
    *,
    name: str = "perturbed",
    n_examples: int = 5,
    max_chars: int = 700,
) -> str:
    """The prompt that asks a model to describe the difference (deterministic:
    the first ``n_examples`` distinct answers of each group, each cut to
    ``max_chars``), so that asking again is served from the cache."""
    if n_examples < 1:
        raise ValueError(f"`n_examples` must be >= 1, got {n_examples!r}.")
    a = _examples(base_texts, n_examples, max_chars)
    b = _examples(perturbed_texts, n_examples, max_chars)
    parts = [SUMMARY_INSTRUCTIONS.format(name=name), "", "Group A (original prompt):"]
    parts += [f"[A{i + 1}] {t}" for i, t in enumerate(a)]
    parts += ["", f"Group B ({name}):"]
    parts += [f"[B{i + 1}] {t}" for i, t in enumerate(b)]
    return "\n".join(parts)


def summarize_difference(
    sampler: Sampler,
    model: Mapping[str, Any],
    base_texts: Sequence[str],
    perturbed_texts: Sequence[str],
    *,
    name: str = "perturbed",
    n_examples: int = 5,
    seed: int = 0,
    temperature: float = 0.2,
    max_tokens: int = 300,
) -> ModelSummary:
    """Ask ``model`` (a model config, e.g. the audited one) how the groups differ.

    Goes through ``sampler`` (a :class:`~dbpa_core.sampling.Sampler`) like every
    call: cached under the prompt, so asking twice costs one call. Raises what
    the sampler raises (``BackendError``, ``RunCancelled``).
    """
    from .backends import GenerationParams
    from .sampling import Job, requests_for
    from .spec import model_label

    prompt = summary_prompt(base_texts, perturbed_texts, name=name, n_examples=n_examples)
    req = requests_for(
        prompt,
        n=1,
        seed=seed,
        params=GenerationParams(temperature=temperature, top_p=1.0, max_tokens=max_tokens),
    )[0]
    rec = sampler.sample([Job(dict(model), req, "summary")], stage="summarizing")[0]
    return ModelSummary(rec.text.strip(), model_label(dict(model)), prompt, rec.cached)


__all__ = [
    "STOP_WORDS",
    "DuplicateGroup",
    "Duplicates",
    "Explanation",
    "ModelSummary",
    "Representative",
    "Term",
    "count_terms",
    "explain",
    "explain_result",
    "find_duplicates",
    "highlight",
    "log_odds",
    "representatives",
    "summarize_difference",
    "summary_prompt",
    "tokenize",
]
