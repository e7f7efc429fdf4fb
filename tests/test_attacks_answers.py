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
VIT = ["Vitamin A", "Vitamin C", "Vitamin D", "Vitamin E"]
HEP = ["Hepatitis B", "Hepatitis C", "Hepatitis A"]
BUGS = ["S. aureus", "E. coli", "K. pneumoniae", "P. mirabilis", "C. difficile"]
ORGANISMS = ["C. elegans", "Drosophila", "Zebrafish"]
FLIES = ["D. melanogaster", "C. elegans", "M. musculus", "D. rerio"]
AUTHORS = ["J. R. R. Tolkien", "C. S. Lewis", "A. A. Milne", "E. B. White"]
PSYCHOLOGISTS = ["B. F. Skinner", "Ivan Pavlov", "John Watson"]
KEYS = ["C major", "G major", "F major"]
MINORS = ["D minor", "A minor", "E minor"]
AMPS = ["2 A", "5 A", "10 A"]
TEMPS = ["100 °C", "37 °C", "0 °C"]
A_ANIMALS = ["A cat", "A wolf", "A mouse"]
BLOOD = ["O", "A", "B", "AB"]
LETTER_OPTIONS = ["A", "B", "C", "D"]
METALS = ["Iron", "Copper", "Gold", "Silver", "Tin"]

