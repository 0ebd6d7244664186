"""A small library of browser-automation prompts (MCP ``prompts/*``), which Claude Code offers as
slash commands.

Each prompt is a TOML file: ``name``, ``title``, ``description``, ``[[arguments]]`` (``name``,
``description``, ``required``) and ``[[messages]]`` (``role``, ``text``, where ``${arg}`` is
replaced by the argument's value). The built-in ones ship in ``router/catalog/prompts/``; an
operator's files in ``<state>/prompts/`` are added, and replace a built-in of the same name. The
folder is read at every request (a few small files), so an edit needs no restart.
"""

from __future__ import annotations

import logging
import string
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from router.catalog.paging import invalid_params

log = logging.getLogger("mcp_router.prompts")

BUILTIN_DIR: Final = Path(__file__).parent / "prompts"
MAX_PROMPT_FILE: Final = 64 * 1024
MAX_ARGUMENT_CHARS: Final = 16 * 1024
ROLES: Final = frozenset({"user", "assistant"})


@dataclass(frozen=True)
class Argument:
    name: str
    description: str
    required: bool


@dataclass(frozen=True)
class Prompt:
    name: str
    title: str
    description: str
    arguments: tuple[Argument, ...]
    messages: tuple[tuple[str, str], ...]  # (role, text template)

    def listed(self) -> dict[str, Any]:
        return {
            "name": self.name, "title": self.title, "description": self.description,
            "arguments": [{"name": a.name, "description": a.description, "required": a.required}
                          for a in self.arguments],
        }

    def expand(self, given: Any) -> dict[str, Any]:
        """The messages with the arguments filled in; -32602 for a missing or malformed one."""
        if given is None:
            given = {}
        if not isinstance(given, dict):
            raise invalid_params("Invalid params: arguments must be an object")
        known = {a.name for a in self.arguments}
        unknown = sorted(set(given) - known)
        if unknown:
            raise invalid_params(f"Invalid params: unknown argument(s) {unknown} for prompt {self.name!r}")
        for name, value in given.items():
            if not isinstance(value, str) or len(value) > MAX_ARGUMENT_CHARS:
                raise invalid_params(f"Invalid params: argument {name!r} must be a string")
        missing = [a.name for a in self.arguments if a.required and not given.get(a.name)]
        if missing:
            raise invalid_params(f"Invalid params: missing required argument(s) {missing} for prompt {self.name!r}")
        values = {a.name: given.get(a.name, "") or "(not given)" for a in self.arguments}
        return {
            "description": self.description,
            "messages": [
                {"role": role, "content": {"type": "text", "text": string.Template(text).safe_substitute(values)}}
                for role, text in self.messages
            ],
        }


def parse_prompt(data: dict[str, Any]) -> Prompt:
    """A prompt from a file's TOML; ValueError names what is wrong."""
    name = data.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError("name is required")
    arguments = []
    for raw in data.get("arguments", []):
        if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
            raise ValueError("every [[arguments]] needs a name")
        arguments.append(Argument(raw["name"], str(raw.get("description", "")), bool(raw.get("required", False))))
    messages = []
    for raw in data.get("messages", []):
        if not isinstance(raw, dict) or raw.get("role") not in ROLES or not isinstance(raw.get("text"), str):
            raise ValueError(f"every [[messages]] needs a role ({sorted(ROLES)}) and a text")
        messages.append((str(raw["role"]), str(raw["text"])))
    if not messages:
        raise ValueError("at least one [[messages]] is required")
    return Prompt(name, str(data.get("title", name)), str(data.get("description", "")), tuple(arguments),
                  tuple(messages))


def _read_dir(folder: Path) -> dict[str, Prompt]:
    found: dict[str, Prompt] = {}
    try:
        files = sorted(folder.glob("*.toml"))
    except OSError:
        return found
    for path in files:
        try:
            if path.stat().st_size > MAX_PROMPT_FILE:
                raise ValueError(f"larger than {MAX_PROMPT_FILE} bytes")
            prompt = parse_prompt(tomllib.loads(path.read_text()))
        except (OSError, ValueError) as exc:  # tomllib.TOMLDecodeError is a ValueError
            log.warning("prompt file skipped %s: %s", path, exc)
            continue
        found[prompt.name] = prompt
    return found


@dataclass(frozen=True)
class PromptLibrary:
    operator_dir: Path | None = None  # <state>/prompts
    builtin_dir: Path = BUILTIN_DIR

    def prompts(self) -> list[Prompt]:
        merged = _read_dir(self.builtin_dir)
        if self.operator_dir is not None:
            merged.update(_read_dir(self.operator_dir))
        return [merged[name] for name in sorted(merged)]

    def get(self, name: Any, arguments: Any) -> dict[str, Any]:
        prompt = next((p for p in self.prompts() if p.name == name), None)
        if prompt is None:
            raise invalid_params(f"Invalid params: unknown prompt {name!r}")
        return prompt.expand(arguments)
