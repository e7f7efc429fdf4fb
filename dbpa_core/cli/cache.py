"""``dbpa cache info | clear``: where the cache is and how big, or empty it."""

from __future__ import annotations

import argparse

from .common import open_cache


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    c = sub.add_parser("cache", help="show or clear the cache")
    c.add_argument("action", choices=["info", "clear"])
    return c


def run(args: argparse.Namespace) -> int:
    c = open_cache(args)
    if args.action == "clear":
        n = c.clear()
        if c.repaired:
            print(f"the cache store in {c.directory} was damaged: removed it and started an empty one")
        else:
            print(f"removed {n} cached items from {c.where if c.url else c.directory}")
    else:
        print(
            f"cache folder: {c.directory}\n"
            + (f"cache database: {c.where}\n" if c.url else "")
            + f"items: {c.count()}\nsize: {c.volume() / 1e6:.1f} MB"
        )
    return 0
