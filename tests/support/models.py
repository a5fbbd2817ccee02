"""Helpers that create small random models (transformers) and tokenizers (tokenizers)."""

import os


def write_hf_tensors(w, hf, arch, quantized=True):
    """A transformers model's weights into ``gguf.GGUFWriter`` ``w`` as llama.cpp's converter
    names and stores them (Gemma 3's norms as weight + 1, Phi-3's fused projections), the
    2-D ones in Q8_0 when ``quantized``; then writes the file and closes it."""
    import gguf
    import numpy as np

    from tallow.models.gguf_decoder import gguf_name

    for name, t in hf.state_dict().items():
        if name == "lm_head.weight" and hf.config.tie_word_embeddings:
            continue
        a = t.detach().numpy().astype(np.float32)
        if arch == "gemma3" and name.endswith("norm.weight"):
            a = a + 1  # the converter's Gemma 3: norms scale by the stored weight
        out = gguf_name(name, arch == "gemma3", arch == "phi3")
        if quantized and a.ndim == 2:
            w.add_tensor(out, gguf.quants.quantize(a, gguf.GGMLQuantizationType.Q8_0),
                         raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            w.add_tensor(out, np.ascontiguousarray(a))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def add_decoder_shape(w, c):
    """A decoder's shape keys in a ``gguf.GGUFWriter``, from its transformers config ``c``,
    as llama.cpp's converter writes them (key and value lengths: the head size, which
    it returns)."""
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_block_count(c.num_hidden_layers)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    return head_dim


def make_bpe_tokenizer(path, vocab_size=300):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    corpus = ["the quick brown fox jumps over the lazy dog", "tensors and kernels run on devices",
              "small models generate text one token at a time", "héllo wörld ünïcode"] * 10
    tok.train_from_iterator(corpus, trainer)
    tok.save(str(path))
    return tok


LLAMA_CFG = dict(vocab_size=320, hidden_size=64, intermediate_size=160, num_hidden_layers=3,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=96,
                 rope_theta=50000.0, rms_norm_eps=1e-5, tie_word_embeddings=True,
                 bos_token_id=0, eos_token_id=0)


def save_llama(d, seed=0, **overrides):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(**{**LLAMA_CFG, **overrides})).eval()
    model.save_pretrained(d)
    make_bpe_tokenizer(os.path.join(d, "tokenizer.json"))
    return model


# -- GGUF (llama.cpp layout) ---------------------------------------------------------------

QLLAMA_CFG = dict(LLAMA_CFG, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False)


def llama_cpp_permute(w, n_head, n_head_kv):
    """llama.cpp's convert_hf_to_gguf.py ``LlamaModel.permute`` for q_proj / k_proj rows."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama_cpp_unpermute(w, n_head, n_head_kv):
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_names(n_layers, tied=False):
    """Hugging Face Llama tensor names -> llama.cpp GGUF names."""
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight"}
    if not tied:
        names["lm_head.weight"] = "output.weight"
    hf = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
          "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
          "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
          "mlp.down_proj": "ffn_down"}
    for i in range(n_layers):
        for a, b in hf.items():
            names[f"model.layers.{i}.{a}.weight"] = f"blk.{i}.{b}.weight"
    return names


def save_llama_gguf(model, path, fmt="F32", rope_theta=None, eos_token_id=None):
    """Write a transformers Llama as llama.cpp does, with the gguf package's writer.

    2-D weights are stored as ``fmt`` (F32; Q8_0 quantized by the gguf package; K-quants,
    which the gguf package cannot quantize, by tallow's candle-exact quantizers), norms F32.
    """
    import gguf
    import numpy as np

    from tallow.quantized import ggml_type

    c = model.config
    tied = bool(c.tie_word_embeddings)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_block_count(c.num_hidden_layers)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_rope_freq_base(rope_theta or LLAMA_CFG["rope_theta"])
    w.add_rope_dimension_count(c.hidden_size // c.num_attention_heads)
    w.add_vocab_size(c.vocab_size)
    if eos_token_id is not None:
        w.add_eos_token_id(eos_token_id)
    sd = {k: v.detach().numpy().astype(np.float32) for k, v in model.state_dict().items()}
    for hf_name, name in gguf_names(c.num_hidden_layers, tied).items():
        a = sd[hf_name]
        if hf_name.endswith("q_proj.weight"):
            a = llama_cpp_permute(a, c.num_attention_heads, c.num_attention_heads)
        elif hf_name.endswith("k_proj.weight"):
            a = llama_cpp_permute(a, c.num_attention_heads, c.num_key_value_heads)
        if a.ndim == 1 or fmt == "F32":
            w.add_tensor(name, np.ascontiguousarray(a))
            continue
        qtype = gguf.GGMLQuantizationType[ggml_type(fmt).ggml_name.upper()]
        try:
            raw = gguf.quants.quantize(a, qtype)
        except NotImplementedError:
            raw = ggml_type(fmt).quantize(a)
        w.add_tensor(name, raw, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
