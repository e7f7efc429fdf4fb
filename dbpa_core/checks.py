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
      - {name: chose unknown, choice: "{unknown}"}    # a suite with options: the option chosen
      - name: recommends a statin
        judge: {model: {backend: openai, name: gpt-4o-mini},
                question: "Does the answer recommend a statin? Answer yes or no."}

In a suite (``cases:``) every check's text may hold ``{column}`` placeholders, filled
per case (``contains: ["{unknown}"]``); a ``choice`` check reads which of the case's
``options`` an answer chose with the battery's answer parser
(:func:`dbpa_core.attacks.answers.parse_answer`), in the order the arm's prompt showed
them, and passes when that option is its text; an answer that names no option clearly
is counted as unparsed, like a judge's reply.

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

from .intervals import MAX_COUNT, wilson_interval
from .spec_schema import JUDGE_MAX_TOKENS as JUDGE_MAX_TOKENS  # declared with the schema
from .spec_schema import KINDS as KINDS

if TYPE_CHECKING:
    from .backends.base import SampleRequest
    from .cache import Cache
    from .spec import AuditSpec, SpecDoc


TEXT_KINDS = ("contains", "absent", "regex")  # the kinds that take case_sensitive
CONFIDENCE = 0.95
BOSCHLOO_MAX_N = 200  # answers in both arms; beyond, Boschloo's test is slow and ~ Fisher's
EXPECT_CHECK = "expected answer"  # the check a suite's ``expect:`` adds
PERMUTATION_BATCH = 4096  # random splits drawn at once: memory stays small at any B
MAX_PERMUTATION_WORK = 10**10  # permutation_p: permutations x answers, about 2 minutes of one core


def _count_iv(x: object, n: object, xname: str = "x", nname: str = "n") -> tuple[int, int]:
    """``x`` passing answers of ``n``: whole numbers, ``1 <= n <= MAX_COUNT``, ``0 <= x <= n``."""
    from ._validate import check_int

    n_ = check_int(n, nname, 1, MAX_COUNT, "larger counts are not exact as floats")
    x_ = check_int(x, xname, 0, n_, f"it counts answers that pass, out of `{nname}` = {n_}")
    return x_, n_


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
    target: str | None = None  # choice: the option's text (a template until filled per case)
    # choice, filled per case: each arm's options in the order its prompt shows them
    arm_options: tuple[tuple[str, tuple[str, ...]], ...] = ()

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
        elif self.kind == "choice":
            out["choice"] = self.target
        elif self.kind == "judge":
            from .spec_doc import shown_config

            out["judge"] = {"model": shown_config(dict(self.judge_model or {})), "question": self.question}
            if self.max_tokens != JUDGE_MAX_TOKENS:
                out["judge"]["max_tokens"] = self.max_tokens
        else:
            out[self.kind] = True
        if self.case_sensitive:
            out["case_sensitive"] = True
        return out

    def outcome(self, text: str, arm: str | None = None) -> bool | int | None:
        """The check on one answer: pass or fail, or the number of words (not for judges,
        which :func:`judge_outcomes` asks in bulk). A ``choice`` check reads the option
        chosen among ``arm``'s options: None when the answer names none clearly."""
        if self.kind == "choice":
            return self.chose(text, arm)
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

    def chose(self, text: str, arm: str | None = None) -> bool | None:
        """A ``choice`` check on one answer of ``arm``: True when the option the answer
        chose is :attr:`target`, False when it chose another, None when it chose none
        clearly (unparsed)."""
        from .attacks.answers import parse_answer
        from .cases import same_answer

        shown = dict(self.arm_options)
        options = shown.get(arm or "base") or shown.get("base")
        if not options or self.target is None:
            raise ValueError(
                f"check {self.name!r}: a choice check needs the options of the arm, filled per case"
            )
        index = parse_answer(text, options).index
        return None if index is None else same_answer(options[index], self.target)


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
    from .spec_doc import key_name
    from .spec_models import model_entry
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
        elif kind == "choice":
            kw["target"] = value.strip()
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
            kw["judge_model"] = model_entry(
                doc, value["model"], at + ("model",), Path(base_dir), allow_key_env
            )
            if not ch.judge.question.strip():
                raise doc.err(at + ("question",), f"check {name!r}: the judge's question is empty")
            kw["question"] = ch.judge.question.strip()
            kw["max_tokens"] = ch.judge.max_tokens
        elif value is not True:  # the schema allows only true
            raise doc.err(at, f"check {name!r}: write '{kind}: true' ({key_name(at)} is {value!r})")
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
        elif kind == "choice":
            kw["target"] = value
        elif kind == "judge":
            kw.update(
                judge_model=dict(value["model"]),
                question=value["question"],
                max_tokens=int(value.get("max_tokens", JUDGE_MAX_TOKENS)),
            )
        out.append(Check(e["name"], kind, **kw))
    return tuple(out)


