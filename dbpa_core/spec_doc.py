"""Reading a spec document: YAML with the line of every key, the limits every spec gets
(size, nesting depth, alias expansion), and the small readers each section's parser uses
to check a value and name its line in an error (:class:`SpecDoc`, :func:`get_value`,
:func:`check_keys`, :func:`existing_path`, :func:`top_section`).

The floor below every spec section: the audit spec (:mod:`dbpa_core.spec`), its cases,
checks and schema, the model entries (:mod:`dbpa_core.spec_models`), the battery and
simulation specs and the user's own settings files (:mod:`dbpa_core.home`) read their
documents through it; it imports none of them.
"""

from __future__ import annotations

import difflib
import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from ._validate import file_problem, first_surrogate
from .backends.base import redact_url

MAX_SPEC_BYTES = 10 * 1024**2  # a spec is a page of YAML; anything this large is not one
MAX_DEPTH = 32  # nesting levels
MAX_VALUES = 20_000  # values after YAML aliases are expanded


class SpecError(ValueError):
    """A spec mistake; the message names the file and line."""


def shown_config(config: dict[str, Any]) -> dict[str, Any]:
    """A model or embedder config fit to be written out: no password in ``base_url``."""
    out = dict(config)
    if "base_url" in out:
        out["base_url"] = redact_url(out["base_url"])
    return out


def model_label(config: dict[str, Any]) -> str:
    """A short display name of a model config."""
    if config.get("label"):
        return str(config["label"])
    if config.get("backend", "local") == "local":
        t = config.get("temperature")
        return "SmolLM2-135M (local)" + (f" T={t:g}" if t is not None else "")
    if config.get("name"):
        return str(config["name"])
    return os.path.basename(str(config.get("path") or config.get("file") or "model"))


