"""MkDocs hooks: the manual's reference pages that are generated from the code at build time.

* ``reference/cli.md`` from the ``dbpa`` command's argparse parser: every command and
  sub-command (found by walking the parser's sub-parsers, however the commands are split
  into modules), its usage line, its help and a table of its arguments;
* ``reference/spec.md`` and ``reference/battery-spec.md`` from the JSON Schemas of an audit
  spec and a battery spec (``dbpa_core.spec_schema.json_schema()``,
  ``dbpa_core.attacks.schema.json_schema()``): every key with its type, default, allowed
  values and description. Without such a module its page is neither generated nor named
  in the navigation.

Nothing here is copied by hand: a new option or spec key appears in the manual on the next
build. The functions are plain so that ``tests/test_docs.py`` can call them directly.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _import_path() -> None:
    if str(ROOT) not in sys.path:  # the build runs from anywhere: import this checkout
        sys.path.insert(0, str(ROOT))


# ---------------------------------------------------------------- the command line


def _cell(text: Any) -> str:
    """Text for one cell of a markdown table: one line, pipes and angle brackets escaped."""
    s = " ".join(str(text).split())
    return s.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def _commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], str, argparse.ArgumentParser]]:
    """(words after ``dbpa``, the help the parent gave it, the sub-parser) for every
    command and sub-command, depth first, in the order they were added."""
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        helps = {a.dest: a.help or "" for a in action._choices_actions}
        seen: set[int] = set()
        for name, child in action.choices.items():
            if id(child) in seen:  # an alias
                continue
            seen.add(id(child))
            yield (*path, name), helps.get(name, ""), child
            yield from _commands(child, (*path, name))


def _argument_rows(parser: argparse.ArgumentParser, common: frozenset[str] = frozenset()) -> list[str]:
    """One table row per argument; ``common`` options (those every command takes, listed
    once at the top) are left out of a command's table."""
    rows = []
    for a in parser._actions:
        if (
            isinstance(a, (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction))
            or a.help == argparse.SUPPRESS
        ):
            continue
        if a.default == argparse.SUPPRESS and set(a.option_strings) & common:
            continue
        if a.option_strings:
            names = ", ".join(f"`{o}`" for o in a.option_strings)
            if a.nargs != 0:
                names += f" `{a.metavar or a.dest.upper()}`"
        else:
            names = f"`{a.metavar or a.dest}`"
        default = a.default
        shown = "" if default in (None, False, argparse.SUPPRESS, [], "") else f"`{default}`"
        helptext = (a.help or "").replace("%(default)s", str(default))
        if a.choices:
            helptext += " (one of: " + ", ".join(str(c) for c in a.choices) + ")"
        if a.nargs in ("+", "*"):
            helptext += " (one or more)" if a.nargs == "+" else " (any number)"
        rows.append(f"| {_cell(names)} | {_cell(shown)} | {_cell(helptext)} |")
    return rows


def cli_markdown(parser: argparse.ArgumentParser | None = None) -> str:
    """The command-line reference, generated from ``dbpa``'s parser."""
    if parser is None:
        _import_path()
        from dbpa_core.cli import build_parser

        parser = build_parser()
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "78"  # argparse wraps usage lines at the terminal's width
    try:
        out = [
            "# Command line reference",
            "",
            "Generated from the `dbpa` command's own parser when this manual is built, so "
            "it lists exactly the options of this version. `dbpa COMMAND --help` prints "
            "the same in a terminal. `--cache-dir`, `--home` and `--quiet` are accepted "
            "before or after any command.",
            "",
            "Exit codes: 0 done, 1 a gate failed (`--fail-on`, `--max-asr`, "
            "`--fail-on-change`), 2 a mistake in the input or the setup (one line says "
            "which), 3 a backend failure (key, server, model, malformed answers), "
            "130 stopped.",
            "",
            "```text",
            parser.format_usage().strip(),
            "```",
            "",
        ]
        if parser.description:
            out += [parser.description, ""]
        rows = _argument_rows(parser)
        if rows:
            out += ["| argument | default | meaning |", "|---|---|---|", *rows, ""]
        common = frozenset(o for a in parser._actions for o in a.option_strings)
        for words, helptext, child in _commands(parser):
            out += [f"{'#' * min(len(words) + 1, 4)} `dbpa {' '.join(words)}`", ""]
            text = child.description or helptext
            if text:
                out += [text.strip()[0].upper() + text.strip()[1:] + ".", ""]
            out += ["```text", child.format_usage().strip(), "```", ""]
            rows = _argument_rows(child, common)
            if rows:
                out += ["| argument | default | meaning |", "|---|---|---|", *rows, ""]
        return "\n".join(out)
    finally:
        if old is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old


# ---------------------------------------------------------------- the spec's schema


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """(the definition's name, the definition) for a ``$ref``; (None, node) otherwise."""
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        name = ref.rsplit("/", 1)[-1]
        return name, defs.get(name, {})
    return None, node


