"""A fake model and embedder over a vocabulary of 40 words, for tests of the audit's
sampling and verdicts that need no server: answers are 12 words drawn with the request's
own seed (two draws of one prompt differ, one request always gets the same answer)."""

from __future__ import annotations

import random

import numpy as np

from dbpa_core.backends import Sample

WORDS = [f"w{i}" for i in range(40)]
BASE = "John is 70 and takes statins. Is his risk high?"


class WordModel:
    """12 words per answer from all 40; a prompt that holds ``narrow`` (if given) draws
    from the first 10 only (a large change). ``asked`` lists every request served."""

    name = "fake"
    deterministic = False

    def __init__(self, *, narrow: str | None = "comedian", model: str = "words"):
        self.narrow, self.model = narrow, model
        self.asked: list = []

    def generate(self, requests, on_sample, *, should_stop=None):
        for r in requests:
            self.asked.append(r)
            rnd = random.Random(r.seed)
            pool = WORDS[:10] if self.narrow and self.narrow in r.prompt else WORDS
            on_sample(r, Sample(" ".join(rnd.choice(pool) for _ in range(12)), 5, 12, self.model))


def noisy_model() -> WordModel:
    """Every prompt draws from all 40 words: no perturbation changes the answers."""
    return WordModel(narrow=None, model="noisy")


class BagOfWords:
    """A cheap embedder: word counts over the vocabulary (plus one, never all zero); a word
    outside it counts for the word at its length."""

    name = "bow"

    def embed(self, texts):
        out = np.ones((len(texts), len(WORDS) + 1), np.float32)
        for i, t in enumerate(texts):
            for w in t.split():
                out[i, WORDS.index(w) if w in WORDS else len(w) % len(WORDS)] += 1
        return out / np.linalg.norm(out, axis=1, keepdims=True)
