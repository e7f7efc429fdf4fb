"""The audit spec's schema, declared once: keys, types, bounds, defaults and help texts.

:class:`AuditSpecModel` (and the sections it holds) is what :func:`dbpa_core.spec.parse_spec`
validates a spec against, and what :func:`json_schema` exports for editors: a YAML file
that starts with ::

    # yaml-language-server: $schema=spec.schema.json

(a path relative to the spec, an absolute path or a URL) is checked as it is typed
(completion, hover help, red underlines) by editors that run the YAML language server
(VS Code's YAML extension, Neovim, Helix, Zed, ...).
``dbpa schema --out spec.schema.json`` writes the file; a copy ships in the package
(``dbpa_core/schemas/spec.schema.json``).

Pydantic's errors are turned into the spec's own messages, with the YAML line that is
wrong, by :func:`validate_section`. The checks that relate several keys (a perturbation
needs a prompt, ``all: true`` goes with ``contains``, a replay file must exist, ...) stay
in :mod:`dbpa_core.spec`, :mod:`dbpa_core.checks` and :mod:`dbpa_core.cases`.
"""

from __future__ import annotations

import difflib
import json
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SkipValidation,
    StringConstraints,
    TypeAdapter,
    ValidationError,
    model_validator,
)
from pydantic.config import JsonDict
from pydantic.fields import FieldInfo

from .measures import DEFAULT_MEASURE, MEASURES, NULLS
from .multitest import METHODS

# the kinds of answer check (one key each in a check) and the judge's longest reply
KINDS = ("contains", "absent", "regex", "refusal", "words", "json", "choice", "judge")
JUDGE_MAX_TOKENS = 16

BACKENDS = ("local", "openai", "hf", "replay")
EMBEDDER_BACKENDS = ("local", "sentence-transformers", "openai", "bleu", "rouge1", "rouge2", "rougeL")
ROLES = ("control", "target")
ATTACK_LEVELS = ("char", "word", "visual")  # dbpa_core.attacks.text.LEVELS (tested equal)
SCHEMA_FILE = Path(__file__).parent / "schemas" / "spec.schema.json"

# Literal types built from the registries, so a new measure or backend is known here too
# (for mypy, which cannot read a Literal built at run time, they are text)
if typing.TYPE_CHECKING:
    Backend = str
    EmbedderBackend = str
    Measure = str
    Correction = str
    Null = str
    Role = str
    AttackLevel = str
else:
    Backend = Literal[BACKENDS]
    EmbedderBackend = Literal[EMBEDDER_BACKENDS]
    Measure = Literal[tuple(MEASURES)]
    Correction = Literal[METHODS]
    Null = Literal[NULLS]
    Role = Literal[ROLES]
    AttackLevel = Literal[ATTACK_LEVELS]


@dataclass(frozen=True)
class Msg:
    """A message of the spec's own for errors of one key (``Annotated`` metadata).

    ``text`` is formatted with ``path`` (``checks[0].regex``), ``key``, ``value`` (what the
    spec gave) and ``label`` (the name of the entry that holds the key). ``deep``: also for
    errors inside the value (a list's items); ``types``: only for these pydantic error
    types; ``up``: report the line of the key's parent (a missing key has no line).
    """

    text: str
    deep: bool = False
    types: tuple[str, ...] | None = None
    up: int = 0


def keys_of(cls: type[BaseModel]) -> set[str]:
    """The keys a section of the spec accepts."""
    return {info.alias or name for name, info in cls.model_fields.items()}


def _drop_nulls(data: Any) -> Any:
    """``key: null`` (or ``key:`` with nothing) means the default, as if the key were not
    written: a required key that is null is missing."""
    if isinstance(data, dict):
        return {k: v for k, v in data.items() if v is not None}
    return data


class Section(BaseModel):
    """A mapping of the spec: unknown keys are refused, values are not converted (text is
    not a number, ``yes`` is not text), ``null`` means the default."""

    model_config = ConfigDict(strict=True, extra="forbid", protected_namespaces=())
    what: ClassVar[str] = "{path}"  # how messages name the mapping

    @classmethod
    def entry_label(cls, obj: dict, n: int) -> str:
        """The entry's name in messages (a check's or a perturbation's ``name``)."""
        return ""

    @model_validator(mode="before")
    @classmethod
    def _nulls(cls, data: Any) -> Any:
        return _drop_nulls(data)


