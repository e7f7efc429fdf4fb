"""Which system answered: the model name and ``system_fingerprint`` of every answer.

An OpenAI-compatible server says, in each chat completion, the model that answered (e.g.
``gpt-4o-2024-08-06`` for a request to ``gpt-4o``) and a ``system_fingerprint`` that changes
when the provider changes the system behind that name (weights, serving stack). If they
change within one audit, the arms may not have been answered by the same system, and a
difference between them may come from that change rather than from the perturbation.

An audit keeps both for every sample (:mod:`dbpa_core.sampling` caches them with the
answer), writes them into ``responses.jsonl``, keeps them per arm in its ``usage`` (so
``results.json`` and the run history have them), and warns when either changes within
the run. Answers cached before dbpa recorded them, and backends that report nothing
(local models, replay files without a model), have "" for both: unknown, never a change.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from .backends.base import clean_text

KEY = "provenance"  # the entry of an audit's usage that holds them


def arm_entry(arm: str, model: str, records: Sequence[Any]) -> dict[str, Any]:
    """One arm's provenance: the model config's label, then per sample (in order) the
    model name and the system fingerprint it came back with."""
    return {
        "arm": arm,
        "model": model,
        "served_models": [getattr(r, "model", "") or "" for r in records],
        "system_fingerprints": [getattr(r, "system_fingerprint", "") or "" for r in records],
    }


def entries_of(usage: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The per-arm entries kept in an audit's usage (``[]`` for runs recorded before
    provenance was kept, or a garbled entry)."""
    found = (usage or {}).get(KEY)
    if not isinstance(found, list):
        return []
    return [
        e
        for e in found
        if isinstance(e, dict)
        and isinstance(e.get("arm"), str)
        and isinstance(e.get("served_models"), list)
        and isinstance(e.get("system_fingerprints"), list)
    ]


def sample_of(entries: Sequence[Mapping[str, Any]], arm: str, index: int) -> dict[str, str]:
    """``{"served_model", "system_fingerprint"}`` of sample ``index`` of ``arm`` ("" when
    unknown)."""
    for e in entries:
        if e["arm"] == arm:
            models, fps = e["served_models"], e["system_fingerprints"]
            return {
                "served_model": str(models[index]) if index < len(models) else "",
                "system_fingerprint": str(fps[index]) if index < len(fps) else "",
            }
    return {"served_model": "", "system_fingerprint": ""}


def _counts(entries: Sequence[Mapping[str, Any]], field: str) -> Counter:
    return Counter(str(v) for e in entries for v in e[field] if v)


def _listing(counts: Counter, limit: int = 4) -> str:
    items = [f"{clean_text(v, 60)}: {n} answer{'s' if n != 1 else ''}" for v, n in counts.most_common(limit)]
    more = len(counts) - limit
    return ", ".join(items) + (f" and {more} more" if more > 0 else "")


def _by_arm(entries: Sequence[Mapping[str, Any]], field: str, limit: int = 4) -> str:
    parts = []
    for e in entries:
        c = Counter(str(v) for v in e[field] if v)
        if c:
            parts.append(
                f"{clean_text(e['arm'], 40)}: " + ", ".join(f"{clean_text(v, 40)} x{n}" for v, n in c.items())
            )  # in sample order
    more = len(parts) - limit
    return "; ".join(parts[:limit]) + (f"; and {more} more arms" if more > 0 else "")


def change_warnings(entries: Sequence[Mapping[str, Any]]) -> list[str]:
    """One warning per model config whose answers came back from more than one model name
    or with more than one system fingerprint in this run (unknown values do not count)."""
    by_model: dict[str, list[Mapping[str, Any]]] = {}
    for e in entries:
        by_model.setdefault(str(e.get("model", "")), []).append(e)
    out = []
    for label, group in by_model.items():
        for field, what in (("served_models", "model names"), ("system_fingerprints", "system fingerprints")):
            counts = _counts(group, field)
            if len(counts) > 1:
                out.append(
                    f"{clean_text(label, 80)}: the answers came back with {len(counts)} different "
                    f"{what} ({_listing(counts)}); by arm: {_by_arm(group, field)}. The system "
                    "behind the model changed during this run (or since some answers were "
                    "cached), so a difference between arms may come from that change and not "
                    "from the perturbation. responses.jsonl says which answer came from which; "
                    "clear the cache and run again to draw every answer from one system."
                )
    return out


def summary_lines(entries: Sequence[Mapping[str, Any]]) -> list[str]:
    """For people: per model config, the model names and fingerprints its answers came
    back with (nothing when the server reported neither)."""
    by_model: dict[str, list[Mapping[str, Any]]] = {}
    for e in entries:
        by_model.setdefault(str(e.get("model", "")), []).append(e)
    lines = []
    for label, group in by_model.items():
        models, fps = _counts(group, "served_models"), _counts(group, "system_fingerprints")
        if models or fps:
            lines.append(
                f"{clean_text(label, 80)} answered as "
                f"{_listing(models) if models else 'an unnamed model'}; system "
                f"fingerprint {_listing(fps) if fps else 'not reported'}"
            )
    return lines


def fingerprints(entries: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
    """Every system fingerprint of a run's answers, sorted (for comparing two runs)."""
    return tuple(sorted({clean_text(v, 100) for v in _counts(entries, "system_fingerprints")}))


def served_models(entries: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
    """Every model name a run's answers came back with, sorted."""
    return tuple(sorted({clean_text(v, 100) for v in _counts(entries, "served_models")}))


__all__ = [
    "KEY",
    "arm_entry",
    "change_warnings",
    "entries_of",
    "fingerprints",
    "sample_of",
    "served_models",
    "summary_lines",
]
