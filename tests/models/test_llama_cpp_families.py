"""Each decoder family against llama.cpp on files llama.cpp wrote: its own
convert_hf_to_gguf.py (F32, F16) and quantizer (Q8_0, Q4_K_M) on a small random
transformers model, its logits from the llama-cpp-python wheel (a 32-token prompt,
then 16 cached steps). Slow; skipped without llama-cpp-python or the converter
(see tests/support/llama_cpp_families.py)."""

import pytest

from support import llama_cpp_families as lcf

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    why = lcf.available()
    if why:
        pytest.skip(why)
    return tmp_path_factory.mktemp("llama_cpp_families")


@pytest.mark.parametrize("fmt", lcf.FORMATS)
@pytest.mark.parametrize("family", sorted(lcf.FAMILIES))
def test_logits_match_llama_cpp_on_its_own_files(root, family, fmt):
    path = lcf.family_files(family, root, [fmt])[fmt]
    r = lcf.compare(path)
    # within the difference llama.cpp's own f16 cache makes on the same file
    assert r["rel_l2"] <= r["llama_kv_f16_rel_l2"], r
    assert r["argmax_agree"] >= 0.9, r