def number_field(kind: type, default: Any, description: str, **bounds: Any) -> Any:
    """A numeric key: strict type, bounds, never NaN or infinite."""
    kw: dict[str, Any] = dict(bounds)
    if kind is float:
        kw["allow_inf_nan"] = False
    return Field(default, description=description, **kw)


NonBlank = Annotated[str, StringConstraints(pattern=r"\S")]
TwoTexts = Annotated[list[NonBlank], Field(min_length=2, max_length=2)]
"""Two texts (or column names) that change places: ``swap`` and ``swap_text``."""


# --------------------------------------------------------------------------- models
class Connection(Section):
    """The keys shared by a model and an embedder that call a server."""

    backend: str = Field("local", description="Where the answers come from.")
    name: str | None = Field(
        None,
        description=(
            "The model's name as its server knows it (backend openai, e.g. gpt-4o-mini), or the "
            "embedding model's name."
        ),
    )
    path: str | None = Field(
        None,
        description=(
            "A model folder on this machine (backend hf: a Hugging Face model; embedder "
            "sentence-transformers), relative to the spec's folder."
        ),
    )
    base_url: str | None = Field(
        None,
        description=(
            "The server's URL for an OpenAI-compatible API, e.g. http://localhost:8000/v1 (vLLM, "
            "Ollama, LM Studio, Azure, ...). Default: OpenAI's."
        ),
    )
    api_key_env: str | None = Field(
        None,
        description=(
            "The name of the environment variable that holds the API key (never the key itself), "
            "e.g. OPENAI_API_KEY. Other names than an LLM provider's key variables (or DBPA_*) "
            "must be allowed by you: --allow-key-env NAME, allow_key_env in your settings file or "
            "$DBPA_ALLOW_KEY_ENV."
        ),
    )
    concurrency: int = number_field(int, None, "Requests sent at the same time (default 8).", ge=1, le=256)
    max_retries: int = number_field(
        int, None, "Retries of a request that failed: rate limits, server errors (default 6).", ge=0, le=20
    )
    timeout: float = number_field(
        float, None, "Seconds a whole request may take (default 60).", ge=0.1, le=86_400
    )
    max_retry_wait: float = number_field(
        float, None, "The longest wait, in seconds, before a retry (default 60).", ge=0.0, le=86_400
    )
    max_response_mb: float = number_field(
        float,
        None,
        "The largest response accepted from the server, in MB (default 8 for a model, 64 for an embedder).",
        ge=0.01,
        le=4096,
    )


class ModelEntry(Connection):
    """One model: where its answers come from and how it is sampled."""

    what: ClassVar[str] = "{path}"
    backend: Backend = Field(
        "local",
        description=(
            "local: the embedded SmolLM2 (offline); openai: any OpenAI-compatible server; hf: a "
            "Hugging Face model folder ('path'); replay: answers recorded in a JSON-lines file "
            "('file')."
        ),
    )
    label: str | None = Field(None, description="The name shown in results and reports.")
    file: str | None = Field(
        None,
        description=(
            "backend replay: a UTF-8 JSON-lines file of recorded answers, one "
            '{"prompt", "response", "model"?} per line, relative to the folder of the spec.'
        ),
    )
    n_per_request: int = number_field(
        int, None, "backend openai: answers asked for in one request (the API's n; default 1).", ge=1, le=128
    )
    batch_size: int = number_field(
        int,
        None,
        "backends local and hf: at most this many answers "
        "decoded together (default 64, within a memory budget).",
        ge=1,
        le=256,
    )
    temperature: float = number_field(
        float,
        None,
        (
            "This model's sampling temperature, overriding the spec's (the same weights sampled "
            "at another temperature make a model variant)."
        ),
        ge=0.0,
        le=2.0,
    )


class Embedder(Connection):
    """What turns answers into vectors (or, for bleu and rouge, compares them as text)."""

    what: ClassVar[str] = "embedder"
    backend: EmbedderBackend = Field(
        "local",
        description=(
            "local: the embedded MiniLM (offline); sentence-transformers: a model folder "
            "('path'); openai: an embeddings API ('name', 'base_url', 'api_key_env'); bleu, rouge1, "
            "rouge2, rougeL: text similarity instead of embeddings."
        ),
    )


def _base_text(value: Any) -> Any:
    return {"prompt": value} if isinstance(value, str) else value


class Base(Section):
    """The prompt every perturbation is compared with."""

    what: ClassVar[str] = "base"
    prompt: str = Field(
        description=(
            "The base prompt. With 'cases', a template whose {column} placeholders are filled from each case."
        )
    )
    system_prompt: str | None = Field(
        None, description="A system prompt for the base (and, unless they give their own, the perturbations)."
    )


