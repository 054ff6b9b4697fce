"""The word-problem generator's phrase tables: prompts, solution phrasings and remarks.

`oar_rl.data.wordproblems` draws from them; its tokenizer's vocabulary is derived from them
(`corpus_texts`), so editing a table changes the tokenizer and invalidates the shipped warm starts.
Placeholders: {n} name, {o} the other person, {item}, {item2}, {k}/{m}/{d} numbers, {p}/{P} the pronoun
(capitalised), {r} a running total.
"""

from __future__ import annotations

NAMES: tuple[tuple[str, str], ...] = (
    ("Mia", "she"),
    ("Ava", "she"),
    ("Zoe", "she"),
    ("Lily", "she"),
    ("Leo", "he"),
    ("Sam", "he"),
    ("Tom", "he"),
    ("Max", "he"),
)
ITEMS: tuple[str, ...] = ("apples", "pears", "plums", "eggs", "cards", "stamps", "shells", "coins")
GAIN_PROMPTS = ("{n} buys {k} more {item}.", "{n} finds {k} more {item}.", "{o} gives {n} {k} {item}.")
LOSS_PROMPTS = ("{n} gives {k} {item} to {o}.", "{n} loses {k} {item}.", "{n} sells {k} {item}.")
MUL_PROMPT = "{n} buys {k} bags with {m} {item} in each bag."
DISTRACTORS = ("{o} has {d} {item}.", "{o} buys {d} {item2}.", "{n} also has {d} {item2}.")
QUESTIONS = ("How many {item} does {n} have now?", "How many {item} does {n} have in the end?")
# The long regime only (`WordProblemConfig.trap_prob`): phrasings that read like the opposite event. A
# fallible teacher misreads them (`teacher_slips`, `misread_prob`), so a warm start prefers the wrong
# operator there: a systematic reasoning error, not a sampling slip.
TRAP_GAIN_PROMPTS = ("{n} gets {k} {item} from {o}.",)
TRAP_LOSS_PROMPTS = ("{o} takes {k} {item} from {n}.",)

# Solution phrasings. {p}: pronoun, {P}: capitalised pronoun, {n}: name, {item}, {item2}, {o}.
OPENINGS = (
    "Only the {item} of {n} matter here.",
    "We need to count the {item} that {n} has.",
    "Let us follow the {item} of {n} step by step.",
    "The question is about {n} and the {item}.",
)
IGNORES = (
    "The {item2} do not count.",
    "We can ignore the {item2}.",
    "What {o} has does not matter.",
    "The other numbers are not needed.",
)
FIRST = ("First,", "To start,", "At first,", "")
NEXT = ("Then", "Next,", "After that,", "Now", "")
GAIN_CLAUSES = (
    "{p} gets more {item}, so",
    "{p} adds the new {item}, so",
    "the {item} go up, so",
    "we add them, which gives",
    "more {item} come in:",
)
LOSS_CLAUSES = (
    "{p} gives some away, which leaves",
    "{p} has fewer {item} now, so",
    "we take them away, so",
    "the {item} go down:",
    "some {item} are gone, so",
)
MUL_CLAUSES = (
    "the bags hold",
    "{p} buys bags of {item}, and they hold",
    "each bag has the same number, so",
    "we multiply for the bags:",
)
MUL_ADD_CLAUSES = ("{p} adds them, so", "we add the bag {item}, so", "with the bags, {p} has")
REMARKS = (
    "Good.",
    "That is easy.",
    "Let me check: yes.",
    "This looks right.",
    "Okay.",
    "So far so good.",
    "Nice.",
)
NEUTRAL_CLAUSES = ("so", "this gives", "we work it out:", "the count becomes", "which makes")
"""The long regime's clauses for gain and loss steps (`neutral_clauses`): they do not tell the direction,
so the operator is where the policy decides it."""
RESTATES = ("{P} has {r} {item} now.", "That makes {r} {item}.", "So {n} has {r} {item}.")
"""The long regime's running total after each change of the stock (`restate`)."""
CLOSINGS = ("That is the answer.", "So this is the final count.", "We are done.", "That is all.")
