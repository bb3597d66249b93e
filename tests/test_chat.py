"""prep tokenize --chat: the loss mask covers exactly the assistant turns' tokens, for three
templates (a system prompt, tool calls, prompt/completion from a tokenizer_config.json), as
PackedDataset's labels show; a hostile template is refused by the sandbox."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from jinja2.sandbox import ImmutableSandboxedEnvironment
from typer.testing import CliRunner

from loaders import DocumentDataset, PackedDataset
from prep import PrepError
from prep.cli.main import app
from prep.kinds.text.config import TokenizeConfig
from prep.kinds.text.tokenize import tokenize
from prep.media.text.chat import template_text

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
TOOLS = (
    "{% if tools %}<|system|>Tools: {{ tools | tojson }}\n{% endif %}"
    "{% for m in messages %}{% if m.role == 'assistant' %}<|assistant|>"
    "{% if m.tool_calls %}{% for c in m.tool_calls %}<call>{{ c.function.name }}"
    "({{ c.function.arguments | tojson }})</call>{% endfor %}"
    "{% else %}{{ m.content }}{% endif %}<|end|>\n"
    "{% else %}<|{{ m.role }}|>{{ m.content }}<|end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
ALPACA = (
    "{% for m in messages %}{% if m.role == 'user' %}### Instruction:\n{{ m.content }}\n\n"
    "{% else %}### Response:\n{{ m.content }}</s>{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}### Response:\n{% endif %}"
)

SYSTEM_CHAT = {
    "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Capital of France?"},
        {"role": "assistant", "content": "Paris."},
        {"role": "user", "content": "And of Italy?"},
        {"role": "assistant", "content": "Rome."},
    ]
}
CALL = {"name": "weather", "arguments": {"city": "Paris"}}
TOOL_CHAT = {
    "tools": [{"name": "weather", "parameters": {"city": "string"}}],
    "messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [{"function": CALL}]},
        {"role": "tool", "content": "sunny, 21 C"},
        {"role": "assistant", "content": "Sunny, 21 °C."},
    ],
}
PAIR = {"prompt": "Add 2 and 3.", "completion": "5"}

CASES = {  # template, its chats, each chat's assistant text as the template writes it
    "system": (CHATML, [SYSTEM_CHAT], [["Paris.<|im_end|>\n", "Rome.<|im_end|>\n"]]),
    "tools": (
        TOOLS,
        [TOOL_CHAT],
        [['<call>weather({"city": "Paris"})</call><|end|>\n', "Sunny, 21 °C.<|end|>\n"]],
    ),
    "completion": (
        ALPACA,
        [PAIR, {"prompt": "Say hi.", "completion": "hi"}],
        [["5</s>"], ["hi</s>"]],
    ),
}


def chat_run(tmp: Path, template: str, chats: list[dict[str, Any]], as_config: bool) -> Path:
    src = tmp / "chats.jsonl"
    src.write_text("".join(json.dumps(c, ensure_ascii=False) + "\n" for c in chats))
    if as_config:  # a tokenizer_config.json holding the template
        spec = tmp / "tokenizer_config.json"
        spec.write_text(json.dumps({"chat_template": template}))
    else:
        spec = tmp / "template.jinja"
        spec.write_text(template)
    out = tmp / "out"
    cfg = TokenizeConfig(
        src=str(src), out=str(out), chat=True, chat_template=str(spec), val_fraction=0.0, jobs=1
    )
    tokenize(cfg, show_progress=False)
    return out


def rendered(template: str, chat: dict[str, Any]) -> str:
    """The chat as the template writes it, rendered here on its own."""
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = lambda v: json.dumps(v, ensure_ascii=False)
    if "prompt" in chat:
        chat = {
            "messages": [
                {"role": "user", "content": chat["prompt"]},
                {"role": "assistant", "content": chat["completion"]},
            ]
        }
    return env.from_string(template).render(**chat, add_generation_prompt=False)


@pytest.mark.parametrize("case", list(CASES))
def test_loss_mask_is_the_assistant_turns(tmp_path: Path, case: str) -> None:
    template, chats, answers = CASES[case]
    out = chat_run(tmp_path, template, chats, as_config=case == "completion")
    docs = DocumentDataset(out, split="train")
    assert len(docs) == len(chats)
    texts = {bytes(docs[i].numpy().astype("uint8")).decode(): i for i in range(len(docs))}
    ds = PackedDataset(out, 512, strategy="greedy")
    for chat, answer in zip(chats, answers, strict=True):
        text = rendered(template, chat)
        d = texts[text]  # the tokens are the rendered text, whole
        rows = [ds[s] for s in range(len(ds))]
        targets = torch.cat(
            [r["labels"][(r["document_ids"] == d) & (r["labels"] != -100)] for r in rows]
        )
        assert bytes(targets.numpy().astype("uint8")).decode() == "".join(answer)
        assert all(turn in text for turn in answer)  # each as the template writes it


def test_hostile_template_is_refused(tmp_path: Path) -> None:
    hostile = "{{ ''.__class__.__mro__[1].__subclasses__() }}{% for m in messages %}{% endfor %}"
    with pytest.raises(PrepError, match="sandbox"):
        chat_run(tmp_path, hostile, [PAIR], as_config=False)


def test_chat_bad_lines_rejected_and_text_refused(tmp_path: Path) -> None:
    src = tmp_path / "chats.jsonl"
    src.write_text(json.dumps(PAIR) + "\n" + json.dumps({"messages": "nope"}) + "\n")
    (tmp_path / "t.jinja").write_text(ALPACA)
    args = ["tokenize", str(src), str(tmp_path / "out"), "--chat", "--chat-template"]
    res = CliRunner().invoke(app, [*args, str(tmp_path / "t.jinja"), "--max-rejects", "0.6"])
    assert res.exit_code == 0, res.output
    assert "1 rejected" in res.output
    txt = tmp_path / "a.txt"
    txt.write_text("plain text\n")
    args = ["tokenize", str(txt), str(tmp_path / "o2"), "--chat", "--chat-template"]
    res = CliRunner().invoke(app, [*args, str(tmp_path / "t.jinja")])
    assert res.exit_code != 0 and ".jsonl" in res.output and "Traceback" not in res.output


def test_template_from_the_tokenizer_config_beside_the_tokenizer(tmp_path: Path) -> None:
    (tmp_path / "tokenizer.json").write_text("{}")
    named = [{"name": "tool_use", "template": TOOLS}, {"name": "default", "template": CHATML}]
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": named}))
    assert template_text(None, str(tmp_path / "tokenizer.json")) == CHATML
    with pytest.raises(PrepError, match="--chat-template"):
        template_text(None, "bytes")  # no tokenizer file: no template beside it


def test_special_tokens_of_a_tokenizer_json_and_one_eot_a_chat(tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = {w: i for i, w in enumerate(["user", "assistant", "hi", "yo", "ok", "<unk>"])}
    tok = Tokenizer(models.WordLevel(words, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens(["<|im_start|>", "<|im_end|>", "<|endoftext|>"])  # ids 6, 7, 8
    tok.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": CHATML}))
    chat = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}
    src = tmp_path / "chats.jsonl"
    src.write_text(
        json.dumps(chat) + "\n" + json.dumps({"prompt": "ok", "completion": "hi"}) + "\n"
    )
    cfg = TokenizeConfig(
        src=str(src),
        out=str(tmp_path / "out"),
        chat=True,
        val_fraction=0.0,
        jobs=1,
        tokenizer=str(tmp_path / "tokenizer.json"),
    )
    tokenize(cfg, show_progress=False)  # the template: tokenizer_config.json beside it
    ds = PackedDataset(tmp_path / "out", 64, strategy="concat")
    item = ds[0]
    ids = item["input_ids"][item["document_ids"] >= 0].tolist()
    # <|im_start|> user hi <|im_end|> <|im_start|> assistant | yo <|im_end|> | <|endoftext|>
    assert ids == [6, 0, 2, 7, 6, 1, 3, 7, 8, 6, 0, 4, 7, 6, 1, 2, 7, 8]
    trained = item["labels"][item["labels"] != -100].tolist()
    # the assistant's words and end markers, and the eot after a chat that ends with its turn
    assert trained == [3, 7, 8, 2, 7, 8]