CASES = [
    # --- ChatGPT style: a choice up front, then an explanation naming other letters
    ("B) False. Option A would be correct only if the passage said the claim was true.", TF, "B"),
    ("B. False — not (A), since the passage contradicts the claim.", TF, "B"),
    ("**B) False**\n\nExplanation: Option A would only apply if the claim held.", TF, "B"),
    ("The correct answer is **B) False**.\n\nThe passage says otherwise, so A is wrong.", TF, "B"),
    ("**Answer: C**\n\nThe text gives no information, so neither A nor B can be chosen.", TF, "C"),
    ("Answer: B\n\nExplanation: A is incorrect because the statement is contradicted.", TF, "B"),
    (
        "The answer is (B) wolves. (A) cats and (C) mice are mentioned, but the passage says "
        "sheep are afraid of wolves.",
        ANIMALS,
        "B",
    ),
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
    (
        "Let's think step by step.\nTom has 12 apples and buys 6 more.\n12 + 6 = 18.\n"
        "Therefore, the answer is (C).",
        NUMS,
        "C",
    ),
    (
        "Based on the passage, Bill is in the kitchen and the milk is there too. So the answer is A.",
        ["kitchen", "garden", "office"],
        "A",
    ),
    ("I'd go with (B). The passage says Greg is a swan, and swans are white.", COLOURS, "B"),
    (
        "Looking at each option:\n(A) cats - no, the passage never says so.\n(B) wolves - yes, "
        "sheep are afraid of wolves.\n(C) mice - no.\n\nSo the answer is (B).",
        ANIMALS,
        "B",
    ),
    (
        "A) True - the passage does not say this.\nB) False - the passage contradicts it.\n"
        "C) Unable to determine - no.\n\nThe answer is B.",
        TF,
        "B",
    ),
    (
        "Step 1: Sheep are afraid of wolves.\nStep 2: Gertrude is a sheep.\n"
        "Conclusion: the answer is option B.",
        ANIMALS,
        "B",
    ),
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
    # --- a choice that its own clause rejects is a rejection, in every marker style (issue 16)
    ("A: cats is wrong. B: wolves is right.", ANIMALS, "B"),
    ("A) cats - incorrect. B) wolves - correct.", ANIMALS, "B"),
    ("(A) cats? No. (B) wolves? Yes.", ANIMALS, "B"),
    ("A - cats, incorrect; the answer is B", ANIMALS, "B"),
    ("Answer:\nA) cats is not right\nB) wolves", ANIMALS, "B"),
    ("A: True? No — the passage contradicts the claim. B: False? Yes.", TF, "B"),
    ("- A) cats: no\n- B) wolves: yes\n- C) mice: no\n- D) sheep: no", ANIMALS, "B"),
    (
        "**Option A: cats** ❌ The passage never mentions cats.\n**Option B: wolves** ✅ Sheep "
        "are afraid of wolves.\n**Option C: mice** ❌\n**Option D: sheep** ❌",
        ANIMALS,
        "B",
    ),
    (
        "Let me evaluate each option:\n\n1. A) cats - Incorrect, the passage does not mention "
        "cats.\n2. B) wolves - Correct, sheep are afraid of wolves.\n3. C) mice - Incorrect.\n"
        "4. D) sheep - Incorrect.",
        ANIMALS,
        "B",
    ),
    ("A) cats is incorrect\nB) wolves is incorrect\nC) mice is correct", ANIMALS, "C"),
    ("Answer: A) cats ✗  B) wolves ✓", ANIMALS, "B"),
    ("D) sheep - no. C) mice - no. A) cats - no.", ANIMALS, None),  # eliminates, never picks
    ("B) wolves. Cats are wrong here.", ANIMALS, "B"),
    ("B) wolves. No other animal frightens sheep.", ANIMALS, "B"),
    ("Answer: B (the claim is false)", TF, "B"),
    (
        "**Answer:** B\n\n**Why not the others?**\n- A) cats: sheep are not afraid of cats.\n"
        "- C) mice: no.\n- D) sheep: no.",
        ANIMALS,
        "B",
    ),
    # --- "the answer is X" under a hedge or a negation is no choice
    ("I don't think the answer is A. The answer is B.", ANIMALS, "B"),
    ("Many would say the answer is A. However, the correct answer is B.", ANIMALS, "B"),
    ("You might think the answer is A, but it's B.", ANIMALS, "B"),
    ("It's tempting to say the answer is A, but sheep fear wolves, so the answer is B.", ANIMALS, "B"),
    ("Some may argue the answer is C. I disagree: the answer is B.", ANIMALS, "B"),
    ("Most people would pick A, but the correct answer is B.", ANIMALS, "B"),
    ("You could argue it's C, but the passage clearly says wolves. The answer is B.", ANIMALS, "B"),
    ("I don't think it's A or C. I'd go with B.", ANIMALS, "B"),
    ("The answer is C only if the passage mentions mice; it doesn't, so the answer is B.", ANIMALS, "B"),
    ("If you think about it, the answer is B.", ANIMALS, "B"),
    ("The answer is B. Many would say A, but they are wrong.", ANIMALS, "B"),
    ("It is not the case that the answer is A.", ANIMALS, None),
    ("I'm not sure whether it's A or B.", ANIMALS, None),
    ("Based on the information, I'd say the answer is probably B, but it could also be A.", ANIMALS, None),
    # --- two choices, no correction: a later one introduced by so/however/but, else unparsed
    ("A. Sheep fear wolves, so the answer is B.", ANIMALS, "B"),
    ("A. Sheep are afraid of wolves, and the answer is B.", ANIMALS, None),
    ("The answer is A. The answer is B.", ANIMALS, None),
    ("The answer is B, not A.", ANIMALS, "B"),
    ("The answer is not A; it is B.", ANIMALS, "B"),
    ("I would say the answer is B, although A is tempting.", ANIMALS, "B"),
    ("Both B and C could be argued, but I'll pick B.", ANIMALS, "B"),
    ("The answer is A. No wait, it's B.", ANIMALS, "B"),
    ("A\n\nWait, I misread. Sheep fear wolves, so B.", ANIMALS, "B"),
    ("B) False. The answer is A only if the passage supports it.", TF, "B"),
    ("C) Unable to determine\n\nThe passage does not say whether the claim is true or false.", TF, "C"),
    # --- naming two, or none
    ("Neither A nor B.", TF, None),
    ("A or B, I'm not sure.", ANIMALS, None),
    ("I cannot choose between A and B without more context.", ANIMALS, None),
    ("I'm sorry, I can't determine which animal sheep fear. It could be A or B.", ANIMALS, None),
    ("Sheep are afraid of wolves (B), not cats (A).", ANIMALS, "B"),
    # --- option texts that hold a letter: the letter is part of the text, never a choice
    ("Vitamin C", VIT, "B"),
    ("Vitamin C is the answer: scurvy is caused by its deficiency.", VIT, "B"),
    ("Vitamin D is the correct answer.", VIT, "C"),
    ("It's vitamin D, which the body makes from sunlight.", VIT, "C"),
    ("The answer is B) Vitamin C.", VIT, "B"),
    ("Scurvy is caused by a deficiency of Vitamin C, so the answer is B.", VIT, "B"),
    ("Hepatitis C is the right answer, since it is blood-borne and has no vaccine.", HEP, "B"),
    ("E. coli", BUGS, "B"),
    ("E. coli is the most common cause of urinary tract infections.", BUGS, "B"),
    ("The answer is E. coli.", BUGS, "B"),
    ("C. elegans has exactly 959 somatic cells in the adult hermaphrodite.", ORGANISMS, "A"),
    ("D. melanogaster", FLIES, "A"),
    ("C. S. Lewis wrote The Chronicles of Narnia.", AUTHORS, "B"),
    ("A. A. Milne", AUTHORS, "C"),
    ("Answer: C. S. Lewis", AUTHORS, "B"),
    ("B. F. Skinner developed operant conditioning.", PSYCHOLOGISTS, "A"),
    ("The relative major of A minor is C major. Answer: C major", KEYS, "A"),
    ("The answer is C major.", KEYS, "A"),
    ("The answer is A minor.", MINORS, "B"),
    ("By Ohm's law, I = V/R = 10/2 = 5 A. So 5 A is the correct answer.", AMPS, "B"),
    ("5 A is correct.", AMPS, "B"),
    ("37 °C is correct.", TEMPS, "B"),
    ("Normal body temperature is 37 °C.", TEMPS, "B"),
    ("A wolf.", A_ANIMALS, "B"),
    ("The answer is a wolf.", A_ANIMALS, "B"),
    ("Answer: A wolf", A_ANIMALS, "B"),
    ("The answer is D) 18.", NUMS, "D"),  # a letter then another option's text: the letter
    # options that are letters themselves: "A" as option B could mean either
    ("Type A is correct.", BLOOD, None),
    ("Blood type A is the correct answer here.", BLOOD, None),
    ("B", BLOOD, None),
    ("The universal donor is type O.", BLOOD, "A"),
    ("O", BLOOD, "A"),
    ("The answer is AB.", BLOOD, "D"),
    ("The answer is D) AB.", BLOOD, "D"),
    ("The answer is B) B.", LETTER_OPTIONS, "B"),
    # --- an option's text under a negation names nothing; on a True/False item, the other
    ("That's not true.", TF, "B"),
    ("Not true.", TF, "B"),
    ("The statement is not true.", TF, "B"),
    ("It's not false.", TF, "A"),
    ("This is untrue.", TF, "B"),
    ("It's not false, but it's not true either.", TF, None),
    ("It's true the passage mentions a dog, but it never says the dog is brown, so we can't tell.", TF, None),
    ("It's true that the passage mentions a dog, but the statement itself is false.", TF, "B"),
    ("Not red, not green, not yellow — white.", COLOURS, "B"),
    ("It is not true.", ["True", "False", "Maybe"], None),
    ("I can't say yes.", ["Yes", "No"], None),
    # --- a hypothetical never concludes; a "wait" that only checks corrects nothing
    ("Answer: A\n\nHowever, if the question were about goats, the answer would be B.", ANIMALS, "A"),
    ("B) wolves. But if the sheep were in a city, the answer would be A.", ANIMALS, "B"),
    ("If I had to pick, the answer would be B.", ANIMALS, "B"),
    (
        "The answer is B) wolves.\n\nWait, let me double-check option C: mice are tiny and "
        "harmless to sheep. Confirmed.",
        ANIMALS,
        "B",
    ),
    (
        "The answer is B.\n\nWait, let me verify by checking the others: A is cats, C is mice. "
        "Neither is a predator. So B.",
        ANIMALS,
        "B",
    ),
    ("**Answer: C**\n\nWait — let me re-check. 3 × 6 = 18, which is option C. Yes.", NUMS, "C"),
    ("B. On second thought, let me make sure C isn't better. No, B is right.", ANIMALS, "B"),
    ("A. Let me re-check: sheep fear wolves, so B.", ANIMALS, "B"),
    ("Answer: A. Wait, let me double-check: A is wrong.", ANIMALS, None),
    # --- coordinated letters share what is said of them
    ("Both A and B could be correct.", ANIMALS, None),
    ("A and B might both be right.", ANIMALS, None),
    ("A or B could work.", ANIMALS, None),
    ("It could be A, B or C.", ANIMALS, None),
    ("Both A and B could be correct depending on context.", ANIMALS, None),
    ("B and C are both wrong, so A.", ANIMALS, "A"),
    ("Not A, B.", ANIMALS, "B"),
    # --- a JSON answer field is a choice; a letter used as a variable is none
    (
        '{"reasoning": "Option A is plausible, but wolves are the real predator.", "answer": "B"}',
        ANIMALS,
        "B",
    ),
    ('{"reasoning": "Cats (A) are small; wolves (B) hunt sheep.", "answer": "B"}', ANIMALS, "B"),
    ('{"answer": "B", "explanation": "Option C would be correct only for cats."}', ANIMALS, "B"),
    ('{"final_answer": "C. S. Lewis"}', AUTHORS, "B"),
    ("Let A be the area of the square. A = 4 × 4, so the area is sixteen square units.", NUMS, None),
    # --- more ways to give the answer
    ("A) cats\nB) wolves\nC) mice\n\nB", ANIMALS, "B"),
    ("Answer:\nA) cats\nB) wolves\nC) mice\nB", ANIMALS, "B"),
    ("❌ A) cats\n✅ B) wolves\n❌ C) mice", ANIMALS, "B"),
    ("It's not hard: the answer is B.", ANIMALS, "B"),
    ("It is not surprising that the answer is B.", ANIMALS, "B"),
    ("<think>\nThe passage says... hmm, A seems wrong. B also wrong. So C.\n</think>\n\nC", TF, "C"),
    ("Sheep fear wolves. C is for cats, which they don't fear.", ANIMALS, None),
]


