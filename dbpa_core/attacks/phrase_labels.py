"""A word's phrase type (Penn Treebank: NP, VP, PP, ...) read off spaCy's dependency
parse by the rules of :func:`phrase_label` (described in :mod:`dbpa_core.attacks.phrases`),
and the groups of the paper's phrase table. Both the word tables
(:mod:`dbpa_core.attacks.patterns`) and the phrase analysis use it."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from spacy.tokens import Token

GROUPS = ("NP", "VP", "PP", "ADJP", "ADVP", "QP", "PRT", "WH", "other")
LABELS = (
    "NP",
    "VP",
    "PP",
    "ADJP",
    "ADVP",
    "QP",
    "PRT",
    "WHNP",
    "WHADVP",
    "WHADJP",
    "WHPP",
    "SBAR",
    "S",
    "INTJ",
    "X",
)
GROUP_TEXT = {
    "NP": "noun phrase",
    "VP": "verb phrase",
    "PP": "prepositional phrase",
    "ADJP": "adjective phrase",
    "ADVP": "adverb phrase",
    "QP": "quantity phrase",
    "PRT": "particle",
    "WH": "wh-phrase",
    "other": "other (clause level)",
}

_WH_NOMINAL = frozenset({"WDT", "WP", "WP$"})
_NOMINAL = frozenset({"NOUN", "PROPN", "PRON"})
_VERBAL = frozenset({"VERB", "AUX"})
_GRADED = frozenset({"advmod", "npadvmod", "conj", "cc", "prep"})  # an adjective's own phrase
_SUBJECT = frozenset({"nsubj", "nsubjpass", "csubj", "csubjpass", "expl"})


def group_of(label: str) -> str:
    """The group of a phrase label: WHNP -> WH, SBAR -> other, NP -> NP."""
    if label.startswith("WH"):
        return "WH"
    return label if label in GROUPS else "other"


def _is_number(tok: Token) -> bool:
    return tok.tag_ == "CD" or tok.pos_ == "NUM"


def _in_qp(tok: Token) -> bool:
    """A number with a quantity modifier (``about 5``, ``5 million``, ``3 and 4``), or
    that modifier: the Treebank's QP."""
    if tok.dep_ == "quantmod":
        return True
    if not _is_number(tok):
        return (
            tok.dep_ in ("advmod", "amod", "cc")
            and tok.head is not tok
            and _is_number(tok.head)
            and _in_qp(tok.head)
        )
    if tok.dep_ in ("compound", "conj") and tok.head is not tok and _is_number(tok.head):
        return True
    return any(
        c.dep_ in ("quantmod", "advmod", "amod") or (c.dep_ in ("compound", "conj") and _is_number(c))
        for c in tok.children
    )


def _wh_nominal(tok: Token) -> bool:
    """A noun determined by a wh-word (``which book``, ``whose car``, ``how many apples``)."""
    for c in tok.children:
        if c.tag_ in _WH_NOMINAL and c.dep_ in ("det", "poss"):
            return True
        if c.dep_ == "amod" and any(g.tag_ == "WRB" for g in c.children):
            return True
    return False


def _head_label(tok: Token) -> str:
    return phrase_label(tok.head) if tok.head is not tok else "X"


def phrase_label(tok: Token) -> str:
    """The Treebank label of the smallest phrase holding spaCy token ``tok`` (see the
    module docstring for the rules)."""
    dep, pos, tag = tok.dep_, tok.pos_, tok.tag_
    if dep == "prt" or tag == "RP":
        return "PRT"
    if tag == "WRB":
        return "WHADJP" if dep == "advmod" and tok.head.pos_ == "ADJ" and tok.head is not tok else "WHADVP"
    if tag in _WH_NOMINAL:
        return "WHNP"
    if dep == "mark" or (pos == "SCONJ" and dep not in ("prep", "quantmod")):
        return "SBAR"
    if _in_qp(tok):
        return "QP"
    if pos == "ADP" or (dep in ("prep", "agent") and tag == "IN"):
        objects = [c for c in tok.children if c.dep_ in ("pobj", "pcomp")]
        return "WHPP" if any(c.tag_ in _WH_NOMINAL for c in objects) else "PP"
    if dep in ("cc", "preconj"):
        head = tok.head
        if head.pos_ in _VERBAL:
            clauses = [
                c for c in head.children if c.dep_ == "conj" and any(g.dep_ in _SUBJECT for g in c.children)
            ]
            return "S" if clauses else "VP"
        return _head_label(tok)
    if dep == "neg" and tok.lower_ in ("not", "n't"):  # "never" is an ADVP of its own
        return _head_label(tok)
    if pos in _NOMINAL or tag == "EX":
        return "WHNP" if _wh_nominal(tok) else "NP"
    if pos == "ADJ" or dep == "amod":
        if any(c.tag_ == "WRB" for c in tok.children):
            return "WHADJP"
        if dep == "conj" and tok.head.pos_ == "ADJ":
            return _head_label(tok)
        if dep == "amod":  # before its noun: in the NP unless graded or coordinated
            return "ADJP" if any(c.dep_ in _GRADED for c in tok.children) else _head_label(tok)
        if dep in ("det", "nummod", "poss", "compound"):
            return _head_label(tok)
        return "ADJP"
    if pos == "ADV":
        head = tok.head
        if dep == "advmod" and head is not tok:
            if head.pos_ in ("ADJ", "ADV") or head.pos_ in _NOMINAL or _is_number(head):
                return "ADVP" if head.pos_ == "ADV" else phrase_label(head)
        return "ADVP"
    if pos == "DET" or tag == "POS" or dep in ("det", "predet", "case", "poss"):
        return _head_label(tok) if tok.head.pos_ in _NOMINAL or _is_number(tok.head) else "NP"
    if _is_number(tok):
        return "NP"
    if pos in _VERBAL or tag in ("TO", "MD"):
        return "VP"
    if pos == "PART":  # "to" before a verb, "not": the verb's phrase
        return "VP" if tok.head.pos_ in _VERBAL else _head_label(tok)
    if pos == "INTJ":
        return "INTJ"
    return "X"


__all__ = ["GROUPS", "GROUP_TEXT", "LABELS", "group_of", "phrase_label"]
