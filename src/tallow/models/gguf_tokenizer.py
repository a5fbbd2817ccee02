"""The tokenizer inside a llama.cpp GGUF file, as a ``tokenizers.Tokenizer``.

llama.cpp's converters store the model's tokenizer in the file's metadata
(``tokenizer.ggml.*``), so a GGUF model needs no ``tokenizer.json``.
:func:`tokenizer_from_gguf` rebuilds it with the ``tokenizers`` package for
the two kinds llama.cpp writes:

* ``tokenizer.ggml.model = "gpt2"`` — byte-level BPE (GPT-2, Llama 3, Qwen,
  SmolLM...): ``tokens`` in id order, ``merges`` ("a b", by rank), the
  pre-tokenizer's split pattern chosen by ``tokenizer.ggml.pre`` (the name
  llama.cpp's converter gives the original tokenizer's regex), byte-level
  decoding.
* ``tokenizer.ggml.model = "llama"`` — SentencePiece BPE (Llama 1/2, Mistral,
  TinyLlama...): ``tokens`` with their ``scores``; SentencePiece merges the
  adjacent pair whose joined piece has the highest score, which is a BPE
  whose merge ranks are the joined pieces' scores; a space becomes "▁" with
  one prepended (``tokenizer.ggml.add_space_prefix``, default true; as in
  transformers' fast Llama tokenizer, not when the text already starts with a
  space, where SentencePiece adds one more), and characters outside the
  vocabulary fall back to the ``<0xXX>`` byte tokens.

In both, tokens whose ``token_type`` is control (3) or user-defined (4) are
added tokens matched before the model runs (``<|im_start|>``, ``<s>``), the
former special (dropped by ``decode(skip_special_tokens=True)``).  The BOS
token is prepended when ``tokenizer.ggml.add_bos_token`` says so (llama.cpp's
default: true for "llama", false for "gpt2"), the EOS token appended when
``add_eos_token`` does.  ``tokenizer.chat_template``, when present, is
returned by :func:`chat_template` and rendered by :func:`apply_chat_template`.
"""

from __future__ import annotations

import os

from .config import ModelFormatError

# token_type values of llama.cpp's llama_token_type / gguf.TokenType.
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

