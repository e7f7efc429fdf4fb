"""Loading a Hugging Face model the workbench's way: offline (nothing is fetched from a model
hub) and without the library's own "Loading weights" bar, which would otherwise appear amid
the run's progress, in ``--quiet`` runs and in CI logs."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator


@contextlib.contextmanager
def loading_quietly() -> Iterator[None]:
    """Within the block, Hugging Face libraries stay offline and show no progress bar; the
    bar setting is restored afterwards (offline stays: the workbench never fetches)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers.utils import logging as hf_logging

    shown = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if shown:
            hf_logging.enable_progress_bar()
