"""Writing an output through a symbolic link writes the file the link points to
(atomically, in the target's folder) and leaves the link a link."""

from __future__ import annotations

import os

import pytest

from tallow.atomic import write_bytes

from adversarial.test_adv_atomic_writes import OLD, WRITERS


@pytest.mark.parametrize("writer", list(WRITERS))
def test_writer_through_a_symlink_replaces_its_target(tmp_path, writer):
    name, write = WRITERS[writer]
    real = tmp_path / "store"
    real.mkdir()
    target = real / name
    target.write_bytes(OLD)
    os.chmod(target, 0o640)
    links = tmp_path / "links"
    links.mkdir()
    link = links / name
    link.symlink_to(target)
    write(str(link))
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_bytes() != OLD and target.stat().st_size > 0
    assert (target.stat().st_mode & 0o777) == 0o640
    assert sorted(os.listdir(real)) == [name], "a temporary file was left beside the target"
    assert sorted(os.listdir(links)) == [name]


def test_chain_of_relative_links_and_a_dangling_one(tmp_path):
    (tmp_path / "a").mkdir()
    final = tmp_path / "a" / "data.bin"
    final.write_bytes(b"old")
    (tmp_path / "hop").symlink_to(os.path.join("a", "data.bin"))
    (tmp_path / "out.bin").symlink_to("hop")
    write_bytes(str(tmp_path / "out.bin"), b"new")
    assert final.read_bytes() == b"new"
    assert (tmp_path / "out.bin").is_symlink() and (tmp_path / "hop").is_symlink()
    # A link to a file that does not exist yet creates that file, as open() would.
    (tmp_path / "later.bin").symlink_to(os.path.join("a", "later.bin"))
    write_bytes(str(tmp_path / "later.bin"), b"first")
    assert (tmp_path / "a" / "later.bin").read_bytes() == b"first"
    assert (tmp_path / "later.bin").is_symlink()
