"""The SimCSE model: encoder + pooler module, its saved-folder format and its inference loop.

The reference code's ``simcse.models`` held its training classes (``BertForCL``, ``RobertaForCL``, ``Pooler``,
...); importing one of those names gives an ``ImportError`` that names what replaces it
(:func:`simcse.models.reference_checkpoints.reference_name_error`).
"""


def __getattr__(name: str):
    from simcse.models.reference_checkpoints import reference_name_error

    raise reference_name_error(__name__, name)
