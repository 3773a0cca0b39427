"""Serving-runtime host-cost profiles shipped with diptych (``*.toml``, read by
:func:`diptych.arch.runtime.load_runtime`)."""