# --------------------------------------------------------------------------- YAML with lines
class SpecDoc:
    """The spec being read: its ``source`` and the line where each key stands (``lines``,
    by path), so that every section's parser names the line of an error (:meth:`err`)."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.lines: dict[tuple, int] = {}

    def err(self, path: tuple, message: str) -> SpecError:
        line = None
        p = path
        while line is None and p:
            line = self.lines.get(p)
            p = p[:-1]
        where = f"{self.source}, line {line}" if line else self.source
        return SpecError(f"{where}: {message}")

    def convert(self, node: yaml.Node, path: tuple = ()) -> Any:
        self.lines.setdefault(path, node.start_mark.line + 1)
        self.values = getattr(self, "values", 0) + 1
        if self.values > MAX_VALUES:
            raise self.err(
                path,
                f"the spec expands to more than {MAX_VALUES} values (YAML aliases that repeat each other?)",
            )
        if len(path) > MAX_DEPTH:
            raise self.err(path, f"nested more than {MAX_DEPTH} levels deep")
        if isinstance(node, yaml.MappingNode):
            _flatten_merge_keys(self, node, path)
            out: dict[str, Any] = {}
            for knode, vnode in node.value:
                if not isinstance(knode, yaml.ScalarNode):
                    self.lines[path + ("?",)] = knode.start_mark.line + 1
                    raise self.err(path + ("?",), "keys must be plain text, not lists or mappings")
                key = knode.value
                if key in out:
                    self.lines[path + (key,)] = knode.start_mark.line + 1
                    raise self.err(path + (key,), f"key {key!r} appears twice")
                self.lines[path + (key,)] = knode.start_mark.line + 1
                out[key] = self.convert(vnode, path + (key,))
            return out
        if isinstance(node, yaml.SequenceNode):
            return [self.convert(v, path + (i,)) for i, v in enumerate(node.value)]
        try:
            value = self.scalar(node)
        except (yaml.YAMLError, ValueError, TypeError, OverflowError) as exc:
            raise self.err(
                path, f"cannot read the value {node.value[:40]!r} ({getattr(exc, 'problem', None) or exc})"
            ) from None
        bad = first_surrogate(value) if isinstance(value, str) else None
        if bad:  # "\ud800" in a quoted string: half of a UTF-16 pair, not a character
            raise self.err(
                path,
                f"the text holds the escape {bad}, which is not a character "
                "(half of a UTF-16 surrogate pair): write the character itself",
            )
        return value

    def scalar(self, node: yaml.Node) -> Any:
        if not hasattr(self, "_loader"):
            self._loader = yaml.SafeLoader("")
        return self._loader.construct_object(node, deep=True)


def _flatten_merge_keys(doc: SpecDoc, node: yaml.MappingNode, path: tuple) -> None:
    """Resolve ``<<: *alias`` merge keys in place, as YAML loaders do."""
    if not any(k.tag == "tag:yaml.org,2002:merge" for k, _ in node.value):
        return
    explicit = [(k, v) for k, v in node.value if k.tag != "tag:yaml.org,2002:merge"]
    loader = yaml.SafeLoader("")
    try:
        loader.flatten_mapping(node)
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or exc
        raise doc.err(path, f"a '<<' merge key must refer to a mapping ({problem})") from None
    finally:
        loader.dispose()
    # merged keys come first; a key given here, or merged again later, overrides them
    own = {k.value for k, _ in explicit if isinstance(k, yaml.ScalarNode)}
    merged: dict[Any, tuple] = {}
    for k, v in node.value[: len(node.value) - len(explicit)]:
        if isinstance(k, yaml.ScalarNode) and k.value not in own:
            merged.pop(k.value, None)
            merged[k.value] = (k, v)
    node.value = list(merged.values()) + explicit


class _DepthLimitedLoader(yaml.SafeLoader):
    """PyYAML's composer is recursive: refuse nesting deeper than MAX_DEPTH before it
    can end in a RecursionError."""

    def __init__(self, stream: str, source: str = "<spec>") -> None:
        super().__init__(stream)
        self.depth = 0
        self.spec_source = source

    def compose_node(self, parent: Any, index: Any) -> Any:
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise SpecError(
                    f"{self.spec_source}, line {mark.line + 1}: nested more than {MAX_DEPTH} levels deep"
                )
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def _compose(text: str, source: str) -> yaml.Node | None:
    """The YAML node graph of ``text`` (one pass; nesting limited to MAX_DEPTH)."""
    loader = None
    try:
        loader = _DepthLimitedLoader(text, source)
        return loader.get_single_node()
    except yaml.reader.ReaderError as exc:  # a control character the YAML reader refuses
        line = text.count("\n", 0, max(0, exc.position)) + 1
        raise SpecError(
            f"{source}, line {line}: not valid YAML (character #x{exc.character:04x} is not allowed)"
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}, line {mark.line + 1}" if mark else source
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpecError(f"{where}: not valid YAML ({problem})") from None
    except RecursionError:  # belt and braces: the depth limit comes first
        raise SpecError(f"{source}: nested too deeply") from None
    finally:
        if loader is not None:
            loader.dispose()


def key_name(path: tuple) -> str:
    return ".".join(str(p) if not isinstance(p, int) else f"[{p}]" for p in path).replace(".[", "[")


def check_keys(doc: SpecDoc, obj: Any, allowed: set[str], path: tuple, what: str) -> dict:
    if not isinstance(obj, dict):
        raise doc.err(path, f"{what} must be a mapping of keys to values")
    for key in obj:
        if key not in allowed:
            hint = difflib.get_close_matches(str(key), sorted(allowed), n=1)
            extra = f" (did you mean {hint[0]!r}?)" if hint else f" (allowed: {', '.join(sorted(allowed))})"
            raise doc.err(path + (key,), f"unknown key {key!r} in {what}{extra}")
    return obj


def get_value(
    doc: SpecDoc,
    obj: Any,
    key: str,
    path: tuple,
    kind: Any,
    default: Any = None,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    choices: Iterable[Any] | None = None,
    required: bool = False,
) -> Any:
    if key not in obj or obj[key] is None:
        if required:
            raise doc.err(path, f"missing {key_name(path + (key,))}")
        return default
    value = obj[key]
    here = path + (key,)
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise doc.err(here, f"{key_name(here)} must be a whole number, got {value!r}")
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise doc.err(here, f"{key_name(here)} must be a number, got {value!r}")
        try:
            value = float(value)
        except OverflowError:
            value = math.inf
        if not math.isfinite(value):
            raise doc.err(here, f"{key_name(here)} must be a finite number, got {value!r}")
    if kind is str and not isinstance(value, str):
        raise doc.err(here, f"{key_name(here)} must be text, got {value!r}")
    if minimum is not None and value < minimum:
        raise doc.err(here, f"{key_name(here)} must be >= {minimum}, got {value!r}")
    if maximum is not None and value > maximum:
        raise doc.err(here, f"{key_name(here)} must be <= {maximum}, got {value!r}")
    if choices is not None and value not in choices:
        raise doc.err(here, f"{key_name(here)} must be one of {', '.join(choices)}; got {value!r}")
    return value


def existing_path(doc: SpecDoc, obj: dict, path: tuple, key: str, base_dir: Path, what: str) -> str:
    """A required file (``key == "file"``) or folder, relative to the spec's folder."""
    given = get_value(doc, obj, key, path, str, required=True)
    full = Path(given) if os.path.isabs(given) else (base_dir / given).resolve()
    if key == "file" and full.exists() and file_problem(full):
        raise doc.err(path + (key,), f"{what} {given!r} {file_problem(full)}")
    if not (full.is_file() if key == "file" else full.is_dir()):
        raise doc.err(path + (key,), f"{what} {given!r} does not exist")
    return str(full)