# --- a second hostile probe: citations ("Section 2(c)", "Rule 12(b)(6)", "see ref. (a)") are
# no choices, an opening marker that only starts examining an option is none, "Part D" is the
# end of an option's text, answers that only start thinking ("Considering iron:", "Is it
# iron?", "A) Iron — hmm", cut off) name nothing, and lists that judge each option
P_DRUG = ["Metformin", "Insulin glargine", "Glipizide", "Sitagliptin"]
P_VIT = ["Vitamin A", "Vitamin B12", "Vitamin C", "Vitamin D"]
P_HEP = ["Hepatitis A", "Hepatitis B", "Hepatitis C", "Hepatitis E"]
P_NONE = ["Penicillin", "Vancomycin", "Ceftriaxone", "None of the above"]
P_LAW = ["Section 2(b)", "Section 3(a)", "Article III", "Rule 12(b)(6)"]
P_ROMAN = ["I only", "I and II only", "I and III only", "I, II and III"]
P_MOT = ["Motion for summary judgment", "Motion to dismiss", "Motion for a new trial", "Motion in limine"]
P_SUB = ["Subsection (a)", "Subsection (b)", "Subsection (c)", "Subsection (d)"]
P_ROM = ["I only", "II only", "I and II", "Neither I nor II"]
P_MED = ["Atropine", "Adenosine", "Amiodarone", "Epinephrine"]
P_SHORT = ["Yes", "No"]
P_MET = ["Iron", "Zinc", "Copper", "Magnesium"]
P_HEP_D = ["Hepatitis A", "Hepatitis B", "Hepatitis C", "Hepatitis D"]
P_FIN = ["2%", "5%", "7.5%", "10%"]
P_IMM = ["T cells", "Plasma cells", "Neutrophils", "Macrophages"]
P_DM = ["HbA1c", "Fasting glucose", "C-peptide", "Insulin level"]
P_TAX = ["Schedule A", "Schedule C", "Schedule D", "Schedule E"]
P_FEL = ["Class A misdemeanor", "Class B felony", "Class C felony", "Infraction"]
P_PLAN = ["Medicare Part A", "Medicare Part B", "Medicare Part D", "Medicaid"]
P_GEN = ["Autosomal dominant", "Autosomal recessive", "X-linked recessive", "Mitochondrial"]
P_STAT = ["p < 0.05", "p < 0.01", "p = 0.05", "p > 0.05"]
P_ACT = ["Section 230", "Section 1983", "Title VII", "Title IX"]
P_SCI = ["Oxygen", "Nitrogen", "Argon", "Carbon dioxide"]