class PromptAttack(Section):
    """The battery's seeded text attacks as one perturbation: each word of the prompt
    attacked with probability rho."""

    what: ClassVar[str] = "attack"
    level: AttackLevel = Field(
        description=(
            "char: typos (a character repeated, deleted or inserted); word: words inserted, "
            "deleted or replaced (needs WordNet); visual: letters replaced by look-alike "
            "characters (homoglyphs)."
        )
    )
    rho: float = number_field(
        float, ..., "ρ: the share of the prompt's words attacked, in [0, 1].", ge=0.0, le=1.0
    )
    seed: int = Field(0, description="Seed of the attack (with 'cases': drawn afresh for each case from it).")
    op: str | None = Field(
        None,
        description=(
            "Only this operation (char: repeat, delete, insert; word: insert, delete, replace; "
            "visual: homoglyph). Default: drawn for each attacked word."
        ),
    )
    letters: float | None = number_field(
        float, None, "visual: r, the fraction of a word's letters replaced (default 0.5).", ge=0.01, le=1.0
    )


class Perturbation(Section):
    """One change of the base prompt, tested against the base."""

    what: ClassVar[str] = "perturbation {n}"

    @classmethod
    def entry_label(cls, obj: dict, n: int) -> str:
        name = obj.get("name")
        return name if isinstance(name, str) and name else f"perturbation-{n}"

    name: str | None = Field(None, description="A short name, unique in the spec (default: perturbation-N).")
    prompt: str | None = Field(
        None,
        description=(
            "The perturbed prompt (with 'cases': a template filled from each case). Give it, or "
            "'prefix'/'suffix'."
        ),
    )
    prefix: str | None = Field(None, description="Text put before the base prompt.")
    suffix: str | None = Field(None, description="Text put after the base prompt.")
    system_prompt: str | None = Field(None, description="Its own system prompt (default: the base's).")
    role: Role | None = Field(
        None,
        description=(
            "control: a change that should not change the answers (a name, a harmless "
            "rewording); target: one that should. dbpa audit --fail-on control|target gates on "
            "them."
        ),
    )
    set: (
        Annotated[
            dict[str, str | int | float],
            Field(min_length=1),
            Msg(
                "perturbation {label!r}: 'set' maps a column to its new value (text or a number), "
                "e.g. set: {{name: Ahmed}}",
                deep=True,
            ),
        ]
        | None
    ) = Field(
        None,
        description=(
            "With 'cases': columns changed in every case before the prompt is filled, e.g. "
            "{name: Ahmed} (a covariate change)."
        ),
    )
    swap: (
        Annotated[
            TwoTexts,
            Msg(
                "perturbation {label!r}: 'swap' names two columns whose values change places, "
                "e.g. swap: [name1, name2]",
                deep=True,
            ),
        ]
        | None
    ) = Field(
        None,
        description=(
            "With 'cases': two columns whose values change places in every case, e.g. "
            "[name1, name2] (the two people of a question in the other order)."
        ),
    )
    swap_text: (
        Annotated[
            TwoTexts,
            Msg(
                "perturbation {label!r}: 'swap_text' names two pieces of text that change "
                "places in the prompt, e.g. swap_text: [the grandfather, the grandson]",
                deep=True,
            ),
        ]
        | None
    ) = Field(
        None,
        description=(
            "With 'cases': two pieces of text that change places wherever they occur in the "
            "filled prompt ({column} placeholders allowed), e.g. [the grandfather, the grandson]."
        ),
    )
    reorder: (
        Annotated[
            Literal["reverse", "rotate", "shuffle"],
            Msg("perturbation {label!r}: 'reorder' is reverse, rotate or shuffle, got {value!r}", deep=True),
        ]
        | None
    ) = Field(
        None,
        description=(
            "With 'options': show each case's options in another order: reverse, rotate (the "
            "first goes last) or shuffle (an order drawn per case from the seed)."
        ),
    )
    attack: PromptAttack | None = Field(
        None,
        description=(
            "The prompt attacked by the robustness battery's typo, word or homoglyph attack at "
            "one rate, e.g. {level: char, rho: 0.1} (with 'cases': each case's prompt, seeded per "
            "case)."
        ),
    )


class CasesFile(Section):
    what: ClassVar[str] = "cases"
    file: str = Field(
        description="A .csv (with a header row) or .jsonl file of cases, relative to the spec's folder."
    )


