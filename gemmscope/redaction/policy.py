"""The redaction policy: what is taken out of every text gemmscope writes for a person to paste or
share (docs/redaction.md), and the `Redactor` that applies it.

The rules are text rules only (gemmscope.redaction.secret_rules' `RULES`: tokens and keys recognisable by
their shape or their name, e-mail addresses, user@host, host names, IP addresses, home and
per-user directories, Windows shares, user names in URLs), plus what a trace
recorded (secret values, paths, user and host names), given to the Redactor by whoever read it
(gemmscope.redaction.scrub learns them from a trace's own records). This module reads no trace: the report
model, the CLI and the scrubber all use it.
"""

from __future__ import annotations

import fnmatch
import re
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from gemmscope.redaction.secret_rules import MIN_SECRET_LENGTH, PATH_CHAR, PUBLIC_HOSTS, REDACTED, RULES, TRIGGERS

# Rules made from what a trace recorded (Redactor's arguments): their kinds, for the counts.
RECORDED_SECRET, RECORDED_PATH, USER_OR_HOST_NAME = "recorded-secret", "recorded-path", "user-or-host-name"
# What a document holds that has no text in it: left as it is without a call per value (a
# per-launch document holds millions of numbers).
_PLAIN = (int, float, bool, type(None))
# What a text no rule could match adds to the counts (shared, never changed).
_NOTHING: Counter[str] = Counter()
# How many distinct texts a Redactor remembers the redaction of, and as many it found no trigger
# in (a trace's names repeat millions of times, and one trace's distinct names, a few hundred
# thousand where a range is pushed per operator call, are redacted in its frames and again in its
# launches' ranges; a scrubbed trace's distinct texts are not kept without bound).
_REMEMBERED = 1_000_000
# Between texts searched all at once (Redactor.texts): no trigger matches it, unless a recorded value holds it.
_SEPARATOR = "\x00"


def _by_first_character(triggers: list[str]) -> list[re.Pattern]:
    """`triggers` (each starting with a literal character, escaped or not) as one regex per first
    character: a regex that starts with a literal is searched for that character alone, several
    times faster than an alternation is tried at every place."""
    by_first: dict[str, list[str]] = {}
    for trigger in triggers:
        first = trigger[:2] if trigger.startswith("\\") else trigger[:1]
        by_first.setdefault(first, []).append(trigger[len(first):])
    return [re.compile(f"{first}(?:{'|'.join(rests)})") for first, rests in by_first.items()]


def _alternation(literals: Iterable[str]) -> str:
    """Literal strings as one regex alternation, longest first, so that each is taken whole
    rather than by a shorter one it starts with."""
    return "|".join(re.escape(s) for s in sorted(set(literals), key=len, reverse=True))


