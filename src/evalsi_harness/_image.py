"""A task's image from disk: an OCI image layout or a ``docker save`` archive, unpacked into a cached rootfs.

No container runtime and no registry: the image is a directory (``oci-layout``, ``index.json``, ``blobs/sha256/``,
as ``skopeo copy docker://… oci:DIR:TAG`` or ``crane pull --format=oci`` write it) or a tar archive (``docker
save``, legacy or the OCI layout newer Docker writes; an ``oci-archive`` tar). ``path#ref`` picks one image by
tag or name when the file holds several; an image index with one manifest per platform is resolved to this
machine's platform (``linux/amd64``, ``linux/arm64``) unless the task names another.

Every blob read is checked against its digest (and size), every layer's uncompressed stream against the
config's ``rootfs.diff_ids``; layers are gzip, zstd or plain tar as their media type says (by their first bytes
in a legacy archive, which has no media types). The layers are unpacked in order into a root filesystem under
the image cache (:func:`image_cache_dir`), named by the manifest's digest (a legacy archive has no manifest: by
its config's digest, the image ID): into a temporary directory renamed into place once whole, under a lock, so
two processes asking at once unpack it once and neither sees a half-unpacked tree. Later episodes, in this
process or another, start from that copy.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import logging
import os
import platform as _platform
import re
import shutil
import tarfile
import tempfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol, cast

from evalsi._util.filelock import exclusive_lock
from evalsi_harness._unpack import ImageError, LayerApplier

log = logging.getLogger(__name__)

CACHE_ENV = "EVALSI_IMAGE_CACHE"
"""The environment variable naming the image cache directory."""
ROOT_CACHE = "/var/cache/evalsi/images"
"""The image cache when running as root: a place every sandbox user can traverse (``/root`` is not)."""

_INDEX_TYPES = {"application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json"}
_MANIFEST_TYPES = {"application/vnd.oci.image.manifest.v1+json", "application/vnd.docker.distribution.manifest.v2+json"}
_LAYER_COMPRESSION = {
    "application/vnd.oci.image.layer.v1.tar": "tar",
    "application/vnd.oci.image.layer.v1.tar+gzip": "gzip",
    "application/vnd.oci.image.layer.v1.tar+zstd": "zstd",
    "application/vnd.oci.image.layer.nondistributable.v1.tar": "tar",
    "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip": "gzip",
    "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd": "zstd",
    "application/vnd.docker.image.rootfs.diff.tar": "tar",
    "application/vnd.docker.image.rootfs.diff.tar.gzip": "gzip",
    "application/vnd.docker.image.rootfs.diff.tar.zstd": "zstd",
    "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip": "gzip",
}
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_REF_NAME = "org.opencontainers.image.ref.name"
_IMAGE_NAME = "io.containerd.image.name"
_MAX_JSON = 16 << 20
"""The largest index, manifest or config read (they are small documents; a larger one is refused)."""
_MAX_DEPTH = 4
"""How deep image indexes may nest."""
_ARCHES = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


def host_platform() -> str:
    """The platform of this machine as images name it: ``linux/amd64``, ``linux/arm64`` (others as uname says)."""
    machine = _platform.machine().lower()
    return f"linux/{_ARCHES.get(machine, machine)}"


def image_cache_dir() -> Path:
    """Where unpacked images are kept.

    ``$EVALSI_IMAGE_CACHE``; else ``/var/cache/evalsi/images`` as root (the sandbox's users must traverse it), else
    ``$XDG_CACHE_HOME/evalsi/images`` (``~/.cache/evalsi/images``).
    """
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured).expanduser().absolute()
    if os.geteuid() == 0:
        return Path(ROOT_CACHE)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "evalsi" / "images"


def split_image(image: str) -> tuple[str, str | None]:
    """``path#ref`` as ``(path, ref)``; ``ref`` None when there is no ``#``.

    Example:
        >>> split_image("images/app.tar#app:1.0"), split_image("rootfs")
        (('images/app.tar', 'app:1.0'), ('rootfs', None))

    """
    path, sep, ref = image.partition("#")
    return path, (ref if sep else None)


def is_image(path: str | Path) -> bool:
    """Whether ``path`` is an image (an OCI layout directory or a tar archive) rather than a root filesystem."""
    path = Path(path)
    if path.is_dir():
        return (path / "oci-layout").is_file() and (path / "index.json").is_file()
    return path.is_file()


@dataclass(frozen=True)
class UnpackedImage:
    """An image's root filesystem in the cache."""

    rootfs: str
    """The root filesystem directory."""
    digest: str
    """What the cache entry is named by: the manifest's digest (a legacy ``docker save`` archive: its image ID)."""
    platform: str
    """The platform unpacked (``linux/amd64``)."""
    cached: bool
    """True when it was already unpacked (by an earlier episode, here or in another process)."""


def unpack_image(
    path: str | Path, ref: str | None = None, platform: str | None = None, cache_dir: str | Path | None = None
) -> UnpackedImage:
    """The root filesystem of the image at ``path``, unpacked once into the cache and reused after.

    Args:
        path: An OCI image layout directory, or a ``docker save`` / OCI archive tar.
        ref: Which image when it holds several: a tag (``1.0``), a name (``app:1.0``, ``docker.io/library/app:1.0``).
        platform: ``os/arch[/variant]``; default this machine's.
        cache_dir: Where unpacked images are kept (default :func:`image_cache_dir`).

    Raises:
        ImageError: The image cannot be read, its digests do not match, the reference or platform matches no
            image (the message lists those there), or a layer holds a refused member.

    """
    label = str(path) + (f"#{ref}" if ref else "")
    want = platform or host_platform()
    with _open_store(Path(path), label) as store:
        image = _select(store, label, ref, want)
        cache = Path(cache_dir) if cache_dir is not None else image_cache_dir()
        return _cached(store, image, cache)


# --- stores: where blobs come from -------------------------------------------------------------------------------


class _Store:
    """Named files (``index.json``, a legacy archive's members) and blobs by digest, from a directory or a tar."""

    label: str

    def open(self, name: str) -> IO[bytes] | None:
        raise NotImplementedError

    def has(self, name: str) -> bool:
        raise NotImplementedError

    def blob_name(self, digest: str) -> str:
        if not _DIGEST.match(digest):
            raise ImageError(f"{self.label}: {digest!r} is not a sha256 digest (sha256: and 64 hex digits)")
        return "blobs/sha256/" + digest.split(":", 1)[1]

    def read_json(self, name: str, digest: str | None = None, size: int | None = None) -> Any:
        """A small JSON document, checked against ``digest`` and ``size`` when given."""
        handle = self.open(name)
        if handle is None:
            raise ImageError(f"{self.label}: {name} is not in the image")
        with handle:
            data = handle.read(_MAX_JSON + 1)
        if len(data) > _MAX_JSON:
            raise ImageError(f"{self.label}: {name} is larger than {_MAX_JSON} bytes")
        if digest is not None:
            _check(self.label, name, hashlib.sha256(data).hexdigest(), digest, len(data), size)
        try:
            return json.loads(data)
        except ValueError as exc:
            raise ImageError(f"{self.label}: {name} is not JSON: {exc}") from None


class _Directory(_Store):
    def __init__(self, root: Path, label: str) -> None:
        self.root = root
        self.label = label

    def open(self, name: str) -> IO[bytes] | None:
        try:
            return (self.root / name).open("rb")
        except FileNotFoundError:
            return None

    def has(self, name: str) -> bool:
        return (self.root / name).is_file()


class _Archive(_Store):
    def __init__(self, tar: tarfile.TarFile, label: str) -> None:
        self.tar = tar
        self.label = label
        self.members = {m.name.removeprefix("./"): m for m in tar.getmembers()}

    def open(self, name: str) -> IO[bytes] | None:
        member = self.members.get(name)
        if member is None:
            return None
        try:
            return self.tar.extractfile(member)  # a link to another member gives that member's data
        except (KeyError, tarfile.TarError) as exc:
            raise ImageError(f"{self.label}: {name} cannot be read: {exc}") from None

    def has(self, name: str) -> bool:
        return name in self.members


@contextlib.contextmanager
def _open_store(path: Path, label: str) -> Iterator[_Store]:
    if path.is_dir():
        if not (path / "oci-layout").is_file() or not (path / "index.json").is_file():
            raise ImageError(f"{label}: a directory image is an OCI image layout (oci-layout, index.json, blobs/)")
        yield _Directory(path, label)
        return
    if not path.is_file():
        raise ImageError(f"{label}: no such file or directory")
    with path.open("rb") as handle:
        magic = handle.read(4)
    if magic[:2] == b"\x1f\x8b" or magic == b"\x28\xb5\x2f\xfd":
        raise ImageError(f"{label}: the archive is compressed: decompress it first (gunzip, zstd -d) to its .tar")
    try:
        tar = tarfile.open(path, "r:")  # noqa: SIM115 (closed by the with below, once it is known to open)
    except (tarfile.TarError, OSError) as exc:
        raise ImageError(f"{label}: not a tar archive of an image: {exc}") from None
    with tar:
        yield _Archive(tar, label)


# --- selecting the image -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Layer:
    where: str
    """How errors name it: ``layer 2 (sha256:…)``."""
    name: str
    """The blob or member holding it."""
    compression: str | None
    """``tar``, ``gzip``, ``zstd``, or None: by its first bytes."""
    digest: str | None
    size: int | None
    diff_id: str


@dataclass(frozen=True)
class _Image:
    key: str
    platform: str
    layers: list[_Layer]
    summary: dict[str, Any]


def _select(store: _Store, label: str, ref: str | None, want: str) -> _Image:
    if store.has("index.json") and store.has("oci-layout"):
        return _select_oci(store, label, ref, want)
    if store.has("manifest.json"):
        return _select_docker(store, label, ref, want)
    raise ImageError(
        f"{label}: neither an OCI image (oci-layout, index.json) nor a docker save archive (manifest.json)"
    )


def _select_oci(store: _Store, label: str, ref: str | None, want: str) -> _Image:
    index = store.read_json("index.json")
    tops: list[dict[str, Any]] = list(_descriptors(index, label, "index.json"))
    if ref is not None:
        named = [d for d in tops if _ref_matches(d.get("annotations") or {}, ref)]
        if not named and store.has("manifest.json"):
            named = _by_repo_tags(store, label, ref, tops)
        if not named:
            raise ImageError(f"{label}: no image is named {ref!r}; the image holds {_names(tops) or 'no names'}")
        tops = named
    candidates: dict[str, tuple[dict[str, Any], str | None]] = {}
    for top in tops:
        for descriptor, where in _expand(store, label, top, 0):
            candidates.setdefault(descriptor["digest"], (descriptor, where))
    if not candidates:
        raise ImageError(f"{label}: index.json lists no image manifest")
    matching = {d: c for d, c in candidates.items() if c[1] is None or _platform_matches(c[1], want)}
    if not matching:
        have = sorted({c[1] for c in candidates.values() if c[1]})
        raise ImageError(f"{label}: no image for {want}; it has {', '.join(have)} (choose one with platform:)")
    if len(matching) > 1:
        raise ImageError(
            f"{label}: several images match {want}: {_names(tops) or ', '.join(sorted(matching))}; "
            "choose one with image: PATH#REF"
        )
    descriptor, _ = next(iter(matching.values()))
    digest = descriptor["digest"]
    blob = store.blob_name(digest)
    if not store.has(blob):
        raise ImageError(f"{label}: the manifest {digest} for {want} is not in the image (only its index is)")
    manifest = store.read_json(blob, digest, descriptor.get("size"))
    config_descriptor = manifest.get("config")
    if not isinstance(config_descriptor, dict) or "digest" not in config_descriptor:
        raise ImageError(f"{label}: manifest {digest} has no config")
    config = store.read_json(
        store.blob_name(str(config_descriptor["digest"])), config_descriptor["digest"], config_descriptor.get("size")
    )
    platform, listed = _config_layers(label, config, want, manifest.get("layers"), f"manifest {digest}")
    layers = []
    for number, (layer, diff_id) in enumerate(listed, start=1):
        media_type = str(layer.get("mediaType", ""))
        layer_digest = str(layer.get("digest", ""))
        where = f"{label}: layer {number} ({layer_digest})"
        if media_type not in _LAYER_COMPRESSION:
            raise ImageError(f"{where}: unsupported media type {media_type!r} (tar, tar+gzip or tar+zstd layers)")
        name = store.blob_name(layer_digest)
        if not store.has(name):
            raise ImageError(f"{where}: the blob is not in the image")
        layers.append(_Layer(where, name, _LAYER_COMPRESSION[media_type], layer_digest, layer.get("size"), diff_id))
    summary = {"manifest": digest, "config": config_descriptor["digest"], "platform": platform}
    return _Image(digest, platform, layers, summary)


def _select_docker(store: _Store, label: str, ref: str | None, want: str) -> _Image:
    """A legacy ``docker save`` archive: ``manifest.json`` names each image's config and layer tars."""
    entries = store.read_json("manifest.json")
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise ImageError(f"{label}: manifest.json is not a list of images")
    if ref is not None:
        entries = [e for e in entries if any(_same_name(tag, ref) for tag in e.get("RepoTags") or [])]
    if len(entries) != 1:
        tags = sorted(t for e in store.read_json("manifest.json") for t in e.get("RepoTags") or [])
        if not entries:
            raise ImageError(f"{label}: no image is named {ref!r}; the archive holds {', '.join(tags) or 'no tags'}")
        raise ImageError(f"{label}: the archive holds {len(entries)} images ({', '.join(tags)}): choose one with #REF")
    entry = entries[0]
    config_name = str(entry.get("Config", ""))
    handle = store.open(config_name)
    if handle is None:
        raise ImageError(f"{label}: its config {config_name!r} is not in the archive")
    with handle:
        data = handle.read(_MAX_JSON + 1)
    config_digest = "sha256:" + hashlib.sha256(data).hexdigest()
    named = re.search(r"([0-9a-f]{64})(?:\.json)?$", config_name)
    if named and "sha256:" + named.group(1) != config_digest:
        raise ImageError(f"{label}: {config_name} does not match its digest (the archive is corrupt)")
    try:
        config = json.loads(data)
    except ValueError as exc:
        raise ImageError(f"{label}: {config_name} is not JSON: {exc}") from None
    platform, listed = _config_layers(label, config, want, entry.get("Layers"), "manifest.json")
    layers = []
    for number, (name, diff_id) in enumerate(listed, start=1):
        if not store.has(str(name)):
            raise ImageError(f"{label}: layer {number} ({name}) is not in the archive")
        layers.append(_Layer(f"{label}: layer {number} ({name})", str(name), None, None, None, diff_id))
    summary = {"config": config_digest, "platform": platform, "repo_tags": entry.get("RepoTags") or []}
    return _Image(config_digest, platform, layers, summary)


def _descriptors(document: Any, label: str, where: str) -> Iterator[dict[str, Any]]:
    manifests = document.get("manifests") if isinstance(document, dict) else None
    if not isinstance(manifests, list):
        raise ImageError(f"{label}: {where} is not an image index (no manifests list)")
    for descriptor in manifests:
        if not isinstance(descriptor, dict) or not isinstance(descriptor.get("digest"), str):
            raise ImageError(f"{label}: {where} holds a manifest entry without a digest")
        yield descriptor


def _expand(
    store: _Store, label: str, descriptor: dict[str, Any], depth: int
) -> Iterator[tuple[dict[str, Any], str | None]]:
    """The image manifests a descriptor leads to, with their platforms (None when it does not say)."""
    media_type = descriptor.get("mediaType")
    platform = _descriptor_platform(descriptor)
    if platform is not None and platform.startswith("unknown/"):
        return  # attestations and signatures ride along in indexes as manifests of no platform
    if media_type in _MANIFEST_TYPES:
        yield descriptor, platform
        return
    if media_type is not None and media_type not in _INDEX_TYPES:
        return  # some other artifact
    blob = store.blob_name(descriptor["digest"])
    if not store.has(blob):
        if media_type is None:
            return
        raise ImageError(f"{label}: the index {descriptor['digest']} is not in the image")
    document = store.read_json(blob, descriptor["digest"], descriptor.get("size"))
    if media_type is None and "manifests" not in document:
        yield descriptor, platform
        return
    if depth >= _MAX_DEPTH:
        raise ImageError(f"{label}: image indexes nest deeper than {_MAX_DEPTH}")
    for child in _descriptors(document, label, descriptor["digest"]):
        yield from _expand(store, label, child, depth + 1)


def _descriptor_platform(descriptor: dict[str, Any]) -> str | None:
    platform = descriptor.get("platform")
    if not isinstance(platform, dict) or "architecture" not in platform:
        return None
    parts = [str(platform.get("os", "linux")), str(platform["architecture"])]
    if platform.get("variant"):
        parts.append(str(platform["variant"]))
    return "/".join(parts)


def _platform_matches(have: str, want: str) -> bool:
    def split(value: str) -> tuple[str, str, str | None]:
        parts = value.split("/")
        os_name, arch = parts[0], _ARCHES.get(parts[1], parts[1]) if len(parts) > 1 else ""
        variant = parts[2] if len(parts) > 2 else ("v8" if arch == "arm64" else None)
        return os_name, arch, variant

    have_os, have_arch, have_variant = split(have)
    want_os, want_arch, want_variant = split(want)
    if (have_os, have_arch) != (want_os, want_arch):
        return False
    return want_variant is None or have_variant is None or have_variant == want_variant


def _check_config_platform(label: str, config: Any, want: str) -> str:
    if not isinstance(config, dict):
        raise ImageError(f"{label}: the image config is not a JSON object")
    have = f"{config.get('os', 'linux')}/{config.get('architecture', '')}"
    if config.get("variant"):
        have += f"/{config['variant']}"
    if config.get("architecture") and not _platform_matches(have, want):
        raise ImageError(f"{label}: the image is {have}, not {want} (set platform: {have} to use it anyway)")
    return have if config.get("architecture") else want


def _config_layers(label: str, config: Any, want: str, layers: Any, lister: str) -> tuple[str, list[tuple[Any, str]]]:
    """The image's platform, and each layer ``lister`` lists beside the digest of its content the config gives."""
    platform = _check_config_platform(label, config, want)
    rootfs = config.get("rootfs")
    diff_ids = rootfs.get("diff_ids") if isinstance(rootfs, dict) else None
    if not isinstance(diff_ids, list) or not all(isinstance(d, str) and _DIGEST.match(d) for d in diff_ids):
        raise ImageError(f"{label}: the image config has no rootfs.diff_ids (sha256 digests of its layers)")
    if not isinstance(layers, list) or len(layers) != len(diff_ids):
        raise ImageError(f"{label}: {lister} lists other layers than its config's rootfs.diff_ids")
    return platform, list(zip(layers, diff_ids, strict=True))


def _ref_matches(annotations: dict[str, Any], ref: str) -> bool:
    names = [str(annotations[k]) for k in (_REF_NAME, _IMAGE_NAME) if k in annotations]
    return any(name == ref or _same_name(name, ref) for name in names)


def _names(descriptors: list[dict[str, Any]]) -> str:
    names = []
    for descriptor in descriptors:
        annotations = descriptor.get("annotations") or {}
        name = annotations.get(_IMAGE_NAME) or annotations.get(_REF_NAME)
        if name:
            names.append(str(name))
    return ", ".join(sorted(set(names)))


def _by_repo_tags(store: _Store, label: str, ref: str, tops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Docker's archives also name images in ``manifest.json``: the manifests whose config a matching entry names."""
    entries = store.read_json("manifest.json")
    configs = {
        str(e.get("Config", "")).rsplit("/", 1)[-1].removesuffix(".json")
        for e in entries if isinstance(e, dict) and any(_same_name(t, ref) for t in e.get("RepoTags") or [])
    }  # fmt: skip
    found = []
    for top in tops:
        for descriptor, _ in _expand(store, label, top, 0):
            blob = store.blob_name(descriptor["digest"])
            if store.has(blob):
                manifest = store.read_json(blob, descriptor["digest"], descriptor.get("size"))
                config = str((manifest.get("config") or {}).get("digest", "")).removeprefix("sha256:")
                if config in configs:
                    found.append(top)
                    break
    return found


def _same_name(name: str, ref: str) -> bool:
    """Whether two image names are the same image: ``app:1.0`` is ``docker.io/library/app:1.0``."""
    return _normal(name) == _normal(ref)


def _normal(name: str) -> str:
    digest = ""
    if "@" in name:
        name, digest = name.split("@", 1)
        digest = "@" + digest
    last = name.rsplit("/", 1)[-1]
    if ":" not in last and not digest:
        name += ":latest"
    first = name.split("/", 1)[0]
    if "/" not in name or not ("." in first or ":" in first or first == "localhost"):
        name = "docker.io/" + (name if "/" in name else "library/" + name)
    return name + digest


# --- unpacking, once -------------------------------------------------------------------------------------------


def _cached(store: _Store, image: _Image, cache: Path) -> UnpackedImage:
    key = image.key.replace(":", "-")
    final = cache / key
    rootfs = final / "rootfs"
    if rootfs.is_dir():
        return UnpackedImage(str(rootfs), image.key, image.platform, cached=True)
    _make_cache(cache)
    with exclusive_lock(cache / f".{key}.lock"):
        if rootfs.is_dir():  # another process unpacked it while this one waited
            return UnpackedImage(str(rootfs), image.key, image.platform, cached=True)
        for stale in cache.glob(f".{key}.*.partial"):  # left by a process that died unpacking (it held the lock)
            shutil.rmtree(stale, ignore_errors=True)
        partial = Path(tempfile.mkdtemp(prefix=f".{key}.", suffix=".partial", dir=cache))
        try:
            os.chmod(partial, 0o755)
            os.mkdir(partial / "rootfs", 0o700)
            _unpack(store, image, str(partial / "rootfs"))
            (partial / "image.json").write_text(json.dumps({"source": store.label, **image.summary}, indent=2))
            os.rename(partial, final)
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise
    log.info("unpacked %s (%s) into %s", store.label, image.key, rootfs)
    return UnpackedImage(str(rootfs), image.key, image.platform, cached=False)


def _make_cache(cache: Path) -> None:
    cache.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        return
    # The sandbox runs as another user, which must traverse every directory down to the image.
    for directory in [cache, *cache.parents]:
        mode = directory.stat().st_mode
        if not mode & 0o001:
            if directory == cache:
                os.chmod(cache, mode | 0o755)
                continue
            raise ImageError(
                f"the image cache {cache} is inside {directory}, which the sandbox's user cannot enter "
                f"(mode {mode & 0o777:o}): set {CACHE_ENV} to a directory others can traverse "
                f"(as root the default is {ROOT_CACHE})"
            )


def _unpack(store: _Store, image: _Image, rootfs: str) -> None:
    applier = LayerApplier(rootfs)
    try:
        for layer in image.layers:
            handle = store.open(layer.name)
            if handle is None:
                raise ImageError(f"{layer.where}: the blob is not in the image")
            with handle:
                _apply_layer(applier, layer, handle)
        applier.finish()
    finally:
        applier.close()


def _apply_layer(applier: LayerApplier, layer: _Layer, handle: IO[bytes]) -> None:
    packed = _Hashing(handle)
    compression = layer.compression or _sniff(packed)
    data = _Hashing(_decompressor(compression, packed, layer.where))
    try:
        with tarfile.open(fileobj=data, mode="r|") as tar:  # type: ignore[call-overload]
            applier.apply(tar, layer.where)
        data.drain()
        packed.drain()
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise ImageError(f"{layer.where}: not a readable {compression} layer: {exc}") from None
    except Exception as exc:  # zstandard's errors, which have no common base class here
        if type(exc).__module__.startswith("zstandard"):
            raise ImageError(f"{layer.where}: not a readable zstd layer: {exc}") from None
        raise
    if layer.digest is not None:
        _check(layer.where, "the blob", packed.hexdigest(), layer.digest, packed.size, layer.size)
    _check(layer.where, "its uncompressed tar", data.hexdigest(), layer.diff_id, None, None)


def _check(label: str, what: str, hexdigest: str, digest: str, size: int | None, expected_size: int | None) -> None:
    if "sha256:" + hexdigest != digest:
        raise ImageError(f"{label}: {what} does not match its digest {digest} (found sha256:{hexdigest})")
    if expected_size is not None and size != expected_size:
        raise ImageError(f"{label}: {what} is {size} bytes, not the {expected_size} its descriptor says")


def _sniff(packed: _Hashing) -> str:
    head = packed.peek(4)
    if head[:2] == b"\x1f\x8b":
        return "gzip"
    if head == b"\x28\xb5\x2f\xfd":
        return "zstd"
    return "tar"


def _decompressor(compression: str, packed: _Hashing, where: str) -> _Readable:
    if compression == "gzip":
        return gzip.GzipFile(fileobj=cast(IO[bytes], packed), mode="rb")
    if compression == "zstd":
        try:
            import zstandard
        except ImportError:
            raise ImageError(
                f"{where}: a zstd layer needs the zstandard package: pip install 'evalsi[images]'"
            ) from None
        reader: _Readable = zstandard.ZstdDecompressor().stream_reader(cast(IO[bytes], packed), read_across_frames=True)
        return reader
    return packed


class _Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


class _Hashing:
    """A stream that hashes (sha256) and counts what is read through it; ``peek`` looks ahead without reading."""

    def __init__(self, source: Any) -> None:
        self._source: Callable[[int], bytes] = source.read
        self._hash = hashlib.sha256()
        self._ahead = b""
        self.size = 0

    def peek(self, size: int) -> bytes:
        while len(self._ahead) < size:
            more = self._source(size - len(self._ahead))
            if not more:
                break
            self._ahead += more
        return self._ahead[:size]

    def read(self, size: int = -1) -> bytes:
        if self._ahead:
            data, self._ahead = self._ahead, b""
            if size < 0:
                data += self._source(-1)
            elif len(data) > size:
                data, self._ahead = data[:size], data[size:]
        else:
            data = self._source(size)
        self._hash.update(data)
        self.size += len(data)
        return data

    def drain(self) -> None:
        """Read to the end (a tar's padding after its last member still counts in the digest)."""
        while self.read(1 << 20):
            pass

    def hexdigest(self) -> str:
        return self._hash.hexdigest()