# --------------------------------------------------------------------------- cases
def check_texts(check: Check) -> list[tuple[str, str]]:
    """The texts of a check that may hold ``{column}`` placeholders: ``(key, text)``."""
    if check.kind in ("contains", "absent"):
        return [(check.kind, t) for t in check.terms]
    if check.kind == "regex":
        return [("regex", check.pattern or "")]
    if check.kind == "choice":
        return [("choice", check.target or "")]
    if check.kind == "judge":
        return [("judge", check.question or "")]
    return []


def fill_check(
    check: Check, values: Mapping[str, Any], arm_options: Mapping[str, Sequence[str]] = {}
) -> Check:
    """``check`` for one case: its ``{column}`` placeholders filled from ``values`` (a
    regex gets each value escaped, so that it matches literally) and, for a choice check,
    the options each arm shows (``{arm name: options}``)."""
    from dataclasses import replace

    from .cases import fill_text

    v = dict(values)
    if check.kind in ("contains", "absent"):
        return replace(check, terms=tuple(fill_text(t, v) for t in check.terms))
    if check.kind == "regex":
        return replace(check, pattern=fill_text(check.pattern or "", v, escape=True))
    if check.kind == "choice":
        return replace(
            check,
            target=fill_text(check.target or "", v),
            arm_options=tuple((k, tuple(o)) for k, o in arm_options.items()),
        )
    if check.kind == "judge":
        return replace(check, question=fill_text(check.question or "", v))
    return check


def case_checks(
    doc: Any,
    checks: tuple[Check, ...],
    cases: tuple,
    *,
    options: Sequence[str] = (),
    expect: str | None = None,
    seed: int = 0,
) -> tuple[Check, ...]:
    """The spec's checks with their placeholders checked against the cases' columns (an
    unknown one is the spec's error, with the check's line), and the ``expected answer``
    check that ``expect`` adds (a choice check with ``options``, else contains)."""
    from .cases import CaseError, case_arm, fill_text, same_answer, text_placeholders

    for i, c in enumerate(checks):
        here = ("checks", i)
        if c.kind == "choice" and not options:
            raise doc.err(
                here + ("choice",),
                f"check {c.name!r}: a choice check reads which option an answer chose, and the "
                'spec gives no \'options\' (add options: ["{ans0}", "{ans1}", ...] and '
                "{options} in the prompt)",
            )
        if expect is not None and c.name == EXPECT_CHECK:
            raise doc.err(
                here + ("name",), f"check name {EXPECT_CHECK!r} is the check that 'expect' adds: rename it"
            )
        for key, text in check_texts(c):
            names = text_placeholders(text)
            if names and not cases:
                raise doc.err(
                    here + (key,),
                    f"check {c.name!r}: the placeholder {{{names[0]}}} names no column (the spec "
                    "gives no 'cases'); write {{ and }} for literal braces",
                )
            for case in cases:
                try:
                    filled = fill_text(text, case.values)
                except CaseError:
                    missing = next(n for n in names if n not in case.values)
                    columns = ", ".join(k for k, _ in case.fields) or "none"
                    raise doc.err(
                        here + (key,),
                        f"check {c.name!r}: the placeholder {{{missing}}} names no column of case "
                        f"{case.id!r} ({case.where}; its columns: {columns}); write {{{{ and }}}} "
                        "for literal braces",
                    ) from None
                if c.kind == "choice":
                    shown = case_arm("", None, case, options=options, seed=seed).options
                    if not any(same_answer(filled, o) for o in shown):
                        raise doc.err(
                            here + (key,),
                            f"check {c.name!r}: in case {case.id!r} ({case.where}) {filled!r} is "
                            "none of its options, so no answer could choose it",
                        )
    if expect is None:
        return checks
    extra = (
        Check(EXPECT_CHECK, "choice", target=expect)
        if options
        else Check(EXPECT_CHECK, "contains", terms=(expect,))
    )
    return (*checks, extra)


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
        Job(dict(c.judge_model or {}), judge_request(c, t, seed), f"judge: {c.name}")
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


