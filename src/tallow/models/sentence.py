"""SentenceEmbedder: sentence-transformers model directories (encoder + pooling + normalise).

The encoder is chosen by ``config.json``'s ``model_type``: BERT, XLM-RoBERTa (and
RoBERTa) or MPNet.

A directory as sentence-transformers saves it: ``config.json``, ``model.safetensors``,
``tokenizer.json``, ``1_Pooling/config.json`` (``modules.json`` says which modules run,
e.g. ``2_Normalize``; ``sentence_bert_config.json`` gives ``max_seq_length``).
Sentences are tokenized together (the ``tokenizers`` package), sorted by length
and run in batches padded to their longest member, so little work is spent on
padding; results come back in the input order.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from threadpoolctl import threadpool_limits

from .. import dtype as dt
from ..backends.cpu import parallel
from ..backends.cpu.threads import CONFIG
from ..creation import cat
from ..device import Device, cpu
from ..nn.var_builder import VarBuilder
from ..tensor_class import Tensor
from ..utils import get_num_threads
from .bert import BertConfig, BertModel
from .config import ModelFormatError, read_json

POOLING_MODES = ("cls_token", "max_tokens", "mean_tokens", "mean_sqrt_len_tokens",
                 "weightedmean_tokens", "lasttoken")
_SHORT_MODES = {"cls": "cls_token", "max": "max_tokens", "mean": "mean_tokens",
                "mean_sqrt_len": "mean_sqrt_len_tokens", "weightedmean": "weightedmean_tokens"}


def _encoders():
    """``model_type`` -> (model class, config reader) of the encoders tallow runs."""
    from .mpnet import MPNetModel, mpnet_config
    from .xlm_roberta import XLMRobertaModel, xlm_roberta_config

    return {"bert": (BertModel, BertConfig.from_dict),
            "xlm-roberta": (XLMRobertaModel, xlm_roberta_config),
            "roberta": (XLMRobertaModel, xlm_roberta_config),
            "mpnet": (MPNetModel, mpnet_config)}


def read_encoder_config(model_dir):
    """The encoder class and its config for ``model_dir/config.json``, chosen by
    ``model_type``; another model type is a ``ModelFormatError`` listing those supported."""
    path = os.path.join(model_dir, "config.json")
    data = read_json(path)
    encoders = _encoders()
    mtype = data.get("model_type", "bert")
    if mtype not in encoders:
        raise ModelFormatError(
            f"{path}: model_type {mtype!r} is not a sentence-embedding architecture tallow "
            f"runs (supported: {', '.join(sorted(encoders))})")
    model_cls, read = encoders[mtype]
    return model_cls, read(data, path)


def check_model_dir(path, who: str) -> None:
    """Refuse a path that is not a directory: missing (``FileNotFoundError``) or a file
    such as a GGUF or safetensors file (``ModelFormatError``, saying what is needed)."""
    path = os.fspath(path)
    if os.path.isdir(path):
        return
    if not os.path.exists(path):
        raise FileNotFoundError(f"{who}: no such model directory: {path}")
    hint = (" (a GGUF file is a generation model: tallow generate --model)"
            if path.lower().endswith(".gguf") else "")
    raise ModelFormatError(f"{who}: {path} is a file, not a model directory{hint}; sentence "
                           "embeddings need a sentence-transformers directory (config.json, "
                           "model.safetensors, tokenizer.json)")


def load_tokenizer(path):
    """A ``tokenizers.Tokenizer`` from ``tokenizer.json`` (a file or a directory holding it)."""
    path = os.fspath(path)
    if os.path.isdir(path):
        path = os.path.join(path, "tokenizer.json")
    if not os.path.exists(path):
        raise FileNotFoundError(f"tokenizer: no such file: {path}")
    try:
        from tokenizers import Tokenizer
    except ImportError:  # pragma: no cover - an optional dependency
        raise ImportError("reading tokenizer.json needs the 'tokenizers' package "
                          "(pip install tokenizers)") from None
    try:
        return Tokenizer.from_file(path)
    except Exception as e:  # the Rust side raises plain Exceptions
        raise ModelFormatError(f"{path}: not a valid tokenizer.json ({e})") from None


def _modules(model_dir):
    path = os.path.join(model_dir, "modules.json")
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _full_mode(name, path):
    full = _SHORT_MODES.get(name, name)
    if full not in POOLING_MODES:
        raise ModelFormatError(f"{path}: pooling mode {name!r} is not supported "
                               f"({', '.join(POOLING_MODES)})")
    return full


class Pooling:
    """sentence-transformers' Pooling: token embeddings + mask -> one vector per text.

    Modes concatenate in the order given. ``include_prompt=False`` leaves the prompt's
    tokens (``prompt_length`` of them, the leading special token included) out of
    the pooling, as sentence-transformers does for instruction models.
    """

    def __init__(self, modes=("mean_tokens",), include_prompt: bool = True):
        if not modes:
            raise ModelFormatError("the pooling config enables no pooling mode")
        full = []
        for m in modes:
            m = _full_mode(m, "pooling")
            if m not in full:
                full.append(m)
        self.modes = tuple(full)
        self.include_prompt = bool(include_prompt)

    @staticmethod
    def from_json(path) -> "Pooling":
        data = read_json(path, "pooling config")
        include_prompt = data.get("include_prompt", True)
        named = data.get("pooling_mode")  # newer sentence-transformers: a name or a list
        if named is not None:
            names = [named] if isinstance(named, str) else list(named)
            return Pooling([_full_mode(m, path) for m in names], include_prompt)
        unknown = [k for k, v in data.items() if k.startswith("pooling_mode_") and v
                   and k[len("pooling_mode_"):] not in POOLING_MODES]
        if unknown:
            raise ModelFormatError(f"{path}: pooling {unknown} is not supported")
        # The older boolean keys: no mode enabled means mean, as sentence-transformers reads it.
        modes = [m for m in POOLING_MODES if data.get(f"pooling_mode_{m}")] or ["mean_tokens"]
        return Pooling(modes, include_prompt)

    def pooling_mask(self, mask: np.ndarray, prompt_length: int = 0) -> np.ndarray:
        """The (b, s) 0/1 mask of the tokens pooled (padding at the end of each row)."""
        if prompt_length and not self.include_prompt:
            mask = mask.copy()
            mask[:, :prompt_length] = 0
        return mask

    def __call__(self, hidden: Tensor, mask: Tensor, prompt_length: int = 0) -> Tensor:
        """``hidden`` (b, s, h), ``mask`` (b, s) of 0/1 in hidden's dtype -> (b, out)."""
        b, s, h = hidden.shape
        dev = hidden.device
        pool_np = self.pooling_mask(mask.to_dtype(dt.f32).numpy(), prompt_length)
        if prompt_length and not self.include_prompt:
            mask = Tensor.from_vec(pool_np, None, device=dev).to_dtype(hidden.dtype)
        m = mask.unsqueeze(-1)
        rows = hidden.reshape((b * s, h))

        def pick(cols):  # one row of hidden per text: hidden[i, cols[i]]
            ids = (np.arange(b, dtype=np.int64) * s + cols).astype(np.uint32)
            return rows.index_select(Tensor.from_vec(ids, None, device=dev), 0)

        outs = []
        for mode in self.modes:
            if mode == "cls_token":
                # The first pooled token (the first after the prompt when it is left out).
                outs.append(pick(pool_np.argmax(axis=1)))
            elif mode == "lasttoken":
                kept = pool_np[:, ::-1].argmax(axis=1)
                last = s - 1 - kept
                some = pool_np[np.arange(b), last][:, None].astype(np.float32)
                outs.append(pick(last).broadcast_mul(
                    Tensor.from_vec(some, None, device=dev).to_dtype(hidden.dtype)))
            elif mode == "max_tokens":
                # Padding must never win: push it far below any real value.
                low = (m - 1.0) * 1e9
                outs.append(hidden.broadcast_mul(m).broadcast_add(low).max(1).values)
            elif mode == "weightedmean_tokens":
                w_np = pool_np * np.arange(1, s + 1, dtype=np.float32)[None]
                w = Tensor.from_vec(w_np[..., None], None, device=dev).to_dtype(hidden.dtype)
                total = w.sum(1).clamp(1e-9, None)
                outs.append(hidden.broadcast_mul(w).sum(1).broadcast_div(total))
            else:
                summed = hidden.broadcast_mul(m).sum(1)
                count = m.sum(1).clamp(1e-9, None)
                if mode == "mean_tokens":
                    outs.append(summed.broadcast_div(count))
                else:
                    outs.append(summed.broadcast_div(count.sqrt()))
        if len(outs) == 1:
            return outs[0]
        return cat(outs, -1)


