"""The interop commands of ``simcse``: ``export`` (sentence-transformers, plain HF, ONNX) and ``convert`` (a
reference trainer checkpoint into simcse's format). :mod:`simcse.cli` parses the arguments and calls these.
"""
from __future__ import annotations

import sys
from pathlib import Path

from simcse.files.errors import UsageError

def cmd_export(args) -> int:
    from simcse.interop.export import export_huggingface, export_sentence_transformers, huggingface_reading
    from simcse.models.modeling import SimCSEModel
    from simcse.models.pooling import pooler_to_use

    if args.quantize and args.format != "onnx":
        raise UsageError(f"--quantize needs --format onnx (got --format {args.format})")
    if args.override_pooler and args.pooler is None:
        raise UsageError("--override-pooler needs --pooler (the pooler to export with)")
    pooler = args.pooler if args.override_pooler else pooler_to_use(
        args.model, args.pooler, "--pooler", "pass --override-pooler to export with another pooler on purpose")[0]
    model = SimCSEModel.from_pretrained(args.model, pooler_type=pooler)
    if args.format == "onnx":
        from simcse.interop.onnx import export_onnx

        out = export_onnx(model, args.output, quantize=args.quantize)
    elif args.format == "sentence-transformers":
        out = export_sentence_transformers(model, args.output, max_seq_length=args.max_length)
    else:
        out = export_huggingface(model, args.output)
        reading, pooler = huggingface_reading(model)
        print(f"the embedding of this model in the plain HF folder: {reading}; load it back with "
              f"SimCSE({str(out)!r}, pooler={pooler!r})", file=sys.stderr)
    print(f"wrote {args.format} folder {out}", file=sys.stderr)
    return 0


def cmd_convert(args) -> int:
    from simcse.models.modeling import SimCSEModel
    from simcse.models.pooling import get_pooler
    from simcse.models.reference_checkpoints import conversion_pooler, read_reference_mlp

    out = Path(args.output)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"--output {args.output!r} exists and is not an empty folder")
    get_pooler(args.pooler)  # an unknown name fails first, with the list of poolers
    pooler, mlp_only_train, note = conversion_pooler(args.pooler, args.mlp_only_train,
                                                     read_reference_mlp(args.model) is not None)
    model = SimCSEModel.from_pretrained(args.model, pooler_type=pooler, mlp_only_train=mlp_only_train or None)
    model.save_pretrained(out)
    if note:
        print(f"note: {note}", file=sys.stderr)
    print(f"wrote {out} (pooler {model.pooler_type}, mlp_only_train {model.mlp_only_train})", file=sys.stderr)
    return 0
