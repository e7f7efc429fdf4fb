"""The battery spec's schema (``dbpa attack SPEC.yaml``), declared once like the audit's
(:mod:`dbpa_core.spec_schema`): :func:`dbpa_core.attacks.spec.parse_attack_spec` checks a
spec against :class:`BatterySpecModel` first, and ``dbpa schema --battery`` exports it as a
JSON Schema for editors (``dbpa_core/schemas/attack.schema.json``).

The sections whose forms are many (``data``, ``consistency``, ``rti``, ``curve``, an
attack's ``rho``) are declared here for editors and checked, with their own messages, by
:mod:`dbpa_core.attacks.spec`.
"""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import ConfigDict, Field, SkipValidation

from ..spec_schema import (
    Correction,
    Embedder,
    Measure,
    ModelEntry,
    Msg,
    Prices,
    Section,
    export_schema,
    number_field,
    shared,
)
from .consistency import INSTRUCTIONS
from .items import DEFAULT_TEMPLATE, FORMATS
from .sample import DATASETS
from .text import LEVELS, OPS

SCHEMA_FILE = Path(__file__).resolve().parent.parent / "schemas" / "attack.schema.json"

if typing.TYPE_CHECKING:
    Level = str
    Format = str
    Dataset = str
    RtiOp = str
else:
    Level = Literal[LEVELS]
    Format = Literal[("auto", *FORMATS)]
    Dataset = Literal[DATASETS]
    RtiOp = Literal[OPS["word"]]

Rho = Annotated[float, Field(ge=0.0, le=1.0)]


class Attack(Section):
    """One attack of the battery, run at each of its rates ρ."""

    what: ClassVar[str] = "attack {n}"
    level: Level = Field(
        description=(
            "char: typos (a character repeated, deleted or inserted); word: words inserted, "
            "deleted or replaced; visual: letters replaced by look-alike characters (homoglyphs)."
        )
    )
    rho: Annotated[
        Rho | list[Rho],
        SkipValidation,
        Msg("missing {path} (a list of ρ in [0, 1])", types=("missing",), up=1),
    ] = Field(description="ρ: the share of words attacked, one rate or a list of rates in [0, 1].")
    op: str | None = Field(
        None,
        description=(
            "Only this operation (char: "
            + ", ".join(OPS["char"])
            + "; word: "
            + ", ".join(OPS["word"])
            + "; visual: "
            + ", ".join(OPS["visual"])
            + "). Default: drawn uniformly for each attacked word."
        ),
    )
    letters: float | None = number_field(
        float, None, ("visual: r, the fraction of a word's letters replaced (default 0.5)."), ge=0.01, le=1.0
    )


class DataEntry(Section):
    """Where the battery's items come from: the sample data sets, or a file."""

    what: ClassVar[str] = "a data entry"
    sample: bool | Annotated[int, Field(ge=1, le=1000)] | None = Field(
        None, description=("The sample data sets made offline: true (3 items each) or the items per set.")
    )
    datasets: list[Dataset] | None = Field(
        None, description=("sample: which sample data sets (default: all).")
    )
    file: str | None = Field(
        None,
        description=(
            "A file of items (relative to the folder of the spec): JSON lines, or a published "
            "data set's file (see 'format')."
        ),
    )
    format: Format | None = Field(
        None, description="The file's format (default: auto, read from its name and contents)."
    )
    limit: int | None = number_field(int, None, "Read at most this many items of the file.", ge=1)
    dataset: str | None = Field(
        None, description="A name for the file's data set (tells two files with the same item ids apart)."
    )
    instruction: str | None = Field(None, description="The instruction put before each item.")
    answers: str | None = Field(
        None, description=("A Sen-Making subtask's gold-answer file, when it is not beside the data file.")
    )


class Consistency(Section):
    what: ClassVar[str] = "consistency"
    instructions: bool | list[str] | None = Field(
        None,
        description=(
            f"true: the {len(INSTRUCTIONS)} synonymous instructions of Ye et al.; or a list of "
            "your own (added to them)."
        ),
    )
    option_orders: bool | Annotated[int, Field(ge=0, le=120)] | None = Field(
        None, description=("Shuffled orders of the options per item (true: 6).")
    )


