"""Bring recorded runs in: other tools' outputs -> the replay format.

The replay format is JSONL, one ``{"prompt", "response", "model"?,
"system_prompt"?}`` per line (see :mod:`dbpa_core.backends.replay`): a file of
responses someone already paid for, audited with ``model: {backend: replay}``.

Readers:

* :func:`import_promptfoo` — ``promptfoo eval --repeat N -o out.json`` (the
  ``{"evalId", "results": {"version": 3, "results": [...]}, "config"}`` file),
  ``-o out.jsonl`` (one result per line) or the summary object of promptfoo's
  node API. Each result's ``prompt.raw`` is the prompt (a chat prompt's last user
  message, its system message as ``system_prompt``), ``response.output`` the
  response, ``provider.label`` or ``provider.id`` the model. Responses promptfoo
  served from its own cache that repeat another response of the same prompt are
  copies of one draw, not independent samples: they are dropped and reported.
* :func:`import_openai_batch` — an OpenAI Batch API output file (``custom_id``,
  ``response.status_code``, ``response.body``, ``error``) joined with the
  requests file that was uploaded (the output holds no prompts);
  ``/v1/chat/completions``, ``/v1/completions`` and ``/v1/responses``; every
  choice of ``n > 1`` is one sample.
* :func:`import_table` — any CSV / TSV / JSONL with prompt and response columns
  named by the caller (dotted paths reach into JSON objects: ``output.text``).

Malformed rows (bad JSON, a failed call, a missing or empty field) are never
skipped silently: each becomes an :class:`ImportProblem` with its line, and the
caller decides (the CLI stops unless ``--skip-bad``; the dashboard imports the
good rows and lists the bad ones).
"""

from __future__ import annotations

import bisect
import contextlib
import csv
import dataclasses
import functools
import hashlib
import io
import json
import os
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._validate import csv_header, file_problem, valid_unicode

FORMATS = ("promptfoo", "openai-batch", "csv", "jsonl")


class ImportFormatError(ValueError):
    """The file as a whole cannot be read in the chosen format (the message says why)."""


@dataclass(frozen=True)
class ReplayRecord:
    """One recorded response, with the line of the source file it came from."""

    prompt: str
    response: str
    model: str | None = None
    system_prompt: str | None = None
    line: int | None = None

    def to_json(self) -> str:
        d: dict[str, Any] = {"prompt": self.prompt, "response": self.response}
        if self.model:
            d["model"] = self.model
        if self.system_prompt:
            d["system_prompt"] = self.system_prompt
        return json.dumps(d, ensure_ascii=False)


@dataclass(frozen=True)
class ImportProblem:
    """A row that was not imported, and why."""

    line: int | None
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}" if self.line else self.message


