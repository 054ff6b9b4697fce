"""An independent reader of the word-problem prompts and worked solutions, written from the text only.

What it reads: a prompt's sentences, one by one, with its own regular expressions (the sentence shapes
were read off generated problems, not imported from the generator's phrase tables); it keeps a ledger of
every (person, item) count the story states and applies each sentence to it. The asked count at the end
is the reader's answer. A transfer moves items between two people; the reader decides who gives and who
receives from the sentence's grammar alone ("O gives P k", "P gives k to O", "P gets k from O",
"O takes k from P").

How it is independent of the generator: it never calls `oar_rl.data.wordproblems`' drawing or solving
code, nor reads `WordProblem.steps` / `.answer` / `.roles`; those are only what it is compared with
(`audit.py`). The names' pronouns are listed here, as a reader of the text knows them.

Besides the answer the reader records, per prompt, anything a careful human reader would object to
(`Story.issues`): the asked stock going negative, another person giving away more than the story says they
have (a story inconsistency: it does not change the answer), a question about another person or item, a
second statement of the asked count, a person giving to themself.
"""

from __future__ import annotations

import re

SHE = frozenset({"Mia", "Ava", "Zoe", "Lily"})
HE = frozenset({"Leo", "Sam", "Tom", "Max"})
_W = r"([A-Z][a-z]+)"
PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (kind, re.compile(rx))
    for kind, rx in (
        ("has", rf"{_W} has (\d+) (\w+)\."),
        ("has", rf"{_W} also has (\d+) (\w+)\."),
        ("bags", rf"{_W} buys (\d+) bags with (\d+) (\w+) in each bag\."),
        ("gain", rf"{_W} buys (\d+) more (\w+)\."),
        ("gain", rf"{_W} finds (\d+) more (\w+)\."),
        ("gain", rf"{_W} buys (\d+) (\w+)\."),
        ("loss", rf"{_W} loses (\d+) (\w+)\."),
        ("loss", rf"{_W} sells (\d+) (\w+)\."),
        ("gives_obj", rf"{_W} gives {_W} (\d+) (\w+)\."),  # O gives P k items: O -> P
        ("gives_to", rf"{_W} gives (\d+) (\w+) to {_W}\."),  # P gives k items to O: P -> O
        ("gets_from", rf"{_W} gets (\d+) (\w+) from {_W}\."),  # P gets k items from O: O -> P
        ("takes_from", rf"{_W} takes (\d+) (\w+) from {_W}\."),  # O takes k items from P: P -> O
    )
)
TRAP_KINDS = ("gets_from", "takes_from")
"""Transfers whose wording reads like the opposite change of the subject's stock."""
_QUESTION = re.compile(rf"How many (\w+) does {_W} have (?:now|in the end)\?")


class Unreadable(ValueError):
    """A sentence none of the reader's shapes matches."""


def sentences(text: str) -> list[str]:
    out = [s.strip() for s in re.findall(r"[^.?]+[.?]", text)]
    if " ".join(out) != text:
        raise Unreadable(f"not a sequence of sentences: {text!r}")
    return out


