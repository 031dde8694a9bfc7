"""The old module paths, kept so that code written before the split keeps working.

`bertlite.embed` held the jobs and the CLI's file I/O; they now live in `bertlite.jobs`
(Embedder, CrossEncoder, SparseEncoder, MultiVectorEncoder, their configs, kind detection) and
`bertlite.files` (readers, writers, the resume journal, Ray). `import bertlite.embed.embedder` imports
`bertlite.jobs.embedder` and gives that same module object (so a monkeypatch on either path reaches
the code); `bertlite.embed.io`, split in two, is a module holding the names of
`bertlite.files.readers` and `bertlite.files.writers`. Nothing is imported until an old path is.
New code imports the new paths.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types

MOVED = {
    "base": "bertlite.jobs.base",
    "cross_encoder": "bertlite.jobs.cross_encoder",
    "embedder": "bertlite.jobs.embedder",
    "kinds": "bertlite.jobs.kinds",
    "long_texts": "bertlite.jobs.long_texts",
    "multi_vector": "bertlite.jobs.multi_vector",
    "multi_vector_config": "bertlite.jobs.st.folders",
    "pairs": "bertlite.jobs.pairs",
    "sparse_config": "bertlite.jobs.st.folders",
    "sparse_encoder": "bertlite.jobs.sparse_encoder",
    "st_config": "bertlite.jobs.st.folders",
    "partial": "bertlite.files.partial",
    "ray": "bertlite.files.ray",
}
SPLIT = {"io": ("bertlite.files.readers", "bertlite.files.writers", "bertlite.utils.text")}


class _OldPath(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds `bertlite.embed.<old>` and hands back the module that now holds it."""

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        package, _, name = fullname.rpartition(".")
        if package != __name__ or (name not in MOVED and name not in SPLIT):
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        name = spec.name.rpartition(".")[2]
        if name in MOVED:
            module = importlib.import_module(MOVED[name])
            spec.loader_state = module.__spec__  # the import system sets __spec__ to this one; put it back
            return module
        module = types.ModuleType(spec.name, f"The old {spec.name}: the public names of {', '.join(SPLIT[name])}.")
        for source in SPLIT[name]:
            new = importlib.import_module(source)
            module.__dict__.update({k: v for k, v in vars(new).items() if not k.startswith("_")})
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        # The module ran when it was imported by its new name; only its own spec is restored.
        if module.__spec__.loader_state is not None:
            module.__spec__ = module.__spec__.loader_state


if not any(isinstance(finder, _OldPath) for finder in sys.meta_path):
    sys.meta_path.insert(0, _OldPath())