@dataclass(frozen=True)
class ImportResult:
    """What an importer read: the records to keep, the rows it could not use, notes."""

    source: str
    format: str
    records: tuple[ReplayRecord, ...]
    problems: tuple[ImportProblem, ...] = ()
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # text that is not valid Unicode (a "\\ud800" escape in the JSON) cannot be written as
        # UTF-8: it is replaced by U+FFFD, and the count said in a note (never dropped)
        replaced, records = 0, []
        for r in self.records:
            fixed: dict[str, Any] = {}
            for name in ("prompt", "response", "model", "system_prompt"):
                value = getattr(r, name)
                if isinstance(value, str):
                    value, n = valid_unicode(value)
                    if n:
                        replaced += n
                        fixed[name] = value
            records.append(dataclasses.replace(r, **fixed) if fixed else r)
        if replaced:
            object.__setattr__(self, "records", tuple(records))
            object.__setattr__(
                self,
                "notes",
                self.notes
                + (
                    f"{replaced} character(s) that are not valid Unicode (lone surrogates such as "
                    "\\ud800) were replaced by U+FFFD.",
                ),
            )

    def groups(self) -> list[dict[str, Any]]:
        """One entry per (prompt, model): how many responses, how many distinct."""
        order: dict[tuple[str, str | None], list[str]] = {}
        for r in self.records:
            order.setdefault((r.prompt, r.model), []).append(r.response)
        return [
            {"prompt": p, "model": m, "responses": len(rs), "distinct": len(set(x.strip() for x in rs))}
            for (p, m), rs in order.items()
        ]

    def to_jsonl(self) -> str:
        return "".join(r.to_json() + "\n" for r in self.records)

    def write(self, path: str | os.PathLike) -> str:
        """Write the replay JSONL atomically (a temporary file renamed when complete, so a
        failure never leaves a partial file that reads as valid; folders are created);
        returns the path. Never over the file it was read from."""
        if not self.records:
            raise ImportFormatError(f"{self.source}: no usable responses to write")
        if _same_file(path, self.source):
            raise ImportFormatError(
                f"{path} is the file being imported: writing the replay "
                "file there would destroy it; choose another path"
            )
        write_atomic({path: self.to_jsonl()})
        return str(path)

    def starter_spec(self, replay_path: str, *, spec_dir: str | None = None) -> str:
        """A DBPA spec (YAML) auditing the imported responses: the first prompt is the
        base, the others are perturbations (several models on one prompt: a model
        comparison). ``samples`` is the smallest number of responses per prompt."""
        import yaml

        groups = self.groups()
        if not groups:
            raise ImportFormatError(f"{self.source}: no usable responses for a spec")
        file = os.path.relpath(replay_path, spec_dir) if spec_dir else replay_path
        prompts = list(dict.fromkeys(g["prompt"] for g in groups))
        models = list(dict.fromkeys(g["model"] for g in groups))
        system = {r.prompt: r.system_prompt for r in self.records if r.system_prompt}
        data: dict[str, Any] = {}
        if len(prompts) == 1 and len(models) > 1:
            data["models"] = [
                {
                    "backend": "replay",
                    "file": file,
                    **({"name": m} if m else {}),
                    "label": m or f"model-{i + 1}",
                }
                for i, m in enumerate(models)
            ]
            chosen = groups
        else:
            model = models[0]
            data["model"] = {"backend": "replay", "file": file, **({"name": model} if model else {})}
            chosen = [g for g in groups if g["model"] == model]
        k = min(g["responses"] for g in chosen)
        data.update(
            {
                "embedder": {"backend": "local"},
                "samples": max(2, min(k, 50)),
                "permutations": 2000,
                "correction": "holm",
            }
        )
        base = {"prompt": prompts[0]}
        if prompts[0] in system:
            base["system_prompt"] = system[prompts[0]]
        data["base"] = base
        if "models" not in data:
            data["perturbations"] = [
                {
                    "name": f"prompt-{i + 2}",
                    "prompt": p,
                    **({"system_prompt": system[p]} if p in system else {}),
                }
                for i, p in enumerate(prompts[1:])
                if any(g["prompt"] == p for g in chosen)
            ]
            if not data["perturbations"]:
                data["perturbations"] = [{"name": "edit-me", "prompt": prompts[0] + " (edit me)"}]
        head = (
            f"# Written by `dbpa import` from {os.path.basename(self.source)}: "
            f"{len(self.records)} responses to {len(prompts)} prompt(s).\n"
            "# The first prompt is the base; rename the perturbations, set their role "
            "(control / target) and check 'samples'.\n"
        )
        if k < 2:
            head += "# warning: a prompt has fewer than 2 responses; DBPA needs at least 2.\n"
        return head + yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)

    def summary(self) -> str:
        lines = [
            f"{len(self.records)} responses to {len(self.groups())} prompt/model pair(s) "
            f"from {self.source} ({self.format})."
        ]
        for g in self.groups():
            p = " ".join(g["prompt"].split())
            p = p if len(p) <= 70 else p[:67] + "..."
            who = f" [{g['model']}]" if g["model"] else ""
            rep = "" if g["distinct"] == g["responses"] else f", {g['distinct']} distinct"
            lines.append(f"  {g['responses']:>4} responses{rep}{who}: {p}")
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


# --------------------------------------------------------------------------- writing
def _same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def output_problem(
    path: str | os.PathLike, *, inputs: Sequence[str | os.PathLike] = (), force: bool = False
) -> str | None:
    """Why ``path`` cannot receive an output file, in one line (None when it can): it is
    one of the ``inputs``, exists (unless ``force``), is a folder or a device, or its
    folder is below a regular file or not writable. Checked before any input is read."""
    p = Path(path)
    if any(_same_file(p, i) for i in inputs if i):
        return (
            f"{path} is the file being imported: writing there would destroy it; choose another output path"
        )
    if p.exists():
        if p.is_dir():
            return f"{path} is a folder; give a file path"
        if not p.is_file():
            return f"{path} is not a regular file (a device or a pipe); give a file path"
        if not force:
            return f"{path} already exists: add --force to replace it"
    folder = p.absolute().parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        return f"cannot write {path}: {folder} is a file, not a folder"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"cannot write {path}: the folder {folder} is not writable"
    return None


