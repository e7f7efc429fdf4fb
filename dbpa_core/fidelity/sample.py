"""A small synthetic survey, made by the project, so that the page and the CLI work out
of the box. **Nothing here is real survey data.**

:func:`sample_data` draws, with a fixed seed: 40 questions (agree/disagree statements
with 5 options, how-often questions with 4, yes/no questions with 2) on everyday topics;
for each, a "real" answer distribution from a flat Dirichlet and 400–1000 "real" answers
from it; and three simulated respondents with known flaws:

* ``sim-close`` — 300 answers from a distribution near the real one (92 % real, 8 % noise);
* ``sim-biased`` — 300 answers from the real distribution tilted toward the last options
  (more "Agree", "Often", "No");
* ``sim-flat`` — probabilities halfway between the real distribution and uniform, given
  to 3 decimals (a probabilities column).

With the default settings (tv, γ = ½, α = 0.1) sim-close is shown at least as good as
sim-biased and as uniform on 90 % of questions, sim-flat at least as good as uniform,
and the other pairs cannot be told apart at that level.

:func:`sample_values_data` is the same idea for real-valued answers (a 0–10 rating per
respondent). ``assets/make_fidelity_sample.py`` writes both as CSV files.
"""

from __future__ import annotations

import numpy as np

from .dataset import FidelityData, Scenario, validate

SEED = 20251204
AGREE = ("Strongly disagree", "Disagree", "Neither agree nor disagree", "Agree", "Strongly agree")
OFTEN = ("Never", "Rarely", "Sometimes", "Often")
YESNO = ("Yes", "No")
STATEMENTS = (
    "Public transport in my area is reliable",
    "I trust the news I read online",
    "Working from home makes people more productive",
    "My neighbourhood is a safe place to live",
    "Schools should teach personal finance",
    "Social media does more harm than good",
    "Cities should have more cycle lanes",
    "Artificial intelligence will create more jobs than it destroys",
    "Local shops matter more than online ones",
    "Healthy food is too expensive",
    "Young people today have better opportunities than their parents did",
    "Tourism benefits my town",
    "Scientists can be trusted to tell the truth",
    "There should be a four-day working week",
    "Libraries are still important",
    "Recycling makes a real difference",
)
ACTIVITIES = (
    "cook a meal from scratch",
    "read a printed book",
    "exercise for at least 30 minutes",
    "talk to your neighbours",
    "use a food delivery app",
    "volunteer for a local cause",
    "visit a museum or gallery",
    "buy second-hand clothes",
    "watch live sport",
    "take public transport",
    "play a video game",
    "write a letter or card by hand",
)
TOPICS = (
    "your local parks",
    "public transport where you live",
    "your internet connection",
    "the food you eat",
    "your work-life balance",
    "the air quality in your area",
    "your local library",
    "your neighbourhood's shops",
    "the amount of sleep you get",
    "your commute",
    "your local doctor's surgery",
    "the price of your groceries",
    "your housing",
    "the news you read",
    "the time you spend outdoors",
)
YES_NO = (
    "Have you moved house in the last five years?",
    "Do you own a car?",
    "Have you voted in your most recent local election?",
    "Do you have a pet?",
    "Have you changed jobs in the last two years?",
    "Do you grow any of your own food?",
    "Have you travelled abroad in the last year?",
    "Do you donate to charity regularly?",
    "Do you use a password manager?",
    "Have you taken an online course in the last year?",
    "Do you live within walking distance of a park?",
    "Have you ever run a marathon?",
)


def _questions() -> list[tuple[str, str, tuple[str, ...]]]:
    qs: list[tuple[str, str, tuple[str, ...]]] = [
        (f"agree-{i + 1:02d}", f"How much do you agree or disagree: {s}?", AGREE)
        for i, s in enumerate(STATEMENTS)
    ]
    qs += [(f"often-{i + 1:02d}", f"How often do you {a}?", OFTEN) for i, a in enumerate(ACTIVITIES)]
    qs += [(f"yesno-{i + 1:02d}", q, YESNO) for i, q in enumerate(YES_NO)]
    return qs


def sample_data(seed: int = SEED) -> FidelityData:
    """The synthetic categorical sample (40 questions, 3 simulators); see the module."""
    rng = np.random.default_rng(seed)
    scenarios, close, biased, flat = [], [], [], []
    for sid, text, options in _questions():
        d = len(options)
        p = rng.dirichlet(np.ones(d))
        n = int(rng.integers(400, 1001))
        real = rng.multinomial(n, p).astype(float)
        noise = rng.dirichlet(np.ones(d))
        close.append(rng.multinomial(300, 0.92 * p + 0.08 * noise).astype(float))
        tilt = p * np.exp(1.6 * np.linspace(-1, 1, d))
        biased.append(rng.multinomial(300, tilt / tilt.sum()).astype(float))
        f = np.round(0.5 * p + 0.5 / d, 3)
        f[np.argmax(f)] += round(1.0 - float(f.sum()), 3)  # sum exactly 1 at 3 decimals
        flat.append(f)
        scenarios.append(Scenario(sid, options, real, text))
    data = FidelityData(
        "categorical",
        tuple(scenarios),
        {"sim-close": tuple(close), "sim-biased": tuple(biased), "sim-flat": tuple(flat)},
        {"sim-close": "counts", "sim-biased": "counts", "sim-flat": "probabilities"},
        "synthetic sample (dbpa_core.fidelity.sample)",
    )
    return validate(data)


def sample_values_data(seed: int = SEED) -> FidelityData:
    """A synthetic real-valued sample: 30 questions answered with a 0–10 rating by 80–150
    "real" respondents and 50 answers of two simulators (``sim-close``, ``sim-shifted``)."""
    rng = np.random.default_rng(seed + 1)
    scenarios, close, shifted = [], [], []
    for i in range(30):
        mu = rng.uniform(2.5, 7.5)
        sd = rng.uniform(1.0, 2.5)
        n = int(rng.integers(80, 151))
        real = np.clip(np.round(rng.normal(mu, sd, n), 1), 0, 10)
        close.append(np.clip(np.round(rng.normal(mu + rng.normal(0, 0.3), sd, 50), 1), 0, 10))
        shifted.append(np.clip(np.round(rng.normal(mu + 1.5, sd * 0.6, 50), 1), 0, 10))
        topic = TOPICS[i % len(TOPICS)]
        text = (
            f"On a scale from 0 to 10, how satisfied are you with {topic}?"
            if i < len(TOPICS)
            else f"On a scale from 0 to 10, how would you rate {topic} compared with a year ago?"
        )
        scenarios.append(Scenario(f"rating-{i + 1:02d}", (), real, text))
    return validate(
        FidelityData(
            "values",
            tuple(scenarios),
            {"sim-close": tuple(close), "sim-shifted": tuple(shifted)},
            {"sim-close": "values", "sim-shifted": "values"},
            "synthetic sample (dbpa_core.fidelity.sample, values)",
        )
    )


__all__ = ["SEED", "sample_data", "sample_values_data"]
