"""``dbpa import FILE --out replay.jsonl``: turn promptfoo, OpenAI Batch or CSV/JSONL
output into a replay file (:mod:`dbpa_core.importers`), with a starter spec on request."""

from __future__ import annotations

import argparse
import os
import sys


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    i = sub.add_parser("import", help="turn promptfoo, OpenAI Batch or CSV/JSONL output into a replay file")
    i.add_argument("file")
    i.add_argument(
        "--from", dest="fmt", default="auto", choices=["auto", "promptfoo", "openai-batch", "csv", "jsonl"]
    )
    i.add_argument("--requests", help="OpenAI Batch: the requests file that was uploaded")
    i.add_argument("--prompt-column", help="CSV/JSONL: the column with the prompt")
    i.add_argument("--response-column", help="CSV/JSONL: the column with the response")
    i.add_argument("--model-column", help="CSV/JSONL: the column with the model name (optional)")
    i.add_argument("--system-column", help="CSV/JSONL: the column with the system prompt (optional)")
    i.add_argument("--out", help="replay file to write (default: next to FILE, .replay.jsonl)")
    i.add_argument(
        "--spec-out",
        metavar="SPEC_FILE_OUT",
        help="also write a starter audit spec for the imported responses",
    )
    i.add_argument(
        "--force",
        action="store_true",
        help="replace --out / --spec-out when they exist (never the input file)",
    )
    i.add_argument(
        "--skip-bad",
        action="store_true",
        help="import the good rows when some are malformed (each is still listed)",
    )
    i.add_argument(
        "--keep-cached-copies",
        action="store_true",
        help="promptfoo: keep cached responses that repeat another word for word",
    )
    return i


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ..importers import ImportFormatError, import_file, output_problem, write_atomic

    out = args.out or str(Path(args.file).with_suffix("")) + ".replay.jsonl"
    inputs = [args.file] + ([args.requests] if args.requests else [])
    targets = [out] + ([args.spec_out] if args.spec_out else [])
    if args.spec_out and os.path.abspath(args.spec_out) == os.path.abspath(out):
        targets = [out]
        problems = ["--spec-out and --out name the same file; give two paths"]
    else:
        problems = []
    # every output is checked before the input is read: nothing is read, nothing is lost
    problems += [p for p in (output_problem(t, inputs=inputs, force=args.force) for t in targets) if p]
    if problems:
        print(f"error: {problems[0]}; nothing was written.", file=sys.stderr)
        return 2
    try:
        result = import_file(
            args.file,
            args.fmt,
            requests=args.requests,
            prompt_column=args.prompt_column,
            response_column=args.response_column,
            model_column=args.model_column,
            system_column=args.system_column,
            keep_cached_copies=args.keep_cached_copies,
        )
    except ImportFormatError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for p in result.problems[:50]:
        print(f"{'skipped' if args.skip_bad else 'bad row'}: {args.file}, {p}", file=sys.stderr)
    if len(result.problems) > 50:
        print(f"... and {len(result.problems) - 50} more", file=sys.stderr)
    if result.problems and not args.skip_bad:
        print(
            f"error: {len(result.problems)} row(s) could not be imported; nothing was written. "
            f"Fix them, or pass --skip-bad to import the other {len(result.records)}.",
            file=sys.stderr,
        )
        return 2
    if not result.records:
        print(f"error: {args.file}: no usable responses", file=sys.stderr)
        return 2
    files = {out: result.to_jsonl()}
    if args.spec_out:
        spec_dir = str(Path(args.spec_out).resolve().parent)
        files[args.spec_out] = result.starter_spec(str(Path(out).resolve()), spec_dir=spec_dir)
    try:
        write_atomic(files)  # all or nothing: never a partial replay file that reads as valid
    except OSError as exc:
        print(
            f"error: cannot write {' and '.join(files)} ({exc.strerror or exc}); nothing was "
            "written and the input is unchanged.",
            file=sys.stderr,
        )
        return 2
    print(result.summary())
    if result.problems:
        print(f"skipped {len(result.problems)} malformed row(s), listed above.")
    print(f"wrote {out}")
    if args.spec_out:
        print(f"wrote {args.spec_out}: check it, then run `dbpa audit {args.spec_out}`")
    else:
        print(
            f"Use it as a model: {{backend: replay, file: {out}}} (or --spec-out SPEC.yaml "
            "for a starter spec)."
        )
    return 0
