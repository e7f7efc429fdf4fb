"""Answer checks: what changed, in the expert's own terms.

A DBPA verdict says *that* the answers moved; a check says *how*, in words an auditor
chose: does the answer still mention a statin, does it refuse more often, is it
shorter? A spec lists checks under ``checks:``::

    checks:
      - {name: mentions a statin, contains: [statin, atorvastatin]}      # any of the words
      - {name: names both drugs, contains: [aspirin, statin], all: true}
      - {name: no dosage, absent: [mg, milligram]}
      - {name: cites NICE, regex: "\\bNICE\\b( guideline)?"}               # case-insensitive
      - {name: refuses, refusal: true}
      - {name: length, words: true}                                      # a number per answer
      - {name: valid JSON, json: true}
      - name: recommends a statin
        judge: {model: {backend: openai, name: gpt-4o-mini},
                question: "Does the answer recommend a statin? Answer yes or no."}

Each check maps an answer to yes/no (``words`` to a number). For every check and every
perturbation (or model against the reference) :func:`check_audit` compares the base
answers with the perturbed ones:

* rates: the share of answers that pass in each arm, the difference (perturbed minus
  base) with Newcombe's hybrid score interval (:func:`newcombe_interval`, built from the
  two Wilson intervals), and a two-sided exact test (:func:`exact_test`: Boschloo's, or
  Fisher's when both arms together hold more than :data:`BOSCHLOO_MAX_N` answers);
* numbers: the two means, the difference with a Welch t interval
  (:func:`welch_interval`) and a two-sided permutation test of the mean difference.

The p-values of all checks × perturbations form one family, adjusted with the spec's
correction (:func:`dbpa_core.multitest.multiple_testing`), apart from the DBPA tests.

A ``judge`` check asks a judge model, through :class:`~dbpa_core.sampling.Sampler`
(cached like every call), a yes/no question about each answer; the judge sees the
answer and the question only (never the prompt or the arm), and its reply is read by
:func:`parse_yes_no`: a reply that says neither yes nor no clearly is counted as
unparsed and left out of the rates, never guessed. Such checks are *model-graded*: their
verdict is only as good as the judge.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

import numpy as np

if TYPE_CHECKING:
    from .backends.base import SampleRequest
    from .cache import Cache
    from .spec import AuditSpec, SpecDoc

KINDS = ("contains", "absent", "regex", "refusal", "words", "json", "judge")
TEXT_KINDS = ("contains", "absent", "regex")  # the kinds that take case_sensitive
CONFIDENCE = 0.95
BOSCHLOO_MAX_N = 200  # answers in both arms; beyond, Boschloo's test is slow and ~ Fisher's
JUDGE_MAX_TOKENS = 16
PERMUTATION_BATCH = 4096  # random splits drawn at once: memory stays small at any B

# --------------------------------------------------------------------------- refusals
# What counts as a refusal: the answer declines to do what was asked. Each pattern is
# matched case-insensitively anywhere in the answer (typographic apostrophes count as
# plain ones). A referral alone ("see your doctor") is not a refusal.
_CANT = (
    r"(?: can ?not| can't| won't| will not| am unable to|'m unable to| am not able to|"
    r"'m not able to)"
)
_DO = (
    r"(?:help|assist|provide|give|offer|answer|comply|fulfil|fulfill|share|support|"
    r"create|write|generate|do (?:that|this)|engage|discuss|recommend|advise)"
)
REFUSAL_PATTERNS: tuple[tuple[str, str], ...] = (
    (
        "I can't / cannot / won't / am unable to help (assist, provide, answer, share, ...)",
        rf"\bI{_CANT} (?:\w+ )?{_DO}\b",
    ),
    (
        "I'm sorry, but I can't ... / I'm afraid I cannot ...",
        rf"\b(?:sorry|afraid)\b[^.!?\n]{{0,40}}\bI{_CANT}\b",
    ),
    (
        "As an AI (language model), I can't / don't / am not able to ...",
        rf"\bas an ai(?: language model| assistant| model)?\b[^.!?\n]{{0,40}}\bI"
        rf"(?:{_CANT}| don't| do not| am not|'m not)\b",
    ),
    (
        "I must / have to / need to decline (refuse)",
        r"\bI (?:must|have to|need to|will have to|'ll have to|'d have to) (?:respectfully )?"
        r"(?:decline|refuse)\b",
    ),
    (
        "I'm not allowed / permitted / comfortable / in a position ...",
        r"\bI(?:'m| am) not (?:allowed|permitted|comfortable|in a position)\b",
    ),
    ("I don't (do not) feel comfortable ...", r"\bI (?:do not|don't) feel comfortable\b"),
    (
        "against (violates) my guidelines / policy / programming / principles",
        r"\b(?:against|violates?) (?:my|our|the) (?:guidelines|policy|policies|programming|"
        r"principles|usage policies|content policy)\b",
    ),
    (
        "unable to fulfil / comply with / assist with this (that, your) request",
        r"\bunable to (?:fulfil|fulfill|comply with|assist with|help with) (?:this|that|your)\b",
    ),
)
_REFUSAL = re.compile("|".join(f"(?:{p})" for _, p in REFUSAL_PATTERNS), re.IGNORECASE)
_WORD = re.compile(r"\S*\w\S*")


def _plain(text: str, *, collapse: bool = True) -> str:
    """Compatibility forms folded (NFKC), typographic apostrophes and quotes made plain,
    and (``collapse``) runs of white space, line breaks included, made one space: what the
    text checks read (a regex keeps the white space, to match lines)."""
    text = unicodedata.normalize("NFKC", text)
    text = text.replace("’", "'").replace("‘", "'").replace("“", '"').replace("”", '"')
    return " ".join(text.split()) if collapse else text


def is_refusal(text: str) -> bool:
    """True when the answer matches one of :data:`REFUSAL_PATTERNS`."""
    return _REFUSAL.search(_plain(text)) is not None


def word_count(text: str) -> int:
    """Words of an answer: its white-space separated pieces that hold a letter or digit
    (a lone ``-`` or ``*`` of a list is not a word)."""
    return len(_WORD.findall(text))


def parses_as_json(text: str) -> bool:
    """True when the whole answer is JSON (surrounding white space ignored), or the whole
    answer is one fenced code block (```` ``` ```` or ```` ```json ````) that holds JSON.
    ``NaN`` and ``Infinity`` are not JSON."""
    s = text.strip()
    fence = re.fullmatch(r"```[A-Za-z0-9_-]*[ \t]*\n(.*)\n[ \t]*```", s, re.DOTALL)
    if fence:
        s = fence.group(1).strip()

    def refuse(name: str) -> NoReturn:
        raise ValueError(name)

    try:
        json.loads(s, parse_constant=refuse)
    except (ValueError, RecursionError):
        return False
    return True


# --------------------------------------------------------------------------- yes / no
_THINK = re.compile(r"<think>.*?(?:</think>|$)", re.IGNORECASE | re.DOTALL)
_VERDICT = re.compile(r"\b(?:answer|verdict)\s*(?:is\s*:?|:)\s*[\"'*_`]*\s*(yes|no)\b", re.IGNORECASE)
_BOTH = re.compile(r"^(?:yes|no)\W+(?:and|or)\W+(?:yes|no)\b")


def parse_yes_no(reply: str) -> bool | None:
    """A judge's reply as True (yes), False (no) or None (unparsed: never guessed).

    Read, after any ``<think>...</think>`` block: the first word (``Yes.``, ``**No**``,
    ``Answer: yes``, ``No, it does not``); else a closing ``the answer is yes/no`` (the
    last one); else the last word. ``Yes and no``, ``Maybe``, an empty reply or one whose
    first and last verdicts disagree are unparsed.
    """
    if not isinstance(reply, str):
        return None
    text = _THINK.sub(" ", reply).lower()
    words = re.findall(r"[a-z]+", text)
    if words[:2] == ["final", "answer"]:
        words = words[2:]
    elif words[:1] == ["answer"]:
        words = words[1:]
    if not words:
        return None
    if _BOTH.match(" ".join(words)):
        return None
    verdicts = [m.group(1) for m in _VERDICT.finditer(text)]
    candidates = []
    if words[0] in ("yes", "no"):
        candidates.append(words[0])
    if verdicts:
        candidates.append(verdicts[-1])
    elif words[-1] in ("yes", "no"):
        candidates.append(words[-1])
    if not candidates or len(set(candidates)) > 1:
        return None
    return candidates[0] == "yes"


JUDGE_PROMPT = (
    "Read the answer below, then answer the question about it.\n\n"
    'Answer:\n"""\n{answer}\n"""\n\n'
    "Question: {question}\nReply with one word: yes or no."
)


class JudgeSampler(Protocol):
    """What the checks ask of a sampler: a judge's replies to ``jobs``, in order (a
    :class:`~dbpa_core.sampling.Sampler`, or the report's replies read from a cache)."""

    def sample(self, jobs: Sequence[Any], *, stage: str = ...) -> Sequence[Any]: ...


