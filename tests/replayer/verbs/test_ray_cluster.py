"""`replayer batch --ray ADDRESS` on a cluster of two nodes (two raylets on this machine, each with its own
resources and node id): the jobs are spread over both, each outcome names the node that ran it, results land
in the one output directory, and what a job needs (its agent bundle, the image it was keyed with) is made
present on the node that runs it."""

from __future__ import annotations

import io
import tarfile
import uuid
from pathlib import Path

import orjson
import pytest

from replayer.floor.errors import SandboxError
from replayer.floor.pins import load_pins
from replayer.pipeline.provision import archive_path, ensure_image
from replayer.verbs.batch_dir import BATCH_LABEL, batch_id
from tests.conftest import CLAUDE, replayer
from tests.support.ray_cluster import ray_nodes

pytestmark = pytest.mark.agent


def test_a_batch_spreads_over_ray_nodes(tmp_path: Path, docker_client) -> None:
    single = CLAUDE.fixture("single")
    lines = [
        {"trajectory": str(single / "session.jsonl"), "boundaries": [1, 2, 3], "mode": "replay",
         "workspace": str(single / "workspace")},
        {"trajectory": str(CLAUDE.fixture("write_edit") / "session.jsonl")},
    ]  # fmt: skip
    manifest = tmp_path / "manifest.jsonl"
    manifest.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    out = tmp_path / "out"
    cache_b = tmp_path / "bundles-b"  # node_b's own bundle cache, empty: what it needs it installs itself
    with ray_nodes(node_env={"node_b": {"REPLAYER_BUNDLES": str(cache_b)}}) as cluster:
        proc = replayer(
            "batch",
            "--trust-manifest",
            str(manifest),
            "-o",
            str(out),
            "--ray",
            cluster.address,
            "--json",
            env=cluster.env,
        )
    assert proc.returncode == 0, proc.stderr
    summary = orjson.loads((out / "batch.json").read_bytes())
    outcomes = summary["outcomes"]
    assert summary["jobs"] == summary["done"] == len(outcomes) >= 4, summary
    assert {o["node"] for o in outcomes} == set(cluster.nodes.values()), "both nodes ran jobs, and only they"
    base = docker_client.images.get(load_pins().base_image.tag).id
    bundles_b = set()
    for o in outcomes:
        result = orjson.loads((out / "jobs" / o["key"] / "result.json").read_bytes())
        assert result["after_step"] == o["boundary"]
        if o["mode"] == "replay":
            assert result["image_id"] == base, "the node ran it in the image the job was keyed with"
            assert all(d["status"] == "exact" for d in result["divergences"])
            if o["node"] == cluster.nodes["node_b"]:
                bundles_b.add(f"{result['agent']}-{result['version']['version']}")
    installed = {p.parent.name for p in cache_b.glob("*/.installed")}
    assert installed == bundles_b, (
        "node_b installed into its own cache the bundle of each replay it ran, only"
    )
    label = f"{BATCH_LABEL}={batch_id(out)}"
    assert not docker_client.containers.list(all=True, filters={"label": label}), "no container left behind"


@pytest.fixture
def tiny_image(docker_client):
    """An image of one file (imported, so its id is its own), removed afterwards."""
    tag = f"sandbox-replayer-test/tiny:{uuid.uuid4().hex[:12]}"
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        info = tarfile.TarInfo("hello")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"hi"))
    docker_client.api.import_image_from_data(
        data.getvalue(), repository=tag.split(":")[0], tag=tag.split(":")[1]
    )
    yield tag
    docker_client.images.remove(tag, force=True)


def test_a_node_without_the_image_loads_it_from_the_batch_directory(
    tmp_path: Path, docker_client, tiny_image: str
) -> None:
    image = docker_client.images.get(tiny_image)
    archive = archive_path(tmp_path, image.id)
    archive.parent.mkdir()
    with open(archive, "wb") as fh:
        for chunk in image.save(named=True):
            fh.write(chunk)
    docker_client.images.remove(tiny_image)
    ensure_image(tiny_image, image.id, tmp_path)
    assert docker_client.images.get(tiny_image).id == image.id


def test_a_node_whose_image_differs_from_the_keyed_one_refuses(tmp_path: Path, tiny_image: str) -> None:
    keyed = "sha256:" + "0" * 64
    with pytest.raises(SandboxError, match=r"is [0-9a-f]{12}, the batch keyed its jobs with 000000000000"):
        ensure_image(tiny_image, keyed, tmp_path)
