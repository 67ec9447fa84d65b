"""Environment images on a real Docker engine: built offline from setup steps, named by their
content, built once, refused with the failing step's words, kept under a disk budget."""

from __future__ import annotations

import uuid
import zipfile

import pytest

from opd_gym.errors import ConfigError
from opd_gym.sandboxes.env_image import (
    BASE_LABEL,
    IMAGE_LABEL,
    SETUP_CACHE_MOUNT,
    EnvironmentSpec,
    ImageCache,
    parse_size,
)
from opd_gym.sandboxes.image import DEFAULT_IMAGE

INSTALL_TOOLZ = (f"tar -xzf {SETUP_CACHE_MOUNT}/toolz-1.2.0.tar.gz -C /tmp && "
                 "cp -r /tmp/toolz-1.2.0/toolz /usr/local/lib/python3.11/dist-packages/")


def test_sizes_parse_once_with_clear_refusals():
    assert parse_size("20g") == 20 << 30
    assert parse_size("512MiB") == 512 << 20
    assert parse_size("1.5k") == 1536
    assert parse_size(7) == 7
    for bad in ("", "lots", "-1g", "3q"):
        with pytest.raises(ConfigError, match="not a size"):
            parse_size(bad)
    with pytest.raises(ConfigError, match="negative"):
        parse_size(-1)


def test_the_name_covers_base_steps_and_cache(tmp_path):
    (tmp_path / "a.tar.gz").write_bytes(b"x")
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels" / "w-1.whl").write_bytes(b"w")
    spec = EnvironmentSpec(setup=("pip install /opd-cache/a.tar.gz",), cache_dir=tmp_path)
    assert spec.tag("sha256:1") == spec.tag("sha256:1")
    assert spec.tag("sha256:1") != spec.tag("sha256:2")
    assert spec.tag("sha256:1") != EnvironmentSpec(
        setup=("pip install /opd-cache/a.tar.gz ",), cache_dir=tmp_path).tag("sha256:1")
    assert spec.cache_listing() == [("a.tar.gz", 1)]
    before = spec.tag("sha256:1")
    (tmp_path / "b.tar.gz").write_bytes(b"y")  # a file no step names: the same image
    assert spec.tag("sha256:1") == before
    (tmp_path / "a.tar.gz").write_bytes(b"xx")  # the file a step installs changed
    assert spec.tag("sha256:1") != before
    folder = EnvironmentSpec(setup=("pip install --find-links /opd-cache/wheels w",),
                             cache_dir=tmp_path)
    glob = EnvironmentSpec(setup=("pip install /opd-cache/wheels/*.whl",), cache_dir=tmp_path)
    assert folder.cache_listing() == glob.cache_listing() == [("wheels/w-1.whl", 1)]
    whole = EnvironmentSpec(setup=("cp -r /opd-cache /tmp/cache",), cache_dir=tmp_path)
    before = whole.tag("sha256:1")
    (tmp_path / "c.tar.gz").write_bytes(b"z")
    assert whole.tag("sha256:1") != before
    assert EnvironmentSpec(setup=("echo /opd-cachex",), cache_dir=tmp_path).cache_paths() == set()
    with pytest.raises(ConfigError, match="at least one setup step"):
        EnvironmentSpec(setup=())


@pytest.fixture
def engine():
    from opd_gym.sandboxes.docker import DockerEngine

    return DockerEngine()


@pytest.fixture
def cache(engine, tmp_path):
    """An ImageCache with its own index; every image it made is removed afterwards."""
    images = ImageCache(engine, directory=tmp_path / "state")
    yield images
    for image in images.images():
        if image["tag"] in images._index():
            try:
                engine.client.images.remove(image["tag"], force=True)
            except Exception:
                pass


def run_in(engine, image: str, command: str) -> str:
    out = engine.client.containers.run(image, ["sh", "-c", command], remove=True,
                                       network_mode="none")
    return out.decode().strip()


@pytest.mark.docker
def test_setup_steps_install_offline_from_the_setup_cache_once(cache, engine):
    from opd_gym.tasks.libraries import sdist_cache

    marker = uuid.uuid4().hex[:8]  # a step of our own: this test's image is built here
    spec = EnvironmentSpec(setup=(INSTALL_TOOLZ, f"echo {marker} > /etc/opd-marker"),
                           cache_dir=sdist_cache())
    first = cache.ensure(spec)
    assert first.built and first.tag.startswith("opd-gym-env:") and first.size > 0
    again = cache.ensure(spec)
    assert not again.built and again.tag == first.tag
    assert run_in(engine, first.tag,
                  "python3 -c 'import toolz; print(toolz.frequencies(\"abca\")[\"a\"])'") == "2"
    assert run_in(engine, first.tag, "cat /etc/opd-marker") == marker
    attrs = engine.client.images.get(first.tag).attrs
    base = engine.client.images.get(DEFAULT_IMAGE).attrs["Config"]
    # the base's config is kept (the agent's user, workdir), the build's own labels are not
    assert attrs["Config"]["User"] == base["User"]
    assert attrs["Config"]["WorkingDir"] == base["WorkingDir"]
    assert attrs["Config"]["Labels"] == {IMAGE_LABEL: "1", BASE_LABEL: DEFAULT_IMAGE}
    # the cache was mounted for the build only: the image holds none of its files
    assert run_in(engine, first.tag, f"ls -A {SETUP_CACHE_MOUNT} 2>/dev/null | wc -l") == "0"
    assert not engine.client.containers.list(all=True, filters={"ancestor": first.tag})


