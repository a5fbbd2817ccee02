"""XLM-RoBERTa encoder (Hugging Face's ``XLMRobertaModel`` weights): BERT's layers with
RoBERTa's position ids.

The math is BERT's, so the model is ``BertModel`` with one change: position ids start
at ``pad_token_id + 1`` (transformers' ``create_position_ids_from_input_ids``; the
padding positions it gives ``pad_token_id`` are masked out of everything that reads
them). The token-type table has one row. multilingual-e5, paraphrase-multilingual and
bge-m3 are this architecture; their SentencePiece (Unigram) tokenizer comes from
``tokenizer.json`` through the ``tokenizers`` package.
"""

from __future__ import annotations

from .bert import BertConfig, BertModel
from .config import read_json

XLM_ROBERTA_TYPES = ("xlm-roberta", "roberta")


def xlm_roberta_config(data: dict, path="config") -> BertConfig:
    """A ``BertConfig`` from an XLM-RoBERTa (or RoBERTa) ``config.json``'s dict."""
    data = {"pad_token_id": 1, "type_vocab_size": 1, "layer_norm_eps": 1e-5, **data}
    return BertConfig.from_dict(data, path, XLM_ROBERTA_TYPES, "XLM-RoBERTa")


class XLMRobertaModel(BertModel):
    """``BertModel`` whose position ids start after the padding index."""

    @classmethod
    def position_offset_for(cls, cfg: BertConfig) -> int:
        return cfg.pad_token_id + 1

    @staticmethod
    def config_from_json(path) -> BertConfig:
        return xlm_roberta_config(read_json(path), path)