CASES += [
    ("First-line therapy for type 2 diabetes is metformin.", P_DRUG, "A"),
    (
        "- A) Vitamin A: causes night blindness — incorrect\n- B) Vitamin B12: megaloblastic anemia — incorrect\n- C) Vitamin C: scurvy — correct\n- D) Vitamin D: rickets — incorrect",
        P_VIT,
        "C",
    ),
    (
        "**A. Hepatitis A** – fecal-oral, no chronic state ❌\n**B. Hepatitis B** – DNA virus, chronic ✅\n**C. Hepatitis C** – RNA virus ❌\n**E. Hepatitis E** – fecal-oral ❌",
        P_HEP,
        "B",
    ),
    (
        "* (A) Penicillin — MRSA is resistant. ✗\n* (B) Vancomycin — covers MRSA. ✓\n* (C) Ceftriaxone — no MRSA activity. ✗\n* (D) None of the above — wrong since B works. ✗",
        P_NONE,
        "B",
    ),
    (
        "A) Section 2(b) - not applicable\nB) Section 3(a) - not applicable\nC) Article III - correct, it establishes the judiciary\nD) Rule 12(b)(6) - procedural, not applicable",
        P_LAW,
        "C",
    ),
    ("Statement I is correct. Statement II is incorrect. Statement III is correct. Answer: C", P_ROMAN, "C"),
    ("Section 2(c) governs this. The answer is the motion in limine.", P_MOT, "D"),
    ("Under 18 U.S.C. § 1030(a)(2), unauthorized access is covered; so Subsection (a).", P_SUB, "A"),
    ("I think only statement II is correct. So B.", P_ROM, "B"),
    ("A. Atropine is for bradycardia, not for SVT; adenosine is correct.", P_MED, "B"),
    ("Yes — under Rule 12(b)(6) the complaint fails to state a claim.", P_SHORT, "A"),
    ("Let's analyze each option. A) Iron is", P_MET, None),
    ("No. Under § 2(a) of the Act, the employer is exempt.", P_SHORT, "B"),
    ("Yes, because 42 U.S.C. § 1983 and Rule 23(b)(3) permit a class action.", P_SHORT, "A"),
    ("The court should grant the motion to dismiss under Rule 12(b)(6).", P_MOT, "B"),
    ("Under Rule 59(a), a motion for a new trial is proper.", P_MOT, "C"),
    ("The evidence is excludable under FRE 403; file a motion in limine (see Rule 103(d)).", P_MOT, "D"),
    ("Under 26 U.S.C. § 501(c)(3), the organization is tax-exempt. Yes.", P_SHORT, "A"),
    ("No — Section 10(b) and Rule 10b-5 require scienter.", P_SHORT, "B"),
    ("Zinc deficiency (see ref. (a)) impairs wound healing.", P_MET, "B"),
    ("Wilson disease involves copper; (a) ceruloplasmin is low, (b) urinary copper is high.", P_MET, "C"),
    ("Adenosine: (i) blocks AV node, (ii) very short half-life.", P_MED, "B"),
    ("Adenosine is used for SVT (e.g., AVNRT).", P_MED, "B"),
    ("Epinephrine (1 mg IV q3-5 min) is the first drug in cardiac arrest.", P_MED, "D"),
    ("Amiodarone (class III antiarrhythmic)", P_MED, "C"),
    ("Copper (Cu) accumulates in Wilson disease.", P_MET, "C"),
    ("Iron (Fe) overload is seen in hemochromatosis.", P_MET, "A"),
    ("Magnesium (Mg) is the treatment for torsades.", P_MET, "D"),
    ("Zinc (Zn)", P_MET, "B"),
    ("Vitamin B12 (cobalamin) requires intrinsic factor (IF).", P_VIT, "B"),
    ("Patient has hepatitis B (HBsAg positive).", P_HEP_D, "B"),
    ("Let's look at the options:\nA) Iron - ", P_MET, None),
    ("To answer, consider iron, zinc, copper and", P_MET, None),
    ("Let me think about iron first.", P_MET, None),
    ("First, iron deficiency causes microcytic anemia. But the question is about", P_MET, None),
    ("Considering Iron:", P_MET, None),
    ("A) Iron — hmm", P_MET, None),
    ("Iron? Zinc? I'm not sure.", P_MET, None),
    ("Is it iron?", P_MET, None),
    ("Could be iron.", P_MET, None),
    ("Maybe zinc, maybe copper.", P_MET, None),
    ("It's not iron.", P_MET, None),
    ("Not zinc.", P_MET, None),
    ("I believe the answer is B.", P_ROM, "B"),
    ("Statement I is wrong, statement II is right: II only.", P_ROM, "B"),
    ("I.", P_ROM, None),
    ("A) Atropine — no. The answer is adenosine.", P_MED, "B"),
    ("A. Atropine? No, that's for bradycardia. B. Adenosine? Yes.", P_MED, "B"),
    ("Atropine is used for symptomatic bradycardia.", P_MED, "A"),
    ("Not atropine — adenosine.", P_MED, "B"),
    ("Yes (see Table 2(a)).", P_SHORT, "A"),
    ("No (p < 0.05 in group (b)).", P_SHORT, "B"),
    ("B) No — see footnote (a).", P_SHORT, "B"),
    ("The answer is yes (a) because the statute is clear.", P_SHORT, "A"),
    ("Under IRC §401(k), the employer match is 5%.", P_FIN, "B"),
    ("Per Regulation T (12 CFR 220), the margin is... the answer is 10%.", P_FIN, "D"),
    ("Per 12 CFR 217.10(a)(1)(iii) the minimum is 7.5%.", P_FIN, "C"),
    ("The Basel III (Tier 1) minimum plus buffer is 7.5%.", P_FIN, "C"),
    ("Plasma cells, which are differentiated B cells, secrete antibodies.", P_IMM, "B"),
    ("Antibodies are produced by plasma cells (derived from B lymphocytes).", P_IMM, "B"),
    ("Macrophages present antigen to CD4+ T cells via MHC class II.", P_IMM, None),
    ("Macrophages are the answer; they present antigen via MHC class II.", P_IMM, "D"),
    ("HbA1c reflects average glucose over ~3 months.", P_DM, "A"),
    ("C-peptide distinguishes endogenous from exogenous insulin.", P_DM, "C"),
    ("Measure C-peptide.", P_DM, "C"),
    ("The answer is HbA1c (A1C).", P_DM, "A"),
    ("Rental income goes on Schedule E.", P_TAX, "D"),
    ("Schedule C is for self-employment income.", P_TAX, "B"),
    ("Capital gains are reported on Schedule D, so C.", P_TAX, "C"),
    ("Itemized deductions: Schedule A. Answer: A", P_TAX, "A"),
    ("B", P_TAX, "B"),
    ("Schedule D", P_TAX, "C"),
    ("It's a Class C felony under the statute.", P_FEL, "C"),
    ("Class B felony", P_FEL, "B"),
    ("An infraction, not a Class A misdemeanor.", P_FEL, "D"),
    ("The answer is D.", P_FEL, "D"),
    ("Outpatient doctor visits are covered by Medicare Part B.", P_PLAN, "B"),
    ("Part D covers prescription drugs, so C.", P_PLAN, "C"),
    ("Part A covers inpatient hospital stays.", P_PLAN, "A"),
    ("Medicaid", P_PLAN, "D"),
    ("Prescription drugs fall under Part D.", P_PLAN, "C"),
    ("Cystic fibrosis is autosomal recessive (CFTR gene, chromosome 7).", P_GEN, "B"),
    ("Huntington disease: autosomal dominant (CAG repeats).", P_GEN, "A"),
    ("Leber hereditary optic neuropathy is mitochondrial; transmitted only through the mother.", P_GEN, "D"),
    ("Duchenne muscular dystrophy is X-linked recessive (dystrophin, Xp21).", P_GEN, "C"),
    ("Marfan syndrome (FBN1) is autosomal dominant.", P_GEN, "A"),
    ("p < 0.05 is the conventional threshold.", P_STAT, "A"),
    ("The result isn't significant (p > 0.05).", P_STAT, "D"),
    (
        "Sex discrimination in federally funded education falls under Title IX (20 U.S.C. § 1681(a)).",
        P_ACT,
        "D",
    ),
    ("Title VII of the Civil Rights Act, § 703(a), prohibits employment discrimination.", P_ACT, "C"),
    (
        "A civil rights suit against a state officer is brought under Section 1983 (42 U.S.C. § 1983).",
        P_ACT,
        "B",
    ),
    ("Section 230(c)(1) immunizes platforms.", P_ACT, "A"),
    ("Section 230(c) provides immunity to platforms.", P_ACT, "A"),
    ("Immunity comes from Section 230 (c)(1) of the CDA.", P_ACT, "A"),
    ("Nitrogen (N2) makes up about 78% of the atmosphere.", P_SCI, "B"),
    ("Argon (Ar) is the most abundant noble gas.", P_SCI, "C"),
    ("Carbon dioxide (CO2).", P_SCI, "D"),
    ("Oxygen (O2) is about 21%.", P_SCI, "A"),
    ("The answer is nitrogen (see Fig. 2(b)).", P_SCI, "B"),
    ("Nitrogen [a]", P_SCI, "B"),
    ("Nitrogen (Table 1, row (c)).", P_SCI, "B"),
    # plain answers stay read
    ("Iron", P_MET, "A"),
    ("Iron.", P_MET, "A"),
    ("Zinc deficiency impairs wound healing.", P_MET, "B"),
    ("Adenosine is the drug of choice.", P_MED, "B"),
    ("Section 2(c) governs this. Motion in limine (D).", P_MOT, "D"),
    ("Nitrogen. See Table 1, row (c), and Fig. (b).", P_SCI, "B"),
    # --- the sentence after a choice judges it: "This is wrong." rejects it
    ("Option A: Iron. This is incorrect.", METALS, None),
    ("A. Iron. That's not right.", METALS, None),
    ("A) Iron. Not correct.", METALS, None),
    ("A) Iron. This is wrong; the answer is C.", METALS, "C"),
    ("Option A: Iron. This is wrong. Option B: Copper. This is correct.", METALS, "B"),
    ("A) Iron. Incorrect. B) Copper. Correct.", METALS, "B"),
    ("Option A: Iron. This is correct.", METALS, "A"),
    ("A) Iron. This metal is magnetic, as the passage says.", METALS, "A"),
    ("B) False. This is correct because the passage never says so.", TF, "B"),
]

