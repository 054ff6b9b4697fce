"""Credit-rule names as a user writes them: `grpo` is plain GRPO's name everywhere, `none` its alias.

The registry (:mod:`oar_rl.credits`) keys plain GRPO as ``'none'`` (the reshaping it takes, and the value
every recipe and run file written so far records, so protocol hashes stay as they are); the study has
always called it ``'grpo'``. Every place that reads a rule's name from a user (`OARConfig.credit`,
`oar-rl train --credit`, `oar-rl study --credits`, `oar-rl bench --credits`, `oar-rl blame --credits`)
resolves it here, once: :func:`registered` gives the registry's key, :func:`study_name` the study's, and
an unknown name is an error that names the nearest valid ones (:func:`unknown_message`).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

ALIASES: dict[str, str] = {"grpo": "none"}
"""A name a user may write -> the registered rule it names (`oar_rl.credits.CREDIT_MODES`)."""


def registered(name: str) -> str:
    """The registry's name for `name` (``'grpo'`` -> ``'none'``; any other name as given)."""
    return ALIASES.get(name, name)


def study_name(name: str) -> str:
    """The study's name for `name`: plain GRPO is ``'grpo'`` (also when written ``'none'``)."""
    return "grpo" if registered(name) == "none" else name


def spelled(valid: Iterable[str]) -> list[str]:
    """`valid` as a user reads it: plain GRPO shown once, as ``grpo (alias none)``."""
    out = []
    for v in valid:
        if registered(v) == "none":
            if "grpo (alias none)" not in out:
                out.append("grpo (alias none)")
        else:
            out.append(v)
    return out


def nearest(name: str, valid: Iterable[str], n: int = 3) -> list[str]:
    """Up to `n` names of `valid` (and their aliases) closest to `name`, by `difflib` (case ignored)."""
    pool = list(dict.fromkeys([*valid, *(a for a, r in ALIASES.items() if r in valid or a in valid)]))
    lower = {p.lower(): p for p in pool}
    return [lower[m] for m in difflib.get_close_matches(str(name).lower(), list(lower), n=n, cutoff=0.5)]


def unknown_message(what: str, name: str, valid: Iterable[str]) -> str:
    """`WHAT='NAME' is not valid (did you mean 'x' or 'y'?); choose one of ...` for an unknown name."""
    valid = list(valid)
    quoted = [repr(c) for c in nearest(name, valid)]
    said = " or ".join([", ".join(quoted[:-1]), quoted[-1]] if len(quoted) > 1 else quoted)
    hint = f" (did you mean {said}?)" if quoted else ""
    return f"{what}={name!r} is not valid{hint}; choose one of {', '.join(spelled(valid))}"


def not_scorable(name: str, valid: Iterable[str]) -> str:
    """Why `name` is not among the rules `valid` a standalone analysis (attribute, oracle, recall) scores:
    not a rule (the nearest valid one named), plain GRPO, a rule registered with ``standalone=False``
    (said so, not "unknown"), or a control."""
    from oar_rl.credits import CREDIT_MODES

    mode = CREDIT_MODES.get(registered(name))
    if mode is None:
        near = nearest(name, list(valid))
        return f"{name!r} is not a registered credit rule" + (f" (did you mean {near[0]!r}?)" if near else "")
    if mode.scorer is None:
        return f"{name!r} scores no token (plain GRPO)"
    if not mode.standalone:
        return (
            f"{name!r} is registered with standalone=False (it reads the rollouts' outcome: gold answers, "
            "answer check, advantages), which this command does not have; oar-rl blame scores it"
        )
    return f"{name!r} is a control every table carries already"