Scalar = str | int | float | bool


class Judge(Section):
    """A yes/no question about each answer, asked to a judge model."""

    what: ClassVar[str] = "the judge of check {parent_label!r}"
    model: Annotated[
        ModelEntry,
        Msg(
            "check {parent_label!r}: the judge needs a 'model' (a model entry, such as "
            "{{backend: openai, name: gpt-4o-mini}})",
            types=("missing",),
            up=1,
        ),
    ] = Field(description="The judge model (a model entry, e.g. {backend: openai, name: gpt-4o-mini}).")
    question: str = Field(
        description="The question about the answer, to be answered yes or "
        "no, e.g. 'Does the answer recommend a statin?'."
    )
    max_tokens: int = number_field(
        int, JUDGE_MAX_TOKENS, "The longest reply of the judge, in tokens.", ge=1, le=100_000
    )


_TERMS = Msg(
    "check {label!r}: '{key}' must be a list of words or phrases (not empty), such "
    "as {key}: [statin, atorvastatin]",
    deep=True,
)
_TRUE = Msg("check {label!r}: write '{key}: true' ({path} is {value!r})", deep=True)
_FLAG = Msg("check {label!r}: '{key}' must be true or false, got {value!r}", deep=True)
Terms = Annotated[NonBlank | Annotated[list[NonBlank], Field(min_length=1)], _TERMS]
_ONE_KIND: JsonDict = {"oneOf": [{"required": [k]} for k in KINDS]}


class Check(Section):
    """An answer check: each answer passes or not (words: a number per answer)."""

    model_config = ConfigDict(json_schema_extra=_ONE_KIND)
    what: ClassVar[str] = "check {n}"

    @classmethod
    def entry_label(cls, obj: dict, n: int) -> str:
        name = obj.get("name")
        return name.strip() if isinstance(name, str) else ""

    name: str = Field(description="A short name, unique among the checks.")
    contains: Terms | None = Field(
        None,
        description=(
            "Passes when the answer holds any of these words or phrases (all of them with "
            "'all: true'); case-insensitive unless case_sensitive."
        ),
    )
    absent: Terms | None = Field(
        None, description="Passes when the answer holds none of these words or phrases."
    )
    regex: (
        Annotated[
            str,
            Field(min_length=1),
            Msg("check {label!r}: 'regex' must be a non-empty pattern (text)", deep=True),
        ]
        | None
    ) = Field(
        None,
        description="Passes when this regular expression matches somewhere in the answer "
        "(case-insensitive unless case_sensitive).",
    )
    refusal: Annotated[Literal[True], _TRUE] | None = Field(
        None, description="Passes when the answer refuses (declines to do what was asked)."
    )
    words: Annotated[Literal[True], _TRUE] | None = Field(
        None, description="The answer's number of words (a number, compared by its mean)."
    )
    json_: Annotated[Literal[True], _TRUE] | None = Field(
        None, alias="json", description="Passes when the whole answer is JSON."
    )
    choice: (
        Annotated[
            str,
            StringConstraints(pattern=r"\S"),
            Msg(
                "check {label!r}: 'choice' is the text of an option, e.g. choice: \"{{unknown}}\"", deep=True
            ),
        ]
        | None
    ) = Field(
        None,
        description=(
            "Passes when the answer chose this option (read from the answer by the battery's "
            "answer parser, not as a substring); a template such as '{unknown}', filled per case. "
            "Needs 'options'."
        ),
    )
    judge: Judge | None = Field(
        None,
        description=(
            "Asks a judge model a yes/no question about each answer (model-graded: only as "
            "reliable as the judge)."
        ),
    )
    all: Annotated[bool, _FLAG] = Field(
        False, description="contains: pass only when every word or phrase is there."
    )
    case_sensitive: Annotated[bool, _FLAG] = Field(
        False, description=("contains, absent, regex: match upper and lower case exactly.")
    )


Checks = Annotated[
    list[Check],
    Msg(
        "'checks' must be a list of checks, each with a 'name' and one of " + ", ".join(KINDS),
        types=("list_type",),
    ),
]


class Price(Section):
    input: float = number_field(float, None, "$ per 1M prompt tokens.", ge=0)
    output: float = number_field(float, None, "$ per 1M answer tokens.", ge=0)


_PRICES = Msg("'prices' maps a model name to {{input: $ per 1M tokens, output: $ per 1M tokens}}", deep=True)
Prices = Annotated[dict[str, Price], _PRICES]


