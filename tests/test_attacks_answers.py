"""The answer parser on realistic answers in the styles of ChatGPT, Llama and Mistral:
multi-line reasoning, markdown, self-corrections and refusals. Each case has the letter a
careful reader takes from it, or None where a reader cannot tell: the parser must never
read a wrong letter (unparsed is allowed to cost accuracy, a wrong letter is not)."""
import pytest

from dbpa_core.attacks.answers import parse_answer

TF = ["True", "False", "Unable to determine"]
ANIMALS = ["cats", "wolves", "mice", "sheep"]
NUMS = ["12", "15", "18", "21", "24"]
COLOURS = ["green", "white", "yellow", "gray", "red"]

CASES = [
    # --- ChatGPT style: a choice up front, then an explanation naming other letters
    ("B) False. Option A would be correct only if the passage said the claim was true.", TF, "B"),
    ("B. False — not (A), since the passage contradicts the claim.", TF, "B"),
    ("**B) False**\n\nExplanation: Option A would only apply if the claim held.", TF, "B"),
    ("The correct answer is **B) False**.\n\nThe passage says otherwise, so A is wrong.", TF, "B"),
    ("**Answer: C**\n\nThe text gives no information, so neither A nor B can be chosen.", TF, "C"),
    ("Answer: B\n\nExplanation: A is incorrect because the statement is contradicted.", TF, "B"),
    ("The answer is (B) wolves. (A) cats and (C) mice are mentioned, but the passage says "
     "sheep are afraid of wolves.", ANIMALS, "B"),
    ("**Correct option:** (D) sheep", ANIMALS, "D"),
    ("The correct answer is: **(C) 18**", NUMS, "C"),
    ("### Answer\n(B) 15\n\n### Reasoning\nHe starts with 12 (A) and adds 3.", NUMS, "B"),
    ("Final answer: D", NUMS, "D"),
    ("The best answer is (A).", COLOURS, "A"),
    ("$\\boxed{C}$", NUMS, "C"),
    ("The answer is \\boxed{(E)} since 4 x 6 = 24.", NUMS, "E"),
    ("C is correct: 6 + 6 + 6 = 18, not 21 (D).", NUMS, "C"),
    ("(B) is the right answer; (A) would need a larger total.", NUMS, "B"),
    # --- Llama style: reasoning first, the choice last
    ("Let's think step by step.\nTom has 12 apples and buys 6 more.\n12 + 6 = 18.\n"
     "Therefore, the answer is (C).", NUMS, "C"),
    ("Based on the passage, Bill is in the kitchen and the milk is there too. So the "
     "answer is A.", ["kitchen", "garden", "office"], "A"),
    ("I'd go with (B). The passage says Greg is a swan, and swans are white.", COLOURS, "B"),
    ("Looking at each option:\n(A) cats - no, the passage never says so.\n(B) wolves - yes, "
     "sheep are afraid of wolves.\n(C) mice - no.\n\nSo the answer is (B).", ANIMALS, "B"),
    ("A) True - the passage does not say this.\nB) False - the passage contradicts it.\n"
     "C) Unable to determine - no.\n\nThe answer is B.", TF, "B"),
    ("Step 1: Sheep are afraid of wolves.\nStep 2: Gertrude is a sheep.\n"
     "Conclusion: the answer is option B.", ANIMALS, "B"),
    ("I choose option (C) because the passage says nothing either way.", TF, "C"),
    ("My answer: D", ANIMALS, "D"),
    ("Answer:\n\nC", TF, "C"),
    ("After careful analysis, I would select B.", TF, "B"),
    ("The statement is false, so B.", TF, "B"),
    # --- Mistral style: terse
    ("B", TF, "B"),
    (" B\n\nExplanation: the passage contradicts the claim.", TF, "B"),
    ("(C)", TF, "C"),
    ("C.", TF, "C"),
    ("b)", TF, "B"),
    ("B: wolves", ANIMALS, "B"),
    ("wolves", ANIMALS, "B"),
    ("The answer is wolves.", ANIMALS, "B"),
    ("Gertrude is afraid of wolves.", ANIMALS, "B"),
    ("18", NUMS, "C"),
    ("The total is 18 apples.", NUMS, "C"),
    # --- self-corrections: the last explicit choice, or unparsed; never the first
    ("I think the answer is A, wait, no, it's B.", TF, "B"),
    ("The answer is A. Actually, on second thought, the answer is C.", TF, "C"),
    ("A) True. Wait — no. Rereading the passage, the answer is B) False.", TF, "B"),
    ("I'd say B... actually, no, A.", ANIMALS, "A"),
    ("Answer: C. Hmm, let me reconsider: it's D.", NUMS, "D"),
    ("The answer is B. Scratch that.", TF, None),
    ("I think it's A, wait, no.", TF, None),
    ("Answer: C\nWait, let me double-check. Yes, C is correct.", TF, "C"),
    ("Answer: B. Option A is actually wrong because the passage says so.", TF, "B"),
    ("The answer is A. On second thought, (B).", TF, "B"),
    ("The answer is B. Wait, A is wrong and C is wrong, so B.", TF, "B"),
    ("The answer is (A) but actually (B) fits the passage better.", TF, "B"),
    ("The answer is A. Hmm, B and C also mention it.", TF, None),
    ("Answer: C. Wait, let me think about this more.", TF, "C"),
    ("B) False. Actually, the claim is false, so B.", TF, "B"),
    # --- ambiguous: two choices, hypotheticals, hedging
    ("The answer is A or B.", TF, None),
    ("(A) or (B)", TF, None),
    ("It could be A or C, I am not sure.", TF, None),
    ("Both A and C seem plausible here.", TF, None),
    ("Option A would be correct only if the passage said so.", TF, None),
    ("Neither A nor B is right.", ["cats", "wolves"], None),
    ("It is either cats or wolves.", ANIMALS, None),
    ("If B is right then the total is 15, but if C is right it is 18.", NUMS, None),
    ("The answer is not A.", TF, None),
    # --- refusals and non-answers
    ("I'm sorry, but I can't help with that.", TF, None),
    ("I cannot determine the answer from the information given.", ANIMALS, None),
    ("As an AI language model, I do not have personal opinions.", TF, None),
    ("I don't know.", NUMS, None),
    ("", TF, None),
    ("The answer is E.", TF, None),  # no option E: an explicit choice of nothing
    ("The passage is about a mouse and a cat.", ["dogs", "wolves"], None),
    ("Sure! Here is the answer: the question asks about a color.", COLOURS, None),
]


def test_the_set_is_large_and_varied():
    assert len(CASES) >= 60
    assert sum(c[2] is None for c in CASES) >= 15 and len({c[2] for c in CASES}) >= 5


@pytest.mark.parametrize("text, options, letter", CASES)
def test_realistic_answer(text, options, letter):
    got = parse_answer(text, options)
    assert got.letter == letter, (text, got)


def test_no_wrong_letter_over_the_whole_set():
    wrong = [(t, parse_answer(t, o).letter, want) for t, o, want in CASES
             if parse_answer(t, o).letter is not None and parse_answer(t, o).letter != want]
    assert wrong == []


def test_the_rule_is_reported():
    assert parse_answer("B) False. Option A would be right.", TF).how == "marker"
    assert parse_answer("The answer is B; A would be right if ...", TF).how == "explicit"
    assert parse_answer("I think the answer is A, wait, no, it's B.", TF).how == "corrected"
    assert parse_answer("The answer is B. Scratch that.", TF).how == "retracted"
    assert parse_answer("The answer is E.", TF).how == "out-of-range"
