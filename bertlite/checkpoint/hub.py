"""The old path of bertlite.hub: importing it gives that very module, so patches and names reach one place."""

import sys

from bertlite import hub

sys.modules[__name__] = hub