# Pre-tokenizer split patterns of byte-level BPE models, by tokenizer.ggml.pre (as
# llama.cpp's llama-vocab.cpp lists them). A list: the patterns applied one after the
# other, each splitting the pieces of the previous one.
_GPT2 = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"""
_LLAMA3 = (r"""(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|"""
           r"""\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
_QWEN2 = (r"""(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|"""
          r"""\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
BPE_PRE_PATTERNS = {
    "default": [_GPT2],
    "gpt-2": [_GPT2],
    "gpt2": [_GPT2],
    "smollm": [r"\p{N}", _GPT2],  # digits one by one, then GPT-2's pattern
    "starcoder": [r"\p{N}", _GPT2],
    "refact": [r"\p{N}", _GPT2],
    "llama3": [_LLAMA3],
    "llama-bpe": [_LLAMA3],
    "falcon3": [_LLAMA3],
    "qwen2": [_QWEN2],
    "deepseek-r1-qwen": [_QWEN2],
}


def _require_tokenizers():
    try:
        import tokenizers  # noqa: F401
    except ImportError:  # pragma: no cover - an optional dependency
        raise ImportError("a GGUF tokenizer needs the 'tokenizers' package (pip install tokenizers)") from None


def _open(source):
    from ..ggml.gguf_io import GgufFile, read_gguf

    if isinstance(source, GgufFile):
        return source
    return read_gguf(os.fspath(source))


def has_tokenizer(source) -> bool:
    """Whether a GGUF file (path or ``GgufFile``) carries a tokenizer (``tokenizer.ggml.model``)."""
    return _open(source).value("tokenizer.ggml.model") is not None


def chat_template(source) -> str | None:
    """The Jinja chat template stored in the file (``tokenizer.chat_template``), or None."""
    value = _open(source).value("tokenizer.chat_template")
    return value if isinstance(value, str) else None


def apply_chat_template(source, messages, add_generation_prompt: bool = True) -> str:
    """The prompt text for ``messages`` (``[{"role": ..., "content": ...}]``) by the file's chat template.

    Renders ``tokenizer.chat_template`` with Jinja2 in a sandbox, as transformers'
    ``apply_chat_template(..., tokenize=False)`` does (``bos_token``/``eos_token`` from
    the file, ``add_generation_prompt``). A file without a template is a
    ``ModelFormatError``.
    """
    f = _open(source)
    template = chat_template(f)
    if template is None:
        raise ModelFormatError(f"{f.path}: the GGUF file has no chat template (tokenizer.chat_template)")
    try:
        from jinja2.exceptions import TemplateError
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError:  # pragma: no cover - an optional dependency
        raise ImportError("a chat template needs the 'jinja2' package (pip install jinja2)") from None

    def raise_exception(message):
        raise TemplateError(message)

    tokens = f.value("tokenizer.ggml.tokens") or []

    def token(key):
        i = f.value(key)
        return tokens[int(i)] if i is not None and 0 <= int(i) < len(tokens) else ""

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    try:
        return env.from_string(template).render(
            messages=list(messages), add_generation_prompt=add_generation_prompt,
            bos_token=token("tokenizer.ggml.bos_token_id"), eos_token=token("tokenizer.ggml.eos_token_id"))
    except TemplateError as e:
        raise ModelFormatError(f"{f.path}: the chat template failed: {e}") from None
    except (OverflowError, RecursionError, MemoryError) as e:
        # The sandbox caps range() (OverflowError); a macro calling itself recurses.
        kind = "recurses without end" if isinstance(e, RecursionError) else \
            f"loops or grows without bound ({e})"
        raise ModelFormatError(
            f"{f.path}: the chat template (tokenizer.chat_template) {kind}; pass the prompt "
            "without --chat, or fix the template") from None


def tokenizer_from_gguf(source):
    """A ``tokenizers.Tokenizer`` built from a GGUF file's ``tokenizer.ggml.*`` metadata.

    ``source`` is a path or a ``GgufFile``. Raises ``ModelFormatError`` (naming the
    file and the key) for a file without a tokenizer, an unknown tokenizer model or
    inconsistent metadata.
    """
    _require_tokenizers()
    f = _open(source)
    where = f.path
    kind = f.value("tokenizer.ggml.model")
    if kind is None:
        raise ModelFormatError(f"{where}: the GGUF file has no tokenizer (no tokenizer.ggml.model); "
                               "pass a tokenizer.json")
    tokens = f.value("tokenizer.ggml.tokens")
    if not isinstance(tokens, list) or not tokens or not all(isinstance(t, str) for t in tokens):
        raise ModelFormatError(f"{where}: tokenizer.ggml.tokens must be a non-empty list of strings")
    types = _per_token(f, "tokenizer.ggml.token_type", len(tokens), NORMAL)
    if kind == "gpt2":
        tok = _byte_level_bpe(f, tokens, types)
        add_bos_default = False
    elif kind == "llama":
        tok = _sentencepiece_bpe(f, tokens, types)
        add_bos_default = True
    else:
        raise ModelFormatError(f"{where}: tokenizer.ggml.model {kind!r} is not supported "
                               "(supported: 'gpt2' byte-level BPE, 'llama' SentencePiece BPE)")
    _add_special_tokens(tok, tokens, types)
    _post_processor(f, tok, tokens, add_bos_default)
    return tok


def _per_token(f, key, n, default, cast=int):
    values = f.value(key)
    if values is None:
        return [default] * n
    try:
        values = [cast(v) for v in list(values)]
    except (TypeError, ValueError):
        raise ModelFormatError(f"{f.path}: {key} must be a list of numbers") from None
    if len(values) != n:
        raise ModelFormatError(f"{f.path}: {key} has {len(values)} entries for {n} tokens")
    return values


def _token_id(f, key, n):
    v = f.value(key)
    if v is None:
        return None
    v = int(v)
    if not 0 <= v < n:
        raise ModelFormatError(f"{f.path}: {key} = {v} is not a token id (the vocabulary has {n})")
    return v


def _vocab(f, tokens):
    vocab = {}
    for i, t in enumerate(tokens):
        # A repeated string keeps its first id (llama.cpp's token_to_id map does too).
        vocab.setdefault(t, i)
    return vocab


def _byte_level_bpe(f, tokens, types):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    merges = f.value("tokenizer.ggml.merges")
    if not isinstance(merges, list) or not all(isinstance(m, str) for m in merges):
        raise ModelFormatError(f"{f.path}: a 'gpt2' tokenizer needs tokenizer.ggml.merges (a list of strings)")
    vocab = _vocab(f, tokens)
    pairs = []
    for i, m in enumerate(merges):
        parts = m.split(" ")
        if len(parts) != 2:
            raise ModelFormatError(f"{f.path}: tokenizer.ggml.merges[{i}] = {m!r} is not two tokens")
        # Checked here: the tokenizers package aborts on a merge outside the vocabulary.
        if parts[0] not in vocab or parts[1] not in vocab or parts[0] + parts[1] not in vocab:
            raise ModelFormatError(f"{f.path}: tokenizer.ggml.merges[{i}] = {m!r} joins tokens "
                                   "that are not all in tokenizer.ggml.tokens")
        pairs.append((parts[0], parts[1]))
    model = models.BPE(vocab=vocab, merges=pairs, fuse_unk=False, byte_fallback=False)
    tok = Tokenizer(model)
    pre = f.value("tokenizer.ggml.pre") or "default"
    patterns = BPE_PRE_PATTERNS.get(pre, BPE_PRE_PATTERNS["default"])
    steps = [pre_tokenizers.Split(Regex(p), behavior="isolated") for p in patterns]
    steps.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence(steps)
    tok.decoder = decoders.ByteLevel()
    return tok


def _sentencepiece_bpe(f, tokens, types):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    scores = _per_token(f, "tokenizer.ggml.scores", len(tokens), 0.0, cast=float)
    vocab = _vocab(f, tokens)
    unk = _token_id(f, "tokenizer.ggml.unknown_token_id", len(tokens))
    if unk is None:
        unk = next((i for i, t in enumerate(types) if t == UNKNOWN), None)
    # SentencePiece BPE joins the adjacent pair whose joined piece has the highest
    # score: every split of a normal piece into two known pieces is a merge ranked by
    # that score (ties: the lower ids first, as the converters of transformers do).
    candidates = []
    for piece, i in vocab.items():
        if types[i] != NORMAL or len(piece) < 2:
            continue
        for cut in range(1, len(piece)):
            left, right = piece[:cut], piece[cut:]
            li, ri = vocab.get(left), vocab.get(right)
            if li is not None and ri is not None:
                candidates.append((-float(scores[i]), li, ri, left, right))
    candidates.sort()
    merges = [(c[3], c[4]) for c in candidates]
    model = models.BPE(vocab=vocab, merges=merges, unk_token=None if unk is None else tokens[unk],
                       fuse_unk=True, byte_fallback=any(t == BYTE for t in types))
    tok = Tokenizer(model)
    prefix = f.value("tokenizer.ggml.add_space_prefix")
    prefix = True if prefix is None else bool(prefix)
    # Spaces become "▁", and one "▁" goes in front of the text (not in front of the text
    # after each added token, which a normalizer would do).
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first" if prefix else "never",
                                                 split=False)
    steps = [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
    if prefix:
        steps.append(decoders.Strip(content=" ", left=1, right=0))
    tok.decoder = decoders.Sequence(steps)
    return tok


def _add_special_tokens(tok, tokens, types):
    from tokenizers import AddedToken

    special = [AddedToken(tokens[i], special=True, normalized=False)
               for i, t in enumerate(types) if t == CONTROL]
    user = [AddedToken(tokens[i], special=False, normalized=False)
            for i, t in enumerate(types) if t == USER_DEFINED]
    if special:
        tok.add_special_tokens(special)
    if user:
        tok.add_tokens(user)


def _post_processor(f, tok, tokens, add_bos_default):
    from tokenizers import processors

    n = len(tokens)
    bos = _token_id(f, "tokenizer.ggml.bos_token_id", n)
    eos = _token_id(f, "tokenizer.ggml.eos_token_id", n)
    add_bos = f.value("tokenizer.ggml.add_bos_token")
    add_bos = add_bos_default if add_bos is None else bool(add_bos)
    add_eos = bool(f.value("tokenizer.ggml.add_eos_token") or False)
    single, pair, specials = "$A", "$A $B", []
    if add_bos and bos is not None:
        single, pair = f"{tokens[bos]} {single}", f"{tokens[bos]} $A {tokens[bos]} $B"
        specials.append((tokens[bos], bos))
    if add_eos and eos is not None:
        single, pair = f"{single} {tokens[eos]}", f"{pair} {tokens[eos]}"
        specials.append((tokens[eos], eos))
    if specials:
        tok.post_processor = processors.TemplateProcessing(single=single, pair=pair,
                                                           special_tokens=list(dict.fromkeys(specials)))