def write_atomic(files: Mapping[str | os.PathLike, str]) -> None:
    """Write every ``path -> text`` (UTF-8) as a whole or not at all: each goes to a
    temporary file beside it, and only when all are complete are they renamed into place.
    An error (a full disk) removes the temporary files and leaves every target as it was."""
    tmps: list[Path] = []
    try:
        for path, text in files.items():
            p = Path(path)
            p.parent.mkdir(parents=True, exist_ok=True)
            tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
            tmps.append(tmp)
            with open(tmp, "w", encoding="utf-8") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
        for tmp, path in zip(tmps, files, strict=True):
            os.replace(tmp, path)
    finally:
        for tmp in tmps:
            with contextlib.suppress(OSError):
                tmp.unlink()


# --------------------------------------------------------------------------- helpers
class _Lines:
    """Offset -> line number for one text."""

    def __init__(self, text: str):
        self.starts = [0] + [i + 1 for i, c in enumerate(text) if c == "\n"]

    def __call__(self, offset: int) -> int:
        return bisect.bisect_right(self.starts, offset)


def _read_text(path: str | os.PathLike) -> str:
    p = Path(path)
    problem = file_problem(p)
    if problem:
        raise ImportFormatError(f"{path}: {problem}")
    try:
        return p.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ImportFormatError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def _jsonl_objects(text: str) -> Iterator[tuple[int, Any, str | None]]:
    """(line, object, error) for every JSON value of a JSONL text. Several objects on
    one line (older promptfoo versions joined batches without a newline) are read
    one after the other."""
    dec = json.JSONDecoder()
    for lineno, line in enumerate(text.splitlines(), 1):
        i, n = 0, len(line)
        while True:
            while i < n and line[i].isspace():
                i += 1
            if i >= n:
                break
            try:
                obj, i = dec.raw_decode(line, i)
            except json.JSONDecodeError as exc:
                yield lineno, None, f"not valid JSON ({exc.msg}, column {exc.colno})"
                break
            except RecursionError:
                yield lineno, None, "not valid JSON here (nested too deeply)"
                break
            yield lineno, obj, None


