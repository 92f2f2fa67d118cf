"""Checkpoints of :class:`simcse.training.trainer.SimCSETrainer`: atomic ``checkpoint-N`` folders, the
``--do_mlm`` head's own weights, safe resume and best-model loading (HF Trainer's persistence hooks).

:class:`CheckpointHooks` is the mixin holding them (it relies on HF ``Trainer``'s ``args``, ``state``,
``accelerator`` and ``model``).
"""
from __future__ import annotations

import glob
import logging
import os
import re
import shutil

import torch
from safetensors.torch import load_file, save_file
from transformers import Trainer
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, rotate_checkpoints

from simcse.files.storage import WriteError, writing
from simcse.models.card import write_model_card
from simcse.models.folder import TRAIN_COMMAND_NAME

logger = logging.getLogger(__name__)

_TRAINER_STATE_NAME = "trainer_state.json"  # transformers.trainer.TRAINER_STATE_NAME

MLM_HEAD_NAME = "mlm_head.safetensors"  # the --do_mlm head's own weights, in checkpoints (for exact resumes)
OBJECTIVE_STATE_NAME = "objective_state.pt"  # the objective's parameters, buffers and extra state (one per process)
OBJECTIVE_RECORD_NAME = "simcse_objective.json"  # the objective that wrote a checkpoint (checked when resuming)


def check_resume_objective(checkpoint, loss: str, world: int = 1, config: dict | None = None) -> None:
    """Refuse to resume ``checkpoint`` (a ``checkpoint-N`` folder) with another objective than the one that wrote
    it (:data:`OBJECTIVE_RECORD_NAME`; a checkpoint without the record is not checked): its optimizer state,
    objective state and schedule belong to that objective; or on another number of processes (``world``) than
    wrote its per-process objective state (a queue), or with other arguments of the same objective (``config``: the
    run's objective's ``recorded_loss_args()``; a resumed optimizer keeps the old groups' rates and the old state, so
    changed arguments would be half applied). ``loss``: the registry name the run trains with.

    Raises:
        ValueError: one line naming both objectives (or process counts) and the checkpoint.
    """
    import json

    from simcse.training.objectives import get_objective

    path = os.path.join(str(checkpoint), OBJECTIVE_RECORD_NAME)
    if not os.path.isfile(path):
        return
    with open(path, encoding="utf-8") as f:
        record = json.load(f)
    written = record.get("loss")
    now = get_objective(loss).name
    if written and written != now:
        shown = now if now == loss else f"{loss} (registered as {now})"
        raise ValueError(f"--resume_from_checkpoint {str(checkpoint)!r} was written by a run with --loss {written}; this "
                         f"run has --loss {shown}: resume with --loss {written}, or start a new run from the weights "
                         "(--model_name_or_path) without resuming")
    old = record.get("config")
    if config is not None and isinstance(old, dict):
        new = json.loads(json.dumps(config, default=str))
        changed = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        if changed:
            shown = ", ".join(f"{k} {old.get(k)!r} -> {new.get(k)!r}" for k in changed[:4])
            raise ValueError(f"--resume_from_checkpoint {str(checkpoint)!r} was written with other --loss {now} "
                             f"arguments ({shown}): resume with the checkpoint's (its optimizer and objective state "
                             "belong to them), or start a new run from the weights without resuming")
    n = _state_processes(str(checkpoint))
    if n and n != max(1, world):
        raise ValueError(f"--resume_from_checkpoint {str(checkpoint)!r} holds --loss {now}'s per-process state (e.g. a "
                         f"queue) of {n} process(es), and this run has {max(1, world)}: resume with {n} process(es)")