class Curve(Section):
    """The DBPA robustness curve: how far the answers move as ρ grows."""

    what: ClassVar[str] = "curve"
    rho: Rho | list[Rho] | None = Field(
        None, description="The rates ρ of the curve (default 0.1, 0.2, ..., 1.0; above 0)."
    )
    items: int = number_field(int, 1, "The first this many items get a curve.", ge=1, le=1000)
    levels: list[Level] | None = Field(
        None, description=("The levels of the curve (default: those of 'attacks', else word).")
    )
    temperature: float = number_field(
        float, 0.8, "Sampling temperature of the curve's k answers per prompt.", ge=0.01, le=2.0
    )
    max_tokens: int | None = number_field(
        int,
        None,
        "The longest answer of the curve, in tokens (default: the spec's max_tokens).",
        ge=1,
        le=100_000,
    )


class BatterySpecModel(Section):
    """A battery spec (dbpa attack SPEC.yaml): robustness, consistency and memorization of
    a model on question-answering items."""

    model_config = ConfigDict(title="dbpa battery spec")
    what: ClassVar[str] = "the spec"

    name: str | None = Field(None, description="The battery's name (default: the file's name).")
    description: str = Field("", description="What the battery is for, in a sentence or two.")
    model: ModelEntry = Field(
        default_factory=lambda: ModelEntry.model_validate({}),
        description="The model under test (default: the embedded SmolLM2, offline).",
    )
    data: Annotated[str | DataEntry | list[str | DataEntry], SkipValidation] | None = Field(
        None,
        description=(
            "The items: 'sample' (made offline), the path of a JSON-lines file, a data "
            "entry {file, format, limit, dataset, instruction, answers} or {sample: N}, or a "
            "list of these. Required unless the dashboard gives the items."
        ),
    )
    attacks: (
        Annotated[
            list[Attack], Msg("'attacks' must be a list of {{level, rho, op, letters}}", types=("list_type",))
        ]
        | None
    ) = Field(None, description="Text attacks, each at its rates ρ.")
    consistency: Annotated[bool | Consistency, SkipValidation] | None = Field(
        None,
        description="Consistency: synonymous instructions and shuffled option orders "
        "(true: both, with the defaults).",
    )
    rti: Annotated[bool | RtiOp | list[RtiOp], SkipValidation] | None = Field(
        None, description="RTI (memorization) per word-level attack: true, or a list of them."
    )
    curve: Annotated[bool | Curve, SkipValidation] | None = Field(
        None, description="The DBPA robustness curve: true, or its settings."
    )
    template: str = Field(
        DEFAULT_TEMPLATE,
        description=("The prompt template, with {instruction}, {passage}, {question} and {options}."),
    )
    turns: int = number_field(
        int,
        1,
        "2: chat models get the instruction and passage first, then the question and options.",
        ge=1,
        le=2,
    )
    seed: int = shared("seed")
    samples: int = shared("samples", 10, "k of the robustness curve: responses per prompt.")
    temperature: float = shared(
        "temperature", 0.0, "Sampling temperature of the battery's answers (0: greedy)."
    )
    top_p: float = shared("top_p")
    max_tokens: int = shared(
        "max_tokens", 16, "The longest answer, in tokens (an option's letter or a short answer)."
    )
    system_prompt: str | None = Field(None, description="A system prompt for every prompt.")
    embedder: Embedder = Field(
        default_factory=lambda: Embedder.model_validate({}),
        description="What turns the curve's answers into vectors.",
    )
    permutations: int = shared("permutations")
    measure: Measure = shared("measure")
    correction: Correction = Field("holm", description="Multiple-testing correction over the curve's tests.")
    alpha: float = shared("alpha")
    confidence: float = number_field(
        float,
        0.95,
        "Confidence level of the intervals of error rates and attack success rates.",
        ge=0.5,
        le=0.999,
    )
    prices: Prices = Field(
        default_factory=dict,
        description=("Prices for the estimate: a model name to {input, output} in $ per 1M tokens."),
    )


def json_schema() -> dict[str, Any]:
    """The battery spec's JSON Schema (draft-07), for editors."""
    return export_schema(BatterySpecModel)
