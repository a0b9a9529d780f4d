"""The command line: info and validate run on a CPU in seconds."""

import pytest

from mok.cli import main


def test_info(capsys):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "2368" in out and "2112" in out  # MoK's GB300 threshold and the H200's, for Kimi


def test_validate_reference(capsys):
    assert main(["validate", "--backend", "reference", "--ep", "1,2,4"]) == 0
    out = capsys.readouterr().out
    assert "vs fp64 oracle" in out and "EP 4 vs EP 1" in out and "PASS" in out


def test_validate_custom_shape_fp32(capsys):
    assert main(["validate", "--backend", "reference", "--shape", "32,16,8,4,2", "--dtype", "fp32",
                 "--ep", "1,2", "--skew", "3"]) == 0
    assert "PASS" in capsys.readouterr().out


def test_validate_unknown_backend_fails(capsys):
    assert main(["validate", "--backend", "nope"]) == 2
    assert "unavailable" in capsys.readouterr().out


def test_bad_arguments():
    with pytest.raises(SystemExit):
        main(["validate", "--dtype", "fp16"])