def newest_checkpoint(output_dir) -> str:
    """The checkpoint ``resume_from_checkpoint=True`` means (HF's ``get_last_checkpoint(output_dir)``), as a path,
    so the run is checked like one given by its path (:func:`check_resume_objective`).

    Raises:
        ValueError: ``output_dir`` holds no ``checkpoint-N`` folder (one line naming it).
    """
    from transformers.trainer_utils import get_last_checkpoint

    found = get_last_checkpoint(str(output_dir)) if os.path.isdir(str(output_dir)) else None
    if found is None:
        raise ValueError(f"resume_from_checkpoint=True: output_dir {str(output_dir)!r} holds no checkpoint-N folder "
                         "to resume from; give a checkpoint's path, or train without resuming")
    return found


def _state_processes(folder: str) -> int:
    """How many processes wrote the objective state files of checkpoint ``folder`` (0: none)."""
    written = glob.glob(os.path.join(glob.escape(folder), OBJECTIVE_STATE_NAME.replace(".pt", "*.pt")))
    if not written:
        return 0
    return sum(1 for w in written if os.path.basename(w) != OBJECTIVE_STATE_NAME) or 1


def _objective_state_file(folder: str, process_index: int, world: int) -> str:
    name = OBJECTIVE_STATE_NAME if world <= 1 else OBJECTIVE_STATE_NAME.replace(".pt", f"_{process_index}.pt")
    return os.path.join(folder, name)

def _own_mlm_head_weights(model) -> dict[str, torch.Tensor]:
    """The MLM head's parameters and buffers, without those shared with the encoder (the tied decoder)."""
    head = getattr(model, "mlm_head", None)
    if head is None:
        return {}
    shared = {id(p) for p in model.encoder.parameters()}
    own = {k: t for k, t in head.named_parameters() if id(t) not in shared}
    own.update(head.named_buffers())
    return {k: t.detach().contiguous().cpu() for k, t in own.items()}

def remove_checkpoints(output_dir: str | os.PathLike) -> list[str]:
    """Remove the ``checkpoint-N`` folders (and leftover ``.checkpoint-N.partial`` staging folders) of
    ``output_dir``; return the names removed. Nothing else of the folder is touched. Called at the end of a
    run with ``--keep_checkpoints false``, after the final model is saved there."""
    removed = []
    pattern = re.compile(rf"\.?{PREFIX_CHECKPOINT_DIR}-\d+(\.partial)?")
    for entry in sorted(os.listdir(output_dir)) if os.path.isdir(output_dir) else ():
        path = os.path.join(output_dir, entry)
        if pattern.fullmatch(entry) and os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
            removed.append(entry)
    if removed:
        logger.info("removed %s from %s (--keep_checkpoints false)", ", ".join(removed), output_dir)
    return removed


