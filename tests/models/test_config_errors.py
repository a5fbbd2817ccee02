"""Damaged or unusual model configs: a ``TallowError`` naming the file, the key and
the fix, never a ZeroDivisionError, KeyError, RecursionError or OverflowError."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tallow.cli import main
from tallow.errors import TallowError
from tallow.models.config import ModelFormatError
from tallow.models.llama import LlamaConfig
from tallow.models.quantized_llama import ModelWeights

from support.models import LLAMA_CFG

gguf = pytest.importorskip("gguf")


def write_gguf(path, meta: dict, tensors: dict, chat_template=None):
    """A llama GGUF with the given ``llama.*`` u32 keys and (array, raw type) tensors."""
    w = gguf.GGUFWriter(str(path), "llama")
    for key, value in meta.items():
        w.add_uint32(f"llama.{key}", value)
    if chat_template is not None:
        w.add_chat_template(chat_template)
        w.add_token_list(["<s>", "</s>", "a"])
        w.add_bos_token_id(0)
        w.add_eos_token_id(1)
    for name, (array, raw) in tensors.items():
        w.add_tensor(name, array, raw_dtype=raw) if raw is not None else w.add_tensor(name, array)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(path)


META = {"context_length": 64, "embedding_length": 8, "block_count": 1, "feed_forward_length": 16,
        "attention.head_count": 2, "attention.head_count_kv": 2}
TENSORS = {"token_embd.weight": (np.zeros((32, 8), np.float32), None),
           "blk.0.attn_norm.weight": (np.ones(8, np.float32), None)}


@pytest.mark.parametrize("key, value, message", [
    ("attention.head_count", 0, "llama.attention.head_count is 0; it must be an integer >= 1"),
    ("attention.head_count_kv", 0, "llama.attention.head_count_kv is 0"),
    ("embedding_length", 0, "llama.embedding_length is 0"),
    ("context_length", 0, "llama.context_length is 0"),
    ("block_count", 0, "llama.block_count is 0"),
    ("block_count", 40, "llama.block_count is 40 but the file holds the tensors of 1 blocks"),
])
def test_bad_gguf_llama_metadata(tmp_path, key, value, message):
    path = write_gguf(tmp_path / "m.gguf", {**META, key: value}, TENSORS)
    with pytest.raises(ModelFormatError, match=message) as e:
        ModelWeights.from_gguf(path)
    assert path in str(e.value)


def test_unsupported_tensor_type_names_the_tensor_and_type(tmp_path):
    tq2 = gguf.GGMLQuantizationType.TQ2_0
    tensors = {**TENSORS, "blk.0.ffn_up.weight": (np.zeros((16, 66), np.uint8), tq2)}
    path = write_gguf(tmp_path / "m.gguf", META, tensors)
    with pytest.raises(TallowError, match=r"tensor 'blk.0.ffn_up.weight' has unsupported GGML "
                                          r"type 35 \(TQ2_0\).*convert the model"):
        ModelWeights.from_gguf(path)


@pytest.mark.parametrize("template, message", [
    ("{% for i in range(10 ** 12) %}x{% endfor %}", "loops or grows without bound"),
    ("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}", "recurses without end"),
])
def test_runaway_chat_template(tmp_path, template, message):
    from tallow.models.gguf_tokenizer import apply_chat_template

    path = write_gguf(tmp_path / "m.gguf", META, TENSORS, chat_template=template)
    with pytest.raises(ModelFormatError, match=message) as e:
        apply_chat_template(path, [{"role": "user", "content": "hi"}])
    assert path in str(e.value) and "tokenizer.chat_template" in str(e.value)


def write_config(tmp_path, **changes):
    data = {**LLAMA_CFG, "model_type": "llama", **changes}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    return str(path)


@pytest.mark.parametrize("changes, message", [
    ({"num_attention_heads": 0}, "'num_attention_heads' is 0; it must be an integer >= 1"),
    ({"num_key_value_heads": 0}, "'num_key_value_heads' is 0"),
    ({"hidden_size": "64"}, "'hidden_size' is '64'"),
    ({"num_hidden_layers": -1}, "'num_hidden_layers' is -1"),
    ({"rope_scaling": {"rope_type": "llama3", "low_freq_factor": 1.0}},
     "rope_scaling \\(llama3\\) key 'factor' is missing; it must be a positive number"),
    ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0,
                       "high_freq_factor": 1.0}}, "high_freq_factor 1.0 must be above"),
])
def test_bad_llama_config_json(tmp_path, changes, message):
    path = write_config(tmp_path, **changes)
    with pytest.raises(ModelFormatError, match=message) as e:
        LlamaConfig.from_json(path)
    assert path in str(e.value)


def test_deeply_nested_config_json(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(ModelFormatError, match="nests JSON arrays or objects too deeply") as e:
        LlamaConfig.from_json(str(path))
    assert str(path) in str(e.value)


def test_embed_with_a_gguf_file_says_it_is_a_file(tmp_path, capsys):
    path = write_gguf(tmp_path / "x.gguf", META, TENSORS)
    assert main(["embed", "--model", path, "hello"]) == 1
    err = capsys.readouterr().err
    assert f"{path} is a file, not a model directory" in err and "tallow generate" in err
    assert "no such model directory" not in err
