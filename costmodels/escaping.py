"""Every user string servopt writes, escaped for where it goes: one function per medium.

A user's string (a study, class, GPU or model-folder name, a path, a hardware file's notes, a
Kubernetes label) is data wherever servopt shows it:

- a terminal: :func:`~servopt.costmodels.errors.one_line` (every control character, the line break
  and ESC included, shown as its escape, so nothing forges a line or drives the terminal);
  :func:`terminal_text` applies it to each line of what a command prints;
- markdown (report.md, the exports' README files): :func:`markdown_text`, with control characters
  shown as escapes, HTML neutralised (``<`` as ``&lt;``) and the characters that start links,
  emphasis or code escaped, so that a name renders as the text it is;
- YAML (Kubernetes manifests, seeded workloads, ``export --format yaml``): :func:`dump_yaml`, whose
  scalars are quoted whenever a YAML 1.1 or 1.2 reader would read them as anything but a string
  (``1e3``, ``0o17``, ``y``, ``yes``, ``null``, ``.5``);
- CSV: :func:`~servopt.costmodels.outfiles.spreadsheet_safe`; shell words: ``shlex`` quoting, with
  :func:`shell_word` for the few with control characters.

Example:
    >>> markdown_text("<script>alert(1)</script> [x](javascript:1) *b*")
    '&lt;script>alert(1)&lt;/script> \\\\[x\\\\](javascript:1) \\\\*b\\\\*'
    >>> print(dump_yaml({"nodeSelector": {"gpu": "1e3", "zone": "0o17", "on": "y", "name": "h100"}}), end="")
    nodeSelector:
      gpu: '1e3'
      zone: '0o17'
      'on': 'y'
      name: h100
    >>> terminal_text("study 'a\\x1b[31mred'\\nnext line")
    "study 'a\\\\x1b[31mred'\\nnext line"
"""

from __future__ import annotations

import re
import shlex
from typing import Any

import yaml

from .errors import one_line

# --- the terminal -----------------------------------------------------------------------------------


def terminal_text(text: str) -> str:
    """What a command prints, each of its lines through :func:`one_line` (the line breaks between
    them kept): no ESC, carriage return, backspace or other control character reaches the terminal."""
    if _PLAIN.fullmatch(text):
        return text
    return "\n".join(one_line(line) for line in text.split("\n"))


_PLAIN = re.compile(r"[\n\x20-\x7e]*")


# --- markdown -----------------------------------------------------------------------------------------
# What starts markup inside a line: code spans, emphasis, links and images, and python-markdown's
# attribute lists; '|' is escaped by the tables themselves (their cells).
_MARKUP = re.compile(r"([\\`*\[\]{}])")
_TAG_START = re.compile(r"<(?![=\s\d])")
_ENTITY_START = re.compile(r"&(?!\s)")
# '_' emphasises only at a word's edge (CommonMark and python-markdown leave snake_case alone).
_EDGE_UNDERSCORE = re.compile(r"(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")


def markdown_text(text: Any, code: bool = False) -> str:
    """A user's string as markdown shows it literally inside a line (after a line's own start, so
    that it begins no heading or list): control characters as escapes (no line break to forge a
    line), HTML neutralised (``&``, ``<``, ``>`` as entities), markup characters backslash-escaped.
    With ``code``, a code span (backticks outnumbering any run inside it; nothing in it is markup or HTML).

    >>> markdown_text("chat_v2 &amp; _batch_ <= 2")
    'chat_v2 &amp;amp; \\\\_batch\\\\_ <= 2'
    >>> markdown_text("servopt export 'a`b'", code=True)
    "``servopt export 'a`b'``"
    """
    text = one_line(str(text))
    if code:
        fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
        pad = " " if text.startswith("`") or text.endswith("`") else ""
        return f"{fence}{pad}{text}{pad}{fence}"
    text = _EDGE_UNDERSCORE.sub(r"\\_", _MARKUP.sub(r"\\\1", text))
    # HTML begins with '<' before a letter, '/', '!' or '?' and an entity with '&': both shown as
    # entities, wherever a '<' or '&' could begin one ('<= 0.5 s' and 'a & b' stay as written).
    return _TAG_START.sub("&lt;", _ENTITY_START.sub("&amp;", text))


# --- YAML ---------------------------------------------------------------------------------------------
class QuotingDumper(yaml.SafeDumper):
    """PyYAML's safe dumper (YAML 1.1) that also quotes what YAML 1.2 (and YAML 1.1 readers beyond
    PyYAML, such as Kubernetes' go-yaml) would read as a number, boolean or null: ``1e3`` (a float in
    1.2, text to PyYAML), ``0o17`` (octal in 1.2), ``y``/``n`` (booleans to go-yaml v2). A mapping used
    twice (pod labels) is written out twice rather than as an alias."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


# YAML 1.2 core schema (yaml.org/spec/1.2.2, 10.3.2) and YAML 1.1's y/n booleans
# (yaml.org/type/bool.html): a plain scalar of these forms is not read as text.
for _tag, _pattern, _first in (
    ("tag:yaml.org,2002:int", r"^[-+]?[0-9]+$|^0o[0-7]+$|^0x[0-9a-fA-F]+$", "-+0123456789"),
    ("tag:yaml.org,2002:float", r"^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?$", "-+.0123456789"),
    ("tag:yaml.org,2002:float", r"^[-+]?\.(?:inf|Inf|INF)$|^\.(?:nan|NaN|NAN)$", "-+."),
    ("tag:yaml.org,2002:bool", r"^(?:y|Y|n|N)$", "yYnN"),
):
    QuotingDumper.add_implicit_resolver(_tag, re.compile(_pattern), list(_first))


def dump_yaml(data: Any, **options: Any) -> str:
    """``data`` as YAML (:class:`QuotingDumper`; keys in the order given unless ``sort_keys``)."""
    return yaml.dump(data, Dumper=QuotingDumper, **{"sort_keys": False, **options})


def dump_yaml_all(documents: list[Any], **options: Any) -> str:
    """Several documents as one YAML stream (:func:`dump_yaml`)."""
    return yaml.dump_all(documents, Dumper=QuotingDumper, **{"sort_keys": False, **options})


# --- shell words ----------------------------------------------------------------------------------------


def shell_word(word: str) -> str:
    """``word`` quoted for a POSIX shell; one with control characters in bash's ``$'...'`` form, so
    that the printed line shows their escapes and still names the same file when pasted.

    >>> shell_word("runs/o;x"), shell_word("runs/a\\nb")
    ("'runs/o;x'", "$'runs/a\\\\nb'")
    """
    if one_line(word) == word:
        return shlex.quote(word)
    escaped = "".join(ch if ch.isprintable() and ch not in "\\'" else
                      ("\\" + ch if ch in "\\'" else ch.encode("unicode_escape").decode()) for ch in word)
    return f"$'{escaped}'"
