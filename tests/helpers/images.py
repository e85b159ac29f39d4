"""Container images written from scratch, as the usual tools write them: OCI image layouts (``skopeo copy ...
oci:DIR:TAG``), legacy ``docker save`` archives and the OCI-in-docker-save archives of newer Docker.

Layers are tar streams built here (``tarfile``), compressed with gzip or zstd or left plain; blobs are named by
their sha256, configs list each layer's uncompressed digest (``rootfs.diff_ids``), manifests and indexes are the
JSON documents the image spec describes. No registry, no container runtime.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import tarfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import zstandard

from evalsi_harness._image import host_platform

OCI_LAYER = "application/vnd.oci.image.layer.v1.tar"
MEDIA_TYPES = {"tar": OCI_LAYER, "gzip": OCI_LAYER + "+gzip", "zstd": OCI_LAYER + "+zstd"}
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
INDEX = "application/vnd.oci.image.index.v1+json"


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def member(
    name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"", **fields: object
) -> tuple[tarfile.TarInfo, bytes]:
    """A tar member: ``kind`` is a tarfile type (REGTYPE, DIRTYPE, SYMTYPE, LNKTYPE, CHRTYPE...)."""
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = 0o755 if kind == tarfile.DIRTYPE else 0o644
    info.mtime = 1_700_000_000
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    for key, value in fields.items():
        setattr(info, key, value)
    return info, data


def file(name: str, text: str, mode: int = 0o644) -> tuple[tarfile.TarInfo, bytes]:
    return member(name, tarfile.REGTYPE, text.encode(), mode=mode)


def directory(name: str) -> tuple[tarfile.TarInfo, bytes]:
    return member(name, tarfile.DIRTYPE)


def tar_of(members: Iterable[tuple[tarfile.TarInfo, bytes]]) -> bytes:
    """An uncompressed layer tar of these members, in order."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return buffer.getvalue()


def tree_tar(root: Path, keep: Callable[[str], bool] = lambda _: True) -> bytes:
    """A layer tar of what is under ``root`` whose relative path ``keep`` accepts, with the directories above it."""
    chosen: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            relative = os.path.relpath(os.path.join(dirpath, name), root)
            if keep(relative):
                parts = relative.split("/")
                chosen.update("/".join(parts[:i]) for i in range(1, len(parts) + 1))
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for relative in sorted(chosen, key=lambda p: p.split("/")):
            tar.add(root / relative, arcname=relative, recursive=False)
    return buffer.getvalue()


def compress(data: bytes, compression: str) -> bytes:
    if compression == "gzip":
        return gzip.compress(data, compresslevel=1, mtime=0)
    if compression == "zstd":
        return zstandard.ZstdCompressor(level=1).compress(data)
    return data


@dataclass
class Layer:
    tar: bytes
    compression: str = "tar"

    @property
    def blob(self) -> bytes:
        return compress(self.tar, self.compression)


@dataclass
class Image:
    layers: list[Layer]
    platform: str = field(default_factory=host_platform)
    tags: list[str] = field(default_factory=list)
    """``name:tag`` names; an OCI layout's ``org.opencontainers.image.ref.name`` is the tag after the colon."""

    def config(self) -> bytes:
        os_name, arch, *variant = self.platform.split("/")
        body: dict[str, object] = {
            "architecture": arch,
            "os": os_name,
            "config": {"Env": ["PATH=/usr/bin:/bin"]},
            "rootfs": {"type": "layers", "diff_ids": [digest(layer.tar) for layer in self.layers]},
        }
        if variant:
            body["variant"] = variant[0]
        return json.dumps(body).encode()

    def manifest(self) -> bytes:
        config = self.config()
        body = {
            "schemaVersion": 2,
            "mediaType": MANIFEST,
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": digest(config),
                "size": len(config),
            },
            "layers": [
                {"mediaType": MEDIA_TYPES[layer.compression], "digest": digest(layer.blob), "size": len(layer.blob)}
                for layer in self.layers
            ],
        }
        return json.dumps(body).encode()

    def blobs(self) -> list[bytes]:
        return [self.config(), self.manifest(), *(layer.blob for layer in self.layers)]