class Story:
    """One prompt, read: the asked person/item/start, the events that change it, the ledger, issues.

    `events`: (op, k) with op "+" or "-", or ("bags", k, m), in the story's order; `kinds`: one label per
    body sentence ("gain", "loss", "bags", "distractor", or a trap kind when the asked stock changes
    through a trap-worded transfer); `issues`: (kind, detail) pairs.
    """

    def __init__(self, prompt: str) -> None:
        self.prompt = prompt
        sents = sentences(prompt)
        m = re.fullmatch(rf"{_W} has (\d+) (\w+)\.", sents[0])
        q = _QUESTION.fullmatch(sents[-1])
        if not m or not q or len(sents) < 3:
            raise Unreadable(f"no opening count or no question: {prompt!r}")
        self.name, self.start, self.item = m[1], int(m[2]), m[3]
        self.issues: list[tuple[str, str]] = []
        if (q[2], q[1]) != (self.name, self.item):
            self.issues.append(("question_mismatch", f"asks {q[2]}'s {q[1]}, story is {self.name}'s"))
        self.ledger: dict[tuple[str, str], int] = {(self.name, self.item): self.start}
        self.events: list[tuple] = []
        self.kinds: list[str] = []
        self.trajectory = [self.start]
        self.people, self.items = {self.name}, {self.item}
        for s in sents[1:-1]:
            self._read(s)

    @property
    def target(self) -> tuple[str, str]:
        return (self.name, self.item)

    @property
    def answer(self) -> int:
        return self.ledger[self.target]

    def _change(self, who: str, item: str, delta: int, sentence: str) -> None:
        key = (who, item)
        if key not in self.ledger:  # a count the story never states: nothing to check
            return
        self.ledger[key] += delta
        if self.ledger[key] < 0:
            kind = "target_negative" if key == self.target else "other_gives_more_than_they_have"
            self.issues.append((kind, f"{who}'s {item} at {self.ledger[key]} after {sentence!r}"))
        if key == self.target:
            self.trajectory.append(self.ledger[key])

    def _read(self, s: str) -> None:
        found = next(((kind, m) for kind, rx in PATTERNS if (m := rx.fullmatch(s))), None)
        if found is None:
            raise Unreadable(f"unreadable sentence {s!r}")
        kind, m = found
        g = m.groups()
        if kind == "has":
            who, d, it = g[0], int(g[1]), g[2]
            self.people.add(who)
            self.items.add(it)
            if (who, it) == self.target:
                self.issues.append(("target_restated", s))
            self.ledger[(who, it)] = d
            self.kinds.append("distractor")
            return
        if kind in ("gain", "loss", "bags"):
            who, it = g[0], g[-1]
            self.people.add(who)
            self.items.add(it)
            delta = int(g[1]) * int(g[2]) if kind == "bags" else int(g[1]) * (1 if kind == "gain" else -1)
            if (who, it) == self.target:
                self.events.append(
                    ("bags", int(g[1]), int(g[2])) if kind == "bags" else (kind_op(delta), abs(delta))
                )
                self.kinds.append(kind)
            else:
                self.kinds.append("distractor")
            self._change(who, it, delta, s)
            return
        if kind == "gives_obj":
            giver, recv, k, it = g[0], g[1], int(g[2]), g[3]
        elif kind == "gives_to":
            giver, k, it, recv = g[0], int(g[1]), g[2], g[3]
        else:  # gets_from, takes_from: the subject receives, the object gives
            recv, k, it, giver = g[0], int(g[1]), g[2], g[3]
        self.people |= {giver, recv}
        self.items.add(it)
        if giver == recv:
            self.issues.append(("self_transfer", s))
        if (giver, it) == self.target:
            self.events.append(("-", k))
        elif (recv, it) == self.target:
            self.events.append(("+", k))
        is_target = self.target in ((giver, it), (recv, it))
        direction = "loss" if (giver, it) == self.target else "gain"
        self.kinds.append((kind if kind in TRAP_KINDS else direction) if is_target else "distractor")
        self._change(giver, it, -k, s)
        self._change(recv, it, k, s)

    def chain(self) -> tuple:
        """The arithmetic alone: the start and each change of the asked stock (a bags event as +k*m)."""
        return (self.start, tuple(("+", e[1] * e[2]) if e[0] == "bags" else e for e in self.events))

    def steps(self) -> list[tuple[int, str, int, int]]:
        """The equations a clean solution writes, in order: a bags event is k*m=p then acc+p=r."""
        acc, out = self.start, []
        for e in self.events:
            if e[0] == "bags":
                p = e[1] * e[2]
                out += [(e[1], "*", e[2], p), (acc, "+", p, acc + p)]
                acc += p
            else:
                r = acc + e[1] if e[0] == "+" else acc - e[1]
                out.append((acc, e[0], e[1], r))
                acc = r
        return out

    def trap_steps(self) -> list[str | None]:
        """Per equation of `steps`: the trap kind of its event, or None."""
        out: list[str | None] = []
        for kind in (k for k in self.kinds if k != "distractor"):
            out += [None, None] if kind == "bags" else [kind if kind in TRAP_KINDS else None]
        return out


def kind_op(delta: int) -> str:
    return "+" if delta > 0 else "-"


def pronoun(name: str) -> str:
    return "she" if name in SHE else "he"