def judge_request(check: Check, text: str, seed: int) -> SampleRequest:
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
    spec: AuditSpec,
    cache: Cache | None = None,
    *,
    arms: Sequence[tuple[Mapping[str, Any], Sequence[SampleRequest]]],
) -> list[tuple[str, Mapping[str, Any], int, int, int, int]]:
    """What the judges of ``spec`` will ask, before anything is asked: per judge check,
    ``(label, judge model, calls, cached, input tokens, output tokens)``. ``arms``: each
    arm's model and the samples it asks (the answers the judges read).

    Answers already in ``cache`` are known: each distinct one is asked once, and its reply
    may be cached too. An answer still to be sampled counts as one call whose answer is
    ``max_tokens`` long (an upper bound). Tokens at ~4 characters each, output at the
    judge's ``max_tokens``.
    """
    from .pricing import estimate_tokens
    from .sampling import backend_identity, is_cached, sample_key

    judges = [c for c in spec.checks if c.model_graded]
    if not judges:
        return []
    known: list[str] = []
    unknown = 0
    for model, reqs in arms:
        found = {}
        if cache is not None:
            keys = [sample_key(backend_identity(model), r) for r in reqs]
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
        todo = [t for t in known if not is_cached(cache, model, judge_request(c, t, spec.seed))]
        frame = estimate_tokens(JUDGE_PROMPT.format(answer="", question=c.question)) + 8
        in_tok = sum(frame + estimate_tokens(t) for t in todo) + unknown * (frame + spec.max_tokens)
        calls = len(todo) + unknown
        rows.append((f"judge: {c.name}", model, calls, len(known) - len(todo), in_tok, calls * c.max_tokens))
    return rows


def outcomes(
    checks: Sequence[Check],
    texts: Sequence[str],
    sampler: Any = None,
    *,
    seed: int = 0,
    arms: Sequence[str] | None = None,
) -> dict[str, list]:
    """``{check name: [outcome per text]}``: True/False (None: a judge's unparsed reply,
    or an answer that chose no option clearly), or the number of words. Judges need
    ``sampler``; choice checks the arm of each text (``arms``, default: the base)."""
    out: dict[str, list[Any]] = (
        dict(judge_outcomes(checks, texts, sampler, seed=seed)) if any(c.model_graded for c in checks) else {}
    )
    where = list(arms) if arms is not None else [None] * len(texts)
    for c in checks:
        if not c.model_graded:
            out[c.name] = [c.outcome(t, a) for t, a in zip(texts, where, strict=True)]
    return {c.name: out[c.name] for c in checks}


# --------------------------------------------------------------------------- statistics
def _z(confidence: float) -> float:
    from scipy.stats import norm

    return float(norm.ppf(0.5 + confidence / 2))