def descriptor(data: bytes, media_type: str, **extra: object) -> dict[str, object]:
    return {"mediaType": media_type, "digest": digest(data), "size": len(data), **extra}


def _platform(image: Image) -> dict[str, str]:
    os_name, arch, *variant = image.platform.split("/")
    return {"os": os_name, "architecture": arch, **({"variant": variant[0]} if variant else {})}


def write_blobs(root: Path, blobs: Iterable[bytes]) -> None:
    (root / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
    for blob in blobs:
        (root / "blobs" / "sha256" / digest(blob).split(":")[1]).write_bytes(blob)


def oci_layout(root: Path, images: list[Image], *, multi_platform: bool = False) -> Path:
    """An OCI image layout: one index entry per image (named by its tags), or with ``multi_platform`` one image
    index holding every image as a platform of the same name."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))
    for image in images:
        write_blobs(root, image.blobs())
    if multi_platform:
        nested = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": INDEX,
                "manifests": [descriptor(i.manifest(), MANIFEST, platform=_platform(i)) for i in images],
            }
        ).encode()
        write_blobs(root, [nested])
        entries = [descriptor(nested, INDEX, annotations=_annotations(images[0].tags))]
    else:
        entries = [descriptor(i.manifest(), MANIFEST, annotations=_annotations(i.tags)) for i in images]
    (root / "index.json").write_text(json.dumps({"schemaVersion": 2, "mediaType": INDEX, "manifests": entries}))
    return root


def _annotations(tags: list[str]) -> dict[str, str]:
    if not tags:
        return {}
    name = tags[0] if "/" in tags[0] else "docker.io/library/" + tags[0]
    return {"io.containerd.image.name": name, "org.opencontainers.image.ref.name": tags[0].rsplit(":", 1)[-1]}


def _tar_files(path: Path, files: dict[str, bytes], links: dict[str, str] | None = None) -> Path:
    with tarfile.open(path, "w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = 1_700_000_000
            tar.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            tar.addfile(info)
    return path


def docker_save_legacy(path: Path, images: list[Image]) -> Path:
    """``docker save`` before Docker 25: ``manifest.json``, ``<id>.json`` configs and ``<layer id>/layer.tar``
    (a layer two images share is stored once, the other a symbolic link to it, as Docker did)."""
    files: dict[str, bytes] = {}
    links: dict[str, str] = {}
    entries = []
    stored: dict[str, str] = {}
    for number, image in enumerate(images):
        config = image.config()
        config_name = digest(config).split(":")[1] + ".json"
        files[config_name] = config
        layer_names = []
        for position, layer in enumerate(image.layers):
            layer_id = hashlib.sha256(f"{number}-{position}-{digest(layer.tar)}".encode()).hexdigest()
            name = f"{layer_id}/layer.tar"
            known = stored.get(digest(layer.tar))
            if known is not None and known != name:
                links[name] = f"../{known}"
            else:
                files[name] = layer.tar if layer.compression == "tar" else layer.blob
                stored[digest(layer.tar)] = name
            layer_names.append(name)
        entries.append({"Config": config_name, "RepoTags": image.tags, "Layers": layer_names})
    files["manifest.json"] = json.dumps(entries).encode()
    return _tar_files(path, files, links)


def docker_save_oci(path: Path, images: list[Image]) -> Path:
    """``docker save`` from Docker 25: an OCI layout (uncompressed layers) plus the legacy ``manifest.json``."""
    files: dict[str, bytes] = {"oci-layout": json.dumps({"imageLayoutVersion": "1.0.0"}).encode()}
    entries, index = [], []
    for image in images:
        for blob in image.blobs():
            files["blobs/sha256/" + digest(blob).split(":")[1]] = blob
        index.append(descriptor(image.manifest(), MANIFEST, annotations=_annotations(image.tags)))
        entries.append(
            {
                "Config": "blobs/sha256/" + digest(image.config()).split(":")[1],
                "RepoTags": image.tags,
                "Layers": ["blobs/sha256/" + digest(layer.blob).split(":")[1] for layer in image.layers],
            }
        )
    files["index.json"] = json.dumps({"schemaVersion": 2, "mediaType": INDEX, "manifests": index}).encode()
    files["manifest.json"] = json.dumps(entries).encode()
    return _tar_files(path, files)
