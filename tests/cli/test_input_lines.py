"""``tallow embed --input``: lines end at \\n (or \\r\\n) only, as under ``--ray``."""

from __future__ import annotations

import io
import json

import pytest

from tallow.cli.models import read_texts
from tallow.distributed.io import read_jsonl_file, read_text_file
from tallow.errors import FileFormatError


def test_form_feed_and_separators_do_not_split_a_line(tmp_path):
    src = tmp_path / "pages.txt"
    src.write_bytes("page one\x0cpage two\nnext\u2028same line\r\nlast\x1d\rend\n".encode())
    want = ["page one\x0cpage two", "next\u2028same line", "last\x1d\rend"]
    assert read_texts(str(src)) == want
    assert read_text_file(str(src))[1] == want  # the --ray reader agrees


def test_valid_jsonl_with_unescaped_line_separator(tmp_path):
    # json.dumps(ensure_ascii=False) writes U+2028 as it is: valid JSON, one line.
    texts = ["a\u2028b", "c\u2029d", "e\x0cf", "plain"]
    src = tmp_path / "items.jsonl"
    src.write_text("".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in texts),
                   encoding="utf-8")
    assert read_texts(str(src)) == texts
    assert read_jsonl_file(str(src))[1] == texts


def test_stdin_is_split_the_same_way(monkeypatch):
    class Stdin(io.TextIOWrapper):
        pass

    raw = io.BytesIO("\ufeffx\x0cy\nz\n".encode())
    monkeypatch.setattr("sys.stdin", Stdin(raw, encoding="utf-8"))
    assert read_texts("-") == ["x\x0cy", "z"]


def test_not_utf8_names_the_file(tmp_path):
    src = tmp_path / "bad.txt"
    src.write_bytes(b"ok\n\xff\xfe\n")
    with pytest.raises(FileFormatError, match=r"--input: .*bad.txt is not UTF-8 text \(byte 3"):
        read_texts(str(src))
