"""WordNet for the word-level attacks: Debian's ``wordnet-base`` read through nltk.

Debian ships the WordNet 3.0 database files (``wordnet-base``, plus ``index.sense``
in ``wordnet-sense-index``) under ``/usr/share/wordnet`` but not the ``lexnames``
file that nltk's reader needs. :func:`install` copies the files into an nltk data
folder (by default ``<venv>/nltk_data/corpora/wordnet``, on nltk's search path) and
writes ``lexnames``; ``make venv`` runs it (``make wordnet``). When nltk finds no
WordNet but the Debian files are there, :func:`wordnet` builds the folder by itself
in the per-user data folder. Otherwise it raises :class:`WordNetMissing` with what
to run.

    python -m dbpa_core.attacks.wordnet install [--source DIR] [--target DIR]
    python -m dbpa_core.attacks.wordnet check
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
import warnings
from pathlib import Path
from typing import Any

DEBIAN_DIR = Path("/usr/share/wordnet")
FILES = (
    "adj.exc",
    "adv.exc",
    "noun.exc",
    "verb.exc",
    "data.adj",
    "data.adv",
    "data.noun",
    "data.verb",
    "index.adj",
    "index.adv",
    "index.noun",
    "index.verb",
)
OPTIONAL = ("index.sense", "cntlist.rev", "cntlist")
# lexnames(5WN) of WordNet 3.0: file number, name, syntactic category
LEXNAMES = """00 adj.all 3
01 adj.pert 3
02 adv.all 4
03 noun.Tops 1
04 noun.act 1
05 noun.animal 1
06 noun.artifact 1
07 noun.attribute 1
08 noun.body 1
09 noun.cognition 1
10 noun.communication 1
11 noun.event 1
12 noun.feeling 1
13 noun.food 1
14 noun.group 1
15 noun.location 1
16 noun.motive 1
17 noun.object 1
18 noun.person 1
19 noun.phenomenon 1
20 noun.plant 1
21 noun.possession 1
22 noun.process 1
23 noun.quantity 1
24 noun.relation 1
25 noun.shape 1
26 noun.state 1
27 noun.substance 1
28 noun.time 1
29 verb.body 2
30 verb.change 2
31 verb.cognition 2
32 verb.communication 2
33 verb.competition 2
34 verb.consumption 2
35 verb.contact 2
36 verb.creation 2
37 verb.emotion 2
38 verb.motion 2
39 verb.perception 2
40 verb.possession 2
41 verb.social 2
42 verb.stative 2
43 verb.weather 2
44 adj.ppl 3
"""
HINT = (
    "WordNet is not installed (the word-level attacks and RTI need it). Run `make wordnet`, "
    "or as root `apt-get install wordnet-base wordnet-sense-index` and then "
    "`python -m dbpa_core.attacks.wordnet install`."
)


class WordNetMissing(RuntimeError):
    """WordNet's files are not where nltk looks and Debian's are not installed."""


def default_target() -> Path:
    """``<sys.prefix>/nltk_data/corpora/wordnet`` (nltk searches ``sys.prefix/nltk_data``)."""
    return Path(sys.prefix) / "nltk_data" / "corpora" / "wordnet"


def _user_target() -> Path:
    from platformdirs import user_data_dir

    return Path(user_data_dir("dbpa")) / "nltk_data" / "corpora" / "wordnet"


def install(source: str | os.PathLike = DEBIAN_DIR, target: str | os.PathLike | None = None) -> Path:
    """Copy WordNet's database files from ``source`` into ``target`` and write ``lexnames``.

    Returns the target folder. Raises :class:`WordNetMissing` when ``source`` lacks a file.
    """
    src = Path(source)
    dst = Path(target) if target else default_target()
    missing = [f for f in FILES if not (src / f).is_file()]
    if missing:
        raise WordNetMissing(f"{src} lacks {', '.join(missing)}. " + HINT)
    tmp = dst.with_name(dst.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    for f in FILES + OPTIONAL:
        if (src / f).is_file():
            shutil.copyfile(src / f, tmp / f)
    (tmp / "lexnames").write_text(LEXNAMES.replace(" ", "\t"), encoding="utf-8")
    lic = Path("/usr/share/doc/wordnet-base/copyright")
    if lic.is_file():
        shutil.copyfile(lic, tmp / "LICENSE")
    if dst.exists():
        shutil.rmtree(dst)
    tmp.rename(dst)  # atomic: a half-copied folder is never taken for WordNet
    return dst


def _reader_at(root: Path) -> Any:
    import nltk
    from nltk.corpus.reader.wordnet import WordNetCorpusReader

    # nltk reads corpora only below a folder on its data path (nltk.pathsec)
    if not any(Path(str(p)).resolve() in (root.resolve(), *root.resolve().parents) for p in nltk.data.path):
        nltk.data.path.append(str(root))

    class EnglishReader(WordNetCorpusReader):
        """nltk's reader without the map from WordNet 3.0's synsets to the loaded ones,
        which only the multilingual functions (Open Multilingual WordNet) read and which
        costs half of the load (two passes over ``index.sense``): there is no
        multilingual reader here."""

        def map_wn(self, version: str = "wordnet") -> None:
            return None

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "multilingual functions are not available"
        return EnglishReader(str(root), None)


@functools.lru_cache(maxsize=1)
def wordnet() -> Any:
    """nltk's WordNet reader (loaded once per process, ~2 s).

    Raises
    ------
    WordNetMissing
        With the command that installs it.
    """
    try:
        import nltk
    except ImportError:
        raise WordNetMissing(
            "nltk is not installed (the `battery` extra): run `dbpa setup battery`. " + HINT
        ) from None
    try:
        root = Path(nltk.data.find("corpora/wordnet"))
        if (root / "lexnames").is_file():
            return _reader_at(root)
    except LookupError:
        pass
    user = _user_target()
    if (user / "lexnames").is_file():
        return _reader_at(user)
    if all((DEBIAN_DIR / f).is_file() for f in FILES):
        try:
            return _reader_at(install(DEBIAN_DIR, user))
        except OSError:
            pass
    raise WordNetMissing(HINT)


def installed() -> bool:
    """True when WordNet's files are where :func:`wordnet` looks (or Debian's are there to
    copy), without reading them: the cheap check (a test's skip mark, read in every test
    process) of what :func:`available` loads to be sure of."""
    try:
        import nltk
    except ImportError:
        return False
    try:
        if (Path(nltk.data.find("corpora/wordnet")) / "lexnames").is_file():
            return True
    except LookupError:
        pass
    return (_user_target() / "lexnames").is_file() or all((DEBIAN_DIR / f).is_file() for f in FILES)


def available() -> bool:
    """True when :func:`wordnet` would load (without raising)."""
    try:
        wordnet()
    except WordNetMissing:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m dbpa_core.attacks.wordnet")
    sub = ap.add_subparsers(dest="cmd", required=True)
    i = sub.add_parser("install", help="copy Debian's WordNet files into an nltk data folder")
    i.add_argument("--source", default=str(DEBIAN_DIR))
    i.add_argument("--target", default=None, help=f"default: {default_target()}")
    sub.add_parser("check", help="load WordNet and look up a word")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "install":
            print(f"WordNet installed in {install(args.source, args.target)}")
        else:
            wn = wordnet()
            print(f"WordNet {wn.get_version()} loaded: 'quick' has {len(wn.synsets('quick'))} synsets")
    except WordNetMissing as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
