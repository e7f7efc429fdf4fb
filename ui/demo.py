"""The landing page's instant demo: the recorded result of its default example.

On first start the landing page shows, at once, what its default example gives on
responses recorded with the embedded model (``assets/demo_replay.jsonl``, with the
MiniLM embeddings of the landing example and when and how it was recorded in
``assets/demo_landing.npz``; both written by ``assets/make_demo_replay.py``). The
statistics are computed now, by the same :func:`~dbpa_core.audit.run_audit` as a run, on
the recorded answers: sample ``i`` of each prompt is the ``i``-th recorded answer. Nothing
recorded is written to the cache: Run samples afresh, and its answers are the recording's
only on a CPU whose arithmetic rounds as the recording's did (bfloat16 kernels differ between
kinds of x86 CPU: on another kind none of the 180 answers need match), which the label says.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import streamlit as st

from dbpa_core.audit import AuditResult, build_arms, run_audit
from dbpa_core.backends import Sample
from dbpa_core.cache import Cache
from dbpa_core.similarity import TEXT_SIMILARITIES
from dbpa_core.spec import AuditSpec

from .export import RunMeta

ROOT = Path(__file__).resolve().parent.parent
RESPONSES = ROOT / "assets" / "demo_replay.jsonl"
EMBEDDINGS = ROOT / "assets" / "demo_landing.npz"


@dataclass(frozen=True)
class Recording:
    """Recorded answers of one model by (system prompt, prompt), in sample order; their
    MiniLM vectors by text; ``meta``: model, precision, date (``recorded``), ``samples``,
    ``temperature``, ``top_p``, ``max_tokens``, ``seed``."""

    meta: dict[str, Any]
    answers: Mapping[tuple[str | None, str], Sequence[str]]
    vectors: Mapping[str, np.ndarray]

    @property
    def date(self) -> str:
        return str(self.meta.get("recorded", ""))


def load_recording(responses: Path = RESPONSES, embeddings: Path = EMBEDDINGS) -> Recording | None:
    """The recording, or None when a file is missing or unreadable (then no demo)."""
    try:
        with np.load(embeddings, allow_pickle=False) as f:
            meta = json.loads(str(f["meta"]))
            vectors = dict(zip(f["texts"].tolist(), f["vectors"], strict=True))
        answers: dict[tuple[str | None, str], list[str]] = {}
        with open(responses, encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    r = json.loads(line)
                    if r.get("model") == meta["model"]:
                        answers.setdefault((None, r["prompt"]), []).append(r["response"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return Recording(meta, answers, vectors)


class _RecordedAnswers:
    """A backend that answers sample ``i`` of a prompt with its ``i``-th recorded answer."""

    name = "local"
    deterministic = True

    def __init__(self, rec: Recording):
        self.rec = rec
        self.model = str(rec.meta["model"])

    def generate(self, requests, on_sample, *, should_stop=None) -> None:
        for r in requests:
            text = self.rec.answers[(r.system_prompt, r.prompt)][r.index]
            on_sample(r, Sample(text, model=self.model))


class _RecordedVectors:
    """The embedder of the recording: the recorded MiniLM vector of each text."""

    name = "local"
    label = "all-MiniLM-L6-v2"

    def __init__(self, rec: Recording):
        self.rec = rec

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self.rec.vectors[t] for t in texts])


def replays_recording(model: Mapping[str, Any], rec: Recording) -> bool:
    """Is ``model`` demo mode's replay of the recorded model: the recording's own answers
    file (:data:`RESPONSES`), read as that model? Then it answers as the recording does."""
    if model.get("backend") != "replay" or str(model.get("name") or "") != str(rec.meta.get("model")):
        return False
    try:
        return Path(str(model.get("file") or "")).resolve() == RESPONSES.resolve()
    except OSError:
        return False


def applies(spec: AuditSpec, rec: Recording) -> bool:
    """True when the recording answers ``spec`` exactly as the embedded model would be
    asked to: one prompt per arm on the default local model (or, in demo mode, on the
    replay of the recording's answers: :func:`replays_recording`), with the recorded k,
    temperature, top-p, max tokens and seed, and every prompt recorded (and, for the
    MiniLM embedder, embedded)."""
    m = rec.meta
    model = spec.model if spec.mode == "perturbation" else None
    if (
        not model
        or "temperature" in model
        or not (model.get("backend") == "local" or replays_recording(model, rec))
    ):
        return False
    if (spec.samples, spec.temperature, spec.top_p, spec.max_tokens, spec.seed) != (
        m.get("samples"),
        m.get("temperature"),
        m.get("top_p"),
        m.get("max_tokens"),
        m.get("seed"),
    ):
        return False
    embedder = spec.embedder.get("backend")
    if embedder not in ("local", *TEXT_SIMILARITIES) or len(spec.embedder) > 1:
        return False
    for arm in build_arms(spec):
        got = rec.answers.get((arm.system_prompt, arm.prompt), ())
        got = got[arm.first_sample : arm.first_sample + spec.samples]  # a same-prompt arm: the next
        if len(got) < spec.samples:
            return False
        if embedder == "local" and not all(t in rec.vectors for t in got):
            return False
    return True


def recorded_result(spec: AuditSpec, rec: Recording) -> AuditResult | None:
    """``spec`` audited on the recording (no cache read or written), or None when the
    recording does not answer it (see :func:`applies`)."""
    if not applies(spec, rec):
        return None
    result = run_audit(
        spec, cache=Cache(enabled=False), backends={0: _RecordedAnswers(rec)}, embedder=_RecordedVectors(rec)
    )
    # no model was called: the answers are the recording's
    result.usage.update(
        precision=rec.meta.get("precision"),
        recorded=rec.date,
        recorded_answers=result.usage.get("calls", 0),
        calls=0,
    )
    return result


@st.cache_resource(show_spinner=False, max_entries=1)
def _recording(mtimes: tuple[float, float]) -> Recording | None:
    return load_recording()


@st.cache_resource(show_spinner=False, max_entries=8)
def _cached_result(signature: str, _spec: AuditSpec, mtimes: tuple[float, float]):
    rec = _recording(mtimes)
    return None if rec is None else recorded_result(_spec, rec)


def _mtimes() -> tuple[float, float] | None:
    try:
        return (RESPONSES.stat().st_mtime, EMBEDDINGS.stat().st_mtime)
    except OSError:
        return None


def offer(spec: AuditSpec | None, *, key: str, job: str, signature: str | None) -> None:
    """Put the recorded result of ``spec`` in the page's results when the page has none
    of its own and the recording answers it (marked recorded in ``results_meta``)."""
    ss = st.session_state
    if spec is None or signature is None or key in ss["results"]:
        return
    mtimes = _mtimes()
    if mtimes is None:
        return
    result = _cached_result(signature, spec, mtimes)
    if result is None:
        return
    rec = _recording(mtimes)
    try:
        when = datetime.fromisoformat(rec.date).replace(tzinfo=UTC)
    except ValueError:
        when = datetime.now(UTC)
    ss["results"][key] = {job: result}
    ss["results_meta"][key] = {
        "signature": signature,
        "failed": None,
        "run": RunMeta(created_at=when, source="recorded"),
        "recorded": dict(rec.meta),
    }


def label(key: str) -> str | None:
    """The words that say the page's results are the recording's, or None when they are
    a run's."""
    meta = st.session_state.get("results_meta", {}).get(key) or {}
    rec = meta.get("recorded")
    if not rec:
        return None
    return (
        f"**Recorded result**, shown at once: the default example answered by "
        f"**{rec.get('model')}** ({rec.get('precision')}, k = {rec.get('samples')} "
        f"answers per prompt), recorded on {rec.get('recorded')}; the statistics are "
        f"computed now. **Run audit** samples the answers afresh on this machine: new answers "
        f"wherever this CPU's arithmetic differs from the recording's (the embedded model's "
        f"{rec.get('precision')} kernels round differently on different kinds of CPU), and so "
        f"other numbers. The recorded answers themselves are replayed, on any machine, by "
        f"`dbpa audit examples/replay_personas.yaml` (see `dbpa examples`)."
    )


def default_settings() -> dict[str, Any]:
    """The sidebar's settings of a fresh session (what ``ui.state.settings`` gives then)."""
    from .state import DEFAULTS as d

    return {
        "samples": d["w_samples"],
        "permutations": d["w_permutations"],
        "measure": d["w_measure"],
        "correction": d["w_correction"],
        "alpha": d["w_alpha"],
        "temperature": d["w_temperature"],
        "max_tokens": d["w_max_tokens"],
        "seed": d["w_seed"],
        "embedder": {"backend": d["w_embedder"]},
        "null": d["w_null"],
    }


def default_spec(model: Mapping[str, Any] | None = None) -> AuditSpec:
    """The landing page's default example as a fresh session builds it, on the embedded
    model (or on ``model``: demo mode's replay of the recording, ``ui/demo_runs.py``)."""
    from dbpa_core.spec import parse_spec

    from . import presets
    from .state import DEFAULTS

    d = DEFAULTS
    return parse_spec(
        {
            "name": "perturbation-test",
            "model": dict(model) if model is not None else {"backend": "local"},
            **default_settings(),
            "base": {"prompt": d["w_base_prompt"]},
            "perturbations": [
                {"name": r["name"], "prefix": r["prefix"]} for r in presets.persona_rows(presets.PERSONAS)
            ],
        },
        source="defaults",
    )


if __name__ == "__main__":
    # `make venv`: compute the recorded result once, so that numba compiles (and caches)
    # the permutation kernels it needs now rather than on the first page view
    import time

    from streamlit import logger

    logger.set_log_level("error")  # its "no runtime found" warning: none is needed here
    t = time.perf_counter()
    rec = load_recording()
    ok = rec is not None and recorded_result(default_spec(), rec) is not None
    print(
        f"landing page's recorded result: {'ready' if ok else 'not available'} "
        f"({time.perf_counter() - t:.1f} s)"
    )
