"""Helpers that create small random models (transformers) and tokenizers (tokenizers)."""

import os


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
