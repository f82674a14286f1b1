"""The SBOM as CycloneDX JSON (spec SPEC_VERSION), written and validated with cyclonedx-python-lib.

Deterministic: the serial number is derived from the image's name and the parts, the timestamp is
SOURCE_DATE_EPOCH where set; the same image facts give the same bytes.
"""

from __future__ import annotations

import json
import os
import textwrap
import uuid
from datetime import UTC, datetime

from cyclonedx.model import HashAlgorithm, HashType, Property, XsUri
from cyclonedx.model.bom import Bom, BomMetaData
from cyclonedx.model.component import (
    Commit,
    Component,
    ComponentType,
    Patch,
    PatchClassification,
    Pedigree,
)
from cyclonedx.output.json import JsonV1Dot6
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from packageurl import PackageURL

from epstack.image.sbom import ImageFacts, Part

SPEC_VERSION = "1.6"
# A schema error quotes the part of the document it is about: kept to one readable line.
MAX_ERROR_CHARS = 200
_KINDS = {
    "library": ComponentType.LIBRARY,
    "application": ComponentType.APPLICATION,
    "container": ComponentType.CONTAINER,
    "operating-system": ComponentType.OPERATING_SYSTEM,
}


def _component(part: Part) -> Component:
    pedigree = None
    if part.commits or part.patches:
        pedigree = Pedigree(
            commits=[Commit(uid=uid, url=XsUri(url)) for uid, url in part.commits],
            patches=[Patch(type=PatchClassification.UNOFFICIAL) for _ in part.patches],
        )
    properties = [Property(name=key, value=value) for key, value in part.properties if value]
    properties += [Property(name="epstack:patch", value=f"{name} sha256:{sha}") for name, sha in part.patches]
    return Component(
        name=part.name,
        version=part.version,
        type=_KINDS[part.kind],
        group=part.group or None,
        bom_ref=f"{part.group}:{part.name}@{part.version}",
        purl=PackageURL.from_string(part.purl) if part.purl else None,
        hashes=[HashType(alg=HashAlgorithm.SHA_256, content=part.sha256)] if part.sha256 else [],
        properties=properties,
        pedigree=pedigree,
    )


def _base_image(facts: ImageFacts) -> Component:
    """The CUDA image the layer is built FROM, by digest; a stand-in build says what replaced it."""
    reference, _, digest = facts.base_image.partition("@")
    name, _, tag = reference.rpartition(":") if ":" in reference.split("/")[-1] else (reference, "", "")
    purl = f"pkg:docker/{name}@{digest}?tag={tag}" if digest else ""
    properties = [Property(name="epstack:standin", value=facts.standin)] if facts.standin else []
    return Component(
        name=name or "unknown",
        version=tag or digest or "unknown",
        type=ComponentType.CONTAINER,
        group="base-image",
        bom_ref=f"base-image:{facts.base_image or 'unknown'}",
        purl=PackageURL.from_string(purl) if purl else None,
        hashes=[HashType(alg=HashAlgorithm.SHA_256, content=digest.removeprefix("sha256:"))]
        if digest
        else [],
        properties=properties,
    )


def _timestamp() -> datetime:
    epoch = os.environ.get("SOURCE_DATE_EPOCH", "")
    return datetime.fromtimestamp(int(epoch), tz=UTC) if epoch.isdigit() else datetime.now(tz=UTC)


def document(facts: ImageFacts) -> str:
    """The CycloneDX JSON of an image: its parts, the base image, and what it depends on."""
    root = Component(
        name=f"epstack-{facts.layer}",
        version=facts.version or "unknown",
        type=ComponentType.CONTAINER,
        bom_ref=f"image:epstack-{facts.layer}@{facts.version or 'unknown'}",
        properties=[
            Property(name="epstack:layer", value=facts.layer),
            *([Property(name="epstack:target", value=facts.target)] if facts.target else []),
            *(
                Property(name=f"epstack:lock:{name}", value=f"sha256:{sha}")
                for name, sha in facts.locks.items()
            ),
        ],
    )
    components = [_base_image(facts), *(_component(part) for part in facts.parts)]
    seed = "\n".join([root.bom_ref.value or "", *(str(c.bom_ref.value) for c in components)])
    bom = Bom(
        serial_number=uuid.uuid5(uuid.NAMESPACE_URL, seed),
        metadata=BomMetaData(component=root, timestamp=_timestamp()),
        components=components,
    )
    bom.register_dependency(root, components)
    return str(JsonV1Dot6(bom).output_as_string(indent=2)) + "\n"


def _one_line(text: str) -> str:
    """A schema error as one short printable line (a key in its path may hold any character)."""
    printable = "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)
    return textwrap.shorten(printable, MAX_ERROR_CHARS)


def validate(text: str) -> list[str]:
    """Every schema error of a CycloneDX JSON document as one line, `$.json.path: what` (empty when
    valid), by cyclonedx-python-lib; ValueError when the text is no JSON document it can check."""
    try:
        json.loads(text)
        errors = JsonStrictValidator(SchemaVersion.V1_6).validate_str(text, all_errors=True) or []
        return [_one_line(f"{error.data.json_path}: {error.data.message}") for error in errors]
    except RecursionError:
        raise ValueError("nested too deeply to check") from None
    except ValueError as exc:
        raise ValueError(f"not JSON ({exc})") from None
