"""``rollstream console``: a live web console of a run, and the one-file report of the same views.

The fleet (:mod:`.fleet`), groups and rewards (:mod:`.rewards`) and a trajectory's view
(:mod:`.trajectory_view`) are pure; the feed (:mod:`.feed`) reads Kafka into them, the server
(:mod:`.server`) answers the browser, the controls (:mod:`.controls`) act with the control token,
and :mod:`.service` runs it all. The front end is in ``web/`` (:mod:`.assets`).
"""

from rollstream.consumers.console.assets import Assets
from rollstream.consumers.console.service import Console
from rollstream.consumers.console.settings import ConsoleSettings

__all__ = ["Assets", "Console", "ConsoleSettings"]