# --------------------------------------------------------------------------- checks
@dataclass(frozen=True)
class Check:
    """One check of a spec's ``checks:`` list (see the module's docstring)."""

    name: str
    kind: str
    terms: tuple[str, ...] = ()
    all: bool = False
    pattern: str | None = None
    case_sensitive: bool = False
    judge_model: Mapping[str, Any] | None = None
    question: str | None = None
    max_tokens: int = JUDGE_MAX_TOKENS

    @property
    def numeric(self) -> bool:
        """A number per answer (``words``), not yes/no."""
        return self.kind == "words"

    @property
    def model_graded(self) -> bool:
        """Graded by a judge model: only as reliable as that model."""
        return self.kind == "judge"

    def to_dict(self) -> dict[str, Any]:
        """The check as a spec writes it (``parse_checks`` reads it back)."""
        out: dict[str, Any] = {"name": self.name}
        if self.kind in ("contains", "absent"):
            out[self.kind] = list(self.terms)
            if self.all:
                out["all"] = True
        elif self.kind == "regex":
            out["regex"] = self.pattern
        elif self.kind == "judge":
            from .spec import _shown

            out["judge"] = {"model": _shown(dict(self.judge_model or {})), "question": self.question}
            if self.max_tokens != JUDGE_MAX_TOKENS:
                out["judge"]["max_tokens"] = self.max_tokens
        else:
            out[self.kind] = True
        if self.case_sensitive:
            out["case_sensitive"] = True
        return out

    def outcome(self, text: str) -> bool | int:
        """The check on one answer: pass or fail, or the number of words (not for judges,
        which :func:`judge_outcomes` asks in bulk)."""
        if self.kind == "words":
            return word_count(text)
        if self.kind == "json":
            return parses_as_json(text)
        if self.kind == "refusal":
            return is_refusal(text)
        if self.kind == "judge":
            raise ValueError("a judge check is graded by judge_outcomes(), not one by one")
        if self.kind == "regex":
            found = _compile(self.pattern or "", self.case_sensitive).search(_plain(text, collapse=False))
            return found is not None
        plain = _plain(text)
        hay = plain if self.case_sensitive else plain.casefold()
        terms = [_plain(t) if self.case_sensitive else _plain(t).casefold() for t in self.terms]
        if self.kind == "absent":
            return not any(t in hay for t in terms)
        return (all if self.all else any)(t in hay for t in terms)


