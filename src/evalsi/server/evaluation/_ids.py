"""Resource ids and names shared by evaluators, datasets and jobs: checked, and written the same way everywhere."""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime

from evalsi.server._errors import ServiceError

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$")


def check_id(value: str, field: str) -> str:
    """``value`` when it is a valid id (letters, digits, ``-``, ``_``; 1-63 characters, not starting with a sign).

    Raises:
        ServiceError: ``invalid_argument`` naming ``field``.

    """
    if not _ID.match(value):
        raise ServiceError(
            "invalid_argument",
            f"{field}: {value[:80]!r} is not a valid id (1-63 letters, digits, '-' or '_', starting with a letter "
            "or digit)",
            path=field,
        )
    return value


def resource_id(value: str, collection: str, field: str) -> str:
    """The id in ``value``, given as ``ID`` or ``<collection>/ID`` (a project is implied by the token)."""
    prefix = collection + "/"
    return check_id(value[len(prefix) :] if value.startswith(prefix) else value, field)


def not_found(noun: str, resource_id: str, project: str, where: str) -> ServiceError:
    """The error answering a request that names a resource the caller's project does not have.

    Args:
        noun: What kind of resource (``evaluator``, ``dataset``, ``job``).
        resource_id: The id asked for.
        project: The caller's project.
        where: The request field that named it.

    Returns:
        A ``not_found`` error naming the field, the id and the project.

    """
    return ServiceError("not_found", f"{where}: no {noun} {resource_id!r} in project {project!r}", path=where)


def project_dir(project: str) -> str:
    """A directory name for a project (its name is the operator's free text: never a path)."""
    return hashlib.sha256(project.encode()).hexdigest()[:24]


def timestamp(seconds: float) -> str:
    """RFC 3339 in UTC."""
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