def l2_normalize(x: Tensor) -> Tensor:
    norm = x.sqr().sum_keepdim(-1).sqrt().clamp(1e-12, None)
    return x.broadcast_div(norm)


class SentenceEmbedder:
    """Sentence embeddings from a sentence-transformers BERT directory."""

    def __init__(self, model: BertModel, tokenizer, pooling: Pooling, normalize: bool,
                 max_seq_length: int, device=None, model_dir=None, prompts=None,
                 default_prompt_name=None):
        self.model = model
        self.tokenizer = tokenizer
        self.pooling = pooling
        self.normalize = normalize
        self.max_seq_length = max_seq_length
        self.device = Device.parse(device) if device is not None else Device.cpu()
        self.model_dir = model_dir
        tokenizer.no_padding()
        tokenizer.enable_truncation(max_seq_length)
        self.pad_id = _pad_id(tokenizer, model.config.pad_token_id)
        self.prompts = dict(prompts or {})
        self.default_prompt_name = default_prompt_name
        self._prompt_lengths = {}

    @staticmethod
    def from_pretrained(model_dir, device=cpu, dtype=dt.f32) -> "SentenceEmbedder":
        model_dir = os.fspath(model_dir)
        check_model_dir(model_dir, "SentenceEmbedder")
        model_cls, cfg = read_encoder_config(model_dir)
        weights = os.path.join(model_dir, "model.safetensors")
        if not os.path.exists(weights):
            raise FileNotFoundError(
                f"SentenceEmbedder: {model_dir} has no model.safetensors (only safetensors "
                "weights are read)")
        tokenizer = load_tokenizer(model_dir)
        vocab = tokenizer.get_vocab_size(with_added_tokens=True)
        if vocab > cfg.vocab_size:
            raise ModelFormatError(
                f"SentenceEmbedder: the tokenizer has {vocab} tokens but the model's vocab_size "
                f"is {cfg.vocab_size}: tokenizer.json does not belong to this model")
        modules = _modules(model_dir)
        pooling_dir, normalize = "1_Pooling", False
        if modules is not None:
            kinds = {m.get("type", ""): m for m in modules}
            pool = next((m for t, m in kinds.items() if t.endswith("Pooling")), None)
            if pool is not None:
                pooling_dir = pool.get("path") or pooling_dir
            normalize = any(t.endswith("Normalize") for t in kinds)
            unsupported = [t for t in kinds if not t.endswith(("Transformer", "Pooling", "Normalize"))]
            if unsupported:
                raise ModelFormatError(
                    f"{model_dir}: modules {unsupported} are not supported (only Transformer, "
                    "Pooling, Normalize)")
        pool_cfg = os.path.join(model_dir, pooling_dir, "config.json")
        pooling = Pooling.from_json(pool_cfg) if os.path.exists(pool_cfg) else Pooling()
        vb = VarBuilder.from_safetensors(weights, dtype=dtype, device=device)
        model = model_cls.load(vb, cfg)
        max_len = _max_seq_length(model_dir, model.max_tokens)
        prompts, default_prompt = _prompts(model_dir)
        return SentenceEmbedder(model, tokenizer, pooling, normalize, max_len, device, model_dir,
                                prompts, default_prompt)

    @property
    def dim(self) -> int:
        return self.model.config.hidden_size * len(self.pooling.modes)

    def tokenize(self, sentences):
        return self.tokenizer.encode_batch(list(sentences))

    def prompt_length(self, prompt: str) -> int:
        """Tokens of ``prompt`` as it starts a text: its encoding less a trailing special
        token (sentence-transformers' rule, used to leave the prompt out of the pooling)."""
        if prompt not in self._prompt_lengths:
            enc = self.tokenizer.encode(prompt)
            n = len(enc.ids)
            if n and enc.special_tokens_mask[-1]:
                n -= 1
            self._prompt_lengths[prompt] = n
        return self._prompt_lengths[prompt]

    def resolve_prompt(self, prompt_name=None, prompt=None) -> str | None:
        """The prompt text ``encode`` prepends: ``prompt``, else the named one from
        ``config_sentence_transformers.json``, else its default prompt (if any)."""
        if prompt is not None:
            return prompt
        name = prompt_name if prompt_name is not None else self.default_prompt_name
        if name is None:
            return None
        if name not in self.prompts:
            raise ValueError(f"encode: prompt_name {name!r} is not one of this model's prompts "
                             f"({', '.join(sorted(self.prompts)) or 'none configured'})")
        return self.prompts[name]

    def embed_batch(self, encodings, prompt_length: int = 0) -> np.ndarray:
        """One padded batch of encodings -> pooled (n, dim) tensor (not normalised here)."""
        n = len(encodings)
        seq = max(len(e.ids) for e in encodings)
        ids = np.full((n, seq), self.pad_id, dtype=np.uint32)
        types = np.zeros((n, seq), dtype=np.uint32)
        mask = np.zeros((n, seq), dtype=np.float32)
        for i, e in enumerate(encodings):
            k = len(e.ids)
            ids[i, :k] = e.ids
            types[i, :k] = e.type_ids
            mask[i, :k] = 1.0
        dev = self.device
        t_ids = Tensor.from_vec(ids, None, device=dev)
        t_types = Tensor.from_vec(types, None, device=dev)
        t_mask = Tensor.from_vec(mask, None, device=dev).to_dtype(self.model.dtype)
        full = bool(mask.all())
        # Padding left out of the dense layers (it is masked out of the pooling anyway).
        hidden = self.model.forward_unpadded(t_ids, t_types, None if full else t_mask)
        return self.pooling(hidden, t_mask, prompt_length)

    def _map_batches(self, run, batches, workers):
        """``run`` over the batches, in order. On a multi-core CPU the batches run
        concurrently, one per core, each single-threaded (NumPy and BLAS release the
        GIL): this keeps every core busy through the many small element-wise steps
        that would not split well over threads inside one batch."""
        if workers is None:
            workers = get_num_threads() if self.device.kind == "cpu" else 1
        workers = max(1, min(int(workers), len(batches)))
        if workers == 1:
            for b in batches:
                yield run(b)
            return
        CONFIG.apply()  # settle tallow's own BLAS setting first, so the workers keep the limit below

        def job(b):
            with parallel.serial():
                return run(b)

        with threadpool_limits(limits=1, user_api="blas"), \
                ThreadPoolExecutor(workers, thread_name_prefix="tallow-embed") as pool:
            futures = [pool.submit(job, b) for b in batches]
            try:
                for f in futures:
                    yield f.result()
            finally:
                for f in futures:
                    f.cancel()

    def encode(self, sentences, batch_size: int = 32, normalize=None, show_progress_bar=None,
               convert_to_numpy: bool = True, workers: int | None = None,
               prompt_name: str | None = None, prompt: str | None = None):
        """Embeddings of ``sentences`` (a string or a list) as an ``(n, dim)`` float32 array.

        ``normalize``: None (the default) does what the directory says (a ``Normalize``
        module in ``modules.json``), which is what sentence-transformers' ``encode``
        returns; True forces unit vectors, False the raw pooled ones. A progress bar shows for long runs
        (``show_progress_bar`` None: more than 8 batches). ``workers``: batches run at
        once on the CPU (default: the thread count, ``tl.utils.get_num_threads()``).
        ``prompt`` (a text) or ``prompt_name`` (one of the directory's configured
        prompts; default: its ``default_prompt_name``) is put before every text, as
        sentence-transformers does.
        """
        single = isinstance(sentences, str)
        if single:
            sentences = [sentences]
        sentences = list(sentences)
        for i, s in enumerate(sentences):
            if not isinstance(s, str):
                raise TypeError(f"encode: item {i} is a {type(s).__name__}, not a str")
        if batch_size < 1:
            raise ValueError(f"encode: batch_size must be at least 1, got {batch_size}")
        do_norm = self.normalize if normalize is None else bool(normalize)
        out = np.zeros((len(sentences), self.dim), dtype=np.float32)
        if not sentences:
            return out
        text_prompt = self.resolve_prompt(prompt_name, prompt)
        prompt_len = 0
        if text_prompt:
            sentences = [text_prompt + s for s in sentences]
            prompt_len = self.prompt_length(text_prompt)
        encodings = self.tokenize(sentences)
        order = sorted(range(len(sentences)), key=lambda i: -len(encodings[i].ids))
        starts = range(0, len(order), batch_size)
        if show_progress_bar is None:
            show_progress_bar = len(starts) > 8
        bar = None
        if show_progress_bar:
            from tqdm import tqdm

            bar = tqdm(total=len(sentences), desc="embedding", unit="text")
        batches = [order[start:start + batch_size] for start in starts]

        def run(idx):
            pooled = self.embed_batch([encodings[i] for i in idx], prompt_len)
            if do_norm:
                pooled = l2_normalize(pooled)
            return pooled.to_dtype(dt.f32).numpy()

        try:
            for idx, vals in zip(batches, self._map_batches(run, batches, workers)):
                out[idx] = vals
                if bar is not None:
                    bar.update(len(idx))
        finally:
            if bar is not None:
                bar.close()
        return out[0] if single else out