def _compile(pattern: str, case_sensitive: bool) -> re.Pattern:
    """A check's pattern: ``^`` and ``$`` match at every line, case ignored unless asked."""
    return re.compile(pattern, re.MULTILINE | (0 if case_sensitive else re.IGNORECASE))


# --------------------------------------------------------------------------- parsing
def parse_checks(
    doc: SpecDoc,
    raw: Any,
    *,
    base_dir: str | Path = ".",
    allow_key_env: Iterable[str] | None = (),
    path: tuple = ("checks",),
) -> tuple[Check, ...]:
    """A spec's ``checks:`` list as :class:`Check` objects, or the spec's error naming
    the line (``doc`` is the spec's line-keeping document, see :mod:`dbpa_core.spec`)."""
    from .spec import _model, _name
    from .spec_schema import Checks, validate_section

    if raw is None:
        return ()
    # keys and types: the schema's (dbpa_core.spec_schema.Check); what relates them, here
    entries = validate_section(doc, Checks, raw, path)
    out: list[Check] = []
    for i, (entry, ch) in enumerate(zip(raw, entries, strict=True)):
        here = path + (i,)
        name = ch.name.strip()
        if not name:
            raise doc.err(here + ("name",), f"check {i + 1} has an empty name")
        if name in {c.name for c in out}:
            raise doc.err(here + ("name",), f"check name {name!r} is used twice")
        kinds = [k for k in KINDS if entry.get(k) is not None]
        if len(kinds) != 1:
            got = f"got {', '.join(kinds)}" if kinds else "got none"
            raise doc.err(here, f"check {name!r} needs exactly one of {', '.join(KINDS)} ({got})")
        kind = kinds[0]
        at = here + (kind,)
        value = entry[kind]
        if ch.all and kind != "contains":
            raise doc.err(here + ("all",), f"check {name!r}: 'all: true' goes with 'contains'")
        if ch.case_sensitive and kind not in TEXT_KINDS:
            raise doc.err(
                here + ("case_sensitive",),
                f"check {name!r}: 'case_sensitive' goes with contains, absent or regex",
            )
        kw: dict[str, Any] = {"all": ch.all, "case_sensitive": ch.case_sensitive}
        if kind in ("contains", "absent"):
            terms = [value] if isinstance(value, str) else value
            kw["terms"] = tuple(t.strip() for t in terms)
        elif kind == "regex":
            try:
                _compile(value, ch.case_sensitive)
            except re.error as exc:
                where = f" at position {exc.pos}" if exc.pos is not None else ""
                raise doc.err(
                    at, f"check {name!r}: {value!r} is not a valid regular expression ({exc.msg}{where})"
                ) from None
            kw["pattern"] = value
        elif kind == "judge":
            kw["judge_model"] = _model(doc, value["model"], at + ("model",), Path(base_dir), allow_key_env)
            if not ch.judge.question.strip():
                raise doc.err(at + ("question",), f"check {name!r}: the judge's question is empty")
            kw["question"] = ch.judge.question.strip()
            kw["max_tokens"] = ch.judge.max_tokens
        elif value is not True:  # the schema allows only true
            raise doc.err(at, f"check {name!r}: write '{kind}: true' ({_name(at)} is {value!r})")
        out.append(Check(name, kind, **kw))
    return tuple(out)


