"""The distributed path on a local Ray runtime of 2 CPUs (the one tallow starts)."""

from __future__ import annotations

import os
import socket

import numpy as np
import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("pyarrow")

from support.ray_fakes import HashModel, hash_vector  # noqa: E402
from support.ray_corpus import by_value, read_index  # noqa: E402

from tallow.cli import main  # noqa: E402
from tallow.distributed import connect, embed_dataset, embed_files, local_init_kwargs  # noqa: E402
from tallow.distributed.runtime import is_loopback, node_address_stays_loopback  # noqa: E402
from tallow.errors import DistributedError  # noqa: E402

pytestmark = pytest.mark.xdist_group("ray")


@pytest.fixture(scope="module")
def runtime():
    if ray.is_initialized():
        ray.shutdown()
    connect(num_cpus=2)
    by_value()
    yield ray
    ray.shutdown()


def cosine_rows(a, b):
    return np.sum(a * b, 1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def test_local_runtime_is_private(runtime):
    kwargs = local_init_kwargs()
    assert kwargs["include_dashboard"] is False
    assert kwargs["dashboard_host"] == "127.0.0.1"
    # Ray turned token authentication on for the runtime connect() started.
    assert os.environ.get("RAY_AUTH_MODE") == "token"
    node = ray._private.worker.global_worker.node
    assert not node.address_info.get("webui_url")
    with socket.socket() as s:  # no dashboard on its default port either
        s.settimeout(1)
        assert s.connect_ex(("127.0.0.1", 8265)) != 0


def listening_sockets_of_ray():
    """(process name, pid, address, port) of every listening TCP socket of this
    process (the driver) and of the processes it started: the GCS, the raylet,
    the agents and the workers are all descendants of the driver that started
    the runtime."""
    import psutil  # Ray ships it (ray/thirdparty_files), on the path once ray is imported
    me = psutil.Process()
    found = []
    for proc in [me, *me.children(recursive=True)]:
        try:
            name, conns = proc.name(), proc.net_connections(kind="tcp")
        except psutil.Error:  # exited meanwhile
            continue
        found += [(name, proc.pid, c.laddr.ip, c.laddr.port) for c in conns
                  if c.status == psutil.CONN_LISTEN]
    return found


def test_local_runtime_listens_on_loopback_only(runtime):
    @ray.remote(max_restarts=1, max_task_retries=1)
    class Pid:
        def pid(self):
            return os.getpid()

    actor = Pid.remote()
    actor_pid = ray.get(actor.pid.remote())
    # A Ray Data job with an actor pool too: its own helper actors and workers.
    ds = embed_dataset(ray.data.from_items([{"text": f"t {i}"} for i in range(8)]),
                       HashModel(dim=3), num_workers=1, block_rows=4)
    assert ds.count() == 8
    sockets = listening_sockets_of_ray()
    names = {name for name, *_ in sockets}
    # The check saw the runtime's core processes and a worker, so it tested something.
    assert {"gcs_server", "raylet"} <= names, sockets
    assert actor_pid in {pid for _, pid, *_ in sockets}, sockets
    exposed = [s for s in sockets if not is_loopback(s[2])]
    assert not exposed, f"listening beyond loopback: {exposed}"
    assert is_loopback(ray.util.get_node_ip_address())
    ray.kill(actor)


def test_single_machine_switch_is_held_for_the_start_only():
    from ray._private import ray_constants

    saved = ray_constants.ENABLE_RAY_CLUSTER
    with pytest.raises(KeyError):
        with node_address_stays_loopback():
            assert ray_constants.ENABLE_RAY_CLUSTER is False
            raise KeyError("a failed start")
    assert ray_constants.ENABLE_RAY_CLUSTER is saved


@pytest.mark.parametrize("host, loopback", [
    ("127.0.0.1", True), ("127.0.0.2", True), ("::1", True), ("::ffff:127.0.0.1", True),
    ("localhost", True), ("0.0.0.0", False), ("::", False), ("192.0.2.2", False),
    ("::ffff:192.0.2.2", False), ("fe80::1%eth0", False), ("example.org", False),
])
def test_is_loopback(host, loopback):
    assert is_loopback(host) is loopback


def test_cli_embed_ray_equals_single_process(runtime, corpus_files, model_dir, tmp_path, capsys):
    """Three input formats -> one index: every row once, with its id, and the vectors of
    single-process embedding (cosine >= 0.999999), although Ray batches differently."""
    from tallow.models.sentence import SentenceEmbedder
    from tallow.search import Index

    paths, expected = corpus_files
    out = str(tmp_path / "index")
    assert main(["embed", "--ray", "--input", *paths, "--output", out, "--model", model_dir,
                 "--num-workers", "2", "--batch-size", "3", "--no-progress"]) == 0
    assert "wrote 20 embeddings of dimension 384" in capsys.readouterr().err
    index = read_index(out)
    assert sorted(index) == sorted(expected)
    assert all(index[i][0] == t for i, t in expected.items())
    ids = sorted(expected)
    ref = SentenceEmbedder.from_pretrained(model_dir).encode([expected[i] for i in ids],
                                                             normalize=None)
    got = np.stack([index[i][1] for i in ids])
    assert got.dtype == np.float32
    assert cosine_rows(got, ref).min() >= 0.999999

    # The index answers searches: each text finds itself first.
    ix = Index(out, model=model_dir)
    hits = ix.search([expected[i] for i in ids[:5]], k=3)
    assert [h[0].id for h in hits] == ids[:5]
    assert main(["search", "--index", out, expected[ids[0]], "-k", "2"]) == 0
    assert ids[0] in capsys.readouterr().out.splitlines()[0]


def test_killed_worker_loses_and_duplicates_nothing(runtime, tmp_path):
    texts = [f"sentence number {i} " + "word " * (i % 13) for i in range(240)]
    src = tmp_path / "many.txt"
    src.write_text("\n".join(texts) + "\n", encoding="utf-8")
    marker = tmp_path / "killed"
    out = tmp_path / "index"
    manifest = embed_files([str(src)], str(out), HashModel(dim=6, kill_marker=str(marker)),
                           num_workers=2, block_rows=12, progress=False)
    assert marker.exists(), "no worker was killed: the test did not test anything"
    pid = int(marker.read_text())
    assert pid != os.getpid()
    assert manifest["rows"] == len(texts)
    index = read_index(str(out))
    assert sorted(index) == sorted(f"{src}:{n}" for n in range(1, len(texts) + 1))
    for n, t in enumerate(texts, 1):
        text, vec = index[f"{src}:{n}"]
        assert text == t
        np.testing.assert_array_equal(vec, hash_vector(t, 6))


def test_failed_run_leaves_previous_index_alone(runtime, tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(f'{{"id": {i}, "text": "row {i}"}}' for i in range(30)) + "\n")
    out = tmp_path / "index"
    embed_files([str(src)], str(out), HashModel(dim=4), num_workers=1, block_rows=8,
                progress=False)
    def snapshot():  # every file of the index, its lock file aside
        return {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*")
                if p.is_file() and p.name != ".lock"}

    before = snapshot()
    with pytest.raises(Exception, match="refusing to embed"):
        embed_files([str(src)], str(out), HashModel(dim=4, fail_text="row 17"), num_workers=1,
                    block_rows=8, progress=False)
    assert snapshot() == before
    assert not [n for n in os.listdir(out) if n.startswith(".partial-")]
    assert sorted(os.listdir(tmp_path)) == ["in.jsonl", "index"]  # no partial directory left
    index = read_index(str(out))
    assert sorted(index, key=int) == [str(i) for i in range(30)]


def test_embed_dataset_composes_with_a_pipeline(runtime):
    ds = ray.data.from_items([{"n": i, "text": f"text {i}"} for i in range(25)])
    out = embed_dataset(ds, HashModel(dim=5), keep_text=False, num_workers=1, block_rows=4)
    out = out.filter(lambda row: row["n"] % 2 == 0)  # a user's own next step
    rows = out.take_all()
    assert sorted(r["n"] for r in rows) == list(range(0, 25, 2))
    for r in rows:
        assert "text" not in r
        np.testing.assert_array_equal(np.asarray(r["embedding"]), hash_vector(f"text {r['n']}", 5))


def test_errors_before_any_work(runtime, tmp_path, model_dir, capsys):
    ds = ray.data.from_items([{"body": "x"}])
    with pytest.raises(ValueError, match="no column 'text'"):
        embed_dataset(ds, HashModel())
    with pytest.raises(DistributedError, match="no GPUs"):
        embed_dataset(ray.data.from_items([{"text": "x"}]), HashModel(), device="gpu")
    with pytest.raises(FileNotFoundError, match="no such model directory"):
        embed_dataset(ray.data.from_items([{"text": "x"}]), str(tmp_path / "nope"))
    src = tmp_path / "a.txt"
    src.write_text("hello\n")
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.me").write_text("user data")
    assert main(["embed", "--ray", "--input", str(src), "--output", str(busy),
                 "--model", model_dir]) == 1
    assert "non-empty directory" in capsys.readouterr().err
    assert (busy / "keep.me").read_text() == "user data"
    assert main(["embed", "--ray", "some text", "--output", str(tmp_path / "o")]) == 2
