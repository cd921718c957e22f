"""A private container engine for tests and local runs: a Docker daemon and its local images.

No engine comes installed on the machines this project runs on, and no image registry is
reachable from them. ``DockerEngine`` runs Debian's ``dockerd`` on a directory of its own (host
networking only, the machine's networking left alone); ``base_image`` and ``busybox_image``
build the images the container tests need from Debian's packages, cached by content;
``compose_cli`` builds Docker Compose v2 from its Go module once per machine. Used by
``rollstream docker start|stop|status|images`` and by the test suite's ``docker_engine`` fixture.
"""

from rollstream.dev.containers.engine import DockerEngine, EngineInfo
from rollstream.dev.containers.images import ImageResult, base_image, busybox_image
from rollstream.dev.containers.settings import DockerSettings

__all__ = [
    "DockerEngine",
    "DockerSettings",
    "EngineInfo",
    "ImageResult",
    "base_image",
    "busybox_image",
]