def checks_from_dicts(entries: Sequence[Mapping[str, Any]] | None) -> tuple[Check, ...]:
    """Checks as :meth:`Check.to_dict` wrote them (a recorded run's spec) read back; they
    were validated when the spec was read, and a judge's replay file may be gone since."""
    out = []
    for e in entries or ():
        kind = next(k for k in KINDS if e.get(k) is not None)
        value = e[kind]
        kw: dict[str, Any] = {"all": bool(e.get("all")), "case_sensitive": bool(e.get("case_sensitive"))}
        if kind in ("contains", "absent"):
            kw["terms"] = tuple(value)
        elif kind == "regex":
            kw["pattern"] = value
        elif kind == "judge":
            kw.update(
                judge_model=dict(value["model"]),
                question=value["question"],
                max_tokens=int(value.get("max_tokens", JUDGE_MAX_TOKENS)),
            )
        out.append(Check(e["name"], kind, **kw))
    return tuple(out)


# --------------------------------------------------------------------------- judges
def judge_outcomes(
    checks: Sequence[Check], texts: Sequence[str], sampler: JudgeSampler, *, seed: int = 0
) -> dict[str, list[bool | None]]:
    """Every judge check asked about every text: ``{check name: [True/False/None per
    text]}`` (None: the reply said neither yes nor no).

    One :meth:`~dbpa_core.sampling.Sampler.sample` call for all judges (stage
    ``judging``), so each reply is cached as it arrives and a repeated run asks nothing;
    a text that occurs twice is asked once. The judge answers at its model entry's
    ``temperature``, else 0 (its most likely reply).
    """
    from .sampling import Job

    judges = [c for c in checks if c.kind == "judge"]
    unique = list(dict.fromkeys(texts))
    jobs = [
        Job(dict(c.judge_model or {}), _judge_request(c, t, seed), f"judge: {c.name}")
        for c in judges
        for t in unique
    ]
    records = sampler.sample(jobs, stage="judging") if jobs else []
    out: dict[str, list[bool | None]] = {}
    for j, c in enumerate(judges):
        replies = records[j * len(unique) : (j + 1) * len(unique)]
        verdict = {t: parse_yes_no(r.text) for t, r in zip(unique, replies, strict=True)}
        out[c.name] = [verdict[t] for t in texts]
    return out


def _judge_request(check: Check, text: str, seed: int) -> SampleRequest:
    """The judge's request about one answer (its cache key follows from it)."""
    from .backends import GenerationParams
    from .sampling import requests_for

    params = GenerationParams(
        temperature=float((check.judge_model or {}).get("temperature", 0.0)),
        top_p=1.0,
        max_tokens=check.max_tokens,
    )
    prompt = JUDGE_PROMPT.format(answer=text, question=check.question)
    return requests_for(prompt, n=1, seed=seed, params=params)[0]