class Redactor:
    """Takes secrets, private paths and the user's and machine's names out of text: one policy
    for everything gemmscope writes for a person (every command's every output format).

    Always: every rule of RULES. And what a trace recorded: `secret_values` (the values of
    secret-named environment variables and command-line options) wherever they appear; `paths`
    (absolute paths named in what scrub removes) wherever they appear as a whole path; `names`
    (user and host names) as words of their own or glued into a name with `_` (alice_run3);
    `machine_names` (those of the machine that writes what is shared, which a trace made
    elsewhere may hold inside an identifier without naming anyone: torchinductor_root) as words
    of their own. `keep`: shell patterns (`*.example.org`, `10.0.*`) of
    what stays although a rule matches it, besides PUBLIC_HOSTS. `counts`: what was redacted so
    far, per kind. Each distinct text is redacted once and remembered: a trace's names, and the
    documents made of them, repeat a few texts many times.
    """

    def __init__(self, secret_values: Iterable[str] = (), paths: Iterable[str] = (), names: Iterable[str] = (),
                 keep: Iterable[str] = (), machine_names: Iterable[str] = ()):
        values = {v for v in secret_values if len(v) >= MIN_SECRET_LENGTH and v != REDACTED}
        paths = {p.rstrip("/") for p in paths} - {""}
        names = {n for n in names if n and n != REDACTED}
        machine = {n for n in machine_names if n and n != REDACTED} - names
        rules = list(RULES)
        if values:
            rules.insert(2, (RECORDED_SECRET, _alternation(values)))
        if paths:
            rules.append((RECORDED_PATH, rf"(?<!{PATH_CHAR})(?<!/)(?:{_alternation(paths)})(?!{PATH_CHAR})"))
        if names:
            # a word of its own, or of a name glued with `_` (alice_run3, ckpt_alice): not inside
            # another word (malice, AliceWBackward0)
            rules.append((USER_OR_HOST_NAME, rf"(?<![A-Za-z0-9])(?:{_alternation(names)})(?![A-Za-z0-9])"))
        if machine:
            rules.append((USER_OR_HOST_NAME, rf"(?<![A-Za-z0-9_])(?:{_alternation(machine)})(?![A-Za-z0-9_])"))
        # what any rule's match holds (TRIGGERS, and the recorded values themselves), on the text in lower case
        recorded = [v.lower() for v in (*values, *paths, *names, *machine)]
        triggers = [trigger for kind, _ in RULES for trigger in TRIGGERS[kind]]
        self._could_match = re.compile("|".join(triggers + [_alternation(recorded)] * bool(recorded))).search
        self._trigger_passes = _by_first_character(triggers) + [re.compile(_alternation(recorded))] * bool(recorded)
        # Each rule one named group (rule0, rule1, …), its kept part lead0, lead1, …
        self._kinds = {f"rule{i}": kind for i, (kind, _) in enumerate(rules)}
        self._pattern = re.compile("|".join(
            f"(?P<rule{i}>{pattern.replace('(?P<lead>', f'(?P<lead{i}>')})" for i, (_, pattern) in enumerate(rules)))
        self._keep = (*PUBLIC_HOSTS, *keep)
        self.counts: Counter[str] = Counter()
        # text -> (the text redacted, the kinds redacted in it): what a repeated text adds to the
        # counts; and the texts no trigger is found in (most of them), left as they are
        self._done: dict[str, tuple[str, Counter[str]]] = {}
        self._plain: set[str] = set()

    def __call__(self, text: str) -> str:
        redacted, found = self._redacted(text)
        if found:
            self.counts.update(found)
        return redacted

    def finds(self, text: str) -> bool:
        """Whether the redaction takes anything out of `text` (nothing counted)."""
        return self._redacted(text)[0] != text

    def _redacted(self, text: str) -> tuple[str, Counter[str]]:
        """`text` redacted, and the kinds redacted in it (what each occurrence adds to the counts)."""
        if text in self._plain:
            return text, _NOTHING
        done = self._done.get(text)
        if done is None:
            if not self._could_match(text.lower()):
                self._remember_plain([text])
                return text, _NOTHING
            found: Counter[str] = Counter()
            done = (self._pattern.sub(lambda match: self._replace(match, found), text), found)
            if len(self._done) >= _REMEMBERED:
                self._done.clear()
            self._done[text] = done
        return done

    def _remember_plain(self, texts: Collection[str]) -> None:
        if len(self._plain) + len(texts) > _REMEMBERED:
            self._plain.clear()
        self._plain.update(texts)

    def _replace(self, match: re.Match, found: Counter[str]) -> str:
        group = match.lastgroup  # the rule's group: it closes after any group inside it
        assert group is not None  # every alternative of the pattern is a rule's group
        lead_group = "lead" + group.removeprefix("rule")
        lead = (match.group(lead_group) if lead_group in self._pattern.groupindex else None) or ""
        value = match.group()[len(lead):]
        if any(fnmatch.fnmatchcase(value, pattern) for pattern in self._keep):
            return match.group()
        found[self._kinds[group]] += 1
        return lead + REDACTED

    def summary(self) -> str:
        """What was redacted, per kind (never the values): "3 email, 1 hugging-face-token"."""
        counted = sorted((kc for kc in self.counts.items() if kc[1]), key=lambda kc: (-kc[1], kc[0]))
        return ", ".join(f"{count} {kind}" for kind, count in counted) or "nothing"

    def document(self, value: Any) -> Any:
        """A JSON-able document with every string in it (keys too) redacted. Redact before
        serialising: JSON's escapes (\\", \\\\) would hide a value from the text pass."""
        if isinstance(value, str):
            return self(value)
        if isinstance(value, dict):
            return {self(k) if isinstance(k, str) else k: v if isinstance(v, _PLAIN) else self.document(v)
                    for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [v if isinstance(v, _PLAIN) else self.document(v) for v in value]
        return value

    def frame(self, table: pd.DataFrame, distinct: Mapping[str, Collection[str]] | None = None) -> pd.DataFrame:
        """`table` with its column names and text cells redacted, each distinct text once.
        `distinct`: the distinct texts of some columns, known already (a trace's range names,
        Trace.range_names), not looked for again among their rows. Redact before writing CSV or
        HTML: their quoting ("" for ", &amp; for &) would hide a value from a text pass."""
        out = table.rename(columns=lambda c: self(c) if isinstance(c, str) else c)
        known = distinct or {}
        for column in out.select_dtypes(include=["object", "string", "category"]).columns:
            texts = out[column]
            redacted = self.values(texts, known.get(column))
            if redacted is not texts:
                out[column] = redacted
        return out

    def values(self, column: pd.Series, distinct: Collection[str] | None = None) -> pd.Series:
        """A column with its text cells redacted, each distinct text once (and counted once);
        the column itself when none changes. `distinct`: its distinct texts, where known."""
        if distinct is None:
            # An object column's by Python's hashing, as traces.model.text_codes codes texts (why:
            # there); only the distinct texts are wanted here, not a code per row. Missing values are no text.
            cells = column.to_numpy() if column.dtype == object else pd.unique(column)
            distinct = [t for t in dict.fromkeys(cells) if isinstance(t, str)]
        changed = self.changes(distinct)
        return column.astype(object).replace(changed) if changed else column

    def texts(self, texts: Sequence[str]) -> list[str]:
        """`texts` (distinct) redacted and counted, as `self` redacts each."""
        changed = self.changes(texts)
        return [changed.get(t, t) for t in texts] if changed else list(texts)

    def changes(self, texts: Collection[str]) -> dict[str, str]:
        """Of `texts` (distinct), those the redaction changes: text → redacted, each counted as
        `self` counts it. Those not met before are searched for triggers all at once
        (`_search_all`); those no trigger is in (most of a trace's) are passed over, not redacted
        one by one nor listed."""
        plain, done = self._plain, self._done
        unknown = [t for t in texts if t not in plain]
        new = [t for t in unknown if t not in done]
        if new:
            triggered = self._search_all(new)
            # all new (a trace's first look): those a trigger is in alone; else those left
            unknown = triggered if len(new) == len(unknown) else [t for t in unknown if t not in plain]
        changed = {}
        for text in unknown:
            redacted = self(text)
            if redacted != text:
                changed[text] = redacted
        return changed

    def _search_all(self, texts: list[str]) -> list[str]:
        """Redact and remember `texts` (distinct, none met before), looking for the triggers in
        all of them joined into one text, a pass per first character: a trace of torch's
        emit_nvtx holds hundreds of thousands of distinct range names, and a search per name
        cost more in calls than in searching. Only the texts a trigger is found in are redacted
        one by one: those, given back."""
        joined = _SEPARATOR.join(texts)
        if joined.isascii():  # lower case keeps each character's place: all lowered at once
            joined, lowered = joined.lower(), texts
        else:  # one character may lower to two (İ): each text lowered on its own
            lowered = [t.lower() for t in texts]
            joined = _SEPARATOR.join(lowered)
        # where each ends in the joined text, its separator included
        ends = np.cumsum(np.fromiter(map(len, lowered), dtype="int64", count=len(texts)) + 1)
        touched = np.zeros(len(texts) + 1, dtype="int64")
        for search in self._trigger_passes:
            for match in search.finditer(joined):
                # every text the match touches: one across a separator (a recorded value that
                # holds one) marks both, each then searched on its own
                touched[np.searchsorted(ends, match.start(), "right")] += 1
                touched[np.searchsorted(ends, match.end() - 1, "right") + 1] -= 1
        found = np.cumsum(touched[:-1]) > 0
        self._remember_plain(np.array(texts, dtype=object)[~found])
        triggered = [texts[i] for i in np.flatnonzero(found)]
        for text in triggered:
            self._redacted(text)
        return triggered
