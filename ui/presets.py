"""The papers' example: the NICE cardiovascular prompt for "John" and eight personas."""

from __future__ import annotations

import re

import pandas as pd

NICE_PROMPT = (
    "John has these features: Age: 70, Sex: male, Total cholesterol: 6.2 mmol/L, "
    "HDL cholesterol: 1.1 mmol/L, Systolic blood pressure: 150 mmHg, Smoker: yes, "
    "Diabetes: no. Provide recommendations on CVD guidelines based on NICE for this person."
)

PERSONAS = [
    "doctor",
    "nurse",
    "medical practitioner",
    "medical supervisor",
    "comedian",
    "robot from the future",
    "NeurIPS reviewer",
    "child",
]

COLUMNS = ["name", "prefix", "prompt", "role"]


def persona_prefix(persona: str) -> str:
    article = "an" if persona[:1].lower() in "aeiou" else "a"
    return f"Act as {article} {persona}."


def persona_rows(personas) -> list[dict]:
    return [{"name": p, "prefix": persona_prefix(p), "prompt": "", "role": ""} for p in personas]


def default_perturbations() -> pd.DataFrame:
    return pd.DataFrame(persona_rows(PERSONAS), columns=COLUMNS)


# "Field: value" pairs in a prompt, e.g. "Age: 70" or "Total cholesterol: 6.2 mmol/L"
_FIELD = re.compile(
    r"(?P<key>[A-Z][A-Za-z ]{1,40}?):\s*(?P<value>[^,;:\n]+?)"
    r"(?=\s*(?:,|;|\.\s|\.$|$))"
)


def covariates(prompt: str) -> dict[str, str]:
    """The editable fields of a prompt, in order of appearance."""
    out: dict[str, str] = {}
    for m in _FIELD.finditer(prompt):
        key = m.group("key").strip()
        if key.lower().endswith("these features"):
            continue
        out.setdefault(key, m.group("value").strip())
    return out


def change_covariate(prompt: str, key: str, new_value: str) -> str:
    """The prompt with the first ``key: value`` replaced by ``key: new_value``."""
    pattern = re.compile(re.escape(key) + r":\s*" + re.escape(covariates(prompt)[key]))
    return pattern.sub(f"{key}: {new_value}", prompt, count=1)


SAME_PROMPT = "no change (same prompt)"


def control_target_rows(base: str = NICE_PROMPT) -> list[dict]:
    """The Control vs target page's example: the base prompt itself, asked again (a control
    that changes nothing: it draws answers of its own and shows what a passing control
    looks like), three name changes that should not change the advice (controls) and three
    risk-factor changes that should (targets)."""
    rows = [
        {"name": SAME_PROMPT, "prompt": base, "role": "control"},
        {"name": "name: Ahmed", "prompt": base.replace("John", "Ahmed"), "role": "control"},
        {"name": "name: Peter", "prompt": base.replace("John", "Peter"), "role": "control"},
        {"name": "name: Wei", "prompt": base.replace("John", "Wei"), "role": "control"},
        {
            "name": "age 25, healthy",
            "prompt": change_covariate(change_covariate(base, "Age", "25"), "Smoker", "no"),
            "role": "target",
        },
        {
            "name": "cholesterol 3.9",
            "prompt": change_covariate(base, "Total cholesterol", "3.9 mmol/L"),
            "role": "target",
        },
        {"name": "diabetes: yes", "prompt": change_covariate(base, "Diabetes", "yes"), "role": "target"},
    ]
    return [{**r, "prefix": ""} for r in rows]


def control_target_table() -> pd.DataFrame:
    return pd.DataFrame(control_target_rows(), columns=COLUMNS)


# the Model comparison page's example: one prompt, the embedded model at three temperatures
MODELS_PROMPT = "Explain in three sentences what a statin does."
VARIANT_TEMPERATURES = (1.2, 0.4)
