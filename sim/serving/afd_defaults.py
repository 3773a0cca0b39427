"""The attention-FFN disaggregation defaults the command line shows (:mod:`.afd`), in a
module that imports nothing, so that ``serve --help`` does not load the engine."""

#: ``--afd-microbatches`` default: two micro-batches, the smallest ping-pong (one in
#: attention while the other is in the FFN). [assumption: MegaScale-Infer sizes m from its
#: stage times (arXiv 2504.02263); no single published default, so give k to match a
#: deployment]
DEFAULT_MICROBATCHES = 2