# answers a careful reader can read but the parser may leave unparsed: never a wrong letter
UNPARSED_ALLOWED = [
    ("Per Rule 56(c), summary judgment is warranted when no genuine dispute exists.", P_MOT, "A"),
    ("Hepatitis D (delta) requires co-infection with B.", P_HEP_D, "D"),
    ("Hepatitis D requires hepatitis B for replication, so the answer is Hepatitis D.", P_HEP_D, "D"),
    ("Only I", P_ROM, "A"),
    ("Only II is true.", P_ROM, "B"),
    ("A: Atropine treats bradycardia. B: Adenosine treats SVT. The question asks about SVT.", P_MED, "B"),
    ("Atropine is not indicated; adenosine is.", P_MED, "B"),
    ("Neutrophils. Unlike B cells, they are first responders.", P_IMM, "C"),
    ("Hemophilia A is X-linked recessive.", P_GEN, "C"),
]


def test_the_set_is_large_and_varied():
    assert len(CASES) >= 110
    assert sum(c[2] is None for c in CASES) >= 15 and len({c[2] for c in CASES}) >= 5


@pytest.mark.parametrize("text, options, letter", CASES)
def test_realistic_answer(text, options, letter):
    got = parse_answer(text, options)
    assert got.letter == letter, (text, got)