def make_wheel(folder, name: str, version: str, source: str):
    """A minimal pure-Python wheel of one module, written here (nothing is downloaded)."""
    dist = f"{name}-{version}.dist-info"
    files = {f"{name}.py": source,
             f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                              "Tag: py3-none-any\n"}
    files[f"{dist}/RECORD"] = "".join(f"{p},,\n" for p in [*files, f"{dist}/RECORD"])
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for rel, text in files.items():
            wheel.writestr(rel, text)
    return path


@pytest.mark.docker
def test_a_plain_pip_install_step_works_in_the_externally_managed_image(cache, engine, tmp_path):
    """The documented step, `pip install --no-index --find-links /opd-cache PKG`, as written:
    the image's Python is Debian's (PEP 668), and setup steps may install into it."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    marker = uuid.uuid4().hex[:8]
    make_wheel(wheels, f"opd_probe_{marker}", "1.0", f"VALUE = {marker!r}\n")
    spec = EnvironmentSpec(setup=(f"pip install --no-index --find-links {SETUP_CACHE_MOUNT} "
                                  f"opd_probe_{marker}",), cache_dir=wheels)
    report = cache.ensure(spec)
    assert report.built
    assert run_in(engine, report.tag,
                  f"python3 -c 'import opd_probe_{marker} as m; print(m.VALUE)'") == marker


@pytest.mark.docker
def test_a_failing_step_names_itself_and_leaves_nothing(cache, engine, monkeypatch):
    from docker.models.containers import ContainerCollection

    # A spy on the real create (other test workers build images at the same time, so
    # "no new container on the engine" would not be about this build).
    made: list[str] = []
    real_create = ContainerCollection.create

    def create(self, *args, **kwargs):
        container = real_create(self, *args, **kwargs)
        made.append(container.id)
        return container

    monkeypatch.setattr(ContainerCollection, "create", create)
    spec = EnvironmentSpec(setup=("echo fine", f"echo boom-{uuid.uuid4().hex[:6]} >&2; exit 3"))
    with pytest.raises(ConfigError, match=r"setup step 2 of 2 failed \(exit 3\)") as caught:
        cache.ensure(spec)
    assert "boom-" in str(caught.value)
    assert not cache.images() or all(i["tag"] not in str(caught.value) for i in cache.images())
    assert len(made) == 1  # the build's one container, and it is gone
    assert made[0] not in {c.id for c in engine.client.containers.list(all=True, sparse=True)}
    base_id = engine.client.images.get(DEFAULT_IMAGE).id
    from docker.errors import ImageNotFound

    with pytest.raises(ImageNotFound):
        engine.client.images.get(spec.tag(base_id))


@pytest.mark.docker
def test_the_budget_removes_least_recently_used_images_but_not_one_in_use(cache, engine):
    run = uuid.uuid4().hex[:8]
    specs = [EnvironmentSpec(setup=(f"head -c 3000000 /dev/urandom > /blob-{run}-{i}",))
             for i in range(3)]
    tags = [cache.ensure(s).tag for s in specs]
    mine = lambda: {i["tag"] for i in cache.images()} & set(tags)  # noqa: E731
    assert mine() == set(tags)
    cache.ensure(specs[0])  # used again: now the most recent
    in_use = engine.client.containers.run(tags[1], ["sleep", "60"], detach=True,
                                          network_mode="none")
    try:
        cache.budget = 0
        removed = cache.collect(keep=())
        assert tags[2] in removed and tags[1] not in removed  # tags[1] runs in a container
        assert mine() == {tags[0], tags[1]} - set(removed)
        # least recently used first: tags[2] (built last but never reused) went before tags[0]
        assert removed.index(tags[2]) < (removed.index(tags[0]) if tags[0] in removed else 99)
    finally:
        in_use.remove(force=True)
    cache.budget = parse_size("1t")
    assert cache.collect() == []  # within budget: nothing goes


@pytest.mark.docker
def test_the_cli_lists_environment_images_and_prunes_to_a_budget(cache, capsys):
    from opd_gym.cli import main

    built = cache.ensure(EnvironmentSpec(setup=("echo listed > /opd-listed",)))
    assert main(["sandbox", "images"]) == 0
    listing = capsys.readouterr().out
    assert built.tag in listing and "environment image(s)" in listing
    assert main(["sandbox", "images", "--prune", "1t"]) == 0  # everything fits: none goes
    out = capsys.readouterr().out
    assert "removed 0 environment image(s)" in out and built.tag in out
    assert main(["sandbox", "images", "--prune", "lots"]) == 2
    assert "--prune: not a size" in capsys.readouterr().err
