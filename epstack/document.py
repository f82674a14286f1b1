"""The JSON documents epstack writes and reads again (the deep_ep manifest, the build report, the build
manifest, the guard report, the smoke's rank results): each is one typed model with a `schema`
version ("name/N"), written and read through that model. A file that is not JSON, has no schema,
another schema or version, or a field missing or of the wrong type is one BadInput line naming the
file, the problem and the fix; never a KeyError.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Generic, TypeVar

from pydantic import TypeAdapter, ValidationError

from epstack.errors import BadInput, shown
from epstack.inputs import parse_json, read_text

T = TypeVar("T")
SCHEMA_KEY = "schema"


@dataclass(frozen=True, kw_only=True)
class Schema(Generic[T]):
    """One kind of document: its name and version, the dataclass it holds, and how to get a good one."""

    name: str  # e.g. "deepep-manifest"
    version: int
    model: type[T]
    what: str  # e.g. "a deep_ep source manifest"
    fix: str  # e.g. "rebuild the image with this epstack"

    @property
    def id(self) -> str:
        return f"{self.name}/{self.version}"

    @cached_property
    def _adapter(self) -> TypeAdapter[T]:
        return TypeAdapter(self.model)

    def body(self, document: T | Mapping[str, Any]) -> dict[str, Any]:
        """The document as a JSON object, its schema first; a mapping is one the model shaped itself."""
        if isinstance(document, Mapping):
            return {SCHEMA_KEY: self.id, **document}
        fields: dict[str, Any] = self._adapter.dump_python(document, mode="json")
        return {SCHEMA_KEY: self.id, **fields}

    def dumps(self, document: T | Mapping[str, Any]) -> str:
        return json.dumps(self.body(document), indent=2) + "\n"

    def parse(self, data: object, source: Path | str) -> T:
        """The model from parsed JSON; BadInput naming `source` for anything else."""
        found = data.get(SCHEMA_KEY) if isinstance(data, dict) else None
        if not isinstance(data, dict) or found != self.id:
            problem = f"no schema, so not {self.what}"
            if isinstance(found, str):
                problem = f"schema {shown(found)} unknown"
            raise BadInput(f"{source}: {problem}, this epstack reads {self.id!r}; fix: {self.fix}")
        try:
            return self._adapter.validate_python({k: v for k, v in data.items() if k != SCHEMA_KEY})
        except ValidationError as exc:
            error = exc.errors()[0]
            where = ".".join(str(part) for part in error["loc"]) or "the document"
            raise BadInput(f"{source}: {where}: {error['msg'].lower()}; fix: {self.fix}") from None

    def _json(self, text: str, source: Path | str) -> object:
        try:
            return parse_json(text)
        except ValueError as exc:
            raise BadInput(f"{source}: {exc}, so not {self.what}; fix: {self.fix}") from None

    def loads(self, text: str, source: Path | str) -> T:
        return self.parse(self._json(text, source), source)

    def read(self, path: Path) -> T:
        """The document in `path`, read as any file a user names (epstack.inputs)."""
        return self.loads(read_text(path, what=self.what), path)

    def read_list(self, path: Path) -> list[T]:
        """A JSON list of such documents (the smoke's every rank, gathered into one file)."""
        data = self._json(read_text(path, what=f"a list of {self.name} documents"), path)
        if not isinstance(data, list):
            raise BadInput(f"{path}: not a JSON list of {self.what}; fix: {self.fix}")
        return [self.parse(entry, f"{path}: [{index}]") for index, entry in enumerate(data)]
