"""Replay recorded responses from a JSONL file.

One object per line: ``{"prompt": "...", "response": "...", "model": "..."}``
(``model`` optional). Sample ``i`` of a prompt is the ``i``-th recorded response
of that prompt in a shuffled order fixed by the prompt: samples are always
distinct records; asking for more than are recorded is an error, never reuse.
"""

from __future__ import annotations

import functools
import json
import logging
import os
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .._validate import file_problem, valid_unicode
from .base import BackendError, Sample, SampleRequest

if TYPE_CHECKING:
    from .base import OnSample

log = logging.getLogger(__name__)


def load_replay_file(path: str | os.PathLike) -> dict[tuple[str, str | None], list[str]]:
    """Recorded responses by (prompt, model); errors name the line. Text that is not valid
    Unicode (a ``\\ud800`` escape) is replaced by U+FFFD (see :func:`read_replay_file`)."""
    return read_replay_file(path)[0]


def read_replay_file(path: str | os.PathLike) -> tuple[dict[tuple[str, str | None], list[str]], int]:
    """``(records, replaced)``: the recorded responses by (prompt, model), and how many
    characters that are not valid Unicode (lone surrogates) were replaced by U+FFFD."""
    problem = file_problem(path)
    if problem == "no such file":
        raise BackendError(f"Replay file {str(path)!r} does not exist.")
    if problem:
        raise BackendError(f"Replay file {str(path)!r} {problem}.")
    records: dict[tuple[str, str | None], list[str]] = defaultdict(list)
    replaced = 0

    def valid(text: str) -> str:
        nonlocal replaced
        text, n = valid_unicode(text)
        replaced += n
        return text

    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise BackendError(
                    f"{path}, line {lineno}: not UTF-8 text (byte "
                    f"0x{raw[exc.start]:02x}); save the file as UTF-8."
                ) from None
            if lineno == 1:
                line = line.removeprefix("\ufeff")
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except (json.JSONDecodeError, RecursionError) as exc:
                msg = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
                raise BackendError(f"{path}, line {lineno}: not valid JSON ({msg}).") from None
            if (
                not isinstance(obj, dict)
                or not isinstance(obj.get("prompt"), str)
                or not isinstance(obj.get("response"), str)
            ):
                raise BackendError(
                    f"{path}, line {lineno}: each line needs string fields 'prompt' and 'response'."
                )
            model = obj.get("model")
            records[(valid(obj["prompt"]), valid(model) if isinstance(model, str) else None)].append(
                valid(obj["response"])
            )
    return dict(records), replaced


class ReplayBackend:
    name = "replay"
    deterministic = True

    def __init__(self, path: str | os.PathLike, model: str | None = None):
        self.path = str(path)
        self.model = model or ""
        self._records, replaced = read_replay_file(path)
        if replaced:
            log.warning(
                "warning: %s holds %d character(s) that are not valid Unicode (lone "
                "surrogates such as \\ud800); each was read as U+FFFD.",
                self.path,
                replaced,
            )

    def available(self, prompt: str) -> int:
        return len(self._responses(prompt))

    def _responses(self, prompt: str) -> list[str]:
        if self.model:
            if (prompt, self.model) in self._records:
                return self._records[(prompt, self.model)]
            return self._records.get((prompt, None), [])
        out: list[str] = []
        for (p, _m), rs in self._records.items():
            if p == prompt:
                out.extend(rs)
        return out

    def check(self, prompt: str, k: int) -> None:
        n = self.available(prompt)
        if n < k:
            short = prompt if len(prompt) <= 60 else prompt[:57] + "..."
            who = f" for model {self.model!r}" if self.model else ""
            if n == 0:
                raise BackendError(
                    f"Replay file {self.path!r} holds no response{who} for prompt {short!r}: "
                    "a replay file answers only the prompts recorded in it. Use a recorded "
                    "prompt, another model, or record this one."
                )
            raise BackendError(
                f"Replay file {self.path!r} has {n} recorded responses{who} for prompt "
                f"{short!r}, but {k} samples were asked for. Record more or lower 'samples'."
            )

    def generate(
        self,
        requests: Sequence[SampleRequest],
        on_sample: OnSample,
        *,
        should_stop: Callable[[], bool] | None = None,
    ) -> None:
        for req in requests:
            if should_stop is not None and should_stop():
                return
            responses = self._responses(req.prompt)
            self.check(req.prompt, req.index + 1)
            # one shuffled order per prompt, so indices 0..k-1 are k distinct records
            order = np.random.default_rng(_prompt_seed(req)).permutation(len(responses))
            on_sample(req, Sample(responses[order[req.index]], model=self.model or "replay"))


@functools.lru_cache(maxsize=16)
def _held(path: str, mtime: float, model: str) -> ReplayBackend:
    return ReplayBackend(path, model or None)


def replay_available(model: Mapping[str, Any], prompt: str) -> int:
    """How many distinct recorded responses the replay ``model`` (a spec's model entry)
    can give for ``prompt``: the backend's own rule (the model's records, else unnamed
    ones; all of them when the model is unnamed). Its file is read once per change.
    Raises OSError or :class:`BackendError` when it cannot be read."""
    path = str(model["file"])
    return _held(path, os.path.getmtime(path), str(model.get("name") or "")).available(prompt)


def replay_lacking(model: Mapping[str, Any], need: Mapping[str, int]) -> list[str]:
    """The prompts of ``need`` (prompt -> answers wanted) that the replay ``model`` holds
    fewer times, in order: what the pages, ``dbpa scan`` and the estimate check before a
    run (nothing is sent)."""
    return [p for p, n in need.items() if replay_available(model, p) < n]


def _prompt_seed(req: SampleRequest) -> int:
    import hashlib

    h = hashlib.sha256(f"{req.system_prompt or ''}\x1f{req.prompt}".encode()).digest()
    return int.from_bytes(h[:8], "big")
