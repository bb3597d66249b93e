"""Chat and instruction data for `prep tokenize --chat`: JSON lines of `messages` (role, content)
or `prompt`/`completion`, rendered by a chat template in a sandboxed Jinja environment (a
template is code from a stranger) into segments, each trained on (an assistant turn) or not.

>>> t = compile_template("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
...                      "{% if add_generation_prompt %}<assistant>{% endif %}")
>>> segments(t, {"messages": [{"role": "user", "content": "hi"},
...                           {"role": "assistant", "content": "yo"}]})
[('<user>hi<assistant>', False), ('yo', True)]
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import numpy as np

from prep.media.text.documents import DocumentReader
from prep.run.errors import PrepError

ROLES = ("system", "user", "assistant", "tool")
TEMPLATE_HINT = "HINT: --chat-template FILE: a Jinja template, or a tokenizer_config.json"


def template_text(spec: str | None, tokenizer: str) -> str:
    """The chat template: a Jinja file, or the `chat_template` of a tokenizer_config.json (by
    default the one beside a --tokenizer tokenizer.json)."""
    if spec is None:
        if not tokenizer.endswith(".json"):
            raise PrepError(f"--chat needs a chat template. {TEMPLATE_HINT}")
        spec = str(Path(tokenizer).with_name("tokenizer_config.json"))
    path = Path(spec)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise PrepError(f"{path}: cannot read the chat template ({e}). {TEMPLATE_HINT}") from e
    if path.suffix != ".json":
        return text
    try:
        found = json.loads(text).get("chat_template")
    except (json.JSONDecodeError, AttributeError) as e:
        raise PrepError(f"{path}: not a tokenizer_config.json ({e}). {TEMPLATE_HINT}") from e
    if isinstance(found, list):  # named templates: the "default" one
        named = {t.get("name"): t.get("template") for t in found if isinstance(t, dict)}
        found = named.get("default")
    if not isinstance(found, str):
        raise PrepError(f"{path} has no chat_template string. {TEMPLATE_HINT}")
    return found


@functools.lru_cache(maxsize=4)
def compile_template(text: str) -> Any:
    """The template in an ImmutableSandboxedEnvironment: no attribute of Python's internals, no
    changing what it is given; `raise_exception` as transformers offers it."""
    from jinja2 import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    env.filters["tojson"] = lambda v, indent=None: json.dumps(v, ensure_ascii=False, indent=indent)
    try:
        return env.from_string(text)
    except TemplateError as e:
        raise PrepError(f"the chat template does not compile: {e}. {TEMPLATE_HINT}") from e


def conversation(record: Any) -> dict[str, Any] | str:
    """A JSON line as {"messages": [...], (tools)}, or why it is not a chat."""
    if not isinstance(record, dict):
        return "is not a JSON object"
    if "messages" not in record and "prompt" in record:
        prompt, completion = record.get("prompt"), record.get("completion")
        if not (isinstance(prompt, str) and isinstance(completion, str)):
            return "has no string prompt and completion"
        record = {
            "messages": [
                {"role": "user", "content": prompt},
                {"role": "assistant", "content": completion},
            ]
        }
    messages = record.get("messages")
    if not isinstance(messages, list) or not messages:
        return "has no list of messages (or prompt and completion)"
    for m in messages:
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            return f"has a message whose role is not one of {', '.join(ROLES)}"
    return {k: v for k, v in record.items() if k in ("messages", "tools")}


def segments(template: Any, chat: dict[str, Any]) -> list[tuple[str, bool]]:
    """The rendered chat cut into (text, trained) runs: an assistant turn is what rendering it
    adds after the prompt for it (its end-of-turn marker in). Raises ValueError for a template
    that does not render turn by turn (a turn's text changes what came before)."""
    messages, tools = chat["messages"], chat.get("tools")

    def render(n: int, prompt: bool) -> str:
        return str(
            template.render(messages=messages[:n], tools=tools, add_generation_prompt=prompt)
        )

    whole = render(len(messages), False)
    if not whole:
        raise ValueError("it renders to nothing")
    out: list[tuple[str, bool]] = []
    done = 0
    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        prompt, turn = render(i, True), render(i + 1, False)
        if not (done <= len(prompt) and turn.startswith(prompt) and whole.startswith(turn)):
            raise ValueError(f"the template does not render message {i} after those before it")
        out += [(whole[done : len(prompt)], False), (whole[len(prompt) : len(turn)], True)]
        done = len(turn)
    out.append((whole[done:], False))
    return [(text, trained) for text, trained in out if text]


class ChatReader(DocumentReader):
    """A DocumentReader whose documents are chats: each read as JSON of its segments, a chat that
    is not one (or that the template refuses) a reject."""

    def __init__(self, template: str, errors: str, max_bytes: int):
        super().__init__("messages", errors, max_bytes)
        self.template = compile_template(template)

    def _from_json(self, line: str, rel: str, offset: int) -> str | None:
        from jinja2 import TemplateError
        from jinja2.exceptions import SecurityError

        where = f"line at byte {offset}"
        try:
            chat = conversation(json.loads(line))
        except json.JSONDecodeError as e:
            self._reject(rel, "json", f"{where} is not JSON ({e.msg})")
            return None
        if isinstance(chat, str):
            self._reject(rel, "no_chat", f'{where} {chat}. HINT: {{"messages": [{{"role": ...')
            return None
        try:
            parts = segments(self.template, chat)
        except SecurityError as e:  # a template after Python's internals: no chat renders
            raise PrepError(f"the chat template is refused by the sandbox: {e}") from e
        except (TemplateError, ValueError, TypeError) as e:
            self._reject(rel, "template", f"{where}: the chat template fails on it: {e}")
            return None
        return json.dumps(parts, ensure_ascii=False)


def encode_chats(tok: Any, docs: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ChatReader's documents as (ids, lengths, loss mask: 1 on the tokens of assistant turns).
    Each segment is encoded alone, so no token straddles a turn; the end-of-document token
    follows the last segment, trained on as it is."""
    parts = [json.loads(d) for d in docs]
    texts = [text for p in parts for text, _ in p]
    ids, lengths = getattr(tok, "encode_marked", tok.encode)(texts)  # markers: their ids
    trained = np.repeat([t for p in parts for _, t in p], lengths).astype(np.uint8)
    eot = tok.eot_id
    if eot is not None:  # one after each segment: kept only after a chat's last
        last = np.cumsum([len(p) for p in parts]) - 1
        keep = np.ones(len(ids), bool)
        ends = np.cumsum(lengths) - 1
        drop = np.setdiff1d(np.arange(len(lengths)), last)
        keep[ends[drop]] = False
        ids, trained = ids[keep], trained[keep]
        lengths = lengths.copy()
        lengths[drop] -= 1
    per_chat = np.add.reduceat(lengths, np.cumsum([0] + [len(p) for p in parts[:-1]]))
    return ids, per_chat.astype(np.int64), trained
