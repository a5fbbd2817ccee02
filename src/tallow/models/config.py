"""Reading Hugging Face ``config.json`` files, with errors that say what is wrong."""

from __future__ import annotations

import json
import os

from ..errors import FileFormatError


class ModelFormatError(FileFormatError):
    """A model directory or file is not what the loader expects (missing file, other
    architecture, tokenizer that does not fit the model...)."""



class ContextLengthError(ModelFormatError, ValueError):
    """A prompt (plus what is generated) does not fit in the model's context."""

def read_json(path, what="config") -> dict:
    path = os.fspath(path)
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{what}: no such file: {path}")
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ModelFormatError(f"{path}: not a valid JSON {what} ({e})") from None
    except RecursionError:
        raise ModelFormatError(f"{path}: the {what} nests JSON arrays or objects too deeply "
                               "to be a model config; check the file") from None
    if not isinstance(data, dict):
        raise ModelFormatError(f"{path}: the {what} must be a JSON object")
    return data


def check_architecture(data: dict, path, expected: tuple, family: str) -> None:
    """Refuse a config whose ``model_type`` (or ``architectures``) is another family."""
    mtype = data.get("model_type")
    archs = data.get("architectures") or []
    if mtype is not None:
        if mtype not in expected:
            raise ModelFormatError(
                f"{path}: this is a {mtype!r} model (architectures {archs}), "
                f"not a {family} model (model_type one of {list(expected)})")
        return
    if archs and not any(any(e in a.lower() for e in expected) for a in archs):
        raise ModelFormatError(f"{path}: architectures {archs} are not a {family} model")


def require(data: dict, path, *keys):
    missing = [k for k in keys if k not in data]
    if missing:
        raise ModelFormatError(f"{path}: config is missing {', '.join(missing)}")


def positive_int(data: dict, path, key: str, *, low: int = 1, source: str = "config"):
    """``data[key]`` as an int >= ``low``, or a ``ModelFormatError`` naming the file and
    the key (a 0 there would divide by zero later, a string fail far from its cause)."""
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ModelFormatError(f"{path}: {source} key {key!r} is {value!r}; it must be an "
                               f"integer >= {low} (fix the value in the file)")
    return value