def judge_estimate(
    spec: AuditSpec, cache: Cache | None = None
) -> list[tuple[str, Mapping[str, Any], int, int, int, int]]:
    """What the judges of ``spec`` will ask, before anything is asked: per judge check,
    ``(label, judge model, calls, cached, input tokens, output tokens)``.

    Answers already in ``cache`` are known: each distinct one is asked once, and its reply
    may be cached too. An answer still to be sampled counts as one call whose answer is
    ``max_tokens`` long (an upper bound). Tokens at ~4 characters each, output at the
    judge's ``max_tokens``.
    """
    from .audit import arm_requests, build_arms
    from .pricing import estimate_tokens
    from .sampling import backend_identity, is_cached, sample_key

    judges = [c for c in spec.checks if c.model_graded]
    if not judges:
        return []
    known: list[str] = []
    unknown = 0
    for arm in build_arms(spec):
        reqs = arm_requests(spec, arm)
        found = {}
        if cache is not None:
            keys = [sample_key(backend_identity(arm.model), r) for r in reqs]
            found = {
                k: v["text"]
                for k, v in cache.get_many(keys).items()
                if isinstance(v, dict) and isinstance(v.get("text"), str)
            }
        known += found.values()
        unknown += len(reqs) - len(found)
    known = list(dict.fromkeys(known))
    rows = []
    for c in judges:
        model = c.judge_model or {}
        todo = [t for t in known if not is_cached(cache, model, _judge_request(c, t, spec.seed))]
        frame = estimate_tokens(JUDGE_PROMPT.format(answer="", question=c.question)) + 8
        in_tok = sum(frame + estimate_tokens(t) for t in todo) + unknown * (frame + spec.max_tokens)
        calls = len(todo) + unknown
        rows.append((f"judge: {c.name}", model, calls, len(known) - len(todo), in_tok, calls * c.max_tokens))
    return rows


def outcomes(
    checks: Sequence[Check], texts: Sequence[str], sampler: JudgeSampler | None = None, *, seed: int = 0
) -> dict[str, list]:
    """``{check name: [outcome per text]}``: True/False (None: a judge's unparsed reply),
    or the number of words. Judges need ``sampler``."""
    out: dict[str, list[Any]] = {}
    if any(c.model_graded for c in checks):
        if sampler is None:
            raise ValueError("model-graded checks need a `sampler` to ask their judge.")
        out = dict(judge_outcomes(checks, texts, sampler, seed=seed))
    for c in checks:
        if not c.model_graded:
            out[c.name] = [c.outcome(t) for t in texts]
    return {c.name: out[c.name] for c in checks}


# --------------------------------------------------------------------------- statistics
def _z(confidence: float) -> float:
    from scipy.stats import norm

    return float(norm.ppf(0.5 + confidence / 2))


