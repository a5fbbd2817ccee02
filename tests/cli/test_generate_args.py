"""``tallow generate`` and the sub-commands' usage errors: refused before any model loads."""

from __future__ import annotations

import pytest

from tallow.cli import main


@pytest.mark.parametrize("flag, value, message", [
    ("--temperature", "-1", "--temperature: expected a finite number >= 0, got '-1'"),
    ("--temperature", "nan", "--temperature: expected a finite number >= 0"),
    ("--temperature", "inf", "--temperature: expected a finite number >= 0"),
    ("--top-p", "0", "--top-p: expected a number in (0, 1]"),
    ("--top-p", "1.5", "--top-p: expected a number in (0, 1]"),
    ("--top-k", "-3", "--top-k: expected an integer >= 0"),
    ("--repeat-penalty", "0", "--repeat-penalty: expected a finite number > 0"),
    ("--repeat-last-n", "-1", "--repeat-last-n: expected an integer >= 0"),
])
def test_bad_sampling_values_are_usage_errors(flag, value, message, capsys):
    with pytest.raises(SystemExit) as e:
        main(["generate", "--prompt", "hi", flag, value])
    assert e.value.code == 2
    assert message in capsys.readouterr().err


def test_dtype_with_a_gguf_model_is_refused_not_ignored(tmp_path, capsys):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF" + bytes(60))  # the magic is all that is read before the check
    assert main(["generate", "--model", str(model), "--prompt", "hi", "--dtype", "bf16"]) == 2
    err = capsys.readouterr().err
    assert "--dtype bf16" in err and "GGUF" in err and "leave --dtype out" in err


@pytest.mark.parametrize("argv, usage", [
    (["generate", "--prompt", "hi", "--temprature", "0"], "usage: tallow generate"),
    (["embed", "x", "--bogus"], "usage: tallow embed"),
    (["search", "q", "--index", "d", "--top", "3"], "usage: tallow search"),
    (["bench", "cpu", "--fast"], "usage: tallow bench"),
])
def test_unknown_flag_prints_the_subcommands_usage(argv, usage, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(usage), err
    assert f"unrecognized arguments: {argv[-2] if argv[-1] in ('0', '3') else argv[-1]}" in err