def _any_rank(flag: bool) -> bool:
    """``flag`` OR-ed over all processes of torch.distributed (just ``flag`` in a single process)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return flag
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else "cpu"
    t = torch.tensor([float(flag)], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item() > 0)


class CheckpointHooks(Trainer):
    """HF Trainer's persistence hooks for SimCSE (see the module): save, checkpoint, resume, best model, card."""

    run_command: str | None = None  # the run's command line, written into each checkpoint (TRAIN_COMMAND_NAME)

    # ------------------------------------------------------------------------------------ persistence
    def _save(self, output_dir: str | None = None, state_dict=None) -> None:
        output_dir = output_dir if output_dir is not None else self.args.output_dir
        if not self.args.should_save:
            return
        model = self.accelerator.unwrap_model(self.model)
        final = getattr(self, "_staging_run_dir", None) is None  # not a checkpoint: the run's model folder
        if getattr(self, "merge_lora", False) and final:
            model.save_pretrained(output_dir, merge_lora=True)
        else:
            model.save_pretrained(output_dir)
        head = _own_mlm_head_weights(model)
        if head:  # a --do_mlm run resumes with its trained head, not the pre-trained one
            save_file(head, os.path.join(output_dir, MLM_HEAD_NAME))
        with open(os.path.join(output_dir, "training_args.json"), "w") as f:
            f.write(self.args.to_json_string())

    def create_model_card(self, model_name: str | None = None, **kwargs) -> None:
        """Hook of ``Trainer.push_to_hub``: write simcse's card (:mod:`simcse.models.card`) instead of HF's."""
        if not self.is_world_process_zero():
            return
        write_model_card(self.args.output_dir, model_name=self.args.hub_model_id or model_name)

    def _get_output_dir(self, trial) -> str:
        # While _save_checkpoint stages a checkpoint, HF's run folder is the staging folder (see there).
        staging = getattr(self, "_staging_run_dir", None)
        return staging if staging is not None else super()._get_output_dir(trial)

    def _save_checkpoint(self, model, trial) -> None:
        """HF's checkpoint save, made atomic: ``checkpoint-N`` appears complete or not at all.

        HF writes ``<run_dir>/checkpoint-N`` file by file (model, optimizer, scheduler, RNG states, trainer
        state), so a kill or an error in between would leave a folder that looks like the newest checkpoint
        but cannot be resumed. Here HF's own ``_save_checkpoint`` runs unchanged with its run folder pointed
        at a hidden staging folder ``<run_dir>/.checkpoint-N.partial`` (which HF's checkpoint discovery and
        rotation ignore); when it has returned, the complete folder is moved to ``checkpoint-N`` by one rename,
        and only then are old checkpoints rotated (``save_total_limit``; HF's rotation never deletes
        ``best_model_checkpoint``), so a failed save costs no earlier checkpoint. A save that raises removes
        its staging folder; one left by a killed process is removed by the next save.
        """
        run_dir = self._get_output_dir(trial=trial)
        name = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        staging = os.path.join(run_dir, f".{name}.partial")
        if self.args.should_save:
            for leftover in glob.glob(os.path.join(glob.escape(run_dir), f".{PREFIX_CHECKPOINT_DIR}-*.partial")):
                shutil.rmtree(leftover, ignore_errors=True)
        self.accelerator.wait_for_everyone()
        self._staging_run_dir = staging
        needed = 3 * sum(p.numel() * p.element_size() for p in self.model.parameters())  # weights + AdamW moments
        failure = None
        try:
            with writing(name, run_dir, needed=needed):
                super()._save_checkpoint(model, trial)
                self._save_objective_state(os.path.join(staging, name))
        except Exception as e:  # agreed on by every rank below, so none is left waiting for the others
            failure = e
        except BaseException:
            if self.args.should_save:
                shutil.rmtree(staging, ignore_errors=True)
            raise
        finally:
            self._staging_run_dir = None
        if _any_rank(failure is not None):
            if self.args.should_save:
                shutil.rmtree(staging, ignore_errors=True)
            raise failure or WriteError(None, f"could not write {name} to {run_dir!r}: another process failed to "
                                              "write its part (see its error)", name, run_dir)
        # HF recorded the best checkpoint under the folder it saw (the staging one when this step is the best).
        recorded = self.state.best_model_checkpoint
        if recorded is not None and os.path.dirname(os.path.normpath(recorded)) == os.path.normpath(staging):
            self.state.best_model_checkpoint = os.path.join(run_dir, os.path.basename(os.path.normpath(recorded)))
        self.accelerator.wait_for_everyone()  # every process has written its files (rng_state_<rank>.pth)
        if self.args.should_save:
            staged, final = os.path.join(staging, name), os.path.join(run_dir, name)
            if recorded != self.state.best_model_checkpoint:
                self.state.save_to_json(os.path.join(staged, _TRAINER_STATE_NAME))
            with writing(name, run_dir, needed=needed):
                objective = getattr(self, "objective", None)
                if objective is not None:  # resuming with another --loss is refused at setup (check_resume_objective)
                    import json

                    with open(os.path.join(staged, OBJECTIVE_RECORD_NAME), "w", encoding="utf-8") as f:
                        json.dump({"loss": objective.name, "config": objective.recorded_loss_args()}, f, default=str)
                if self.run_command:  # loading an unfinished run's folder names it as the resume line
                    with open(os.path.join(staged, TRAIN_COMMAND_NAME), "w", encoding="utf-8") as f:
                        f.write(self.run_command + "\n")
                if os.path.isdir(final):  # saved before (a resumed run re-saving a step): swap it out
                    os.replace(final, os.path.join(staging, "replaced"))
                os.replace(staged, final)
            shutil.rmtree(staging, ignore_errors=True)
            rotate_checkpoints(output_dir=run_dir, save_total_limit=self.args.save_total_limit,
                               best_model_checkpoint=self.state.best_model_checkpoint, use_mtime=True)
        self.accelerator.wait_for_everyone()

    def _save_objective_state(self, folder: str) -> None:
        """Write the objective's state (its modules' parameters and buffers and ``get_extra_state``: a momentum
        encoder, a queue) into checkpoint ``folder``, one file per process; nothing for a stateless objective."""
        objective = getattr(self, "objective", None)
        state = objective.state_dict() if objective is not None else {}
        if not state:
            return
        os.makedirs(folder, exist_ok=True)
        state = {k: (v.detach().cpu() if isinstance(v, torch.Tensor) else v) for k, v in state.items()}
        torch.save(state, _objective_state_file(folder, self.args.process_index, self.args.world_size))

    def _load_objective_state(self, folder: str) -> None:
        """Restore the objective's state saved by :meth:`_save_objective_state` (this process's file).

        Raises:
            ValueError: the objective has state but the checkpoint has none for it (names the file)."""
        objective = getattr(self, "objective", None)
        if objective is None or not objective.state_dict():
            return
        path = _objective_state_file(folder, self.args.process_index, self.args.world_size)
        n = _state_processes(folder)
        if not os.path.isfile(path) and n:  # state of another number of processes
            raise ValueError(f"resume_from_checkpoint {folder!r} holds --loss {objective.name}'s per-process state "
                             f"(e.g. a queue) of {n} process(es), and this run has {self.args.world_size}: resume with "
                             f"{n} process(es)")
        if not os.path.isfile(path):
            raise ValueError(f"resume_from_checkpoint {folder!r} has no {os.path.basename(path)}: it was not written "
                             f"by a run with --loss {objective.name}, whose state (e.g. a momentum encoder or a queue) "
                             "a resume needs")
        objective.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model=None) -> None:
        if not os.path.isfile(os.path.join(resume_from_checkpoint, _TRAINER_STATE_NAME)):
            raise ValueError(
                f"resume_from_checkpoint {resume_from_checkpoint!r} is not a complete training checkpoint: "
                f"{_TRAINER_STATE_NAME} is missing; expected a checkpoint-N folder written during training "
                "(a folder saved by save_model holds the weights only)"
            )
        if not any(os.path.isfile(os.path.join(resume_from_checkpoint, f)) for f in ("optimizer.pt", "optimizer.bin")):
            logger.warning("%s has no optimizer state (saved with save_only_model?): the optimizer restarts from "
                           "scratch and the resumed run will differ from an uninterrupted one", resume_from_checkpoint)
        self._load_checkpoint_model(resume_from_checkpoint, model if model is not None else self.model)

    def _load_checkpoint_model(self, folder: str, model) -> None:
        """Everything a checkpoint holds of what trains: the model's weights, the ``--do_mlm`` head, and the
        objective's state (a learned scale, a queue); one home for resuming and for the best model."""
        model.load_weights(folder)
        head_file = os.path.join(folder, MLM_HEAD_NAME)
        if getattr(model, "mlm_head", None) is not None and os.path.isfile(head_file):
            model.mlm_head.load_state_dict(load_file(head_file), strict=False)  # tied decoder weight: the encoder's
        self._load_objective_state(folder)

    def _load_best_model(self) -> None:
        """``load_best_model_at_end``: the best checkpoint's weights and the objective's learned state of that
        step, so the folder and its record (``loss_learned``) hold one step's model."""
        self._load_checkpoint_model(self.state.best_model_checkpoint, self.accelerator.unwrap_model(self.model))