def _type(node: dict[str, Any], defs: dict[str, Any]) -> str:
    """A short, readable type: ``integer``, ``list of string``, ``ModelConfig``, ``a | b``."""
    if len(node.get("allOf", [])) == 1:  # draft-07 wraps a described $ref in allOf
        node = {**node, **node["allOf"][0]}
        node.pop("allOf")
    name, node = _resolve(node, defs)
    if name:
        return f"[{node.get('title', name)}](#{_anchor(name)})" if _is_object(node) else _type(node, defs)
    if "const" in node:
        return f"`{json.dumps(node['const'])}`"
    if "enum" in node:
        return " \\| ".join(f"`{json.dumps(v)}`" for v in node["enum"])
    for key in ("anyOf", "oneOf"):
        if key in node:
            parts = [_type(n, defs) for n in node[key] if n.get("type") != "null"]
            return " or ".join(dict.fromkeys(parts)) or "null"
    t = node.get("type")
    if isinstance(t, list):
        return " or ".join(x for x in t if x != "null")
    if t == "array":
        items = node.get("items")
        return f"list of {_type(items, defs)}" if isinstance(items, dict) else "list"
    if t == "object" and isinstance(node.get("additionalProperties"), dict):
        return f"mapping of {_type(node['additionalProperties'], defs)}"
    return str(t or "any")


def _is_object(node: dict[str, Any]) -> bool:
    return node.get("type") == "object" and "properties" in node


def _anchor(name: str) -> str:
    return "def-" + "".join(c if c.isalnum() else "-" for c in name.lower())


def _object_refs(node: Any, defs: dict[str, Any]) -> Iterator[str]:
    """Names of the object definitions a node refers to, in the order they appear."""
    if isinstance(node, dict):
        name, target = _resolve(node, defs)
        if name and _is_object(target):
            yield name
        for v in node.values():
            yield from _object_refs(v, defs)
    elif isinstance(node, list):
        for v in node:
            yield from _object_refs(v, defs)


def _property_table(node: dict[str, Any], defs: dict[str, Any]) -> list[str]:
    required = set(node.get("required", []))
    rows = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for key, prop in node.get("properties", {}).items():
        default = (
            "required"
            if key in required
            else f"`{json.dumps(prop['default'])}`"
            if prop.get("default") is not None
            else "—"
        )  # None: not set unless given
        _, target = _resolve(prop, defs)
        desc = prop.get("description") or target.get("description") or ""
        rows.append(f"| `{key}` | {_type(prop, defs)} | {_cell(default)} | {_cell(desc)} |")
    return rows


# (navigation title, page, module with json_schema(), what the spec is for)
SCHEMA_PAGES = (
    ("Audit spec", "reference/spec.md", "dbpa_core.spec_schema", "an audit spec (`dbpa audit`)"),
    (
        "Battery spec",
        "reference/battery-spec.md",
        "dbpa_core.attacks.schema",
        "a robustness battery spec (`dbpa attack`)",
    ),
)


def _json_schema(module: str) -> dict[str, Any] | None:
    """``module.json_schema()``, or None when this version has no such module."""
    _import_path()
    try:
        found = importlib.import_module(module)
    except ImportError:
        return None
    function = getattr(found, "json_schema", None)
    return function() if callable(function) else None


def spec_markdown(schema: dict[str, Any] | None = None, what: str = "an audit spec") -> str:
    """A spec reference, generated from the spec's JSON Schema: the top-level keys, then one
    table per kind of nested object (a model, an embedder, a check, ...)."""
    if schema is None:
        schema = _json_schema(SCHEMA_PAGES[0][2])
        if schema is None:
            raise ImportError("dbpa_core.spec_schema.json_schema is not in this version")
    defs = schema.get("$defs", schema.get("definitions", {}))
    out = [
        f"# {schema.get('title', 'Spec')} reference",
        "",
        f"Generated from the JSON Schema of {what} when this manual is built, so it "
        "lists exactly the keys this version reads. A spec is a YAML file; unknown keys "
        "are refused before any call, with the file and the line.",
        "",
    ]
    if schema.get("description"):
        out += [schema["description"].strip(), ""]
    out += ["## Top-level keys", "", *_property_table(schema, defs), ""]
    done: set[str] = set()
    queue = list(dict.fromkeys(_object_refs(schema.get("properties", {}), defs)))
    while queue:
        name = queue.pop(0)
        if name in done:
            continue
        done.add(name)
        node = defs[name]
        out += [f"## {node.get('title', name)} {{#{_anchor(name)}}}", ""]
        if node.get("description"):
            out += [node["description"].strip(), ""]
        out += [*_property_table(node, defs), ""]
        queue += [n for n in _object_refs(node.get("properties", {}), defs) if n not in done]
    return "\n".join(out)


def spec_schema_available() -> bool:
    """Whether this version has the audit spec's schema."""
    return _json_schema(SCHEMA_PAGES[0][2]) is not None


# ---------------------------------------------------------------- MkDocs


def on_config(config: Any) -> Any:
    """Name the spec references in the navigation, after the command line, for the schemas
    this version has (MkDocs hook)."""
    for section in config["nav"] or []:
        pages = section.get("Reference") if isinstance(section, dict) else None
        if not isinstance(pages, list):
            continue
        named = {title for p in pages if isinstance(p, dict) for title in p}
        at = 1
        for title, page, module, _ in SCHEMA_PAGES:
            if title not in named and _json_schema(module) is not None:
                pages.insert(at, {title: page})
                at += 1
    return config


def on_files(files: Any, config: Any) -> Any:
    """Add the generated pages to the site's files (MkDocs hook)."""
    from mkdocs.structure.files import File

    files.append(File.generated(config, "reference/cli.md", content=cli_markdown()))
    for _, page, module, what in SCHEMA_PAGES:
        schema = _json_schema(module)
        if schema is not None:
            files.append(File.generated(config, page, content=spec_markdown(schema, what)))
    return files