def _max_seq_length(model_dir, limit):
    """sentence_bert_config.json's ``max_seq_length``, else tokenizer_config.json's
    ``model_max_length``, capped by the model's positions (sentence-transformers' rule)."""
    for name, key in (("sentence_bert_config.json", "max_seq_length"),
                      ("tokenizer_config.json", "model_max_length")):
        path = os.path.join(model_dir, name)
        if os.path.exists(path):
            value = read_json(path, name).get(key)
            if isinstance(value, (int, float)) and 0 < value < 1e9:
                return min(int(value), limit)
    return limit


def _prompts(model_dir):
    """``config_sentence_transformers.json``'s prompts and default prompt name."""
    path = os.path.join(model_dir, "config_sentence_transformers.json")
    if not os.path.exists(path):
        return {}, None
    data = read_json(path, "sentence-transformers config")
    prompts = data.get("prompts") or {}
    if not isinstance(prompts, dict) or not all(isinstance(v, str) for v in prompts.values()):
        raise ModelFormatError(f"{path}: 'prompts' must map names to prompt texts")
    default = data.get("default_prompt_name")
    if default is not None and default not in prompts:
        raise ModelFormatError(f"{path}: default_prompt_name {default!r} is not one of the "
                               f"prompts ({', '.join(sorted(prompts)) or 'none'})")
    return prompts, default


def _pad_id(tokenizer, default):
    pad = tokenizer.token_to_id("[PAD]")
    if pad is None:
        pad = tokenizer.token_to_id("<pad>")
    return default if pad is None else pad