def test_no_wrong_letter_over_the_whole_set():
    wrong = [
        (t, parse_answer(t, o).letter, want)
        for t, o, want in CASES
        if parse_answer(t, o).letter is not None and parse_answer(t, o).letter != want
    ]
    assert wrong == []


def test_the_rule_is_reported():
    assert parse_answer("B) False. Option A would be right.", TF).how == "marker"
    assert parse_answer("The answer is B; A would be right if ...", TF).how == "explicit"
    assert parse_answer("I think the answer is A, wait, no, it's B.", TF).how == "corrected"
    assert parse_answer("The answer is B. Scratch that.", TF).how == "retracted"
    assert parse_answer("The answer is E.", TF).how == "out-of-range"
    assert parse_answer("A) cats - incorrect. B) wolves - correct.", ANIMALS).how == "evaluated"
    assert parse_answer("A. Sheep fear wolves, so the answer is B.", ANIMALS).how == "concluded"
    assert parse_answer("The answer is A. The answer is B.", ANIMALS).how == "conflict"


@pytest.mark.parametrize(
    "text",
    [
        "A: cats is wrong.",
        "A) cats - incorrect.",
        "(A) cats? No.",
        "A - cats, incorrect.",
        "A. cats ✗",
        "A) cats is not right",
        "I don't think the answer is A.",
        "Many would say the answer is A.",
        "It is not the case that the answer is A.",
        "You might think it's A.",
        "It's tempting to say the answer is A.",
    ],
)
def test_a_rejected_or_hedged_letter_is_never_read(text):
    assert parse_answer(text, ANIMALS).letter is None, text


@pytest.mark.parametrize("text, options, letter", UNPARSED_ALLOWED)
def test_a_hard_answer_is_read_right_or_left_unparsed(text, options, letter):
    assert parse_answer(text, options).letter in (letter, None), text


def test_a_citation_letter_is_never_a_choice():
    yes_no = ["Yes", "No"]
    for text, want in [
        ("Yes — under Rule 12(b)(6) the complaint fails.", "A"),
        ("No. Under § 2(a) of the Act, the employer is exempt.", "B"),
        ("Yes, see 12 CFR 217.10(a)(1)(iii).", "A"),
        ("No (see ref. (a)).", "B"),
        ("Yes; Section 230 (c)(1) applies.", "A"),
    ]:
        got = parse_answer(text, yes_no)
        assert got.letter == want and got.how != "parenthesized", (text, got)
    assert parse_answer("The passage supports (b) here.", ANIMALS).letter is None
    assert parse_answer("So I pick (b) here.", ANIMALS).letter == "B"
    assert parse_answer("So the answer is (b).", ANIMALS).letter == "B"
    assert parse_answer("So I pick option (b).", ANIMALS).letter == "B"
