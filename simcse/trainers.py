"""The reference code's ``simcse.trainers`` (its ``CLTrainer``): importing a name from it gives an
``ImportError`` naming what replaces it (:func:`simcse.models.reference_checkpoints.reference_name_error`)."""


def __getattr__(name: str):
    from simcse.models.reference_checkpoints import reference_name_error

    raise reference_name_error(__name__, name)