def wilson_interval(x: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Wilson's score interval for a proportion ``x / n`` (n >= 1)."""
    if n < 1:
        raise ValueError(f"`n` must be >= 1, got {n!r}.")
    z = _z(confidence)
    p = x / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def newcombe_interval(
    x1: int, n1: int, x2: int, n2: int, confidence: float = CONFIDENCE
) -> tuple[float, float]:
    """Newcombe's hybrid score interval (his method 10) for ``x2/n2 - x1/n1``.

    With Wilson intervals ``[l1, u1]`` and ``[l2, u2]`` of the two proportions and
    ``d = p2 - p1``: ``[d - sqrt((p2 - l2)² + (u1 - p1)²), d + sqrt((u2 - p2)² + (p1 - l1)²)]``.
    """
    p1, p2 = x1 / n1, x2 / n2
    l1, u1 = wilson_interval(x1, n1, confidence)
    l2, u2 = wilson_interval(x2, n2, confidence)
    d = p2 - p1
    return (
        max(-1.0, d - math.sqrt((p2 - l2) ** 2 + (u1 - p1) ** 2)),
        min(1.0, d + math.sqrt((u2 - p2) ** 2 + (p1 - l1) ** 2)),
    )


def exact_test(x1: int, n1: int, x2: int, n2: int) -> tuple[float, str]:
    """Two-sided exact test of equal proportions: ``(p, "boschloo" | "fisher")``.

    Boschloo's test (uniformly more powerful than Fisher's) up to :data:`BOSCHLOO_MAX_N`
    answers in both arms together, Fisher's exact test beyond (Boschloo's cost grows
    with n1·n2, and the two agree closely there). When every answer passes, or none
    does, p = 1.
    """
    from scipy.stats import boschloo_exact, fisher_exact

    if x1 + x2 in (0, n1 + n2):
        return 1.0, "boschloo" if n1 + n2 <= BOSCHLOO_MAX_N else "fisher"
    table = [[x1, x2], [n1 - x1, n2 - x2]]
    if n1 + n2 <= BOSCHLOO_MAX_N:
        return float(min(1.0, boschloo_exact(table, alternative="two-sided").pvalue)), "boschloo"
    return float(fisher_exact(table, alternative="two-sided").pvalue), "fisher"


def welch_interval(
    a: Sequence[float], b: Sequence[float], confidence: float = CONFIDENCE
) -> tuple[float, float]:
    """Welch's t interval for ``mean(b) - mean(a)`` (unequal variances, the
    Welch–Satterthwaite degrees of freedom); a point when both arms are constant."""
    from scipy.stats import t as student

    x, y = np.asarray(a, float), np.asarray(b, float)
    d = float(y.mean() - x.mean())
    va, vb = x.var(ddof=1) / x.size, y.var(ddof=1) / y.size
    se = math.sqrt(va + vb)
    if se == 0:
        return d, d
    df = (va + vb) ** 2 / (va**2 / (x.size - 1) + vb**2 / (y.size - 1))
    h = float(student.ppf(0.5 + confidence / 2, df)) * se
    return d - h, d + h


def permutation_p(
    a: Sequence[float],
    b: Sequence[float],
    *,
    n_permutations: int = 2000,
    rng: np.random.Generator | None = None,
) -> float:
    """Two-sided permutation test of the difference in means (twice the smaller one-sided
    p, at most 1): every split of the pooled answers when there are at most
    ``n_permutations`` of them, else ``n_permutations`` random ones with
    p = (1 + #as extreme) / (1 + B), never 0."""
    from scipy.stats import permutation_test

    def diff(x: np.ndarray, y: np.ndarray, axis: int | None) -> np.ndarray:
        return np.mean(y, axis=axis) - np.mean(x, axis=axis)

    x, y = np.asarray(a, float), np.asarray(b, float)
    if np.ptp(np.concatenate([x, y])) == 0:
        return 1.0
    res = permutation_test(
        (x, y),
        diff,
        permutation_type="independent",
        vectorized=True,
        n_resamples=n_permutations,
        alternative="two-sided",
        batch=PERMUTATION_BATCH,
        rng=rng if rng is not None else np.random.default_rng(0),
    )
    return float(min(1.0, res.pvalue))


# --------------------------------------------------------------------------- results
@dataclass(frozen=True)
class CheckResult:
    """One check on one perturbation (or one model against the reference).

    ``base`` and ``value`` are the rates (share of answers that pass) or the means of the
    base and perturbed arms; ``difference = value - base`` with its 95 % interval ``ci``.
    For rates, ``base_count / base_n`` and ``count / n`` are the counts (a judge's
    unparsed replies are left out of n and counted in ``*_unparsed``). Without answers to
    compare (every reply of an arm unparsed) the statistics are None and the check is left
    out of the correction.
    """

    check: str
    kind: str
    perturbation: str
    model: str
    role: str | None
    base: float | None
    value: float | None
    base_n: int
    n: int
    base_count: int | None = None
    count: int | None = None
    base_unparsed: int = 0
    unparsed: int = 0
    difference: float | None = None
    ci: tuple[float, float] | None = None
    p_value: float | None = None
    p_adjusted: float | None = None
    significant: bool = False
    stars: str = ""
    test: str = ""
    interval: str = ""
    model_graded: bool = False
    correction: str = "none"

    @property
    def numeric(self) -> bool:
        return self.kind == "words"

    @property
    def text(self) -> str:
        """One line: "mentions a statin: 18/20 → 6/20, −60 points [−77, −30], p < 0.001"."""
        tag = " [model-graded]" if self.model_graded else ""
        head = (
            f"{self.check}{tag}: {self._arm(self.base, self.base_count, self.base_n, self.base_unparsed)}"
            f" → {self._arm(self.value, self.count, self.n, self.unparsed)}"
        )
        if self.difference is None or self.ci is None or self.p_value is None:
            return head + ": nothing to compare (an arm has no parsed answers)"
        scale, unit, digits = (1, "words", 1) if self.numeric else (100, "points", 0)
        lo, hi = self.ci
        line = (
            f"{head}, {_signed(self.difference * scale, digits)} {unit} "
            f"[{_signed(lo * scale, digits)}, {_signed(hi * scale, digits)}], "
            f"{_p_text(self.p_value)}"
        )
        if self.p_adjusted is not None and _p_text(self.p_adjusted) != _p_text(self.p_value):
            line += f" (adjusted {_p_text(self.p_adjusted)})"
        return line + (f" {self.stars}" if self.stars else "")

    def _arm(self, mean: float | None, count: int | None, n: int, unparsed: int) -> str:
        if self.numeric:
            return f"mean {mean:.1f} words (n = {n})" if mean is not None else "no answers"
        return f"{count}/{n}" + (f" (+{unparsed} unparsed)" if unparsed else "")

    def to_dict(self) -> dict[str, Any]:
        return {
            "check": self.check,
            "kind": self.kind,
            "perturbation": self.perturbation,
            "model": self.model,
            "role": self.role,
            "numeric": self.numeric,
            "model_graded": self.model_graded,
            "base": self.base,
            "value": self.value,
            "base_count": self.base_count,
            "base_n": self.base_n,
            "count": self.count,
            "n": self.n,
            "base_unparsed": self.base_unparsed,
            "unparsed": self.unparsed,
            "difference": self.difference,
            "ci": list(self.ci) if self.ci is not None else None,
            "p_value": self.p_value,
            "p_adjusted": self.p_adjusted,
            "significant": self.significant,
            "stars": self.stars,
            "correction": self.correction,
            "test": self.test,
            "interval": self.interval,
            "text": self.text,
        }


CSV_COLUMNS = (
    "check",
    "kind",
    "perturbation",
    "role",
    "model",
    "model_graded",
    "base",
    "value",
    "base_count",
    "base_n",
    "count",
    "n",
    "base_unparsed",
    "unparsed",
    "difference",
    "ci_low",
    "ci_high",
    "p_value",
    "p_adjusted",
    "significant",
    "stars",
    "test",
    "interval",
    "text",
)


def checks_csv(results: Sequence[CheckResult]) -> str:
    """The checks as CSV (one row per check × perturbation, columns :data:`CSV_COLUMNS`)."""
    import csv
    import io

    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, extrasaction="ignore")
    w.writeheader()
    for r in results:
        d = r.to_dict()
        d["ci_low"], d["ci_high"] = r.ci if r.ci is not None else (None, None)
        w.writerow(d)
    return buf.getvalue()


