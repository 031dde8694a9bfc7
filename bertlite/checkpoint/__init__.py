"""Checkpoints in and out (files from a folder or the hub: bertlite.hub): remap.py (the weight map), files.py
(finding and reading weight files), safety.py (what is refused), plan.py (what goes where), load.py (the
load into a model, from_pretrained) and save.py."""
