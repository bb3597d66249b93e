"""`prep tokenize` options (prep.run.config has the options every command shares)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from prep.run.config import RunConfig, check, choice, opt


@dataclass
class TokenizeConfig(RunConfig):
    src: str | None = opt(None, "Folder of .txt files, one .txt file, or a .jsonl file.")
    tokenizer: str = opt(
        "bytes", "bytes (default) | char | bpe | path/to/tokenizer.json.", "--tokenizer", "-t"
    )
    vocab_size: int = opt(8192, "bpe: vocabulary size to train (default 8192).")
    val_fraction: float = opt(0.01, "Share of documents in val, chosen by a hash of their text.")
    split_lines: bool = opt(False, ".txt: one document per line, not per file.", "--split-lines")
    glob: str | None = opt(
        None,
        "Read the files whose name matches instead of *.txt, comma-separated: '*.py,*.md' "
        "(UTF-8 text of any extension; a pattern with / matches the path under SRC).",
    )
    text_field: str = opt("text", ".jsonl: the field holding the text.")
    errors: str = opt("strict", "Invalid UTF-8: strict (reject the document) | replace (U+FFFD).")
    shard_mb: float = opt(64.0, "MB of text per shard (one task each).")
    max_doc_mb: float = opt(64.0, "Reject longer documents (memory stays bounded).")
    chat: bool = opt(
        False,
        ".jsonl of chats (messages with role/content, or prompt/completion): rendered by the "
        "chat template, with a loss mask on the assistant's tokens.",
        "--chat",
    )
    chat_template: str | None = opt(
        None,
        "--chat: a Jinja template file, or a tokenizer_config.json holding one (default: the one "
        "beside a --tokenizer tokenizer.json). Rendered in a sandbox.",
    )
    pack: int | None = opt(
        None,
        "Also store each split's best-fit packing into sequences of this many tokens: "
        "PackedDataset at that seq_len reads it and plans nothing.",
    )

    SECTION: ClassVar[str] = "tokenize"

    def validate(self) -> None:
        from prep.media.text.documents import ERRORS
        from prep.media.text.tokenizers import check_tokenizer

        super().validate()
        check_tokenizer(self.tokenizer, self.vocab_size)
        check(0 <= self.val_fraction < 1, f"--val-fraction {self.val_fraction}", "in [0, 1)")
        choice(self.errors, ERRORS, "--errors")
        check(self.shard_mb > 0, f"--shard-mb {self.shard_mb}", "positive")
        check(self.max_doc_mb > 0, f"--max-doc-mb {self.max_doc_mb}", "positive")
        check(self.pack is None or self.pack >= 2, f"--pack {self.pack}", "2 tokens or more")
        remote = self.pack is not None and "://" in str(self.out)
        check(not remote, "--pack", "for a local OUT (a packing is written beside the tokens)")