class SequentialSamplingEntry(Section):
    """``sequential_sampling`` as a mapping: the looks, their weights, the futility bound's
    confidence (each left out takes its default)."""

    what: ClassVar[str] = "'sequential_sampling'"
    looks: list[Annotated[int, Field(ge=2)]] | None = Field(
        None,
        description=(
            "Answers per arm at each look, increasing, the last equal to 'samples' (default: 12, "
            "18, then doubling up to 'samples': 12, 18, 40 at 40)."
        ),
    )
    weights: list[Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]] | None = Field(
        None,
        description=(
            "The share of α each look may spend, one per look, summing to 1 (default: half on "
            "the last look, the rest shared equally)."
        ),
    )
    confidence: float = number_field(
        float,
        0.95,
        "Confidence of the upper bound of the effect above chance behind a stop for futility "
        "(with min_effect), over all the looks together.",
        gt=0.5,
        lt=1.0,
    )


def _sequential_switch(value: Any) -> Any:
    """``sequential_sampling: true`` is the mapping with every default; false is off."""
    if value is True:
        return {}
    return None if value is False else value


# The keys audit and battery specs share: (type, default, help, bounds), declared once
_SHARED: dict[str, tuple[type, Any, str, dict[str, Any]]] = {
    "samples": (
        int,
        20,
        "k: answers drawn per prompt (more answers find smaller changes).",
        {"ge": 2, "le": 10_000},
    ),
    "temperature": (float, 0.8, "Sampling temperature of the answers.", {"ge": 0.0, "le": 2.0}),
    "top_p": (
        float,
        1.0,
        "Nucleus sampling: the share of probability mass sampled from.",
        {"ge": 0.01, "le": 1.0},
    ),
    "max_tokens": (int, 300, "The longest answer, in tokens.", {"ge": 1, "le": 100_000}),
    "permutations": (
        int,
        2000,
        "B: permutations of each test (the smallest p-value is 1/(B+1)).",
        {"ge": 1, "le": 10_000_000},
    ),
    "alpha": (float, 0.05, "The significance level α.", {"ge": 1e-9, "le": 0.999}),
    "seed": (
        int,
        0,
        "Seed of the sampling and the permutations: the same seed gives the same results.",
        {"ge": 0},
    ),
}
_UNSET: Any = object()


def shared(key: str, default: Any = _UNSET, description: str | None = None) -> Any:
    """The field of a key that audit and battery specs share (a battery changes some
    defaults, and says so in its help)."""
    if key == "measure":
        return Field(
            DEFAULT_MEASURE,
            description=(
                "How two sets of answers are compared: "
                + "; ".join(f"{k}: {m.description}" for k, m in MEASURES.items())
                + "."
            ),
        )
    kind, value, text, bounds = _SHARED[key]
    return number_field(kind, value if default is _UNSET else default, description or text, **bounds)


