"""epstack: one pins.env in, pinned and proven SGLang + DeepEP V2 images out."""

__version__ = "0.1.0"