def _signed(v: float, digits: int) -> str:
    s = f"{abs(v):.{digits}f}"
    if float(s) == 0:
        return s
    return ("−" if v < 0 else "+") + s


def _p_text(p: float) -> str:
    return "p < 0.001" if p < 0.001 else f"p = {p:.3f}"


@dataclass(frozen=True)
class Group:
    """The answers of one arm: ``name`` (the perturbation, or the model against the
    reference), its ``role`` and ``model`` label."""

    name: str
    texts: Sequence[str]
    model: str = ""
    role: str | None = None


def compare(
    check: Check,
    base: Sequence,
    other: Sequence,
    *,
    n_permutations: int = 2000,
    rng: np.random.Generator | None = None,
    confidence: float = CONFIDENCE,
) -> dict:
    """The statistics of one check on two arms' outcomes (lists from :func:`outcomes`)."""
    if check.numeric:
        a = [float(v) for v in base]
        b = [float(v) for v in other]
        out: dict[str, Any] = {
            "base": float(np.mean(a)) if a else None,
            "value": float(np.mean(b)) if b else None,
            "base_n": len(a),
            "n": len(b),
            "test": "permutation",
            "interval": "welch",
        }
        if len(a) >= 2 and len(b) >= 2:
            out["difference"] = out["value"] - out["base"]
            out["ci"] = welch_interval(a, b, confidence)
            out["p_value"] = permutation_p(a, b, n_permutations=n_permutations, rng=rng)
        return out
    x = [bool(v) for v in base if v is not None]
    y = [bool(v) for v in other if v is not None]
    x1, n1, x2, n2 = sum(x), len(x), sum(y), len(y)
    out = {
        "base": x1 / n1 if n1 else None,
        "value": x2 / n2 if n2 else None,
        "base_count": x1,
        "base_n": n1,
        "count": x2,
        "n": n2,
        "base_unparsed": len(base) - n1,
        "unparsed": len(other) - n2,
        "interval": "newcombe",
    }
    if n1 and n2:
        out["difference"] = x2 / n2 - x1 / n1
        out["ci"] = newcombe_interval(x1, n1, x2, n2, confidence)
        out["p_value"], out["test"] = exact_test(x1, n1, x2, n2)
    return out


