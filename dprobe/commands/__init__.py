"""Sub-commands of ``dprobe``: one module each, with ``add_arguments(parser)`` and
``run(args) -> int``. Modules import heavy dependencies inside ``run`` so that
``dprobe --help`` and light commands stay fast.
"""