class AuditSpecModel(Section):
    """An audit spec (dbpa audit SPEC.yaml): a base prompt and perturbations of it
    (or several models) whose answers are compared with permutation tests."""

    model_config = ConfigDict(title="dbpa audit spec")
    what: ClassVar[str] = "the spec"

    name: str | None = Field(None, description="The audit's name (default: the file's name).")
    description: str = Field("", description="What the audit is for, in a sentence or two.")
    model: ModelEntry = Field(
        default_factory=lambda: ModelEntry.model_validate({}),
        description=("The model whose answers are tested (default: the embedded SmolLM2, offline)."),
    )
    models: (
        Annotated[
            list[ModelEntry],
            Field(min_length=2),
            Msg(
                "'models' must list at least 2 models; the first is the reference",
                types=("list_type", "too_short"),
            ),
        ]
        | None
    ) = Field(
        None,
        description=(
            "A model comparison instead of perturbations: each model answers the base prompt "
            "and is tested against the first (the reference)."
        ),
    )
    embedder: Embedder = Field(
        default_factory=lambda: Embedder.model_validate({}),
        description=("What turns answers into vectors (default: the embedded MiniLM, offline)."),
    )
    base: Annotated[
        Base,
        BeforeValidator(_base_text, json_schema_input_type=str | Base),
        Msg("missing 'base' with the base prompt (base: {{prompt: ...}})", types=("missing",), up=1),
    ] = Field(description="The base prompt: text, or {prompt, system_prompt}.")
    system_prompt: str | None = Field(
        None, description="A system prompt for every prompt (base.system_prompt wins)."
    )
    cases: Annotated[CasesFile | list[dict[str, Scalar]], SkipValidation] | None = Field(
        None,
        description=(
            "A suite: rows whose columns fill the {column} placeholders of the prompts; a file "
            "({file: cases.csv} or .jsonl) or a list of mappings. Every perturbation is tested "
            "on every case."
        ),
    )
    options: (
        Annotated[
            list[NonBlank],
            Field(min_length=2, max_length=26),
            Msg(
                "'options' lists each case's answer options (2 to 26 texts or templates), "
                'e.g. options: ["{{ans0}}", "{{ans1}}"]',
                deep=True,
            ),
        ]
        | None
    ) = Field(
        None,
        description=(
            "With 'cases': each case's answer options, templates over its columns such as "
            "'{ans0}'. The placeholder {options} in a prompt shows them as lines 'A) ...', "
            "'B) ...'; 'choice' checks and 'reorder' perturbations read them."
        ),
    )
    expect: (
        Annotated[
            str,
            StringConstraints(pattern=r"\S"),
            Msg("'expect' must be a text or template, e.g. \"{{answer}}\""),
        ]
        | None
    ) = Field(
        None,
        description=(
            "With 'cases': each case's expected answer, a template such as '{unknown}'. It "
            "adds the check 'expected answer' (a choice check with 'options', else contains): "
            "each arm's accuracy."
        ),
    )
    perturbations: Annotated[
        list[Perturbation], Msg("'perturbations' must be a list", types=("list_type",))
    ] = Field(default_factory=list, description="The changes of the base prompt to test.")
    prices: Prices = Field(
        default_factory=dict,
        description=(
            "Prices for dbpa estimate: a model name to {input, output} in $ per 1M tokens "
            "(default: a built-in table)."
        ),
    )
    measure: Measure = shared("measure")
    samples: int = shared("samples")
    temperature: float = shared("temperature")
    top_p: float = shared("top_p")
    max_tokens: int = shared("max_tokens")
    permutations: int = shared("permutations")
    correction: Correction | None = Field(
        None,
        description=(
            "Multiple-testing correction over the perturbations: none, bonferroni, holm or bh "
            "(Benjamini-Hochberg). Default: holm, or bh for a suite ('cases')."
        ),
    )
    alpha: float = shared("alpha")
    seed: int = shared("seed")
    sequential: int | None = number_field(
        int,
        None,
        (
            "h of the Besag-Clifford early stop: the permutations of a test stop once h of them "
            "reach the observed statistic (a clear null stops after a few dozen). Default: all "
            "B permutations."
        ),
        ge=1,
    )
    sequential_sampling: Annotated[
        SequentialSamplingEntry | None,
        BeforeValidator(_sequential_switch, json_schema_input_type=bool | SequentialSamplingEntry),
        Msg(
            "'sequential_sampling' must be true, false or a mapping of looks, weights and confidence",
            types=("model_type", "model_attributes_type", "dict_type"),
        ),
    ] = Field(
        None,
        description=(
            "Draw the answers in rounds (k = 12, 18, 36, ... up to 'samples') and stop each test "
            "as soon as it is significant (or, with min_effect, shown smaller than it), with a "
            "test that stays valid at every look: true, or a mapping of looks, weights, "
            "confidence."
        ),
    )
    null: Null = Field(
        "base",
        description=(
            "Where P0 comes from for jsd, wasserstein and ks: base (the papers' test, "
            "asymmetric) or pooled (both groups, symmetric)."
        ),
    )
    min_effect: float | None = number_field(
        float,
        None,
        (
            "δ, the minimum effect of interest (in units of ω above chance): results then say "
            "whether each effect above chance exceeds it."
        ),
        ge=0.0,
    )
    checks: Checks | None = Field(
        None,
        description=(
            "Answer checks: what changed, in your own terms (a word present, a refusal, the "
            "length, valid JSON, a judge's yes/no)."
        ),
    )


# --------------------------------------------------------------------------- validation
@dataclass
class _Frame:
    """A mapping of the spec met on the way to an error: its model, what the spec gave,
    where it is."""

    cls: type[Section]
    obj: Any
    loc: tuple

    @property
    def n(self) -> int:
        return self.loc[-1] + 1 if self.loc and isinstance(self.loc[-1], int) else 0

    @property
    def label(self) -> str:
        return self.cls.entry_label(self.obj if isinstance(self.obj, dict) else {}, self.n)


