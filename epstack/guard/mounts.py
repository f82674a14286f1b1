"""The container's mounts, as /proc/self/mountinfo lists them: the file system type of its root and every
other mount point. The start trusts a folder's change time only on an overlayfs root and only where no
other file system is mounted on the folder, under it or above it (a mount's files keep their own times).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

MOUNTINFO = Path("/proc/self/mountinfo")
OVERLAY = "overlay"
_ESCAPED = re.compile(r"\\([0-7]{3})")  # the kernel writes a space in a path as \040, and so on


@dataclass(frozen=True, kw_only=True)
class Mounts:
    root_type: str  # the file system of "/" as this process sees it (the last mount there)
    points: tuple[str, ...]  # every other mount point

    def unmounted(self, path: str) -> bool:
        """Nothing but the root is mounted on `path`, under it or above it."""
        inside = path.rstrip("/") + "/"
        return not any(
            point == path or point.startswith(inside) or inside.startswith(point + "/")
            for point in self.points
        )


def read_mounts(text: str | None = None) -> Mounts:
    """This process's mounts (`text`: mountinfo's lines, read from /proc where None)."""
    if text is None:
        text = MOUNTINFO.read_text()
    root_type, points = "", []
    for line in text.splitlines():
        fields, _, rest = line.partition(" - ")
        parts = fields.split()
        if len(parts) < 5 or not rest:
            continue
        point = _ESCAPED.sub(lambda match: chr(int(match.group(1), 8)), parts[4])
        if point == "/":
            root_type = rest.split()[0]
        else:
            points.append(point)
    return Mounts(root_type=root_type, points=tuple(points))