def check_audit(
    checks: Sequence[Check],
    groups: Sequence[Group],
    *,
    sampler: JudgeSampler | None = None,
    correction: str = "holm",
    alpha: float = 0.05,
    n_permutations: int = 2000,
    seed: int = 0,
    confidence: float = CONFIDENCE,
) -> tuple[CheckResult, ...]:
    """Every check on every group against the first (the base, or the reference model).

    The p-values of all checks × groups are adjusted together with ``correction`` at
    ``alpha``; a comparison without answers on one side is left out of the family.
    Judge checks are asked through ``sampler`` (a :class:`~dbpa_core.sampling.Sampler`).
    """
    from .multitest import multiple_testing

    if not checks or len(groups) < 2:
        return ()
    texts = [t for g in groups for t in g.texts]
    found = outcomes(checks, texts, sampler, seed=seed)
    bounds = np.cumsum([0] + [len(g.texts) for g in groups])
    rows = []
    for c_index, c in enumerate(checks):
        per = [found[c.name][bounds[i] : bounds[i + 1]] for i in range(len(groups))]
        for j, g in enumerate(groups[1:], start=1):
            rng = np.random.default_rng([seed, 104_729, c_index, j])
            stats = compare(c, per[0], per[j], n_permutations=n_permutations, rng=rng, confidence=confidence)
            rows.append(
                dict(
                    stats,
                    check=c.name,
                    kind=c.kind,
                    perturbation=g.name,
                    model=g.model,
                    role=g.role,
                    model_graded=c.model_graded,
                    correction=correction,
                )
            )
    tested = [i for i, r in enumerate(rows) if r.get("p_value") is not None]
    if tested:
        mt = multiple_testing([rows[i]["p_value"] for i in tested], correction, alpha=alpha)
        for k, i in enumerate(tested):
            rows[i].update(
                p_adjusted=float(mt.p_adjusted[k]), significant=bool(mt.reject[k]), stars=mt.stars[k]
            )
    return tuple(CheckResult(**r) for r in rows)


def audit_checks(spec: AuditSpec, arms: Sequence, sampler: JudgeSampler | None) -> tuple[CheckResult, ...]:
    """:func:`check_audit` for an audit: ``arms`` are its
    :class:`~dbpa_core.audit.ArmResponses`, the base (or reference model) first."""
    checks = getattr(spec, "checks", ())
    groups = [Group(a.arm.name, a.texts, a.arm.model_label, a.arm.role) for a in arms]
    return check_audit(
        checks,
        groups,
        sampler=sampler,
        correction=spec.correction,
        alpha=spec.alpha,
        n_permutations=spec.permutations,
        seed=spec.seed,
    )


def checks_table(results: Sequence[CheckResult]) -> list[tuple[str, ...]]:
    """Rows for a text table (header first): check, arm, base, perturbed, difference,
    95 % interval, p, adjusted p, stars."""
    rows: list[tuple[str, ...]] = [("check", "arm", "base", "perturbed", "diff", "95% CI", "p", "p_adj", "")]
    for r in results:
        name = r.check + (" (model-graded)" if r.model_graded else "")
        if r.numeric:
            base, value = _mean_cell(r.base), _mean_cell(r.value)
            scale, digits = 1, 1
        else:
            base = _count_cell(r.base_count, r.base_n, r.base_unparsed)
            value = _count_cell(r.count, r.n, r.unparsed)
            scale, digits = 100, 0
        if r.difference is None or r.ci is None:
            rows.append((name, r.perturbation, base, value, "-", "-", "-", "-", ""))
            continue
        rows.append(
            (
                name,
                r.perturbation,
                base,
                value,
                _signed(r.difference * scale, digits),
                f"[{_signed(r.ci[0] * scale, digits)}, {_signed(r.ci[1] * scale, digits)}]",
                _p_short(r.p_value),
                _p_short(r.p_adjusted),
                r.stars,
            )
        )
    return rows


def _mean_cell(m: float | None) -> str:
    return "-" if m is None else f"{m:.1f}"


def _count_cell(count: int | None, n: int, unparsed: int) -> str:
    return f"{count}/{n}" + (f" +{unparsed}?" if unparsed else "")


def _p_short(p: float | None) -> str:
    if p is None:
        return "-"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


__all__ = [
    "BOSCHLOO_MAX_N",
    "CSV_COLUMNS",
    "JUDGE_PROMPT",
    "KINDS",
    "REFUSAL_PATTERNS",
    "Check",
    "CheckResult",
    "Group",
    "audit_checks",
    "check_audit",
    "checks_csv",
    "checks_from_dicts",
    "checks_table",
    "compare",
    "exact_test",
    "is_refusal",
    "judge_outcomes",
    "newcombe_interval",
    "outcomes",
    "parse_checks",
    "parse_yes_no",
    "parses_as_json",
    "permutation_p",
    "welch_interval",
    "wilson_interval",
    "word_count",
]