@dataclass
class _Walk:
    """Where a pydantic error's ``loc`` leads in the models (and in the spec's data)."""

    frames: list[_Frame]
    msgs: list[tuple[Msg, tuple, int]]  # a message, where it is attached, frames above it
    loc: tuple  # the spec's path of the error (union members left out)
    done: bool  # the whole loc was followed
    leaf: Any  # the type at ``loc``


def _unwrap(tp: Any, meta: list) -> Any:
    """``tp`` without Annotated (its metadata go to ``meta``) and without ``| None``."""
    while True:
        if typing.get_origin(tp) is Annotated:
            meta.extend(tp.__metadata__)
            tp = tp.__origin__
            continue
        args = typing.get_args(tp)
        if _is_union(tp) and type(None) in args and len(args) == 2:
            tp = next(a for a in args if a is not type(None))
            continue
        return tp


def _is_union(tp: Any) -> bool:
    import types

    return typing.get_origin(tp) in (typing.Union, types.UnionType)


def _walk(root: Any, data: Any, loc: tuple) -> _Walk:
    frames: list[_Frame] = []
    msgs: list[tuple[Msg, tuple, int]] = []
    tp, here, i = root, tuple[Any, ...](), 0
    while True:
        meta: list = []
        tp = _unwrap(tp, meta)
        msgs += [(m, here, len(frames)) for m in meta if isinstance(m, Msg)]
        is_model = isinstance(tp, type) and issubclass(tp, Section)
        if is_model:
            frames.append(_Frame(tp, data, here))
        if i >= len(loc) or _is_union(tp):
            return _Walk(frames, msgs, here, i >= len(loc), tp)
        step = loc[i]
        origin = typing.get_origin(tp)
        if is_model:
            info = _field(tp, step)
            if info is None:  # an unknown key
                return _Walk(frames, msgs, here + (step,), True, None)
            meta = list(info.metadata)
            msgs += [(m, here + (step,), len(frames)) for m in meta if isinstance(m, Msg)]
            tp = info.annotation
        elif origin in (list, tuple) and isinstance(step, int):
            tp = typing.get_args(tp)[0]
        elif origin is dict:
            tp = typing.get_args(tp)[1]
        else:
            return _Walk(frames, msgs, here, False, tp)
        data = _child(data, step)
        here, i = here + (step,), i + 1


def _field(cls: type[Section], key: Any) -> FieldInfo | None:
    for name, info in cls.model_fields.items():
        if key == (info.alias or name):
            return info
    return None


def _child(data: Any, step: Any) -> Any:
    if isinstance(data, dict):
        return data.get(step)
    if isinstance(data, list) and isinstance(step, int) and step < len(data):
        return data[step]
    return None


def _choose(errors: list) -> dict:
    """The error the spec reports: the first one, unless a mapping on its way has an unknown
    key (a mapping's keys are checked before its values)."""
    first = errors[0]
    loc = tuple(first["loc"])
    unknown = [
        e
        for e in errors
        if e["type"] in ("extra_forbidden", "invalid_key")
        and loc[: len(e["loc"]) - 1] == tuple(e["loc"][:-1])
    ]
    return min(unknown, key=lambda e: len(e["loc"])) if unknown else first


def _name(path: tuple) -> str:
    return ".".join(str(p) if not isinstance(p, int) else f"[{p}]" for p in path).replace(".[", "[")


def _what(frame: _Frame, frames: list[_Frame], prefix: tuple) -> str:
    parent = frames[frames.index(frame) - 1] if frames.index(frame) else None
    return frame.cls.what.format(
        path=_name(prefix + frame.loc), n=frame.n, parent_label=parent.label if parent else ""
    )


def _shown_value(value: Any, leaf: Any) -> Any:
    """The value as a message shows it: a whole number given for a number key is a float."""
    if leaf is float and isinstance(value, int) and not isinstance(value, bool):
        try:
            return float(value)
        except OverflowError:
            return float("inf")
    return value