def read_document(data: str | dict, source: str) -> tuple[SpecDoc, Any]:
    """YAML text (or an already loaded dict) -> the line-keeping document and its data,
    with the limits every spec gets (size, nesting depth, alias expansion)."""
    doc = SpecDoc(source)
    if not isinstance(data, str):
        return doc, data
    node = _compose(data, source)
    if node is None:
        raise SpecError(f"{source}: the spec is empty")
    return doc, doc.convert(node)


def read_spec_file(path: str | os.PathLike) -> str:
    """A spec file's text: it must exist, be at most MAX_SPEC_BYTES and be UTF-8."""
    p = Path(path)
    problem = file_problem(p)
    if problem:
        raise SpecError(
            f"{path}: no such spec file"
            if problem == "no such file"
            else f"{path}: {problem}; give the path of a spec file (YAML)"
        )
    try:
        if p.stat().st_size > MAX_SPEC_BYTES:
            raise SpecError(f"{path}: larger than {MAX_SPEC_BYTES // 1024**2} MB, not a spec")
        data = p.read_bytes()
    except OSError as exc:
        raise SpecError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    return decode_utf8(data, str(path))


def top_section(top: dict, key: str, default: Any = None) -> Any:
    """A top-level section: missing or null gives the default, anything else is
    returned as it is, to be checked (``model: []`` must not mean the local model)."""
    value = top.get(key)
    if value is None:
        return {} if default is None else default
    return value


def decode_utf8(data: bytes, source: str) -> str:
    """``data`` as text, or a SpecError naming the line of the first byte that is not UTF-8."""
    try:
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise SpecError(
            f"{source}, line {line}: not UTF-8 text (byte 0x{data[exc.start]:02x}); save the file as UTF-8"
        ) from None


__all__ = [
    "MAX_DEPTH",
    "MAX_SPEC_BYTES",
    "MAX_VALUES",
    "SpecDoc",
    "SpecError",
    "check_keys",
    "decode_utf8",
    "existing_path",
    "get_value",
    "key_name",
    "model_label",
    "read_document",
    "read_spec_file",
    "shown_config",
    "top_section",
]