def newcombe_interval(
    x1: int, n1: int, x2: int, n2: int, confidence: float = CONFIDENCE
) -> tuple[float, float]:
    """Newcombe's hybrid score interval (his method 10) for ``x2/n2 - x1/n1``.

    With Wilson intervals ``[l1, u1]`` and ``[l2, u2]`` of the two proportions and
    ``d = p2 - p1``: ``[d - sqrt((p2 - l2)² + (u1 - p1)²), d + sqrt((u2 - p2)² + (p1 - l1)²)]``.
    Counts as in :func:`wilson_interval`.
    """
    x1, n1 = _count_iv(x1, n1, "x1", "n1")
    x2, n2 = _count_iv(x2, n2, "x2", "n2")
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
    does, p = 1. Counts as in :func:`wilson_interval`.
    """
    from scipy.stats import boschloo_exact, fisher_exact

    x1, n1 = _count_iv(x1, n1, "x1", "n1")
    x2, n2 = _count_iv(x2, n2, "x2", "n2")

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
    p = (1 + #as extreme) / (1 + B), never 0.

    ``n_permutations`` lies in [1, 10⁸] (the bound of :func:`dbpa_core.dbpa_test`) and,
    times the answers, at most 10¹⁰ (about two minutes of one core).
    """
    from scipy.stats import permutation_test

    from .permutation import check_permutations

    n_permutations = check_permutations(n_permutations)
    size = len(a) + len(b)
    if n_permutations * size > MAX_PERMUTATION_WORK:
        raise ValueError(
            f"`n_permutations` must be <= {max(1, MAX_PERMUTATION_WORK // max(1, size)):_} for "
            f"{size:_} answers, got {n_permutations:_}: each permutation averages every answer, "
            f"and {MAX_PERMUTATION_WORK:.0e} steps take about two minutes of one core."
        )

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


# --------------------------------------------------------------------------- stratified
EXACT_STRATIFIED_MAX_N = 50_000  # answers in all strata; beyond, the CMH chi-square test


def _stratum(x1: int, n1: int, x2: int, n2: int) -> tuple[int, np.ndarray]:
    """The null distribution of ``x2`` given the stratum's margins: (smallest value, pmf)."""
    from scipy.stats import hypergeom

    m = x1 + x2
    lo, hi = max(0, m - n1), min(m, n2)
    support = np.arange(lo, hi + 1)
    return lo, hypergeom.pmf(support, n1 + n2, m, n2)


def stratified_exact_test(tables: Sequence[tuple[int, int, int, int]]) -> float:
    """Two-sided exact test of "no difference in any stratum" over 2 x 2 tables.

    Each table is ``(x1, n1, x2, n2)``: ``x1`` of ``n1`` answers pass in the base arm and
    ``x2`` of ``n2`` in the perturbed arm of one case. Given every table's margins, the
    perturbed arm's passes ``x2`` follow a hypergeometric law under H0 (a common odds ratio
    of 1: the perturbation changes no case's rate); their sum ``T`` follows the
    convolution of those laws. The p-value is the probability of every ``T`` no more
    likely than the one observed (Fisher's rule, with a relative tolerance of 1e-7), the
    exact conditional test of Mantel and Haenszel's hypothesis (Mehta, Patel & Gray,
    1985). With one table it is Fisher's exact test. Tables whose margins leave one value
    (every answer passes, or none) carry no information and change nothing.

    Examples
    --------
    >>> round(stratified_exact_test([(1, 10, 8, 10)]), 5)  # Fisher's exact test
    0.00548
    """
    dist = np.ones(1)
    start = observed = 0
    for x1, n1, x2, n2 in tables:
        if n1 < 1 or n2 < 1:
            continue
        lo, pmf = _stratum(x1, n1, x2, n2)
        dist = np.convolve(dist, pmf)
        start += lo
        observed += x2
    p_obs = dist[observed - start]
    p = float(dist[dist <= p_obs * (1 + 1e-7)].sum())
    return min(1.0, max(p, float(p_obs)))


def cmh_test(tables: Sequence[tuple[int, int, int, int]]) -> tuple[float, float]:
    """The Cochran–Mantel–Haenszel test over 2 x 2 tables ``(x1, n1, x2, n2)``:
    ``(chi-square statistic, p)``, one degree of freedom, with the continuity correction.

    ``χ² = (|Σ (x2 - E x2)| - ½)² / Σ Var x2`` with, per table of ``N = n1 + n2``
    answers of which ``m = x1 + x2`` pass, ``E x2 = n2 m / N`` and
    ``Var x2 = n1 n2 m (N - m) / (N² (N - 1))``. When no table varies, p = 1.
    """
    from scipy.stats import chi2

    dev = var = 0.0
    for x1, n1, x2, n2 in tables:
        n, m = n1 + n2, x1 + x2
        if n1 < 1 or n2 < 1 or n < 2:
            continue
        dev += x2 - n2 * m / n
        var += n1 * n2 * m * (n - m) / (n * n * (n - 1))
    if var <= 0:
        return 0.0, 1.0
    stat = max(0.0, abs(dev) - 0.5) ** 2 / var
    return float(stat), float(chi2.sf(stat, 1))