def _message(err: dict, walk: _Walk, prefix: tuple) -> tuple[tuple, str]:
    """(the spec's path to report the line of, the message) for one pydantic error."""
    kind, value = err["type"], err.get("input")
    path = prefix + walk.loc
    for msg, at, nframes in reversed(walk.msgs):
        if (msg.types is None or kind in msg.types) and (msg.deep or (walk.done and at == walk.loc)):
            frames = walk.frames[:nframes]
            label = frames[-1].label if frames else ""
            parent = frames[-2].label if len(frames) > 1 else ""
            full = prefix + at
            return full[: len(full) - msg.up], msg.text.format(
                path=_name(full), key=at[-1] if at else "", value=value, label=label, parent_label=parent
            )
    name = _name(path)
    if kind in ("extra_forbidden", "invalid_key"):
        frame = walk.frames[-1]
        key = walk.loc[-1]
        allowed = sorted(keys_of(frame.cls))
        hint = difflib.get_close_matches(str(key), allowed, n=1)
        extra = f" (did you mean {hint[0]!r}?)" if hint else f" (allowed: {', '.join(allowed)})"
        return path, f"unknown key {key!r} in {_what(frame, walk.frames, prefix)}{extra}"
    if kind == "missing":
        return path[:-1], f"missing {name}"
    if (
        kind in ("model_type", "model_attributes_type", "dict_type")
        and walk.frames
        and walk.frames[-1].loc == walk.loc
    ):
        return path, f"{_what(walk.frames[-1], walk.frames, prefix)} must be a mapping of keys to values"
    shown = _shown_value(value, walk.leaf)
    if kind.startswith("int_"):
        return path, f"{name} must be a whole number, got {value!r}"
    if kind == "finite_number" or (kind == "float_type" and shown is not value):
        return path, f"{name} must be a finite number, got {shown!r}"
    if kind.startswith("float_"):
        return path, f"{name} must be a number, got {value!r}"
    if kind.startswith("string_"):
        return path, f"{name} must be text, got {value!r}"
    ctx = err.get("ctx") or {}
    if kind in ("greater_than_equal", "greater_than"):
        return path, f"{name} must be >= {ctx.get('ge', ctx.get('gt'))}, got {shown!r}"
    if kind in ("less_than_equal", "less_than"):
        return path, f"{name} must be <= {ctx.get('le', ctx.get('lt'))}, got {shown!r}"
    if kind == "literal_error":
        choices = typing.get_args(walk.leaf) or ()
        return path, f"{name} must be one of {', '.join(map(str, choices))}; got {value!r}"
    if kind == "list_type":
        return path, f"{name} must be a list, got {value!r}"
    return path, f"{name}: {err['msg'][:1].lower()}{err['msg'][1:]}"


_ADAPTERS: dict[Any, TypeAdapter] = {}


def validate_section(doc: Any, tp: Any, data: Any, path: tuple = ()) -> Any:
    """``data`` (the part of a spec at ``path``) validated against ``tp`` (a model of this
    module, or a type such as :data:`Prices`), or the spec's error for it: the spec's own
    words and the line that is wrong (``doc`` is :class:`dbpa_core.spec._Doc`)."""
    adapter = _ADAPTERS.get(tp)
    if adapter is None:
        adapter = _ADAPTERS[tp] = TypeAdapter(tp)
    try:
        return adapter.validate_python(data)
    except ValidationError as exc:
        err = _choose(exc.errors(include_url=False))
        at, message = _message(err, _walk(tp, data, tuple(err["loc"])), path)
        raise doc.err(at, message) from None


# --------------------------------------------------------------------------- JSON Schema
def json_schema() -> dict[str, Any]:
    """The audit spec's JSON Schema, for editors and other tools."""
    return export_schema(AuditSpecModel)


def export_schema(model: type[BaseModel]) -> dict[str, Any]:
    """``model``'s JSON Schema in draft-07 (``definitions``, a ``$ref`` alone in its
    object), which the YAML language server and most validators read; pydantic writes
    draft 2020-12."""
    schema = model.model_json_schema(by_alias=True, ref_template="#/definitions/{model}")
    schema["definitions"] = schema.pop("$defs", {})
    return {"$schema": "http://json-schema.org/draft-07/schema#", **_draft7(schema)}


def _draft7(node: Any) -> Any:
    """Draft-07 ignores the keys next to a ``$ref`` (a description, a default): move the
    reference into ``allOf`` so that they count."""
    if isinstance(node, list):
        return [_draft7(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: _draft7(v) for k, v in node.items()}
    if "$ref" in out and len(out) > 1:
        out["allOf"] = [{"$ref": out.pop("$ref")}]
    return out


def schema_text(schema: dict[str, Any] | None = None) -> str:
    """A JSON Schema (default: :func:`json_schema`) as the text of a shipped file."""
    return json.dumps(json_schema() if schema is None else schema, indent=2, ensure_ascii=False) + "\n"