def _skip_ws(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t\r\n":
        i += 1
    return i


def _array_offsets(text: str, keys: Sequence[str]) -> list[int] | None:
    """Start offsets of the elements of the array at ``keys`` (e.g. results.results)
    in a JSON text already known to be valid; None when the path is not there."""
    dec = json.JSONDecoder()
    try:
        i = _skip_ws(text, 0)
        for key in keys:
            if text[i] != "{":
                return None
            i = _skip_ws(text, i + 1)
            while True:
                if text[i] == "}":
                    return None
                k, i = dec.raw_decode(text, i)
                i = _skip_ws(text, i)
                i = _skip_ws(text, i + 1)  # the colon
                if k == key:
                    break
                _, i = dec.raw_decode(text, i)  # skip the value
                i = _skip_ws(text, i)
                if text[i] == ",":
                    i = _skip_ws(text, i + 1)
        if text[i] != "[":
            return None
        out = []
        i = _skip_ws(text, i + 1)
        while text[i] != "]":
            out.append(i)
            _, i = dec.raw_decode(text, i)
            i = _skip_ws(text, i)
            if text[i] == ",":
                i = _skip_ws(text, i + 1)
        return out
    except (IndexError, json.JSONDecodeError, RecursionError):
        return None


def _text_of(content: Any) -> str | None:
    """Text of a chat message's content: a string, or a list of parts with text."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [str(p["text"]) for p in content if isinstance(p, Mapping) and isinstance(p.get("text"), str)]
        return "\n".join(parts) if parts else None
    return None


def _from_messages(messages: Any) -> tuple[str | None, str | None, int]:
    """(prompt = last user message, system prompt, number of user messages)."""
    if not isinstance(messages, list):
        return None, None, 0
    system = [
        _text_of(m.get("content"))
        for m in messages
        if isinstance(m, Mapping) and m.get("role") in ("system", "developer")
    ]
    users = [
        _text_of(m.get("content")) for m in messages if isinstance(m, Mapping) and m.get("role") == "user"
    ]
    users = [u for u in users if u is not None]
    sys_text = "\n".join(s for s in system if s) or None
    return (users[-1] if users else None), sys_text, len(users)


def _drop_cached_copies(
    items: list[tuple[ReplayRecord, bool]], keep: bool
) -> tuple[list[ReplayRecord], list[int | None]]:
    """Drop responses served from a cache that repeat another response of the same
    prompt and model (copies of one draw); returns (kept, dropped lines)."""
    if keep:
        return [r for r, _ in items], []
    seen: dict[tuple, set[str]] = {}
    for r, cached in items:
        if not cached:
            seen.setdefault((r.prompt, r.system_prompt, r.model), set()).add(r.response.strip())
    kept, dropped = [], []
    for r, cached in items:
        key = (r.prompt, r.system_prompt, r.model)
        if cached:
            texts = seen.setdefault(key, set())
            if r.response.strip() in texts:
                dropped.append(r.line)
                continue
            texts.add(r.response.strip())
        kept.append(r)
    return kept, dropped


def _repeat_note(records: Sequence[ReplayRecord]) -> list[str]:
    counts = Counter((r.prompt, r.system_prompt, r.model, r.response.strip()) for r in records)
    repeats = sum(c - 1 for c in counts.values() if c > 1)
    if not repeats:
        return []
    return [
        f"{repeats} response(s) repeat another response to the same prompt word for word: "
        "separate calls that came out the same (the model repeats itself), kept as samples. "
        "If they are copies of one cached call, they are not independent samples."
    ]


# --------------------------------------------------------------------------- promptfoo
def _promptfoo_results(text: str, source: str) -> tuple[list[tuple[int | None, Any, str | None]], str]:
    stripped = text.lstrip()
    if not stripped:
        raise ImportFormatError(f"{source}: the file is empty")
    if stripped.startswith("["):  # a bare list of results (promptfoo's node API)
        data = _whole_json(text)
        if isinstance(data, list):
            offsets = _array_offsets(text, ())
            lines = _Lines(text)
            return [
                (lines(offsets[i]) if offsets and i < len(offsets) else None, r, None)
                for i, r in enumerate(data)
            ], "promptfoo JSON (a list of results)"
    if stripped.startswith("{"):
        data = _whole_json(text)  # None: perhaps JSONL, one object per line
        if isinstance(data, dict):
            if isinstance(data.get("results"), dict) and isinstance(data["results"].get("results"), list):
                keys: tuple[str, ...] = ("results", "results")
                results = data["results"]["results"]
            elif isinstance(data.get("results"), list):
                keys, results = ("results",), data["results"]
            elif "promptIdx" in data or "response" in data:
                return [(1, data, None)], "promptfoo (one result)"
            else:
                raise ImportFormatError(
                    f"{source}: not a promptfoo output file (no 'results' list). Write one "
                    "with `promptfoo eval --repeat N -o results.json` (or .jsonl)."
                )
            offsets = _array_offsets(text, keys)
            lines = _Lines(text)
            out: list[tuple[int | None, Any, str | None]] = [
                (lines(offsets[i]) if offsets and i < len(offsets) else None, r, None)
                for i, r in enumerate(results)
            ]
            return (
                out,
                f"promptfoo JSON (version {data.get('results', {}).get('version', '?')})"
                if isinstance(data.get("results"), dict)
                else "promptfoo JSON",
            )
    return list(_jsonl_objects(text)), "promptfoo JSONL"


def import_promptfoo(path: str | os.PathLike, *, keep_cached_copies: bool = False) -> ImportResult:
    """Responses from a promptfoo output file (see the module docstring).

    ``keep_cached_copies`` keeps responses promptfoo took from its cache even when
    they repeat another response word for word (they are then not independent).
    """
    source = str(path)
    if source.lower().endswith((".csv", ".html", ".yaml", ".yml", ".xml", ".txt")):
        raise ImportFormatError(
            f"{source}: promptfoo's {Path(source).suffix[1:].upper()} output does not keep each "
            "response with its prompt; write JSON or JSONL instead "
            "(`promptfoo eval --repeat N -o results.json`)"
        )
    text = _read_text(path)
    entries, fmt = _promptfoo_results(text, source)
    problems: list[ImportProblem] = []
    items: list[tuple[ReplayRecord, bool]] = []
    multi_turn = 0
    for n, (line, r, error) in enumerate(entries, 1):
        where = line if line is not None else None
        tag = "" if line is not None else f"result {n}: "
        if error:
            problems.append(ImportProblem(where, tag + error))
            continue
        if not isinstance(r, Mapping):
            problems.append(ImportProblem(where, tag + "a result must be a JSON object"))
            continue
        prompt_obj = r.get("prompt")
        raw = prompt_obj.get("raw") if isinstance(prompt_obj, Mapping) else prompt_obj
        if not isinstance(raw, str) or not raw.strip():
            problems.append(ImportProblem(where, tag + "no prompt (expected prompt.raw)"))
            continue
        prompt, system = raw, None
        if raw.lstrip().startswith("["):
            try:
                msgs = json.loads(raw)
            except (json.JSONDecodeError, RecursionError):
                msgs = None
            p, s, users = _from_messages(msgs)
            if p is not None:
                prompt, system = p, s
                multi_turn += users > 1
        resp = r.get("response")
        err = r.get("error") or (resp.get("error") if isinstance(resp, Mapping) else None)
        output = resp.get("output") if isinstance(resp, Mapping) else None
        if output is None:
            why = f"the call failed ({str(err)[:200]})" if err else "no response.output"
            problems.append(ImportProblem(where, tag + why))
            continue
        if isinstance(resp, Mapping) and resp.get("error"):
            problems.append(ImportProblem(where, tag + f"the call failed ({str(resp['error'])[:200]})"))
            continue
        if not isinstance(output, str):
            output = json.dumps(output, ensure_ascii=False, sort_keys=True)
        prov = r.get("provider")
        model = (prov.get("label") or prov.get("id")) if isinstance(prov, Mapping) else prov
        cached = bool(isinstance(resp, Mapping) and resp.get("cached") is True) or bool(
            isinstance(r.get("gradingResult"), Mapping)
            and (r["gradingResult"].get("metadata") or {}).get("cachedResponse") is True
        )
        items.append((ReplayRecord(prompt, output, str(model) if model else None, system, where), cached))
    records, dropped = _drop_cached_copies(items, keep_cached_copies)
    notes: list[str] = []
    if dropped:
        shown = ", ".join(str(x) for x in dropped[:12] if x is not None)
        lines_at = (
            (f": line{'s' if len(dropped) > 1 else ''} {shown}{' …' if len(dropped) > 12 else ''}")
            if shown
            else ""
        )
        notes.append(
            f"dropped {len(dropped)} response(s) promptfoo served from its cache that "
            f"repeat another response of the same prompt (copies of one draw, not "
            f"independent samples){lines_at}. Run promptfoo with --no-cache (or keep "
            "them with `dbpa import --keep-cached-copies`)."
        )
    n_cached = sum(c for _, c in items) - len(dropped)
    if n_cached:
        notes.append(
            f"{n_cached} response(s) came from promptfoo's cache (recorded in an "
            "earlier run); each is kept once."
        )
    if multi_turn:
        notes.append(
            f"{multi_turn} result(s) hold a conversation: the last user message is taken as the prompt."
        )
    notes += _repeat_note(records)
    return ImportResult(source, fmt, tuple(records), tuple(problems), tuple(notes))


# --------------------------------------------------------------------------- OpenAI Batch
def _batch_prompt(url: str, body: Mapping[str, Any]) -> tuple[str | None, str | None, str]:
    """(prompt, system prompt, kind) of one Batch API request body."""
    if "chat/completions" in url or "messages" in body:
        p, s, _ = _from_messages(body.get("messages"))
        return p, s, "chat"
    if url.endswith("/responses") or "input" in body:
        inp = body.get("input")
        instr = body.get("instructions") if isinstance(body.get("instructions"), str) else None
        if isinstance(inp, str):
            return inp, instr, "responses"
        p, s, _ = _from_messages(inp)
        return p, "\n".join(x for x in (instr, s) if x) or None, "responses"
    if "completions" in url or "prompt" in body:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        return (prompt if isinstance(prompt, str) else None), None, "completions"
    return None, None, "other"


def _batch_texts(body: Mapping[str, Any]) -> list[str | None]:
    """The generated texts of one response body (one per choice)."""
    if isinstance(body.get("choices"), list):
        out: list[str | None] = []
        for c in sorted(body["choices"], key=lambda c: c.get("index", 0) if isinstance(c, Mapping) else 0):
            if not isinstance(c, Mapping):
                out.append(None)
            elif isinstance(c.get("message"), Mapping):
                out.append(_text_of(c["message"].get("content")))
            else:
                out.append(c.get("text") if isinstance(c.get("text"), str) else None)
        return out
    if isinstance(body.get("output"), list):
        parts = [
            p.get("text")
            for item in body["output"]
            if isinstance(item, Mapping) and item.get("type") == "message"
            for p in item.get("content") or []
            if isinstance(p, Mapping) and p.get("type") == "output_text"
        ]
        return ["".join(x for x in parts if isinstance(x, str))] if parts else [None]
    if isinstance(body.get("output_text"), str):
        return [body["output_text"]]
    return [None]


def import_openai_batch(
    output_path: str | os.PathLike, requests_path: str | os.PathLike | None
) -> ImportResult:
    """Responses from an OpenAI Batch API output file, prompts from its requests file."""
    source = str(output_path)
    if requests_path is None:
        raise ImportFormatError(
            f"{source}: a Batch API output file holds no prompts; give the requests file "
            "that was uploaded for the batch as well (--requests FILE)"
        )
    req_text = _read_text(requests_path)
    requests: dict[str, tuple[str, Mapping[str, Any], int]] = {}
    problems: list[ImportProblem] = []
    for line, obj, error in _jsonl_objects(req_text):
        if (
            error
            or not isinstance(obj, Mapping)
            or not isinstance(obj.get("custom_id"), str)
            or not isinstance(obj.get("body"), Mapping)
        ):
            problems.append(
                ImportProblem(
                    None,
                    f"requests file line {line}: "
                    + (error or 'expected {"custom_id", "method", "url", "body"}'),
                )
            )
            continue
        if obj["custom_id"] in requests:
            problems.append(
                ImportProblem(
                    None, f"requests file line {line}: custom_id {obj['custom_id']!r} appears twice"
                )
            )
            continue
        requests[obj["custom_id"]] = (str(obj.get("url", "")), obj["body"], line)
    if not requests:
        raise ImportFormatError(
            f"{requests_path}: no Batch API requests found "
            '(lines of {"custom_id", "method", "url", "body"})'
        )
    text = _read_text(output_path)
    _not_jsonl(
        text, source, "a Batch API output file (JSONL: one line per request, as the Batch API writes it)"
    )
    records: list[ReplayRecord] = []
    answered: dict[str, int] = {}
    for line, obj, error in _jsonl_objects(text):
        if error:
            problems.append(ImportProblem(line, error))
            continue
        if not isinstance(obj, Mapping) or "custom_id" not in obj:
            problems.append(
                ImportProblem(
                    line, 'expected a Batch API output line ({"id", "custom_id", "response", "error"})'
                )
            )
            continue
        cid = obj["custom_id"]
        if not isinstance(cid, str):
            problems.append(ImportProblem(line, f"custom_id {cid!r} is not text"))
            continue
        if cid in answered:
            problems.append(
                ImportProblem(
                    line,
                    f"request {cid!r} is answered a second time "
                    f"(first on line {answered[cid]}); each request has "
                    "one answer, so this one was not imported",
                )
            )
            continue
        answered[cid] = line
        err = obj.get("error")
        resp = obj.get("response")
        if err:
            msg = err.get("message") if isinstance(err, Mapping) else err
            code = err.get("code") if isinstance(err, Mapping) else None
            problems.append(
                ImportProblem(line, f"request {cid!r} failed{f' ({code})' if code else ''}: {msg}")
            )
            continue
        if not isinstance(resp, Mapping) or not isinstance(resp.get("body"), Mapping):
            problems.append(ImportProblem(line, f"request {cid!r} has no response body"))
            continue
        if resp.get("status_code") not in (200, None):
            body_err = resp["body"].get("error")
            msg = body_err.get("message") if isinstance(body_err, Mapping) else body_err
            problems.append(
                ImportProblem(
                    line, f"request {cid!r} failed with HTTP {resp.get('status_code')}: {msg or 'no message'}"
                )
            )
            continue
        if cid not in requests:
            problems.append(ImportProblem(line, f"no request with custom_id {cid!r} in the requests file"))
            continue
        url, body, _ = requests[cid]
        prompt, system, kind = _batch_prompt(url, body)
        if kind == "other" or prompt is None:
            problems.append(
                ImportProblem(
                    line,
                    f"request {cid!r} is not a text-generation request with a prompt ({url or 'no url'})",
                )
            )
            continue
        model = body.get("model") or resp["body"].get("model")
        if resp["body"].get("choices") == []:
            problems.append(
                ImportProblem(
                    line,
                    f"request {cid!r} was answered with no choices "
                    "(an empty 'choices' list): no text to import",
                )
            )
            continue
        texts = _batch_texts(resp["body"])
        for i, t in enumerate(texts):
            if t is None:
                problems.append(
                    ImportProblem(line, f"request {cid!r}, choice {i}: no text (a refusal or a tool call?)")
                )
                continue
            records.append(ReplayRecord(prompt, t, str(model) if model else None, system, line))
    notes = _repeat_note(records)
    unanswered = [c for c in requests if c not in answered]
    if unanswered:
        notes.insert(
            0,
            f"{len(unanswered)} request(s) have no line in this output file "
            f"(e.g. {unanswered[0]!r}): failed ones are in the batch's error file, "
            "expired ones were never run.",
        )
    return ImportResult(source, "OpenAI Batch API", tuple(records), tuple(problems), tuple(notes))


# --------------------------------------------------------------------------- CSV / JSONL
def _field(row: Mapping[str, str], name: str) -> tuple[bool, str | None]:
    return name in row, row.get(name)


def _dig(obj: Any, path: str) -> tuple[bool, Any]:
    if isinstance(obj, Mapping) and path in obj:
        return True, obj[path]
    cur = obj
    for part in path.split("."):
        if isinstance(cur, Mapping) and part in cur:
            cur = cur[part]
        elif isinstance(cur, list) and part.isdigit() and int(part) < len(cur):
            cur = cur[int(part)]
        else:
            return False, None
    return True, cur


def import_table(
    path: str | os.PathLike,
    *,
    prompt_column: str,
    response_column: str,
    model_column: str | None = None,
    system_column: str | None = None,
    fmt: str | None = None,
) -> ImportResult:
    """Responses from any CSV / TSV (header row) or JSONL file with the given columns.

    ``fmt`` is ``"csv"`` or ``"jsonl"`` (default: from the file's extension, ``.tsv``
    is tab-separated). Empty prompts or responses, missing fields and rows with
    more or fewer fields than the header are problems with their line.
    """
    source = str(path)
    for name, value in (("prompt_column", prompt_column), ("response_column", response_column)):
        if not isinstance(value, str) or not value.strip():
            raise ImportFormatError(f"give the {name.replace('_', ' ')} name")
    fmt = fmt or ("jsonl" if str(path).lower().endswith((".jsonl", ".ndjson", ".json")) else "csv")
    if fmt not in ("csv", "jsonl"):
        raise ImportFormatError(f"format {fmt!r} must be csv or jsonl")
    text = _read_text(path)
    cols = {
        "prompt": prompt_column,
        "response": response_column,
        "model": model_column,
        "system_prompt": system_column,
    }
    problems: list[ImportProblem] = []
    records: list[ReplayRecord] = []

    def take(line: int, get: Callable[[str], Any]) -> None:
        vals: dict[str, Any] = {}
        for role, col in cols.items():
            if col is None:
                continue
            found, v = get(col)
            required = role in ("prompt", "response")
            if not found:
                if required:
                    problems.append(ImportProblem(line, f"no {col!r} field"))
                    return
                continue
            if v is None or (isinstance(v, str) and not v.strip()):
                if required:
                    problems.append(ImportProblem(line, f"the {role} ({col!r}) is empty"))
                    return
                continue
            if isinstance(v, (int, float)) and not isinstance(v, bool) and role == "model":
                v = str(v)
            if not isinstance(v, str):
                problems.append(ImportProblem(line, f"{col!r} is not text ({type(v).__name__})"))
                return
            vals[role] = v
        records.append(
            ReplayRecord(vals["prompt"], vals["response"], vals.get("model"), vals.get("system_prompt"), line)
        )

    if fmt == "jsonl":
        for line, obj, error in _jsonl_objects(text):
            if error:
                problems.append(ImportProblem(line, error))
            elif not isinstance(obj, Mapping):
                problems.append(ImportProblem(line, "a line must be a JSON object"))
            else:
                take(line, functools.partial(_dig, obj))
    else:
        delimiter = "\t" if str(path).lower().endswith(".tsv") else None
        if delimiter is None:
            try:
                delimiter = csv.Sniffer().sniff(text[:4096], delimiters=",;\t|").delimiter
            except csv.Error:
                delimiter = ","
        reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
        header = csv_header(reader, source, ImportFormatError)
        header = [h.strip() for h in header]
        wanted = [c for c in cols.values() if c is not None]
        missing = [c for c in wanted if c not in header]
        if missing:
            raise ImportFormatError(
                f"{source}: no column {', '.join(repr(c) for c in missing)} in the header; "
                f"the columns are {', '.join(repr(h) for h in header)}"
            )
        start = reader.line_num + 1
        while True:
            try:
                row = next(reader)
            except StopIteration:
                break
            except csv.Error as exc:
                problems.append(ImportProblem(start, f"not valid CSV ({exc})"))
                break
            if not any(c.strip() for c in row):
                start = reader.line_num + 1
                continue
            if len(row) != len(header):
                problems.append(ImportProblem(start, f"has {len(row)} fields, the header has {len(header)}"))
            else:
                d = dict(zip(header, row, strict=True))
                take(start, functools.partial(_field, d))
            start = reader.line_num + 1
    return ImportResult(source, fmt.upper(), tuple(records), tuple(problems), tuple(_repeat_note(records)))


# --------------------------------------------------------------------------- dispatch
def _whole_json(text: str) -> Any:
    """The file as one JSON value, or None when it is not one (JSONL, CSV, ...)."""
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return None


def _kind(value: Any) -> str:
    return {
        dict: "object",
        list: "array",
        str: "string",
        bool: "true/false",
        int: "number",
        float: "number",
        type(None): "null",
    }.get(type(value), type(value).__name__)


def _not_jsonl(text: str, source: str, expected: str) -> None:
    """Refuse a file that is one JSON value over several lines (or an array, or a bare
    number) where one JSON object per line is expected, naming what it is."""
    stripped = text.strip()
    if not stripped or stripped[0] not in '[{"-0123456789tfn':
        return
    data = _whole_json(stripped)
    if data is None or (isinstance(data, dict) and "\n" not in stripped):
        return
    what = f"one JSON {_kind(data)}" + (
        f" over {stripped.count(chr(10)) + 1} lines" if isinstance(data, dict) else ""
    )
    raise ImportFormatError(f"{source}: holds {what}, not {expected}")


def _looks_like_promptfoo(obj: Any) -> bool:
    return isinstance(obj, Mapping) and (
        "promptIdx" in obj
        or "testIdx" in obj
        or (isinstance(obj.get("provider"), Mapping) and "response" in obj)
    )


def detect_format(path: str | os.PathLike, *, requests: str | os.PathLike | None = None) -> str:
    """``promptfoo``, ``openai-batch``, ``jsonl`` or ``csv``, from the file's content.

    A requests file (``requests``) means an OpenAI Batch output file unless the content
    is clearly promptfoo's. A file that is one JSON number, string or array of something
    else is refused, naming what it holds."""
    text = _read_text(path)
    head = text.lstrip()[:200_000]
    if str(path).lower().endswith((".csv", ".tsv")):
        return "csv"
    first = next((obj for _, obj, err in _jsonl_objects(head.split("\n", 1)[0]) if not err), None)
    if isinstance(first, Mapping):
        if "custom_id" in first and ("response" in first or "error" in first):
            return "openai-batch"
        if _looks_like_promptfoo(first):
            return "promptfoo"
    data = (
        _whole_json(text)
        if head[:1] in ("{", "[")
        or head[:1].isdigit()
        or head[:1] in ('"', "-")
        or head.rstrip() in ("true", "false", "null")
        else None
    )
    if isinstance(data, Mapping) and ("evalId" in data or isinstance(data.get("results"), (Mapping, list))):
        return "promptfoo"
    if isinstance(data, list) and data and all(_looks_like_promptfoo(r) for r in data):
        return "promptfoo"
    if requests is not None:
        return "openai-batch"
    if isinstance(data, Mapping) and "custom_id" in data:
        return "openai-batch"
    if data is not None and not isinstance(data, Mapping):
        raise ImportFormatError(
            f"{path}: holds one JSON {_kind(data)}, not recorded responses: expected promptfoo "
            "output (JSON or JSONL), an OpenAI Batch output file (JSONL, with --requests) or "
            "a CSV / JSONL table"
        )
    if head.startswith("{"):
        return "jsonl"
    return "csv"


def import_file(
    path: str | os.PathLike,
    fmt: str = "auto",
    *,
    requests: str | None = None,
    prompt_column: str | None = None,
    response_column: str | None = None,
    model_column: str | None = None,
    system_column: str | None = None,
    keep_cached_copies: bool = False,
) -> ImportResult:
    """Read ``path`` in format ``fmt`` (``auto`` detects it; giving column names
    means a CSV / JSONL table)."""
    if fmt == "auto":
        fmt = "table" if prompt_column or response_column else detect_format(path, requests=requests)
        if fmt in ("csv", "jsonl") and not (prompt_column and response_column):
            raise ImportFormatError(
                f"{path} looks like a {fmt.upper()} table: name its columns with "
                "--prompt-column and --response-column"
            )
    if fmt == "promptfoo":
        return import_promptfoo(path, keep_cached_copies=keep_cached_copies)
    if fmt == "openai-batch":
        return import_openai_batch(path, requests)
    if fmt in ("csv", "jsonl", "table"):
        if not (prompt_column and response_column):
            raise ImportFormatError("a CSV / JSONL import needs --prompt-column and --response-column")
        return import_table(
            path,
            prompt_column=prompt_column,
            response_column=response_column,
            model_column=model_column,
            system_column=system_column,
            fmt=None if fmt == "table" else fmt,
        )
    raise ImportFormatError(f"unknown format {fmt!r}: choose auto, {', '.join(FORMATS)}")


def imports_dir() -> Path:
    """Where the dashboard keeps imported replay files: ``imports`` in ``DBPA_HOME``
    (:func:`dbpa_core.home.dbpa_home`), next to the saved models that point at them, so
    they outlive the cache and a reload."""
    from .home import dbpa_home

    return dbpa_home() / "imports"


def stored_name(stem: str, content: str) -> str:
    """A file name for imported records that changes when their content changes."""
    safe = "".join(c if c.isalnum() or c in "-_" else "-" for c in stem)[:40].strip("-") or "import"
    return f"{safe}-{hashlib.sha256(content.encode()).hexdigest()[:10]}.jsonl"


__all__ = [
    "FORMATS",
    "ImportFormatError",
    "ImportProblem",
    "ImportResult",
    "ReplayRecord",
    "detect_format",
    "import_file",
    "import_openai_batch",
    "import_promptfoo",
    "import_table",
    "imports_dir",
    "stored_name",
]