def mantel_haenszel_odds_ratio(tables: Sequence[tuple[int, int, int, int]]) -> float | None:
    """The Mantel–Haenszel common odds ratio of passing in the perturbed arm against the
    base arm, ``Σ x2 (n1 - x1) / N / Σ x1 (n2 - x2) / N`` (None when 0/0; inf when only the
    numerator is positive)."""
    num = den = 0.0
    for x1, n1, x2, n2 in tables:
        n = n1 + n2
        if n1 < 1 or n2 < 1:
            continue
        num += x2 * (n1 - x1) / n
        den += x1 * (n2 - x2) / n
    if den == 0:
        return None if num == 0 else math.inf
    return num / den


def pooled_rate_test(tables: Sequence[tuple[int, int, int, int]]) -> dict[str, Any]:
    """A rate check pooled over the cases of a suite: the rate of each arm over all its
    answers with Wilson intervals, the difference with Newcombe's interval, the
    stratified test over the cases (exact while the cases hold at most
    :data:`EXACT_STRATIFIED_MAX_N` answers, else Cochran–Mantel–Haenszel), the CMH
    statistic and the Mantel–Haenszel odds ratio."""
    used = [t for t in tables if t[1] >= 1 and t[3] >= 1]
    x1, n1 = sum(t[0] for t in used), sum(t[1] for t in used)
    x2, n2 = sum(t[2] for t in used), sum(t[3] for t in used)
    out: dict[str, Any] = {
        "cases": len(used),
        "base_count": x1,
        "base_n": n1,
        "count": x2,
        "n": n2,
        "base": x1 / n1 if n1 else None,
        "value": x2 / n2 if n2 else None,
        "base_ci": list(wilson_interval(x1, n1)) if n1 else None,
        "value_ci": list(wilson_interval(x2, n2)) if n2 else None,
        "interval": "newcombe",
    }
    if not used:
        return out
    stat, p_cmh = cmh_test(used)
    exact = n1 + n2 <= EXACT_STRATIFIED_MAX_N
    out.update(
        difference=x2 / n2 - x1 / n1,
        ci=list(newcombe_interval(x1, n1, x2, n2)),
        cmh_statistic=stat,
        cmh_p_value=p_cmh,
        odds_ratio=mantel_haenszel_odds_ratio(used),
        p_value=stratified_exact_test(used) if exact else p_cmh,
        test="exact stratified" if exact else "cmh",
    )
    return out


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
            f"{head}, {signed(self.difference * scale, digits)} {unit} "
            f"[{signed(lo * scale, digits)}, {signed(hi * scale, digits)}], "
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


def signed(v: float, digits: int) -> str:
    """``v`` with its sign and ``digits`` decimals (``+0.12``, ``-3``), no sign on a zero."""
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
    sampler: Any = None,
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
    arms = [g.name for g in groups for _ in g.texts]
    found = outcomes(checks, texts, sampler, seed=seed, arms=arms)
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
                signed(r.difference * scale, digits),
                f"[{signed(r.ci[0] * scale, digits)}, {signed(r.ci[1] * scale, digits)}]",
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
    "EXPECT_CHECK",
    "JUDGE_PROMPT",
    "KINDS",
    "REFUSAL_PATTERNS",
    "Check",
    "CheckResult",
    "Group",
    "audit_checks",
    "case_checks",
    "check_audit",
    "check_texts",
    "checks_csv",
    "checks_from_dicts",
    "checks_table",
    "cmh_test",
    "compare",
    "exact_test",
    "fill_check",
    "is_refusal",
    "judge_outcomes",
    "mantel_haenszel_odds_ratio",
    "newcombe_interval",
    "outcomes",
    "parse_checks",
    "parse_yes_no",
    "parses_as_json",
    "permutation_p",
    "pooled_rate_test",
    "stratified_exact_test",
    "welch_interval",
    "wilson_interval",
    "word_count",
]
