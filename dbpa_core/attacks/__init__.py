"""The robustness, consistency and memorization battery for question answering (Ye et al.,
*A Trusted Evaluation System for Safe Deployment of LLMs*).

* :mod:`.text` — seeded character, word and visual (homoglyph) attacks at rate ρ;
* :mod:`.consistency` — synonymous instructions and shuffled options;
* :mod:`.items` — the item format, loaders, distractors, the prompt template;
* :mod:`.answers` — reading the chosen option from a free-text answer;
* :mod:`.metrics` — ER, ASR, RTI and consistency spreads with intervals;
* :mod:`.patterns` — which words break the model (position, part of speech, dependency);
* :mod:`.phrases` — the phrase type of each attacked word (NP, VP, PP, …, read from the
  dependency parse), per-item frequency vectors and the phrase table;
* :mod:`.importance` — a random forest predicting a changed answer from those vectors:
  held-out accuracy beside the majority guess, permutation importances;
* :mod:`.sample` — a sample data set made from templates (runs offline);
* :mod:`.spec`, :mod:`.battery` — ``dbpa attack SPEC.yaml``: the whole battery over the
  cached sampler, with the DBPA robustness curve.
"""

from .answers import ParsedAnswer, parse_answer
from .consistency import INSTRUCTIONS, option_orders, reorder, shuffle_options, with_instruction
from .items import (
    DEFAULT_INSTRUCTION,
    DEFAULT_TEMPLATE,
    Item,
    ItemsError,
    load_items,
    make_options,
    render_prompt,
)
from .metrics import (
    Rate,
    RTIResult,
    accuracy,
    attack_success_rate,
    error_rate,
    first_change,
    relative_training_index,
    spread,
    wilson_interval,
)
from .sample import sample_items
from .text import AttackedText, Change, attack_text, skeleton, synonyms
from .wordnet import WordNetMissing

__all__ = [
    "DEFAULT_INSTRUCTION",
    "DEFAULT_TEMPLATE",
    "INSTRUCTIONS",
    "AttackedText",
    "Change",
    "Item",
    "ItemsError",
    "ParsedAnswer",
    "RTIResult",
    "Rate",
    "WordNetMissing",
    "accuracy",
    "attack_success_rate",
    "attack_text",
    "error_rate",
    "first_change",
    "load_items",
    "make_options",
    "option_orders",
    "parse_answer",
    "relative_training_index",
    "render_prompt",
    "reorder",
    "sample_items",
    "shuffle_options",
    "skeleton",
    "spread",
    "synonyms",
    "wilson_interval",
    "with_instruction",
]
